"""Synthetic traffic for Tidegauge: a pure, seeded generator of Kafka records in send order.

The generator is the pipeline's ground truth. It decides every record's event time, the instant it
is sent, the instant the broker receives it and the disorder it carries (out-of-order, late,
skewed, duplicated, malformed, buffered), so a test can compute the exact answer the job should
give. Everything here is pure: no Kafka, no wall clock. The start of event time is passed in, and
the randomness comes from a numpy `Generator` seeded by `GeneratorConfig.seed`.
`tidegauge.traffic.producer` is the thin I/O edge that sends the records and writes the ground
truth file; `tidegauge.traffic.cli` holds the `tidegauge produce` flags. The configuration
(`config.py`), the record model (`records.py`), the live commands (`live.py`), the malformed
kinds (`malformed.py`) and the value encoder (`encoder.py`) are modules of their own.

Time is epoch milliseconds (UTC) everywhere. The generator keeps a clock: the instant (in event
time) at which the simulated devices send each record. In `--pace realtime` that clock is pinned
to the wall clock; in `--pace fast` it only exists in the records.

Scenarios (`--scenario`) are named presets that stage one lesson each for demos and tests:
`skewed-clocks` (device clocks that lie), `late-burst` (a device back online with an hour of
buffered events) and `backlog` (the job pauses, then catches up). The last one is not traffic but
a *control* record: the pure generator says when and for how long; the producer carries it out.

Live commands (`--live-commands`, the dashboard's demo buttons) come from outside while the stream
runs: the producer reads them from Redis (`tidegauge.core.control`) into a `LiveCommands` object
that `generate()` consults at every arrival. Without one, nothing changes; with one, the stream is a
pure function of the arguments and of the points at which the commands were updated.
"""

from __future__ import annotations

import functools
import heapq
import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tidegauge.core.control import ALL_SERVICES, Incident
from tidegauge.core.durations import format_duration, to_iso
from tidegauge.traffic.config import BURST_TOP_USERS, GeneratorConfig
from tidegauge.traffic.encoder import ValueEncoder
from tidegauge.traffic.live import Applied, LiveCommands
from tidegauge.traffic.malformed import (
    BASIC_ROTATION,
    EMPTY_KEY_KINDS,
    MALFORMED_KINDS,
    MALFORMED_ROTATION,
)
from tidegauge.traffic.records import (
    CONTROL_KEY,
    HEARTBEAT_KEY,
    Intent,
    Record,
    burst_event_id,
    event_id,
    live_burst_event_id,
)

__all__ = ["generate"]

# During a live incident, matching events fail with probability --error-rate x factor, capped
# here (and never below --error-rate): a slow service also errs more, as real ones do, but the
# error panel should not drown the latency spike the incident is about.
_INCIDENT_MAX_ERROR_RATE = 0.25

# Status mix: success codes (mostly 200) and, with probability --error-rate, a 5xx.
_OK_CODES = (200, 201, 204, 304, 404)
_OK_WEIGHTS = (0.86, 0.05, 0.03, 0.04, 0.02)
_ERROR_CODES = (500, 502, 503, 504)
_ERROR_WEIGHTS = (0.55, 0.2, 0.15, 0.1)

# Random numbers are drawn this many arrivals at a time: vectorised, and independent of the
# config, so the same seed gives the same stream whatever --count or --duration says.
_CHUNK = 4096

#: A Record's fields by name, all but `seq`: what waits in the send-order heap.
Payload = dict[str, Any]


