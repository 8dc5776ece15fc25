"""`tidegauge catalog`: write and read the service catalog (tidegauge/catalog/topic.py).

    tidegauge catalog put checkout --team payments --tier 1 --availability 99.9
        --latency 800ms:99 --period 30d [--effective-from 2026-11-27T10:02:00Z]
    tidegauge catalog rm checkout
    tidegauge catalog load catalog.toml [--prune]
    tidegauge catalog show [--at TIME]
    tidegauge catalog history checkout

Exit status: 0 on success, 1 when Kafka cannot be reached or written, 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from tidegauge.catalog.entry import (
    DEFAULT_PERIOD_MS,
    CatalogEntry,
    Slo,
    entries_from_toml,
    parse_effective_from,
)
from tidegauge.catalog.history import CatalogHistory
from tidegauge.catalog.topic import DEFAULT_CATALOG_TOPIC, CatalogError, read_catalog, write
from tidegauge.core.config import KafkaSettings, add_kafka_options
from tidegauge.core.durations import format_duration, parse_duration, parse_instant, to_iso

__all__ = ["ENV_CATALOG_TOPIC", "add_arguments", "run"]

#: The catalog topic when `--topic` is not given.
ENV_CATALOG_TOPIC = "TIDEGAUGE_CATALOG_TOPIC"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `tidegauge catalog`."""
    p.add_argument("--bootstrap", help="Kafka HOST:PORT (env TIDEGAUGE_KAFKA_BOOTSTRAP)")
    p.add_argument("--topic", help=f"the catalog topic (env {ENV_CATALOG_TOPIC}, default catalog)")
    add_kafka_options(p)
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    put = sub.add_parser("put", help="add or change one service's entry")
    put.add_argument("service")
    put.add_argument("--team")
    put.add_argument("--tier")
    put.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
    put.add_argument("--availability", type=float, metavar="PERCENT", help="e.g. 99.9")
    put.add_argument(
        "--latency",
        metavar="THRESHOLD:PERCENT",
        help="latency objective: PERCENT of events under THRESHOLD, e.g. 800ms:99",
    )
    put.add_argument(
        "--period",
        default=format_duration(DEFAULT_PERIOD_MS),
        help="the SLO period (default 30d)",
    )
    _effective(put)
    rm = sub.add_parser("rm", help="remove a service (a tombstone, from its broker time)")
    rm.add_argument("service")
    load = sub.add_parser("load", help="put every entry of a TOML file that differs from now")
    load.add_argument("file", type=Path)
    load.add_argument(
        "--prune", action="store_true", help="also remove the services the file does not list"
    )
    _effective(load)
    show = sub.add_parser("show", help="the catalog as of a time (default: now)")
    show.add_argument("--at", help="ISO-8601 time, epoch ms or a duration ago (15m)")
    history = sub.add_parser("history", help="every version of one service still in the topic")
    history.add_argument("service")


def _effective(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--effective-from",
        metavar="TIME",
        help="from when the entry holds (ISO-8601 with a zone, or epoch ms; default: the time "
        "the broker takes it)",
    )


def run(args: argparse.Namespace) -> int:
    """Carry out one catalog action."""
    try:
        kafka = KafkaSettings.from_env(
            bootstrap=args.bootstrap,
            topic=args.topic or os.environ.get(ENV_CATALOG_TOPIC) or DEFAULT_CATALOG_TOPIC,
            options=args.kafka_option,
        )
        action = {"put": _put, "rm": _rm, "load": _load, "show": _show, "history": _history}
        return action[args.action](args, kafka)
    except ValueError as e:
        print(f"tidegauge catalog {args.action}: {e}", file=sys.stderr)
        return 2
    except CatalogError as e:
        print(f"tidegauge catalog {args.action}: {e}", file=sys.stderr)
        return 1


def _put(args: argparse.Namespace, kafka: KafkaSettings) -> int:
    entry = _entry_of(args)
    (record,) = write(kafka, [(args.service, entry)])
    print(f"{args.service}: {_describe(entry)} (offset {record.offset})")
    return 0


def _rm(args: argparse.Namespace, kafka: KafkaSettings) -> int:
    (record,) = write(kafka, [(args.service, None)])
    print(f"{args.service}: removed from {to_iso(record.broker_ms)} (offset {record.offset})")
    return 0


