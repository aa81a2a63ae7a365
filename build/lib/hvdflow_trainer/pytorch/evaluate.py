"""Test-set metrics of a saved PyTorch model (``model/model.pt`` of :mod:`.outputs`): the module rebuilt around its
weights, run on the test split read without TensorFlow, scored as the Keras evaluation scores."""

from __future__ import annotations

import io
import os
from typing import Optional

import numpy as np
import torch

from hvdflow_index import read_index, verified_shards
from hvdflow_wire.evaluation import Evaluation

from ..metrics import multi_label_metrics, single_label_metrics
from ..user_code import UserModelRef
from .data import RankBatches, SplitRecords
from .models import build_model, scores
from .outputs import MODEL_FILE, MODEL_FORMAT


def load_model(folder: str, user: Optional[UserModelRef]) -> torch.nn.Module:
    """The module saved in ``folder``, rebuilt (by its name, or the user's build function) and given its weights."""
    path = os.path.join(folder, MODEL_FILE)
    saved = torch.load(path, weights_only=False, map_location="cpu")
    if not isinstance(saved, dict) or saved.get("format") != MODEL_FORMAT:
        raise ValueError("%s is not a model hvdflow's PyTorch trainer saved (format %s)" % (path, MODEL_FORMAT))
    if saved.get("torchscript"):  # a training script's own module: traced, needs none of its code
        return torch.jit.load(io.BytesIO(saved["torchscript"]), map_location="cpu").eval()
    model = build_model(saved["model"], saved["feature_shape"], saved["num_classes"], saved["multi_label"],
                        saved["hidden_units"], user)
    model.load_state_dict(saved["state_dict"])
    return model.eval()


def evaluate(folder: str, dataset_dir: str, batch_size: int, user: Optional[UserModelRef] = None) -> Evaluation:
    """Evaluate the model saved in ``folder`` on the dataset's test split (shards verified first), by its task."""
    torch.use_deterministic_algorithms(True)
    index = read_index(dataset_dir)
    records = SplitRecords(verified_shards(dataset_dir, index, "test"), index)
    multi = index["task"] == "multi-label"
    model = load_model(folder, user)
    truth_batches, score_batches = [], []
    with torch.no_grad():
        for x, y in RankBatches(records, list(range(len(records.spans))), batch_size, 0, False).epoch(0):
            truth_batches.append(y.numpy())
            score_batches.append(scores(model(x), multi).numpy())
    truth, predicted = np.concatenate(truth_batches), np.concatenate(score_batches)
    class_names = list(index["class_names"])  # type: ignore[call-overload]
    if multi:
        return multi_label_metrics(truth, predicted, class_names)
    return single_label_metrics([int(v) for v in truth], [int(v) for v in np.argmax(predicted, axis=1)], class_names)
