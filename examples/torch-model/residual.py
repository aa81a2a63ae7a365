"""A user's own PyTorch module with the parts whose state a resume must carry: BatchNorm2d (running statistics that
each rank moves on its own data), a residual block, and Dropout (torch's random generator).

hvdflow keeps its promises on it as on its own models (README: "Determinism and resume"): bit-identical weights on
CPU, a run killed or stopped at any step and resumed ends with the uninterrupted run's weights, and with 2 ranks
``distributed: horovod`` and ``distributed: ddp`` train the same model bit for bit (both keep each rank's running
statistics and average them over the ranks at each epoch's end). The config names it:

    experiments:
      mine:
        framework: pytorch
        image: hvdflow-torch-cpu
        model: {code: examples/torch-model, build: residual:build, params: {filters: 8, dropout: 0.25}}
"""

from torch import nn


class Residual(nn.Module):
    """Two batch-normalised 3x3 convolutions added to their input."""

    def __init__(self, filters):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(filters, filters, 3, padding=1, bias=False), nn.BatchNorm2d(filters), nn.ReLU(),
            nn.Conv2d(filters, filters, 3, padding=1, bias=False), nn.BatchNorm2d(filters))

    def forward(self, x):
        return nn.functional.relu(x + self.body(x))


def build(input_shape, num_classes, multi_label, filters=8, dropout=0.25):
    """A 3x3 convolution, one residual block, global average pooling, Dropout(``dropout``) and ``num_classes``
    logits (hvdflow applies the softmax or sigmoid in the loss)."""
    channels = input_shape[0]
    return nn.Sequential(
        nn.Conv2d(channels, filters, 3, padding=1, bias=False), nn.BatchNorm2d(filters), nn.ReLU(),
        Residual(filters), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout),
        nn.Linear(filters, num_classes))