def _load(args: argparse.Namespace, kafka: KafkaSettings) -> int:
    try:
        text = args.file.read_text()
    except OSError as e:
        raise ValueError(f"cannot read {args.file}: {e.strerror}") from None
    wanted = entries_from_toml(text)
    effective = _effective_ms(args.effective_from)
    now = CatalogHistory.of(read_catalog(kafka)).now()
    changes: list[tuple[str, CatalogEntry | None]] = []
    for service, entry in wanted.items():
        if effective is not None and entry.effective_from_ms is None:
            entry = CatalogEntry(entry.team, entry.tier, entry.tags, entry.slo, effective)
        if _same(now.get(service), entry):
            continue
        changes.append((service, entry))
    if args.prune:
        changes += [(s, None) for s in now if s not in wanted]
    if changes:
        write(kafka, changes)
    for service, changed in changes:
        print(f"{service}: {_describe(changed) if changed else 'removed'}")
    unchanged = len(wanted) - sum(1 for _, e in changes if e is not None)
    print(f"{len(changes)} change(s) written, {unchanged} entr(y/ies) unchanged")
    return 0


def _show(args: argparse.Namespace, kafka: KafkaSettings) -> int:
    history = CatalogHistory.of(read_catalog(kafka))
    at = parse_instant(args.at, _now_ms()) if args.at else None
    rows = []
    for service in sorted(history.versions):
        entry = history.as_of(service, at) if at is not None else history.now().get(service)
        if entry is not None:
            rows.append((service, entry))
    when = f" as of {to_iso(at)}" if at is not None else ""
    print(f"catalog {kafka.topic!r}{when}: {len(rows)} service(s)")
    for service, entry in rows:
        print(f"  {service:24} {_describe(entry)}")
    for record, why in history.rejected:
        print(f"  (offset {record.offset}, {record.service}: not an entry: {why})")
    return 0


def _history(args: argparse.Namespace, kafka: KafkaSettings) -> int:
    history = CatalogHistory.of(read_catalog(kafka))
    versions = list(history.changes(args.service))
    if not versions:
        print(f"{args.service}: not in the catalog topic {kafka.topic!r}")
        return 0
    for version, change in versions:
        print(f"  from {to_iso(version.effective_ms)}  (offset {version.offset})  {change}")
    return 0


def _entry_of(args: argparse.Namespace) -> CatalogEntry:
    tags = {}
    for tag in args.tag:
        key, sep, value = tag.partition("=")
        if not sep or not key:
            raise ValueError(f"--tag wants KEY=VALUE, got {tag!r}")
        tags[key] = value
    latency_ms = latency_target = None
    if args.latency:
        threshold, sep, target = args.latency.partition(":")
        if not sep:
            raise ValueError(
                f"--latency wants THRESHOLD:PERCENT (e.g. 800ms:99), got {args.latency!r}"
            )
        latency_ms = float(parse_duration(threshold))
        try:
            latency_target = float(target)
        except ValueError:
            raise ValueError(f"--latency: {target!r} is not a percentage") from None
    slo = None
    if args.availability is not None or latency_ms is not None:
        slo = Slo(args.availability, latency_ms, latency_target, parse_duration(args.period))
    return CatalogEntry(args.team, args.tier, tags, slo, _effective_ms(args.effective_from))


def _effective_ms(text: str | None) -> int | None:
    if text is None:
        return None
    return parse_effective_from(int(text) if text.strip().lstrip("-").isdigit() else text)


def _same(a: CatalogEntry | None, b: CatalogEntry) -> bool:
    return a is not None and a.to_bytes() == b.to_bytes()


def _describe(entry: CatalogEntry) -> str:
    parts = [f"team {entry.team}" if entry.team else "no team"]
    if entry.tier:
        parts.append(f"tier {entry.tier}")
    if entry.slo is not None:
        slo = entry.slo
        if slo.availability is not None:
            parts.append(f"availability {slo.availability:g}%")
        if slo.latency_ms is not None:
            parts.append(f"{slo.latency_target:g}% under {format_duration(round(slo.latency_ms))}")
        parts.append(f"over {format_duration(slo.period_ms)}")
    if entry.tags:
        parts.append(", ".join(f"{k}={v}" for k, v in sorted(entry.tags.items())))
    if entry.effective_from_ms is not None:
        parts.append(f"from {to_iso(entry.effective_from_ms)}")
    return ", ".join(parts)


def _now_ms() -> int:
    return int(time.time() * 1000)
