"""Dead letters as tables: records the job could not accept, by reason and the latest few.

The latest few show a preview of their raw bytes, so a producer's mistake is visible at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from dashboard.times import to_utc
from tidegauge.core.store import DeadLetter

__all__ = ["RAW_PREVIEW_CHARS", "dead_counts_frame", "dead_letters_frame"]

#: How many characters of a dead letter's raw bytes the table shows.
RAW_PREVIEW_CHARS = 80


def dead_counts_frame(counts: dict[str, int]) -> pd.DataFrame:
    """Dead letters ever seen by reason, most frequent first."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return pd.DataFrame(items, columns=["reason", "count"]).astype({"count": "int64"})


def _preview(raw: bytes, limit: int = RAW_PREVIEW_CHARS) -> str:
    if not raw:
        return "(empty)"
    text = raw.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def dead_letters_frame(letters: Sequence[DeadLetter]) -> pd.DataFrame:
    r"""The given dead letters as a table: Kafka time (UTC), reason, detail, position, raw preview.

    `raw` shows undecodable bytes escaped (`\xff`), is cut to `RAW_PREVIEW_CHARS` and reads
    "(empty)" for a record without bytes.
    """
    return pd.DataFrame(
        {
            "Kafka time (UTC)": to_utc([d.kafka_timestamp for d in letters]),
            "reason": [d.reason for d in letters],
            "detail": [d.detail for d in letters],
            "partition:offset": [d.ref for d in letters],
            "raw": [_preview(d.raw) for d in letters],
        }
    )
