"""The sink's patience: transient Redis failures retried with back-off, for `--sink-retry-for`.

Runs on the driver around each batch's transaction. Retrying is safe because every write of a
batch is idempotent (absolute values, per-batch fields): an attempt whose reply was lost does no
harm when made again. When the budget runs out the job stops with `SinkError`, whose one-line
message `tidegauge job` prints; the checkpoint keeps the batch, so a restart loses nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis

from tidegauge.core.durations import format_duration

__all__ = ["FULL_REDIS", "SinkError", "retry"]

log = logging.getLogger("tidegauge.job")


#: What to do when Redis refuses writes at its `maxmemory` (docs/redis.md, "Retention").
FULL_REDIS = (
    "Redis is full: it refuses writes at its maxmemory. Raise maxmemory, or keep less with a "
    "smaller --retention-size or a shorter --retention (what each tier takes: docs/redis.md), "
    "with maxmemory-policy "
    "noeviction; the job retries meanwhile"
)


class SinkError(RuntimeError):
    """Redis stayed unreachable for the job's whole `--sink-retry-for`: the job stops."""


#: Longest wait between two attempts, and how often a long outage is logged again.
_MAX_DELAY_S = 5.0
_LOG_EVERY_S = 30.0


def retry(fn: Callable[[], None], what: str, budget_ms: int, where: str = "Redis") -> int:
    """Retry transient Redis failures with back-off; give up (failing the batch) after budget_ms.

    Returns how many attempts failed before the one that succeeded.

    The batch's writes are idempotent (absolute values, per-batch fields), so an attempt that
    reached Redis before its reply was lost does no harm when it is made again.
    """
    started = time.monotonic()
    deadline = started + budget_ms / 1000
    delay, logged, was_full = 0.2, 0.0, False
    failed = 0
    while True:
        try:
            fn()
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as e:
            full = isinstance(e, redis.OutOfMemoryError)
            if isinstance(e, redis.ResponseError) and not full:
                raise
            state = "full" if full else "unreachable"
            was_full = full
            why = f"{e}; {FULL_REDIS}" if full else str(e)
            waited = time.monotonic() - started
            if time.monotonic() + delay > deadline:
                raise SinkError(
                    f"{where} {state} for {format_duration(round(waited * 1000))} while "
                    f"{what} ({why}); gave up after --sink-retry-for "
                    f"{format_duration(budget_ms)}. Nothing of the batch is lost: a restart "
                    "resumes from the checkpoint"
                ) from e
            if not logged:
                log.warning(
                    "%s failed: %s %s (%s); retrying with back-off for up to %s (--sink-retry-for)",
                    what,
                    where,
                    state,
                    why,
                    format_duration(budget_ms),
                )
                logged = waited
            elif waited - logged >= _LOG_EVERY_S:
                log.warning("%s: %s still %s after %.0fs (%s)", what, where, state, waited, e)
                logged = waited
            time.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY_S)
            failed += 1
            continue
        if logged:
            log.warning(
                "%s: %s %s again after %.0fs; written",
                what,
                where,
                "writable" if was_full else "reachable",
                time.monotonic() - started,
            )
        return failed
