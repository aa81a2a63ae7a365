"""Models the PyTorch trainer builds, by name, as the Keras trainer's (:mod:`hvdflow_trainer.keras.models`):

- ``mlp``: flatten, one hidden linear layer with ReLU; any input shape.
- ``small-cnn``: three 3x3 convolution blocks (32, 64, 128 filters, each max-pooled while the feature map is at
  least 4x4), global average pooling and one hidden linear layer.
- ``resnet50``: torchvision's ResNet-50, randomly initialised, its first convolution taking the data's channels;
  needs height and width of at least 32.

Every model ends in ``num_classes`` logits; the loss applies the softmax (single-label: cross-entropy) or the sigmoid
(multi-label: binary cross-entropy), and :func:`scores` turns logits into the probabilities evaluation ranks.

A user's own model (``--model user``) is a ``torch.nn.Module`` their build function returns; it gets
``input_shape`` as the tensors arrive, ``(channels, height, width)`` for images, and is checked to give
``num_classes`` outputs on one batch of zeros. A user's loss function (``--model-loss``) returns a callable
``loss(logits, targets)`` giving the batch's mean as a scalar tensor, in place of the task's; a user's metrics function
(``--model-metrics``) returns ``{name: metric(logits, targets)}``, each giving the batch's mean, which the trainer
averages over the samples and the ranks and logs beside the accuracy (``name`` and ``val_name``). Both are called
with ``num_classes`` and ``multi_label``.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from hvdflow_wire.model_check import ModelCheck
from hvdflow_wire.names import BUILT_IN_MODELS, USER_MODEL

from ..user_code import UserCodeError, UserModelRef, built_by_user, call, load_function, user_frame

MODELS = BUILT_IN_MODELS
CNN_FILTERS = (32, 64, 128)
RESNET_MIN_SIZE = 32


def tensor_shape(feature_shape: Sequence[int]) -> Tuple[int, ...]:
    """The shape of one sample as the model sees it: ``(C, H, W)`` for hvdflow's ``(H, W, C)`` images."""
    shape = tuple(int(n) for n in feature_shape)
    return (shape[2], shape[0], shape[1]) if len(shape) == 3 else shape


def _mlp(shape: Tuple[int, ...], hidden_units: int, num_classes: int) -> nn.Module:
    features = 1
    for n in shape:
        features *= n
    return nn.Sequential(nn.Flatten(), nn.Linear(features, hidden_units), nn.ReLU(), nn.Linear(hidden_units, num_classes))


def _small_cnn(shape: Tuple[int, ...], hidden_units: int, num_classes: int) -> nn.Module:
    if len(shape) != 3:
        raise ValueError("small-cnn needs a (channels, height, width) input, not %s" % (shape,))
    channels, height, width = shape
    layers = []
    for filters in CNN_FILTERS:
        layers += [nn.Conv2d(channels, filters, 3, padding=1), nn.ReLU()]
        channels = filters
        if min(height, width) >= 4:
            layers.append(nn.MaxPool2d(2))
            height, width = height // 2, width // 2
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, hidden_units), nn.ReLU(),
               nn.Linear(hidden_units, num_classes)]
    return nn.Sequential(*layers)


def _resnet50(shape: Tuple[int, ...], num_classes: int) -> nn.Module:
    import torchvision

    if len(shape) != 3 or min(shape[1], shape[2]) < RESNET_MIN_SIZE:
        raise ValueError("input shape %s does not fit resnet50: it needs (channels, height, width) with height and "
                         "width of at least %d" % (shape, RESNET_MIN_SIZE))
    model = torchvision.models.resnet50(weights=None, num_classes=num_classes)
    if shape[0] != 3:
        model.conv1 = nn.Conv2d(shape[0], 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


def build_model(name: str, feature_shape: Sequence[int], num_classes: int, multi_label: bool, hidden_units: int,
                user: Optional[UserModelRef] = None) -> nn.Module:
    """The model ``name`` for samples of hvdflow's ``feature_shape``, with ``num_classes`` logits."""
    shape = tensor_shape(feature_shape)
    if name == USER_MODEL and user is not None:
        return build_user_model(user, shape, num_classes, multi_label)
    if name == "mlp":
        return _mlp(shape, hidden_units, num_classes)
    if name == "small-cnn":
        return _small_cnn(shape, hidden_units, num_classes)
    if name == "resnet50":
        return _resnet50(shape, num_classes)
    raise ValueError("unknown model %r; known: %s, or %s with --model-code" % (name, ", ".join(MODELS), USER_MODEL))


def build_user_model(user: UserModelRef, shape: Tuple[int, ...], num_classes: int, multi_label: bool) -> nn.Module:
    """The user's model, built by their function and checked: a ``torch.nn.Module`` giving ``num_classes`` outputs
    per sample; UserCodeError naming what is wrong."""
    model = built_by_user(user, shape, num_classes, multi_label)
    if not isinstance(model, nn.Module):
        raise UserCodeError("%s returned %s, not a torch.nn.Module" % (user.build, type(model).__name__))
    model.eval()
    with torch.no_grad():
        try:
            out = model(torch.zeros((2,) + shape))
        except Exception as exc:  # the user's forward, on the dataset's shape
            raise UserCodeError("%s: the model fails on a batch of the dataset's shape %s: %s: %s"
                                % (user.build, (2,) + shape, type(exc).__name__, exc)) from None
    model.train()
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, num_classes):
        found = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise UserCodeError("%s returned a model whose output for a batch of 2 is %s; the dataset has %d classes, so "
                            "it needs shape (2, %d): one logit per class" % (user.build, found, num_classes, num_classes))
    return model


