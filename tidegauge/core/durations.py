"""Human durations ("10s", "1m30s", "250ms") and times ("15m" ago, ISO-8601, epoch ms).

Every duration inside Tidegauge is an integer number of milliseconds; these helpers are the only
place where text becomes milliseconds, so CLI flags, environment variables and the docs agree.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

__all__ = ["format_duration", "parse_duration", "parse_instant", "to_iso"]

_UNITS_MS = {
    "ms": 1,
    "s": 1_000,
    "sec": 1_000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|sec|min|s|m|h|d)")


def parse_duration(text: str) -> int:
    """Parse "10s", "1m30s", "250ms", "2h" (or a bare number of seconds) into milliseconds.

    Raises ValueError with the accepted forms when the text is not a duration.
    """
    s = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", s):
        return round(float(s) * 1000)
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS_MS[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(
            f"not a duration: {text!r} (use e.g. 250ms, 10s, 1m30s, 2h; a bare number is seconds)"
        )
    return round(total)


def format_duration(ms: int) -> str:
    """Render milliseconds compactly ("1m30s", "250ms"); the inverse of `parse_duration`."""
    if ms == 0:
        return "0s"
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    out = []
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)):
        if ms >= size:
            out.append(f"{ms // size}{unit}")
            ms %= size
    return sign + "".join(out)


def parse_instant(text: str, now_ms: int) -> int:
    """Parse a point in time into epoch ms (UTC).

    Accepts epoch milliseconds ("1700000000000"), ISO-8601 with a time zone
    ("2026-11-22T10:00:00Z"), or a duration meaning that long before `now_ms` ("15m").
    """
    s = text.strip()
    if re.fullmatch(r"-?\d{11,}", s):
        return int(s)
    try:
        return now_ms - parse_duration(s)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (use epoch ms, ISO-8601 with a zone, or a duration ago like 15m)"
        ) from None
    if dt.tzinfo is None:
        raise ValueError(f"time {text!r} has no time zone (add Z or +00:00)")
    return round(dt.timestamp() * 1000)


def to_iso(ms: int) -> str:
    """Epoch ms to an ISO-8601 UTC string with millisecond precision."""
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")
