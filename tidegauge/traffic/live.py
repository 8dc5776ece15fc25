"""Live demo commands, the pure side: what a running `generate()` consults and what it did.

`tidegauge.core.control` reads and writes the commands in Redis; the producer hands them over
(`LiveCommands.update`); the generator applies them and notes each in `applied`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tidegauge.core.control import DemoCommands, Incident, LateBurstRequest
from tidegauge.core.durations import to_iso

__all__ = ["Applied", "LiveCommands"]


@dataclass(frozen=True)
class Applied:
    """A live command as the generator carried it out, for the producer's log and summary.

    `kind` is `incident` (latencies scaled from now on), `late_burst` (a burst of `events`
    buffered events sent) or `pause` (seen only: the job carries it out). `at_ms` is the
    generator clock (epoch ms) when it took effect; `text` says what happened, for people.
    """

    kind: Literal["incident", "late_burst", "pause"]
    at_ms: int
    text: str
    events: int = 0


class LiveCommands:
    """The live demo commands a running `generate()` consults; by default, none.

    The producer calls `update()` with what it read from Redis, between records and from the
    thread that iterates the generator (this object is not thread-safe). The generator picks a
    change up at its next arrival, so exactly the arrivals after the last record handed out see
    it: given the same updates after the same records, the stream is the same.

    `initial` is what the hash held when the producer started. Its incident is in force (if not
    over yet), but its late burst was requested before this run and is not sent: only a request
    with a new id is. `applied` collects what the generator did, oldest first; the producer
    takes the entries with `take_applied()`.
    """

    def __init__(self, initial: DemoCommands | None = None) -> None:
        self._commands = initial
        burst = None if initial is None else initial.late_burst
        self._seen_burst_id: int | None = None if burst is None else burst.id
        self._bursts: list[LateBurstRequest] = []
        self._version = 0
        self._last_incident: Incident | None = None
        self._last_pause: int | None = None
        self.applied: list[Applied] = []

    def update(self, commands: DemoCommands) -> None:
        """Take in the commands now in the hash: the latest incident, a burst per new id."""
        if commands == self._commands:
            return  # the usual case: one poll a second, nothing new
        self._commands = commands
        burst = commands.late_burst
        if burst is not None and burst.id != self._seen_burst_id:
            self._seen_burst_id = burst.id
            self._bursts.append(burst)
        self._version += 1

    def take_applied(self) -> list[Applied]:
        """The entries of `applied` since the last call (and forget them)."""
        out, self.applied = self.applied, []
        return out

    def _take(self, now_ms: int) -> tuple[Incident | None, bool, list[LateBurstRequest]]:
        """For the generator at clock `now_ms`: (incident, is it new and ahead, bursts to send).

        A new pause still ahead is noted in `applied` here; incidents and bursts are noted by
        the generator, which knows what they do to its stream.
        """
        cmds = self._commands
        incident = None if cmds is None else cmds.incident
        new = (
            incident is not None and incident != self._last_incident and incident.active_at(now_ms)
        )
        self._last_incident = incident
        pause = None if cmds is None else cmds.pause_until_ms
        if pause is not None and pause != self._last_pause and pause > now_ms:
            self.applied.append(
                Applied("pause", now_ms, f"pause of the job until {to_iso(pause)} (seen in Redis)")
            )
        self._last_pause = pause
        bursts, self._bursts = self._bursts, []
        return incident, new, bursts
