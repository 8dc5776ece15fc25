"""Times as the page shows them: epoch ms in, naive-UTC timestamps and short ages out.

Everything the dashboard reads keeps times as epoch ms (UTC) until a table or chart needs them:
`to_utc` turns them into naive-UTC pandas timestamps for plotting, `format_age` into an age a
reader takes in at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

__all__ = ["format_age", "to_utc"]


def to_utc(ms: pd.Series | Sequence[int]) -> pd.Series:
    """Epoch ms to naive datetimes in UTC.

    Naive on purpose: plotly.js has no time zones and would shift or reject offsets, so the
    values are UTC wall-clock times and the axis says "UTC".
    """
    s = pd.Series(ms, dtype="int64")
    return pd.to_datetime(s, unit="ms", utc=True).dt.tz_localize(None)


def format_age(ms: int) -> str:
    """A duration for humans at a glance: "0.4s", "12.3s", "3m05s", "2h10m", "3d4h".

    Coarser than `format_duration` on purpose: ages tick every refresh, and "1m30s250ms"
    would jitter. Negative ages (clock skew between job and dashboard) keep their sign.
    """
    if ms < 0:
        return "-" + format_age(-ms)
    if ms < 60_000:
        return f"{ms // 100 / 10:.1f}s"
    s = ms // 1000
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86_400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86_400}d{s % 86_400 // 3600}h"
