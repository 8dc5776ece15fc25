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


def version_3_bytes(d: TDigest, exponent: int) -> bytes:
    """`d` (unit weights) in version 3 with the gaps of its offsets as varints."""
    means, _ = d.centroids
    offsets = (np.rint(means * 10.0**exponent) - np.rint(d.min * 10.0**exponent)).astype(int)
    head = struct.pack("<4sBfIIHdddBbB", b"TDGT", 3, d.compression, d.count, d.nan_count,
                       len(means), d.sum, d.min, d.max, 0, exponent, 0)  # fmt: skip
    return head + b"".join(leb128(int(g)) for g in np.diff(offsets, prepend=0))


def version_4_head(d: TDigest, mean_width: int, exponent: int, weight_width: int) -> bytes:
    """The preamble and header `d` takes in version 4, written from its layout.

    Varints: flags, compression, count, nan_count, centroids, layout (exponent | mean width's
    code << 3 | weight width's code << 6, codes: 0 = varint gaps, 1, 2, 4, 8 bytes), the sum's
    zigzag distance in ulps from the centroids' own sum, rint(min * 10^exponent); then the f64s
    of the fields that could not be written so (flags 1, 2, 4, 8: compression, sum, min, max).
    """
    means, weights = d.centroids
    codes = (0, 1, 2, 4, 8)
    layout = exponent | codes.index(mean_width) << 3 | codes.index(weight_width) << 6

    def bits(x: float) -> int:
        return struct.unpack("<q", struct.pack("<d", x))[0]

    own = float(np.add.reduceat(means * weights, [0])[0]) if len(means) else 0.0
    ulps = bits(d.sum) - bits(own)
    base = round(d._min * 10**exponent) if len(means) and mean_width != 8 else -1
    fields = {
        1: (d.compression, d.compression.is_integer(), int(d.compression)),
        2: (d.sum, abs(ulps) < 2**33, 2 * ulps if ulps >= 0 else -2 * ulps - 1),
        4: (d._min, 0 <= base < 2**35 and bits(base / 10**exponent) == bits(d._min), base),
        8: (d._max, len(means) > 0 and bits(float(means[-1])) == bits(d._max), None),
    }
    flags = sum(flag for flag, (_, ok, _) in fields.items() if not ok)
    head = leb128(flags) + (leb128(fields[1][2]) if fields[1][1] else b"")
    head += b"".join(leb128(v) for v in (d.count, d.nan_count, len(means), layout))
    head += b"".join(leb128(fields[f][2]) for f in (2, 4) if fields[f][1])
    head += b"".join(struct.pack("<d", value) for value, ok, _ in fields.values() if not ok)
    return b"TDGT\x04" + head