def check_user_model(user: UserModelRef, feature_shape: Sequence[int], num_classes: int, multi_label: bool, seed: int,
                     deterministic: bool = True) -> ModelCheck:
    """Build the user's module for the dataset and take one SGD step on two zero samples with the task's loss
    (under torch's deterministic algorithms unless the experiment says ``deterministic: false``); what was built.
    UserCodeError naming what fails, an op without a deterministic implementation included."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(deterministic)
    shape = tensor_shape(feature_shape)
    model = build_user_model(user, shape, num_classes, multi_label)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    y = torch.zeros((2, num_classes)) if multi_label else torch.zeros((2,), dtype=torch.int64)
    loss_of, metrics = loss_and_metrics(user, num_classes, multi_label)
    try:
        logits = model(torch.zeros((2,) + shape))
        loss = batch_mean(user.loss or "the task's loss", loss_of, logits, y)
        loss.backward()
        optimizer.step()
        for name, metric in metrics.items():
            float(batch_mean("%s (metric %s)" % (user.metrics, name), metric, logits.detach(), y))
    except (RuntimeError, TypeError, ValueError) as exc:  # torch's errors, and a loss or metric called wrongly
        first = str(exc).splitlines()[0]
        if "deterministic" in first:
            raise UserCodeError("%s: an op of the model has no deterministic implementation: %s (set deterministic: "
                                "false in the experiment to train it without deterministic algorithms)"
                                % (user.build, first)) from None
        raise UserCodeError("%s: a training step of the built model failed: %s%s"
                            % (user.build, first, user_frame(exc, user.code))) from None
    return ModelCheck.built(user.build, sum(p.numel() for p in model.parameters()), shape, [None, num_classes],
                            num_classes, multi_label)


def loss_function(multi_label: bool) -> nn.Module:
    """The task's loss on logits: binary cross-entropy (multi-label) or cross-entropy (single-label), batch means."""
    return nn.BCEWithLogitsLoss() if multi_label else nn.CrossEntropyLoss()


Metric = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""A loss or metric on a batch: ``(logits, targets)`` to the batch's mean."""
RESERVED_NAMES = ("loss", "accuracy", "lr", "consensus_distance", "sent_bytes_per_step")
"""The history's own columns, which a user's metric may not take."""


def loss_and_metrics(user: Optional[UserModelRef], num_classes: int, multi_label: bool
                     ) -> Tuple[Metric, Dict[str, Metric]]:
    """The loss to train with (the task's, or the user's loss function's) and the user's metrics by name (none
    unless given); UserCodeError naming a function that returns something else."""
    loss: Metric = loss_function(multi_label)
    metrics: Dict[str, Metric] = {}
    arguments = {"num_classes": num_classes, "multi_label": multi_label}
    if user is not None and user.loss:
        loss = call(load_function(user.code, user.loss), user.loss, user.code, **arguments)
        if not callable(loss):
            raise UserCodeError("%s returned %s, not a loss: return a callable loss(logits, targets) such as a "
                                "torch.nn loss module" % (user.loss, type(loss).__name__))
    if user is not None and user.metrics:
        made = call(load_function(user.code, user.metrics), user.metrics, user.code, **arguments)
        if not isinstance(made, dict) or not all(isinstance(k, str) and callable(v) for k, v in made.items()):
            raise UserCodeError("%s returned %s: return a dict {name: metric(logits, targets)} of callables"
                                % (user.metrics, type(made).__name__))
        clash = sorted(k for k in made if k in RESERVED_NAMES or k.startswith("val_") or not k.isidentifier())
        if clash:
            raise UserCodeError("%s: metric names %s are taken or unusable (the history has %s, and val_<name> for "
                                "validation): rename them" % (user.metrics, ", ".join(clash), ", ".join(RESERVED_NAMES)))
        metrics = dict(sorted(made.items()))
    return loss, metrics


def batch_mean(what: str, function: Metric, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``function(logits, y)``, which must be one number (a scalar tensor); UserCodeError naming ``what`` else."""
    value = function(logits, y)
    if not isinstance(value, torch.Tensor) or value.dim() != 0:
        found = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise UserCodeError("%s gave %s for a batch: it must return the batch's mean as a scalar tensor" % (what, found))
    return value


def correct(logits: torch.Tensor, y: torch.Tensor, multi_label: bool) -> Tuple[float, int]:
    """``(right answers, answers)`` of a batch: Keras' accuracy (argmax) or binary accuracy (per label, at 0.5)."""
    if multi_label:
        predicted = (logits > 0).to(y.dtype)
        return float((predicted == y).sum().item()), int(y.numel())
    return float((logits.argmax(dim=1) == y).sum().item()), int(y.shape[0])


def scores(logits: torch.Tensor, multi_label: bool) -> torch.Tensor:
    """Probabilities from logits: sigmoid per label, or softmax over the classes."""
    return torch.sigmoid(logits) if multi_label else torch.softmax(logits, dim=1)
