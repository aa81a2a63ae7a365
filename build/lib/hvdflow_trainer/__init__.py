"""hvdflow's in-container side: code that runs inside the training images (Python 3.8+, TensorFlow, Horovod).

It is bind-mounted read-only into containers; nothing in it is imported by the host package except this file's
location. It reads its placement from Horovod's environment variables and writes results as files.
"""
