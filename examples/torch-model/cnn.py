"""A user's own PyTorch model for hvdflow: a small convolutional network whose width is a parameter.

hvdflow calls ``build(input_shape=..., num_classes=..., multi_label=..., **params)`` once per rank, in the image,
and trains what it returns with the experiment's distributed mode (Horovod's optimizer or DistributedDataParallel)
and the task's loss (README: "Training with PyTorch"). ``input_shape`` is one sample as the tensors arrive:
``(channels, height, width)`` for images. The module returns one logit per class; hvdflow applies the softmax or
sigmoid in the loss. The config names it:

    experiments:
      mine:
        framework: pytorch
        image: hvdflow-torch-cpu
        model: {code: examples/torch-model, build: cnn:build, params: {filters: 16}}
"""

from torch import nn


def build(input_shape, num_classes, multi_label, filters=16, dense_units=32):
    """Two 3x3 convolutions of ``filters`` filters, flattened (small images such as the 8x8 digits keep where each
    feature is), a hidden layer of ``dense_units`` units, and ``num_classes`` logits."""
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, filters, 3, padding=1), nn.ReLU(),
        nn.Conv2d(filters, filters, 3, padding=1), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(filters * height * width, dense_units), nn.ReLU(),
        nn.Linear(dense_units, num_classes),
    )


def loss(num_classes, multi_label):
    """Optional (``model.loss: cnn:loss``): the loss hvdflow trains with in place of the task's, here cross-entropy
    with label smoothing (binary cross-entropy for multi-label data). It returns a callable ``(logits, targets)`` ->
    the batch's mean, a scalar tensor."""
    return nn.BCEWithLogitsLoss() if multi_label else nn.CrossEntropyLoss(label_smoothing=0.1)


def metrics(num_classes, multi_label):
    """Optional (``model.metrics: cnn:metrics``): metrics logged beside the loss and accuracy (``top3`` and
    ``val_top3`` in history.csv), each ``(logits, targets)`` -> the batch's mean as a scalar tensor."""
    if multi_label:
        return {}

    def top3(logits, targets):
        best = logits.topk(min(3, num_classes), dim=1).indices
        return (best == targets.unsqueeze(1)).any(dim=1).float().mean()

    return {"top3": top3}
