"""Inputs shared by the sketches' unit tests."""

from __future__ import annotations

import random
import struct

import numpy as np

from sketches import TDigest


def leb128(value: int) -> bytes:
    """Unsigned LEB128, one value, the textbook loop (protobuf's varint)."""
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def random_strings(n: int, seed: int = 7) -> list[str]:
    """Lengths 0..40 (so 0..5 words, ragged tails), ASCII and 2-, 3- and 4-byte UTF-8."""
    rng = random.Random(seed)
    alphabet = "abcxyz0189-_é€𝄞"
    return ["".join(rng.choices(alphabet, k=rng.randrange(0, 41))) for _ in range(n)]


def fixed_width_bytes(d: TDigest, exponent: int) -> bytes:
    """`d` (unit weights) in version 3 with 4-byte offsets: how windows were stored before gaps."""
    means, _ = d.centroids
    offsets = np.rint(means * 10.0**exponent) - np.rint(d.min * 10.0**exponent)
    head = struct.pack("<4sBfIIHdddBbB", b"TDGT", 3, d.compression, d.count, d.nan_count,
                       len(means), d.sum, d.min, d.max, 4, exponent, 0)  # fmt: skip
    return head + offsets.astype("<u4").tobytes()
