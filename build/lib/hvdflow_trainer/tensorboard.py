"""TensorBoard's event files written without TensorFlow, for the PyTorch trainer: one scalar per metric and epoch,
named and placed as Keras' TensorBoard callback does (``train/`` and ``validation/``, tags ``epoch_<metric>``), so
that a PyTorch run's ``tensorboard/`` folder reads like a Keras run's.

An event file is a TFRecord file (:func:`hvdflow_trainer.tfrecord.framed`) of ``tensorflow.Event`` messages: the
first names the file version, each later one holds a ``Summary`` with one ``simple_value``.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Dict, List

from hvdflow_wire.replace import replaced

from .tfrecord import framed


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def event(wall_time: float, step: int = 0, file_version: str = "", tag: str = "", value: float = 0.0) -> bytes:
    """A serialized ``Event``: the file's version record, or one scalar ``tag`` = ``value`` at ``step``."""
    message = _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _varint(2 << 3 | 0) + _varint(step)
    if file_version:
        return message + _bytes_field(3, file_version.encode())
    summary_value = _bytes_field(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", value)
    return message + _bytes_field(5, _bytes_field(1, summary_value))


def write_epoch_scalars(folder: str, history: List[Dict[str, float]]) -> None:
    """``train/`` and ``validation/`` event files with every epoch's metrics (``val_`` keys under validation)."""
    now = time.time()
    for split in ("train", "validation"):
        records = [framed(event(now, file_version="brain.Event:2"))]
        for epoch, row in enumerate(history):
            for key, value in sorted(row.items()):
                if key.startswith("val_") == (split == "validation"):
                    name = key[4:] if split == "validation" else key
                    records.append(framed(event(now, epoch, tag="epoch_" + name, value=float(value))))
        os.makedirs(os.path.join(folder, split), exist_ok=True)
        path = os.path.join(folder, split, "events.out.tfevents.%d.%s.v2" % (int(now), socket.gethostname()))
        with replaced(path, mode="wb") as handle:
            handle.write(b"".join(records))
