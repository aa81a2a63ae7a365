"""The trainer's TensorFlow/Keras side: the model (:mod:`.models`, where a user's model plugs in), the step loop
(:mod:`.fit`), its callbacks, the tf.data pipeline, TensorFlow's checkpoint objects, neighbour averaging, elastic
training, evaluation and the benchmark's measurements.

Imports the framework-neutral modules of :mod:`hvdflow_trainer` (the input plan, run control, the checkpoint manifest,
outputs, faults) and never the other way round: a second framework is a sibling folder with the same module names,
and the entry points (``train``, ``evaluate``, ``benchmark``) pick the folder. Importing this package loads nothing.
"""