def generate(
    config: GeneratorConfig, start_ms: int | None = None, commands: LiveCommands | None = None
) -> Iterator[Record]:
    """Yield the records of `config`'s stream in send order (ties: heartbeats first).

    Event time starts at `start_ms` (epoch ms), else at `config.start_time_ms`; one of them is
    required, so the output depends on nothing but its arguments. Arrivals form a Poisson
    process of `config.rate` per second of event time. Every `heartbeat_interval_ms` of the
    generator clock a heartbeat goes to each partition; after the last record (and
    `heartbeat_tail_ms` more of the clock), a final round carries the clock at the end.
    Scenarios add records at fixed instants of the clock: the late burst's buffered events and
    the backlog's control record. The clock runs on until both have happened, even when
    --count or --duration ends the arrivals earlier.

    `commands` (needs `config.live_commands`) are the live demo commands, consulted at every
    arrival while arrivals last: an incident in force scales the latency of each arrival it
    covers (its service's, or all; only those of its route, region or version if it names one,
    as `attributes.Attributes` gives them) and raises its error probability to --error-rate x
    factor, at most 25%; a new
    late-burst request sends a burst like the `late-burst` scenario's, at the arrival's instant,
    drawn from a random stream of its own. Without commands the stream is unchanged, and
    an incident changes nothing but the latency and status of the arrivals it covers.
    """
    t0 = start_ms if start_ms is not None else config.start_time_ms
    if t0 is None:
        raise ValueError("generate() needs a start time: pass start_ms or set start_time_ms")
    if commands is not None and not config.live_commands:
        raise ValueError("generate() got live commands, but config.live_commands is off")
    return _generate(config, t0, commands)


