"""Models the trainer can build, by name, for an input shape and class count.

- ``mlp``: Flatten, one hidden Dense layer; any input shape.
- ``small-cnn``: three 3x3 convolution blocks (32, 64, 128 filters, each max-pooled while the feature map is at
  least 4x4), global average pooling and one hidden Dense layer; any ``(H, W, C)`` input, 8x8x1 included.
- ``resnet50``: Keras' ResNet-50 without its top, randomly initialised (so any channel count), global average
  pooled; needs ``H`` and ``W`` of at least 32.

Every model ends in ``num_classes`` outputs: softmax for single-label data, sigmoid for multi-label data.

A user's own model (``--model user``) is built by the user's function (:func:`build_user_model`), checked to be a
Keras model with ``num_classes`` outputs; its loss and metrics are the task's unless the user gives their own
(:func:`loss_and_metrics`).
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from hvdflow_wire.model_check import ModelCheck
from hvdflow_wire.names import BUILT_IN_MODELS, USER_MODEL

from ..user_code import UserCodeError, UserModelRef, built_by_user, call, load_function

MODELS = BUILT_IN_MODELS
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


def build_model(name: str, input_shape: Sequence[int], num_classes: int, multi_label: bool, hidden_units: int,
                user: Optional[UserModelRef] = None):  # type: ignore[no-untyped-def]
    """A Keras model: softmax outputs for single-label data, sigmoid outputs for multi-label data.

    ``hidden_units`` sizes the hidden Dense layer of ``mlp`` and ``small-cnn``; ``resnet50`` has none. ``user``: the
    user's own model (``name`` is ``user``).
    """
    shape = tuple(int(n) for n in input_shape)
    activation = "sigmoid" if multi_label else "softmax"
    if name == USER_MODEL and user is not None:
        return build_user_model(user, shape, num_classes, multi_label)
    if name == "mlp":
        return _mlp(shape, hidden_units, num_classes, activation)
    if name == "small-cnn":
        return _small_cnn(shape, hidden_units, num_classes, activation)
    if name == "resnet50":
        return _resnet50(shape, num_classes, activation)
    raise ValueError("unknown model %r; known: %s, or %s with --model-code" % (name, ", ".join(MODELS), USER_MODEL))


def build_user_model(user: UserModelRef, shape: Tuple[int, ...], num_classes: int, multi_label: bool):  # type: ignore[no-untyped-def]
    """The user's model, built by their function and checked: a ``tf.keras.Model`` (uncompiled) with one output of
    ``num_classes`` units; UserCodeError naming what is wrong."""
    import tensorflow as tf

    model = built_by_user(user, shape, num_classes, multi_label)
    if not isinstance(model, tf.keras.Model):
        raise UserCodeError("%s returned %s, not a tf.keras.Model" % (user.build, type(model).__name__))
    outputs = model.output_shape
    if not isinstance(outputs, tuple) or outputs[-1] != num_classes:
        raise UserCodeError("%s returned a model whose output shape is %s; the dataset has %d classes, so its last "
                            "layer needs %d units (%s)" % (user.build, outputs, num_classes, num_classes,
                                                           "sigmoid: multi-label" if multi_label else "softmax"))
    return model


def loss_and_metrics(user: Optional[UserModelRef], num_classes: int, multi_label: bool) -> Tuple[Any, List[Any]]:
    """The loss and metrics to compile with: the task's (binary cross-entropy and binary accuracy for multi-label
    data, sparse categorical cross-entropy and accuracy otherwise), or the user's loss or metrics function's, called
    with ``num_classes`` and ``multi_label``."""
    import tensorflow as tf

    if multi_label:
        loss, metrics = "binary_crossentropy", [tf.keras.metrics.BinaryAccuracy(name="accuracy")]
    else:
        loss, metrics = "sparse_categorical_crossentropy", ["accuracy"]
    if user is not None and user.loss:
        loss = call(load_function(user.code, user.loss), user.loss, user.code, num_classes=num_classes,
                    multi_label=multi_label)
    if user is not None and user.metrics:
        metrics = list(call(load_function(user.code, user.metrics), user.metrics, user.code,
                            num_classes=num_classes, multi_label=multi_label))
    return loss, metrics


def sgd(learning_rate: float, momentum: float):  # type: ignore[no-untyped-def]
    """Keras 2's SGD of the ``OptimizerV2`` family, which Horovod 0.28.1's warm-up callback needs (it adjusts momentum
    as a variable): ``tf.keras.optimizers.legacy.SGD`` from TensorFlow 2.11, where the new optimizers became the
    default; ``tf.keras.optimizers.SGD`` itself before (the official Horovod images have TensorFlow 2.9)."""
    import tensorflow as tf

    family = getattr(tf.keras.optimizers, "legacy", tf.keras.optimizers)
    return family.SGD(learning_rate, momentum=momentum)


def check_user_model(user: UserModelRef, shape: Sequence[int], num_classes: int, multi_label: bool, seed: int,
                     deterministic: bool = True) -> ModelCheck:
    """Build the user's model for the dataset, compile it as training does and take one step on two zero samples
    (under TensorFlow's op determinism, unless the experiment says ``deterministic: false``); what was built
    (parameters, output shape, and the random ops whose position a resume cannot restore,
    ``unresumable_random_ops``). UserCodeError naming what fails, an op without a deterministic kernel included."""
    import numpy as np
    import tensorflow as tf

    from .randomness import unresumable_random_ops, use_resumable_generators

    tf.keras.utils.set_random_seed(seed)
    use_resumable_generators()  # as training builds it
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    try:
        model = build_user_model(user, tuple(int(n) for n in shape), num_classes, multi_label)
    except UserCodeError as exc:  # ops that refuse op determinism when called (on CPU most do it then)
        said = [line.strip() for line in str(exc).splitlines() if "determinism is enabled" in line]
        if deterministic and said:
            raise UserCodeError("%s: an op of the model has no deterministic form: %s (set deterministic: false in "
                                "the experiment to train it without op determinism)" % (user.build, said[0])) from None
        raise
    loss, metrics = loss_and_metrics(user, num_classes, multi_label)
    model.compile(optimizer=sgd(0.01, 0.9), loss=loss, metrics=metrics)
    x = np.zeros((2, *shape), dtype=np.float32)
    y = np.zeros((2, num_classes), dtype=np.float32) if multi_label else np.zeros((2,), dtype=np.int64)
    try:
        model.train_on_batch(x, y)
    except (tf.errors.UnimplementedError, tf.errors.InvalidArgumentError) as exc:
        op = getattr(exc.op, "name", "?")
        if "eterminis" in exc.message:
            raise UserCodeError("%s: op %s has no deterministic kernel: %s (set deterministic: false in the experiment "
                                "to train it without op determinism)" % (user.build, op, exc.message.splitlines()[0])
                                ) from None
        raise UserCodeError("%s: a training step of the built model failed in op %s: %s"
                            % (user.build, op, exc.message.splitlines()[0])) from None
    except (ValueError, TypeError) as exc:
        raise UserCodeError("%s: a training step of the built model failed: %s" % (user.build, exc)) from None
    return ModelCheck.built(user.build, int(model.count_params()), shape, model.output_shape, num_classes, multi_label,
                            unresumable_random_ops(model, shape))
