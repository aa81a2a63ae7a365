"""Reads hvdflow's TFRecord shards without TensorFlow (the host has none): the framing and tf.train.Example's wire
format, just enough to check what the preparation wrote."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterator, Union


def records(path: Path) -> Iterator[bytes]:
    """The serialized records of a TFRecord file (length, length CRC, data, data CRC; CRCs not checked)."""
    data = path.read_bytes()
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        yield data[pos + 12:pos + 12 + length]
        pos += 16 + length


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _fields(buf: bytes) -> Iterator[tuple[int, Union[int, bytes]]]:
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        if key & 7 == 0:
            value, pos = _varint(buf, pos)
            yield key >> 3, value
        else:   # length-delimited: the only other wire type an Example uses
            length, pos = _varint(buf, pos)
            yield key >> 3, buf[pos:pos + length]
            pos += length


def example(record: bytes) -> dict[str, Union[bytes, list[int]]]:
    """The features of a serialized tf.train.Example: bytes for a BytesList, a list of ints for an Int64List."""
    features: dict[str, Union[bytes, list[int]]] = {}
    for _, features_msg in _fields(record):                  # Example.features
        for _, entry in _fields(features_msg):               # Features.feature map entries
            fields = dict(_fields(entry))                    # 1: key, 2: Feature
            name, feature = fields[1].decode(), dict(_fields(fields[2]))
            if 1 in feature:                                 # BytesList
                features[name] = dict(_fields(feature[1]))[1]
            else:                                            # Int64List, packed
                packed, values, pos = dict(_fields(feature[3]))[1], [], 0
                while pos < len(packed):
                    value, pos = _varint(packed, pos)
                    values.append(value)
                features[name] = values
    return features
