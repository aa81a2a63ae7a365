"""A user's own Keras model for hvdflow: a small convolutional network whose width is a parameter.

hvdflow calls ``build(input_shape=..., num_classes=..., multi_label=..., **params)`` once per rank, in the image,
and compiles what it returns with Horovod's optimizer and the task's loss and metrics (README: "Training your own
model"). The config names it:

    experiments:
      mine:
        model: {code: examples/keras-model, build: cnn:build, params: {filters: 16}}
"""

import tensorflow as tf


def build(input_shape, num_classes, multi_label, filters=16, dense_units=32):
    """An uncompiled model: two 3x3 convolutions of ``filters`` filters, flattened (small images such as the 8x8
    digits keep where each feature is), a hidden layer of ``dense_units`` units, and ``num_classes`` outputs
    (sigmoid for multi-label data, softmax otherwise)."""
    inputs = tf.keras.Input(shape=input_shape)
    x = tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(inputs)
    x = tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    x = tf.keras.layers.Flatten()(x)
    x = tf.keras.layers.Dense(dense_units, activation="relu")(x)
    outputs = tf.keras.layers.Dense(num_classes, activation="sigmoid" if multi_label else "softmax")(x)
    return tf.keras.Model(inputs, outputs, name="example_cnn")
