"""How a long-running command hears it should stop: SIGINT or SIGTERM set an event.

Ctrl-C and a supervisor's SIGTERM (to the process or its whole group) end the same way: the
command's loop sees `stop` set, finishes what it is doing, prints one line and exits 0. A second
signal aborts at once (KeyboardInterrupt), for a stop that hangs.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["stop_on_signals"]


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[threading.Event]:
    """SIGINT/SIGTERM set `stop` while inside (only in the main thread, where signals land)."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)