def _cdf(weights: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(weights, dtype=np.float64)
    return cdf / cdf[-1]


def _pick(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)


def _generate(cfg: GeneratorConfig, t0: int, live: LiveCommands | None) -> Iterator[Record]:
    # One independent stream per concern. Children of a SeedSequence are fixed by their index,
    # so streams added at the end (network, burst, live bursts) leave the first eight, and every
    # field they decide, exactly as they were.
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(12)]
    rng_arrival, rng_user, rng_service, rng_latency, rng_status, rng_intent, rng_flags, rng_skew = (
        streams[:8]
    )
    rng_network, rng_burst, rng_live, rng_retry = streams[8:]
    user_cdf = _cdf(1.0 / np.arange(1, cfg.users + 1, dtype=np.float64) ** cfg.zipf)
    # A device's clock offset is a property of the user, fixed for the whole run.
    skewed = rng_skew.random(cfg.users) < cfg.skew_fraction
    offsets = rng_skew.integers(-cfg.max_skew_ms, cfg.max_skew_ms + 1, cfg.users)
    user_skew = np.where(skewed, offsets, 0).astype(np.int64)

    names = [name for name, _ in cfg.services]
    name_keys = [name.encode("utf-8") for name in names]
    encoder = ValueEncoder(
        names, cfg.source, cfg.record_format, cfg.request_attributes(), cfg.attributes
    )
    attributes_of = encoder.attributes.of
    service_cdf = _cdf(np.array([w for _, w in cfg.services], dtype=np.float64))
    medians = np.array([cfg.latency_of(n)[0] for n in names], dtype=np.float64)
    sigmas = np.array([cfg.latency_of(n)[1] for n in names], dtype=np.float64)
    ok_cdf = _cdf(np.array(_OK_WEIGHTS))
    err_cdf = _cdf(np.array(_ERROR_WEIGHTS))
    ok_codes = np.array(_OK_CODES)
    err_codes = np.array(_ERROR_CODES)

    mean_gap_ms = 1000.0 / cfg.rate
    end_ms = None if cfg.duration_ms is None else t0 + cfg.duration_ms
    count = cfg.count
    late_cut = cfg.late_fraction
    ooo_cut = cfg.late_fraction + cfg.out_of_order_fraction
    interval = cfg.heartbeat_interval_ms
    net_high = cfg.network_delay_ms + 1
    partitions = range(cfg.partitions)
    seed = cfg.seed

    # Heap items: (send_ms, class, tiebreak, payload). Heartbeats (class 0) go before records
    # (class 1) sent in the same ms; the tiebreak keeps push order, so a duplicate directly
    # follows its original. payload = the Record's fields by name, all but `seq` (given when
    # the record leaves the heap, in send order).
    heap: list[tuple[int, int, int, Payload]] = []
    push = heapq.heappush
    pop = heapq.heappop
    tiebreak = 0
    seq = 0  # send order of all records
    g = 0  # arrival number: names events (event_id) and rotates malformed kinds
    n_malformed = 0
    rotation = MALFORMED_ROTATION if cfg.fuzz else BASIC_ROTATION
    hb_next = t0 + interval if interval > 0 else None
    elapsed = 0.0
    last_t = t0

    def latencies_of(rng: np.random.Generator, svc_idx: np.ndarray) -> np.ndarray:
        z = rng.standard_normal(len(svc_idx))
        return np.round(medians[svc_idx] * np.exp(sigmas[svc_idx] * z), 3)

    def status_draws(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
        """(u, ok, err): a status is err where u < the error probability, else ok."""
        u = rng.random(n)
        ok = ok_codes[_pick(ok_cdf, rng.random(n))]
        err = err_codes[_pick(err_cdf, rng.random(n))]
        return u, ok, err

    def statuses_of(rng: np.random.Generator, n: int) -> np.ndarray:
        u, ok, err = status_draws(rng, n)
        return np.where(u < cfg.error_rate, err, ok)

    def heartbeat(at: int, p: int) -> Payload:
        value = encoder.heartbeat(at, p)
        return dict(
            kind="heartbeat",
            key=HEARTBEAT_KEY,
            value=value,
            partition=p,
            send_ms=at,
            receive_ms=at,
            event_time=at,
            true_time=at,
            sent_time=at,
        )

    def control(at: int) -> list[Payload]:
        value = encoder.control({"control": "pause", "pause_ms": cfg.backlog_pause_ms})
        return [
            dict(
                kind="control",
                key=CONTROL_KEY,
                value=value,
                partition=None,
                send_ms=at,
                receive_ms=at,
            )
        ]

    def late_burst(
        at: int, span_ms: int, n: int, rng: np.random.Generator, ids: Callable[[int], str]
    ) -> list[Payload]:
        # One device, offline for the span, sends what it buffered, oldest first, all at `at`.
        # Everything is drawn from `rng`, the burst's own stream, so the rest of the run is
        # unchanged.
        idx = int(rng.integers(BURST_TOP_USERS, cfg.users))
        user_id = f"u{idx + 1:06d}"
        key = user_id.encode("utf-8")
        skew = int(user_skew[idx])
        trues = np.sort(rng.integers(at - span_ms, at, n)).tolist()
        svc_idx = _pick(service_cdf, rng.random(n))
        lats = latencies_of(rng, svc_idx).tolist()
        stats = statuses_of(rng, n).tolist()
        nets = rng.integers(0, net_high, n).tolist()
        out: list[Payload] = []
        for k, (t, s) in enumerate(zip(trues, svc_idx.tolist(), strict=True)):
            eid = ids(k)
            et, st = t + skew, at + skew
            out.append(
                dict(
                    kind="event",
                    key=key,
                    value=encoder.event(eid, et, names[s], user_id, lats[k], stats[k], st),
                    partition=None,
                    send_ms=at,
                    receive_ms=at + nets[k],
                    event_id=eid,
                    event_time=et,
                    true_time=t,
                    sent_time=st,
                    service=names[s],
                    user_id=user_id,
                    latency_ms=lats[k],
                    status=stats[k],
                    delay_ms=at - t,
                    intent="buffered",
                    skew_ms=skew,
                )
            )
        return out

    def burst(at: int) -> list[Payload]:
        return late_burst(
            at, cfg.burst_span_ms, cfg.burst_count, rng_burst, lambda k: burst_event_id(seed, k)
        )

    # Scenario records at fixed instants of the clock, in time order (a tie: control first).
    scheduled: list[tuple[int, Callable[[int], list[Payload]]]] = []
    if "backlog" in cfg.scenarios:
        scheduled.append((t0 + cfg.backlog_offset_ms, control))
    if "late-burst" in cfg.scenarios:
        scheduled.append((t0 + cfg.burst_offset_ms, burst))
    scheduled.sort(key=lambda item: item[0])

    def release_scheduled(before: int | None) -> None:
        """Push the scenario records due before `before` (None: all) onto the heap."""
        nonlocal tiebreak
        while scheduled and (before is None or scheduled[0][0] < before):
            at, build = scheduled.pop(0)
            for payload in build(at):
                push(heap, (at, 1, tiebreak, payload))
                tiebreak += 1

    # The live incident in force: arrivals before `inc_until` of a service with inc_match[s]
    # get inc_factor times their latency and fail with probability inc_error. No incident:
    # inc_until = -1, before every arrival.
    inc_until = -1
    inc_factor = 1.0
    inc_error = cfg.error_rate
    inc_match = [False] * len(names)
    inc_narrowed: Incident | None = None  # an incident on one route, region or version
    live_version = -1

    def apply_live(t: int) -> None:
        """Pick up changed live commands at arrival time `t`: set the incident, push bursts."""
        nonlocal inc_until, inc_factor, inc_error, inc_match, inc_narrowed, live_version
        nonlocal tiebreak
        assert live is not None
        live_version = live._version
        incident, new, bursts = live._take(t)
        if incident is None:
            inc_until = -1
        else:
            inc_until, inc_factor = incident.until_ms, incident.factor
            cap = max(cfg.error_rate, _INCIDENT_MAX_ERROR_RATE)
            inc_error = min(max(cfg.error_rate, cfg.error_rate * inc_factor), cap)
            inc_match = [incident.applies_to(name) for name in names]
            inc_narrowed = incident if incident.dimension else None
        if incident is not None and new:
            who = "every service" if incident.service == ALL_SERVICES else repr(incident.service)
            if incident.dimension:
                who += f" where {incident.dimension} = {incident.value!r}"
            text = (
                f"incident: latency x{incident.factor:g} for {who} "
                f"until {to_iso(incident.until_ms)}"
            )
            if not any(inc_match):
                text += f" changes nothing: this generator makes {', '.join(names)}"
            elif incident.dimension and not (
                cfg.attributes or cfg.record_format.startswith("otlp")
            ):
                text += f" (these records carry no {incident.dimension}: --attributes writes it)"
            live.applied.append(Applied("incident", t, text))
        for req in bursts:
            n = max(1, round(req.span_ms * cfg.burst_rate / 1000))
            ids = functools.partial(live_burst_event_id, seed, req.id)
            payloads = late_burst(t, req.span_ms, n, rng_live, ids)
            for payload in payloads:
                push(heap, (t, 1, tiebreak, payload))
                tiebreak += 1
            device = payloads[0]["user_id"]
            live.applied.append(
                Applied(
                    "late_burst",
                    t,
                    f"late burst {req.id}: {n:,} buffered events of user {device} from "
                    f"the last {format_duration(req.span_ms)}",
                    events=n,
                )
            )

    done = False
    while not done:
        offs = elapsed + np.cumsum(rng_arrival.exponential(mean_gap_ms, _CHUNK))
        elapsed = float(offs[-1])
        times = (t0 + np.floor(offs).astype(np.int64)).tolist()
        anonymous = (rng_user.random(_CHUNK) < cfg.anonymous_fraction).tolist()
        user_idx = _pick(user_cdf, rng_user.random(_CHUNK))
        skews = user_skew[user_idx].tolist()
        users = user_idx.tolist()
        svc_idx = _pick(service_cdf, rng_service.random(_CHUNK))
        services = svc_idx.tolist()
        latencies = latencies_of(rng_latency, svc_idx).tolist()
        u_status, ok_status, err_status = status_draws(rng_status, _CHUNK)
        statuses = np.where(u_status < cfg.error_rate, err_status, ok_status).tolist()
        u_intent = rng_intent.random(_CHUNK).tolist()
        ooo_delays = rng_intent.integers(1, max(cfg.max_delay_ms, 1) + 1, _CHUNK).tolist()
        lo = cfg.lateness_ms + 1
        late_delays = rng_intent.integers(lo, max(2 * cfg.lateness_ms, lo) + 1, _CHUNK).tolist()
        malformed = (rng_flags.random(_CHUNK) < cfg.malformed_fraction).tolist()
        duplicate = (rng_flags.random(_CHUNK) < cfg.duplicate_fraction).tolist()
        iso = (rng_flags.random(_CHUNK) < cfg.iso_fraction).tolist()
        # A retry travels the network again: a duplicate gets a delay of its own.
        nets = rng_network.integers(0, net_high, _CHUNK).tolist()
        dup_nets = rng_network.integers(0, net_high, _CHUNK).tolist()
        # A retry may go out through another connection, to any partition, and may come long
        # after its original (after its window closed): its own draws, so that turning these
        # on changes no other record of a seed.
        n_parts = max(cfg.partitions, 1)
        retry_anywhere = (rng_retry.random(_CHUNK) < cfg.duplicate_other_partition).tolist()
        retry_parts = rng_retry.integers(0, n_parts, _CHUNK).tolist()
        retry_late = (rng_retry.random(_CHUNK) < cfg.duplicate_late_fraction).tolist()
        retry_delays = rng_retry.integers(lo, max(2 * cfg.lateness_ms, lo) + 1, _CHUNK).tolist()

        for i in range(_CHUNK):
            t = times[i]
            if (count is not None and g >= count) or (end_ms is not None and t >= end_ms):
                done = True
                break
            while hb_next is not None and hb_next < t:
                for p in partitions:
                    push(heap, (hb_next, 0, tiebreak, heartbeat(hb_next, p)))
                    tiebreak += 1
                hb_next += interval
            if scheduled and scheduled[0][0] < t:
                release_scheduled(t)
            while heap and heap[0][0] < t:
                yield Record(seq, **pop(heap)[3])
                seq += 1
            if live is not None and live._version != live_version:
                apply_live(t)

            s = services[i]
            service = names[s]
            if anonymous[i]:
                user_id, key, skew = None, name_keys[s], 0
            else:
                user_id = f"u{users[i] + 1:06d}"
                key, skew = user_id.encode("utf-8"), skews[i]
            latency = latencies[i]
            status = statuses[i]
            eid = event_id(seed, g)
            if (
                t < inc_until
                and inc_match[s]
                and (
                    inc_narrowed is None
                    or inc_narrowed.matches(attributes_of(eid, service).as_dimensions())
                )
            ):
                latency = round(latency * inc_factor, 3)
                if u_status[i] < inc_error:
                    status = int(err_status[i])
            g += 1
            last_t = t

            if malformed[i]:
                kind_name, reason, build = MALFORMED_KINDS[rotation[n_malformed % len(rotation)]]
                n_malformed += 1
                obj = json.loads(encoder.event(eid, t, service, user_id, latency, status, t))
                payload: Payload = dict(
                    kind="malformed",
                    key=b"" if kind_name in EMPTY_KEY_KINDS else key,
                    value=build(obj),
                    partition=None,
                    send_ms=t,
                    receive_ms=t + nets[i],
                    true_time=t,
                    sent_time=t,
                    reason=reason,
                )
                push(heap, (t, 1, tiebreak, payload))
                tiebreak += 1
                continue

            u = u_intent[i]
            intent: Intent
            if u < late_cut:
                intent, delay = "late", late_delays[i]
            elif u < ooo_cut:
                intent, delay = "out_of_order", ooo_delays[i]
            else:
                intent, delay = "in_order", 0
            send = t + delay
            et, st = t + skew, send + skew
            value = encoder.event(eid, et, service, user_id, latency, status, st, bool(iso[i]))
            fields: Payload = dict(
                key=key,
                value=value,
                partition=None,
                send_ms=send,
                event_id=eid,
                event_time=et,
                true_time=t,
                sent_time=st,
                service=service,
                user_id=user_id,
                latency_ms=latency,
                status=status,
                delay_ms=delay,
                intent=intent,
                skew_ms=skew,
            )
            push(
                heap,
                (send, 1, tiebreak, dict(fields, kind="event", receive_ms=send + nets[i])),
            )
            tiebreak += 1
            if duplicate[i]:
                resend = send + (retry_delays[i] if retry_late[i] else 0)
                dup = dict(
                    fields, kind="duplicate", send_ms=resend, receive_ms=resend + dup_nets[i]
                )
                if retry_anywhere[i]:
                    dup["partition"] = retry_parts[i]
                push(heap, (resend, 1, tiebreak, dup))
                tiebreak += 1

    # The stream is finite: drain the delayed and scheduled records (the clock keeps ticking,
    # so do the heartbeats, for --heartbeat-tail longer), then one last round of heartbeats at
    # the end of the clock.
    release_scheduled(None)
    last_send = max((item[0] for item in heap), default=t0)
    clock_end = max(last_t if end_ms is None else end_ms, last_send) + cfg.heartbeat_tail_ms
    while hb_next is not None and hb_next < clock_end:
        for p in partitions:
            push(heap, (hb_next, 0, tiebreak, heartbeat(hb_next, p)))
            tiebreak += 1
        hb_next += interval
    while heap:
        yield Record(seq, **pop(heap)[3])
        seq += 1
    if interval > 0:
        for p in partitions:
            yield Record(seq, **heartbeat(clock_end, p))
            seq += 1


# ---------------------------------------------------------------------------------------------
