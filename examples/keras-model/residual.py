"""A user's own Keras model with the layers whose state a resume must carry: BatchNormalization (moving statistics
that each rank moves on its own data), a residual block, and a seeded Dropout (a random generator).

hvdflow keeps its promises on it as on its own models (README: "Determinism and resume"): two runs give bit-identical
weights on CPU, a run killed or stopped at any step and resumed ends with the uninterrupted run's weights, and every
rank ends with the same model (BatchNorm's statistics averaged over the ranks after each epoch's last step, before
its validation). The config names it:

    experiments:
      mine:
        model: {code: examples/keras-model, build: residual:build, params: {filters: 8, dropout: 0.25}}
"""

import tensorflow as tf


def build(input_shape, num_classes, multi_label, filters=8, dropout=0.25, seed=7):
    """An uncompiled model: a 3x3 convolution, one residual block of two convolutions (each batch-normalised),
    global average pooling, Dropout(``dropout``, seed=``seed``) and ``num_classes`` outputs."""
    layers = tf.keras.layers
    inputs = tf.keras.Input(shape=input_shape)
    x = layers.Activation("relu")(layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same",
                                                                             use_bias=False)(inputs)))
    y = layers.Activation("relu")(layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same",
                                                                             use_bias=False)(x)))
    y = layers.BatchNormalization()(layers.Conv2D(filters, 3, padding="same", use_bias=False)(y))
    x = layers.Activation("relu")(layers.Add()([x, y]))
    x = layers.Dropout(dropout, seed=seed)(layers.GlobalAveragePooling2D()(x))
    outputs = layers.Dense(num_classes, activation="sigmoid" if multi_label else "softmax")(x)
    return tf.keras.Model(inputs, outputs, name="residual")
