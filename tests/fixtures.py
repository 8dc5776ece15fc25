"""Constants the tiers share: units of time in ms and the instant most tests start at."""

from __future__ import annotations

S, M, H, D = 1_000, 60_000, 3_600_000, 86_400_000  # a second, minute, hour and day in ms

#: 2026-11-22T10:00:00Z in epoch ms: a boundary of 10 s, 30 s and 60 s windows, and of hours.
T = 1_795_341_600_000
