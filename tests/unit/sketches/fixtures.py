"""Inputs shared by the sketches' unit tests."""

from __future__ import annotations

import random


def random_strings(n: int, seed: int = 7) -> list[str]:
    """Lengths 0..40 (so 0..5 words, ragged tails), ASCII and 2-, 3- and 4-byte UTF-8."""
    rng = random.Random(seed)
    alphabet = "abcxyz0189-_é€𝄞"
    return ["".join(rng.choices(alphabet, k=rng.randrange(0, 41))) for _ in range(n)]
