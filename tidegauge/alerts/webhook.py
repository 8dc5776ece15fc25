"""Deliver queued notices to webhooks: HTTP POST of JSON, retried with back-off.

The evaluator queues each notice in Redis (`Keys.alert_outbox`) in the same transaction as the
state change, so a notice survives a crash of either side. The sender takes the oldest notice,
POSTs it to every webhook that has not taken it yet, and removes it once all have: delivery is
at least once (a receiver may see a notice twice after a crash; `firing.id` + `state` make it
idempotent). A webhook that fails (connection error, timeout, 5xx, 429) is retried with
exponential back-off up to `max_backoff_s`, and given up on after `give_up_s` (the notice is
then logged and dropped for that webhook); a 4xx other than 429 is given up on at once (the
same request would fail the same way).
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis

from tidegauge.core.store import Keys

__all__ = ["Delivery", "WebhookSender", "post"]

log = logging.getLogger("tidegauge.alerts")


def post(url: str, body: bytes, timeout_s: float = 5.0) -> int:
    """POST `body` as JSON; the HTTP status (raises OSError when nothing answered)."""
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "tidegauge-alerts"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@dataclass
class Delivery:
    """Progress of the notice at the head of the outbox, per webhook."""

    notice: bytes
    done: set[str] = field(default_factory=set)
    attempts: dict[str, int] = field(default_factory=dict)
    first_try: dict[str, float] = field(default_factory=dict)
    next_try: dict[str, float] = field(default_factory=dict)


class WebhookSender:
    """Drains one prefix's outbox to `urls`; call `step()` repeatedly (it never blocks long)."""

    def __init__(
        self,
        r: redis.Redis,
        keys: Keys,
        urls: Sequence[str],
        first_backoff_s: float = 0.5,
        max_backoff_s: float = 60.0,
        give_up_s: float = 600.0,
        send: Callable[[str, bytes], int] = post,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.r, self.keys, self.urls = r, keys, list(urls)
        self.first_backoff_s, self.max_backoff_s, self.give_up_s = (
            first_backoff_s,
            max_backoff_s,
            give_up_s,
        )
        self._send, self._clock = send, clock
        self._head: Delivery | None = None
        #: Notices delivered to every webhook, and (url, notice) pairs given up on.
        self.delivered = 0
        self.given_up: list[tuple[str, bytes]] = []

    def step(self) -> bool:
        """Try the head notice once where due; True if the outbox has more to do right now."""
        if self._head is None:
            raw = self.r.lindex(self.keys.alert_outbox, 0)
            if raw is None:
                return False
            self._head = Delivery(raw if isinstance(raw, bytes) else raw.encode())
        head = self._head
        now = self._clock()
        for url in self.urls:
            if url in head.done or head.next_try.get(url, 0.0) > now:
                continue
            self._try(head, url, now)
        if all(u in head.done for u in self.urls):
            # LPOP only what we delivered: the evaluator only appends at the tail
            self.r.lpop(self.keys.alert_outbox)
            self._head = None
            self.delivered += 1
            return True
        return False

    def _try(self, head: Delivery, url: str, now: float) -> None:
        n = head.attempts[url] = head.attempts.get(url, 0) + 1
        first = head.first_try.setdefault(url, now)
        try:
            code = self._send(url, head.notice)
            why = f"HTTP {code}"
        except OSError as e:  # refused, unreachable, timed out
            code, why = 0, str(e) or type(e).__name__
        if 200 <= code < 300:
            head.done.add(url)
            return
        final = (400 <= code < 500 and code != 429) or now - first >= self.give_up_s
        if final:
            log.error("webhook %s: giving up on a notice after %d attempt(s): %s", url, n, why)
            self.given_up.append((url, head.notice))
            head.done.add(url)
            return
        delay = min(self.max_backoff_s, self.first_backoff_s * 2 ** (n - 1))
        head.next_try[url] = now + delay
        log.warning("webhook %s: %s; retrying in %.1fs (attempt %d)", url, why, delay, n + 1)

    def drain(self, timeout_s: float, poll_s: float = 0.05) -> bool:
        """Deliver until the outbox is empty or `timeout_s` passed; True if it emptied."""
        end = self._clock() + timeout_s
        while self._clock() < end:
            while self.step():
                pass
            if self._head is None and not self.r.llen(self.keys.alert_outbox):
                return True
            time.sleep(poll_s)
        return False
