"""Models the trainer can build, by name, for an input shape and class count.

- ``mlp``: Flatten, one hidden Dense layer; any input shape.
- ``small-cnn``: three 3x3 convolution blocks (32, 64, 128 filters, each max-pooled while the feature map is at
  least 4x4), global average pooling and one hidden Dense layer; any ``(H, W, C)`` input, 8x8x1 included.
- ``resnet50``: Keras' ResNet-50 without its top, randomly initialised (so any channel count), global average
  pooled; needs ``H`` and ``W`` of at least 32.

Every model ends in ``num_classes`` outputs: softmax for single-label data, sigmoid for multi-label data.
"""

from __future__ import annotations

from typing import Sequence, Tuple

MODELS = ("mlp", "small-cnn", "resnet50")
CNN_FILTERS = (32, 64, 128)
RESNET_MIN_SIZE = 32


def _mlp(shape: Tuple[int, ...], hidden_units: int, num_classes: int, activation: str):  # type: ignore[no-untyped-def]
    """Flatten, Dense(hidden_units, relu), then the output layer."""
    import tensorflow as tf

    return tf.keras.Sequential([
        tf.keras.Input(shape=shape),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(hidden_units, activation="relu"),
        tf.keras.layers.Dense(num_classes, activation=activation),
    ], name="mlp")


def _small_cnn(shape: Tuple[int, ...], hidden_units: int, num_classes: int,
               activation: str):  # type: ignore[no-untyped-def]
    """Conv2D blocks, max-pooled (by 2) only while the feature map is at least 4x4, so tiny images fit too."""
    import tensorflow as tf

    if len(shape) != 3:
        raise ValueError("small-cnn needs an (height, width, channels) input, not %s" % (shape,))
    layers = [tf.keras.Input(shape=shape)]
    height, width = shape[0], shape[1]
    for filters in CNN_FILTERS:
        layers.append(tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu"))
        if min(height, width) >= 4:
            layers.append(tf.keras.layers.MaxPool2D(2))
            height, width = height // 2, width // 2
    layers += [
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(hidden_units, activation="relu"),
        tf.keras.layers.Dense(num_classes, activation=activation),
    ]
    return tf.keras.Sequential(layers, name="small-cnn")


def _resnet50(shape: Tuple[int, ...], num_classes: int, activation: str):  # type: ignore[no-untyped-def]
    """ResNet-50 without ImageNet weights or top, average pooled, then the output layer."""
    import tensorflow as tf

    if len(shape) != 3 or min(shape[0], shape[1]) < RESNET_MIN_SIZE:
        raise ValueError("input shape %s does not fit resnet50: it needs (height, width, channels) with height and "
                         "width of at least %d" % (shape, RESNET_MIN_SIZE))
    base = tf.keras.applications.ResNet50(weights=None, include_top=False, input_shape=shape, pooling="avg")
    outputs = tf.keras.layers.Dense(num_classes, activation=activation)(base.output)
    return tf.keras.Model(base.input, outputs, name="resnet50")


def build_model(name: str, input_shape: Sequence[int], num_classes: int, multi_label: bool, hidden_units: int):  # type: ignore[no-untyped-def]
    """A Keras model: softmax outputs for single-label data, sigmoid outputs for multi-label data.

    ``hidden_units`` sizes the hidden Dense layer of ``mlp`` and ``small-cnn``; ``resnet50`` has none.
    """
    shape = tuple(int(n) for n in input_shape)
    activation = "sigmoid" if multi_label else "softmax"
    if name == "mlp":
        return _mlp(shape, hidden_units, num_classes, activation)
    if name == "small-cnn":
        return _small_cnn(shape, hidden_units, num_classes, activation)
    if name == "resnet50":
        return _resnet50(shape, num_classes, activation)
    raise ValueError("unknown model %r; known: %s" % (name, ", ".join(MODELS)))


def sgd(learning_rate: float, momentum: float):  # type: ignore[no-untyped-def]
    """Keras 2's SGD of the ``OptimizerV2`` family, which Horovod 0.28.1's warm-up callback needs (it adjusts momentum
    as a variable): ``tf.keras.optimizers.legacy.SGD`` from TensorFlow 2.11, where the new optimizers became the
    default; ``tf.keras.optimizers.SGD`` itself before (the official Horovod images have TensorFlow 2.9)."""
    import tensorflow as tf

    family = getattr(tf.keras.optimizers, "legacy", tf.keras.optimizers)
    return family.SGD(learning_rate, momentum=momentum)
