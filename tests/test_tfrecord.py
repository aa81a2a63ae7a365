"""The TFRecord shards read without TensorFlow (the PyTorch trainer's reader) and TensorBoard's event files written
without it: framing, CRC-32C, tf.train.Example's encoding, the decoding the Keras pipeline does. TensorFlow's own
shards are checked against the same code in tests/test_datasets_pipeline.py (re-framing them gives their bytes)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from hvdflow_trainer.tensorboard import write_epoch_scalars
from hvdflow_trainer.tfrecord import (
    RecordError,
    SampleDecoder,
    framed,
    masked_crc32c,
    parse_example,
    read_records,
    record_spans,
    split_spans,
)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def example(x: bytes, labels: list[int], packed: bool = True) -> bytes:
    """A serialized tf.train.Example with features x (BytesList) and y (Int64List), built by hand."""
    as_uint = [v & (2 ** 64 - 1) for v in labels]
    if packed:
        ints = _field(1, b"".join(_varint(v) for v in as_uint))
    else:
        ints = b"".join(_varint(1 << 3) + _varint(v) for v in as_uint)
    features = _field(1, _field(1, b"x") + _field(2, _field(1, _field(1, x)))) + \
        _field(1, _field(1, b"y") + _field(2, _field(3, ints)))
    return _field(1, features)


def test_crc32c_is_castagnolis_masked_as_tensorflow_masks_it() -> None:
    crc = 0xE3069283  # CRC-32C of b"123456789", the check value of the Castagnoli polynomial
    assert masked_crc32c(b"123456789") == ((crc >> 15 | crc << 17) + 0xA282EAD8) & 0xFFFFFFFF


def test_records_are_framed_read_back_and_split_in_order(tmp_path: Path) -> None:
    data = [example(bytes([i]) * 4, [i]) for i in range(5)]
    first, second = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"
    first.write_bytes(b"".join(framed(d) for d in data[:3]))
    second.write_bytes(b"".join(framed(d) for d in data[3:]))
    assert list(read_records(str(first))) == data[:3]
    spans = split_spans([str(first), str(second)])
    assert [s[0] for s in spans] == [0, 0, 0, 1, 1] and len(spans) == 5
    assert record_spans(str(second))[0] == (12, len(data[3]))
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(first.read_bytes()[:-3])
    with pytest.raises(RecordError, match=r"cut.tfrecord: the record at byte \d+ claims \d+ bytes, past the file's end"):
        record_spans(str(cut))


def test_examples_decode_packed_and_unpacked_int64_and_refuse_floats() -> None:
    assert parse_example(example(b"\x01\x02", [3, -1, 300])) == {"x": b"\x01\x02", "y": [3, -1, 300]}
    assert parse_example(example(b"", [7], packed=False)) == {"x": b"", "y": [7]}
    floats = _field(1, _field(1, _field(1, b"x") + _field(2, _field(2, b"\x00\x00\x80\x3f"))))
    with pytest.raises(RecordError, match="a FloatList feature"):
        parse_example(floats)


def test_samples_decode_as_the_keras_pipeline_does() -> None:
    pixels = np.arange(12, dtype="<u2").reshape(2, 2, 3)
    index = {"feature_shape": [2, 2, 3], "num_classes": 4, "task": "single-label", "feature_dtype": "uint16",
             "normalization": {"mean": [1.0, 2.0, 3.0], "std": [2.0, 2.0, 4.0]}}
    x, y = SampleDecoder(index)(example(pixels.tobytes(), [2]))
    assert x.dtype == np.float32 and y == 2
    assert np.array_equal(x, (pixels.astype(np.float32) - np.float32([1, 2, 3])) / np.float32([2, 2, 4]))
    multi = SampleDecoder({**index, "task": "multi-label", "normalization": None})
    x, y = multi(example(pixels.tobytes(), [0, 3]))
    assert np.array_equal(x, pixels.astype(np.float32)) and list(y) == [1.0, 0.0, 0.0, 1.0]


def test_tensorboard_event_files_hold_each_epochs_scalars_under_keras_names(tmp_path: Path) -> None:
    history = [{"loss": 2.0, "accuracy": 0.5, "val_loss": 1.5}, {"loss": 1.0, "accuracy": 0.75, "val_loss": 1.25}]
    write_epoch_scalars(str(tmp_path), history)
    for split, tags in (("train", {"epoch_loss", "epoch_accuracy"}), ("validation", {"epoch_loss"})):
        (events,) = (tmp_path / split).glob("events.out.tfevents.*")
        raw = events.read_bytes()
        records = list(read_records(str(events)))
        assert b"".join(framed(r) for r in records) == raw  # every CRC as TensorFlow's reader checks it
        assert b"brain.Event:2" in records[0]
        assert len(records) == 1 + len(tags) * len(history)
        found = {(tag, step) for tag in tags for step in range(2) if any(tag.encode() in r for r in records[1:])}
        assert len(found) == len(tags) * 2
        value = struct.pack("<f", history[1]["loss"] if split == "train" else history[1]["val_loss"])
        assert any(value in r for r in records[1:])
