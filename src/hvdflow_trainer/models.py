"""Models the trainer can build, by name, for any input shape and class count."""

from __future__ import annotations

from typing import Sequence

MODELS = ("mlp",)


def build_model(name: str, input_shape: Sequence[int], num_classes: int, multi_label: bool, hidden_units: int):  # type: ignore[no-untyped-def]
    """A Keras model: softmax outputs for single-label data, sigmoid outputs for multi-label data."""
    import tensorflow as tf

    activation = "sigmoid" if multi_label else "softmax"
    if name == "mlp":
        return tf.keras.Sequential([
            tf.keras.Input(shape=tuple(input_shape)),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(hidden_units, activation="relu"),
            tf.keras.layers.Dense(num_classes, activation=activation),
        ], name="mlp")
    raise ValueError("unknown model %r; known: %s" % (name, ", ".join(MODELS)))
