"""hvdflow host side: images, launchers and run records for containerised Horovod training.

Nothing here imports TensorFlow or Horovod; the code that runs inside the containers is ``hvdflow_trainer``.
"""

__version__ = "0.1.0"
