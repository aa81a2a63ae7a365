"""Test-set metrics of a saved Keras model: single-label (argmax) or multi-label (sigmoid scores) metrics."""

from __future__ import annotations

import os
from typing import Optional

from hvdflow_index import read_index, verified_shards
from hvdflow_wire.evaluation import Evaluation

from ..metrics import multi_label_metrics, single_label_metrics
from ..records import parse_fn
from ..user_code import UserModelRef, load_function

TASKS = ("single-label", "multi-label")


def evaluate(folder: str, dataset_dir: str, batch_size: int, user: Optional[UserModelRef] = None
             ) -> Evaluation:
    """Evaluate the model saved in ``folder`` (``model.keras``) on the dataset's test split (shards verified
    first), by the dataset's task. A
    user's model: its build function's module is imported first, so that the layers it registers load."""
    import numpy as np
    import tensorflow as tf

    index = read_index(dataset_dir)
    if index["task"] not in TASKS:
        raise ValueError("%s has task %r; evaluate supports %s" % (dataset_dir, index["task"], ", ".join(TASKS)))
    paths = verified_shards(dataset_dir, index, "test")
    if user is not None and user.build:  # a script's model is saved as Keras layers it needs no module for
        load_function(user.code, user.build)
    model = tf.keras.models.load_model(os.path.join(folder, "model.keras"), compile=False)
    data = tf.data.TFRecordDataset(paths).map(parse_fn(index)).batch(batch_size)
    truth_batches = []
    score_batches = []
    for x, y in data:
        truth_batches.append(y.numpy())
        score_batches.append(model(x, training=False).numpy())
    truth, scores = np.concatenate(truth_batches), np.concatenate(score_batches)
    class_names = list(index["class_names"])  # type: ignore[call-overload]
    if index["task"] == "multi-label":
        return multi_label_metrics(truth, scores, class_names)
    return single_label_metrics([int(v) for v in truth], [int(v) for v in np.argmax(scores, axis=1)], class_names)
