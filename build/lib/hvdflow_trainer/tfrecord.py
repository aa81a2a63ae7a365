"""The prepared dataset's TFRecord shards read without TensorFlow (for the PyTorch trainer): framing, the records'
``tf.train.Example`` and their decoding as :mod:`hvdflow_trainer.records` writes them.

A TFRecord file is a sequence of records, each ``uint64 length, uint32 masked CRC of the length, data, uint32 masked
CRC of the data`` (little-endian). The CRCs are not checked here: a shard is read only after its sha256 has been
checked against the index (:func:`hvdflow_index.verified_shards`), which covers every byte. A record's data is a
serialized ``tf.train.Example`` whose features are ``x`` (a ``BytesList`` of one value: the sample's pixels) and ``y``
(an ``Int64List`` of label indices); this module parses that much of the protocol buffer encoding (varints,
length-delimited fields, packed and unpacked repeated int64) and refuses anything else by name.
"""

from __future__ import annotations

import struct
from typing import Dict, Iterator, List, Sequence, Tuple, Union

import numpy as np

_HEADER = 12  # uint64 length + uint32 CRC of it
_FOOTER = 4  # uint32 CRC of the data

Feature = Union[bytes, List[int]]


class RecordError(ValueError):
    """A shard or record that is not what hvdflow writes; the message names the file and where."""


def record_spans(path: str) -> List[Tuple[int, int]]:
    """``(offset of the data, its length)`` of every record in the TFRecord file ``path``, in order."""
    spans = []
    with open(path, "rb") as handle:
        size = handle.seek(0, 2)
        offset = 0
        while offset < size:
            handle.seek(offset)
            header = handle.read(_HEADER)
            if len(header) < _HEADER:
                raise RecordError("%s: a record header is cut off at byte %d" % (path, offset))
            (length,) = struct.unpack("<Q", header[:8])
            end = offset + _HEADER + length + _FOOTER
            if end > size:
                raise RecordError("%s: the record at byte %d claims %d bytes, past the file's end" % (path, offset, length))
            spans.append((offset + _HEADER, length))
            offset = end
    return spans


def _varint(data: bytes, pos: int) -> Tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data):
            raise RecordError("a varint runs past the end of the message")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes):  # type: ignore[no-untyped-def]
    """``(field number, wire type, value)`` of each field of a message: an int for varints, bytes otherwise."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise RecordError("wire type %d of field %d is not protocol buffers' encoding" % (wire, number))
        yield number, wire, value


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _feature(data: bytes) -> Feature:
    for number, _, value in _fields(data):
        if number == 1:  # BytesList
            return [v for n, _, v in _fields(value) if n == 1][0] if value else b""
        if number == 3:  # Int64List
            ints: List[int] = []
            for n, wire, v in _fields(value):
                if n != 1:
                    continue
                if wire == 0:
                    ints.append(_int64(v))
                else:  # packed
                    pos = 0
                    while pos < len(v):
                        item, pos = _varint(v, pos)
                        ints.append(_int64(item))
            return ints
        if number == 2:
            raise RecordError("a FloatList feature: hvdflow's records hold bytes and int64 only")
    return []


def parse_example(data: bytes) -> Dict[str, Feature]:
    """The features of a serialized ``tf.train.Example``: bytes for a ``BytesList`` (its first value), a list of
    ints for an ``Int64List``."""
    features: Dict[str, Feature] = {}
    for number, _, value in _fields(data):
        if number != 1:
            continue
        for entry_number, _, entry in _fields(value):  # Features: map<string, Feature> as repeated entries
            if entry_number != 1:
                continue
            key, feature = "", b""
            for n, _, v in _fields(entry):
                if n == 1:
                    key = v.decode()
                elif n == 2:
                    feature = v
            features[key] = _feature(feature)
    return features


class SampleDecoder:
    """A record's ``(x, y)`` as the Keras pipeline decodes it (:func:`hvdflow_trainer.records.parse_fn`): ``x`` the
    pixels as float32 of the index's shape, scaled per channel by the training split's statistics when the index has
    them; ``y`` the first label (single-label) or a multi-hot float32 vector (multi-label)."""

    def __init__(self, index: Dict[str, object]) -> None:
        self.shape = [int(v) for v in index["feature_shape"]]  # type: ignore[attr-defined]
        self.classes = int(index["num_classes"])  # type: ignore[call-overload]
        self.multi = index["task"] == "multi-label"
        self.dtype = np.dtype(str(index.get("feature_dtype", "float32")))
        norm = index.get("normalization")
        self.mean = None if not norm else np.asarray(norm["mean"], np.float32)  # type: ignore[index]
        self.std = None if not norm else np.asarray(norm["std"], np.float32)  # type: ignore[index]

    def __call__(self, data: bytes) -> Tuple[np.ndarray, Union[int, np.ndarray]]:
        features = parse_example(data)
        pixels, labels = features.get("x"), features.get("y")
        if not isinstance(pixels, bytes) or not isinstance(labels, list):
            raise RecordError("a record without the features x (bytes) and y (int64)")
        x = np.frombuffer(pixels, self.dtype).reshape(self.shape).astype(np.float32)
        if self.mean is not None:
            x = (x - self.mean) / self.std
        if self.multi:
            y = np.zeros(self.classes, np.float32)
            y[labels] = 1.0
            return x, y
        return x, int(labels[0])


def read_span(handle, span: Tuple[int, int]) -> bytes:  # type: ignore[no-untyped-def]
    """The data of the record at ``span`` (from :func:`record_spans`) of the open file ``handle``."""
    handle.seek(span[0])
    return handle.read(span[1])  # type: ignore[no-any-return]


def read_records(path: str) -> Iterator[bytes]:
    """The serialized records of the TFRecord file ``path``, in order."""
    with open(path, "rb") as handle:
        for span in record_spans(path):
            yield read_span(handle, span)


def split_spans(paths: Sequence[str]) -> List[Tuple[int, int, int]]:
    """``(file number, offset, length)`` of every record of a split's shards, in the split's record order."""
    return [(i, offset, length) for i, path in enumerate(paths) for offset, length in record_spans(path)]


def _crc32c_table() -> List[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C (Castagnoli) of ``data``, rotated and offset as TensorFlow masks it."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def framed(data: bytes) -> bytes:
    """``data`` framed as one TFRecord record (length, its CRC, data, its CRC)."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))
