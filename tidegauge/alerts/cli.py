"""`tidegauge alerts`: evaluate rules every interval, store firings, tell webhooks.

    tidegauge alerts --rule "p99 > 800 for 3 on api" --webhook http://hooks.local/tidegauge
    tidegauge alerts --rules alerts.toml --interval 5s
    tidegauge alerts --rules alerts.toml --once          # one evaluation, deliver, exit

Prints one line per state change. Rules, their states and why there are three: docs/alerts.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path

import redis

from tidegauge.alerts.evaluator import DEFAULT_LOOKBACK_MS, evaluate_store
from tidegauge.alerts.metrics import AlertMetrics
from tidegauge.alerts.rules import Rule, describe_firing, load_rules, parse_rule
from tidegauge.alerts.slo import slo_rules
from tidegauge.alerts.webhook import WebhookSender
from tidegauge.catalog import SLO_COUNTS_PLUGIN
from tidegauge.catalog.report import read_catalog_entries
from tidegauge.core.closed_windows import ClosedWindows
from tidegauge.core.config import RedisSettings, redact_url
from tidegauge.core.durations import format_duration, parse_duration
from tidegauge.core.plugins import load_plugins
from tidegauge.core.signals import stop_on_signals
from tidegauge.core.store import Keys, connect

__all__ = ["add_arguments", "rules_from_args", "run"]

#: Environment variable with webhook URLs (space-separated), besides `--webhook`.
ENV_WEBHOOKS = "TIDEGAUGE_WEBHOOKS"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `tidegauge alerts`."""
    p.add_argument("--rules", type=Path, help="TOML file of [[rule]] tables (docs/alerts.md)")
    p.add_argument(
        "--rule",
        action="append",
        default=[],
        metavar="TEXT",
        help="a rule: 'METRIC OP THRESHOLD [for N] [on SERVICE]', e.g. 'p99 > 800 for 3 on api' "
        "(repeatable)",
    )
    p.add_argument(
        "--webhook",
        action="append",
        default=[],
        metavar="URL",
        help=f"POST every state change here as JSON (repeatable; env {ENV_WEBHOOKS})",
    )
    p.add_argument(
        "--slo",
        action="store_true",
        help="also the burn-rate rules of every SLO in the catalog the job publishes "
        "(tidegauge job --catalog; docs/slo.md)",
    )
    p.add_argument("--interval", default="2s", help="how often to evaluate (default 2s)")
    p.add_argument(
        "--lookback",
        default=format_duration(DEFAULT_LOOKBACK_MS),
        help="event time read behind the newest window on each evaluation (default 1h)",
    )
    p.add_argument(
        "--give-up",
        default="10m",
        help="stop retrying a webhook for a notice after this long (default 10m)",
    )
    p.add_argument("--once", action="store_true", help="evaluate once, deliver, and exit")
    p.add_argument("--redis", help="Redis URL (env TIDEGAUGE_REDIS_URL)")
    p.add_argument("--redis-prefix", default="tg")
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics (/metrics), /healthz and /readyz on this port (off by "
        "default; docs/alerts.md)",
    )
    p.add_argument(
        "--metrics-bind", default="127.0.0.1", metavar="HOST", help="its address (127.0.0.1)"
    )


def rules_from_args(args: argparse.Namespace) -> list[Rule]:
    """The rules of `--rules` then `--rule`; ValueError with the reason when one is wrong."""
    rules: list[Rule] = []
    if args.rules is not None:
        try:
            text = args.rules.read_text()
        except OSError as e:
            raise ValueError(f"cannot read rules file {args.rules}: {e.strerror}") from None
        rules += load_rules(text)
    rules += [parse_rule(t) for t in args.rule]
    if not rules and not getattr(args, "slo", False):
        raise ValueError("no rules: give --rules FILE, --rule 'p99 > 800 for 3 on api' or --slo")
    if len({r.name for r in rules}) != len(rules):
        raise ValueError("two rules share a name")
    return rules


def run(args: argparse.Namespace) -> int:
    """Evaluate until interrupted (or once)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        rules = rules_from_args(args)
        interval_s = parse_duration(args.interval) / 1000
        lookback_ms = parse_duration(args.lookback)
        give_up_s = parse_duration(args.give_up) / 1000
    except ValueError as e:
        print(f"tidegauge alerts: {e}", file=sys.stderr)
        return 2
    if args.slo:  # the job's exact SLO counts, read from the windows
        load_plugins([SLO_COUNTS_PLUGIN])
    urls = [*args.webhook, *os.environ.get(ENV_WEBHOOKS, "").split()]
    settings = RedisSettings.from_env(url=args.redis, prefix=args.redis_prefix)
    r, keys = connect(settings), Keys(settings.prefix)
    sender = WebhookSender(r, keys, urls, give_up_s=give_up_s) if urls else None
    cache = ClosedWindows()
    print(
        f"tidegauge alerts: {len(rules)} rule(s) on {redact_url(settings.url)} prefix "
        f"{keys.prefix}, every {format_duration(round(interval_s * 1000))}; "
        f"{len(urls)} webhook(s)",
        flush=True,
    )
    for rule in rules:
        print(f"  {rule.name}: {rule.describe()}", flush=True)
    if args.slo:
        print("  and the burn-rate rules of every SLO in the published catalog", flush=True)
    metrics = server = None
    if args.metrics_port is not None:
        metrics = AlertMetrics(interval_s, len(rules))
        server = metrics.serve(args.metrics_bind, args.metrics_port)
        print(f"  metrics on http://{args.metrics_bind}:{server.server_port}/metrics", flush=True)
    try:
        with stop_on_signals(threading.Event()) as stop:
            return _evaluate(
                args, r, keys, rules, sender, cache, interval_s, lookback_ms, stop, metrics
            )
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _evaluate(
    args: argparse.Namespace,
    r: redis.Redis,
    keys: Keys,
    rules: list[Rule],
    sender: WebhookSender | None,
    cache: ClosedWindows,
    interval_s: float,
    lookback_ms: int,
    stop: threading.Event,
    metrics: AlertMetrics | None = None,
) -> int:
    """The evaluation loop, until `--once` is done or `stop` is set (SIGINT, SIGTERM)."""
    give_up_s = sender.give_up_s if sender is not None else 0.0
    next_at = 0.0
    while not stop.is_set():
        try:
            if time.monotonic() >= next_at:
                next_at = time.monotonic() + interval_s
                now_ms = time.time_ns() // 1_000_000
                current = rules + (slo_rules(read_catalog_entries(r, keys)) if args.slo else [])
                firings = evaluate_store(
                    r, keys, current, now_ms, lookback_ms, cache, deliver=sender is not None
                )
                for f in firings:
                    print(describe_firing(f), flush=True)
                if metrics is not None:
                    metrics.evaluated(firings)
            if sender is not None:
                if args.once:  # every notice delivered, or given up on (exit 1)
                    emptied = sender.drain(timeout_s=2 * give_up_s + 1)
                    return 0 if emptied and not sender.given_up else 1
                while sender.step():
                    pass
            elif args.once:
                return 0
        except redis.RedisError as e:
            print(f"tidegauge alerts: cannot reach Redis: {e}; retrying", file=sys.stderr)
            if metrics is not None:
                metrics.failed()
            if args.once:
                return 1
            next_at = time.monotonic() + interval_s
        time.sleep(0.05)
    # SIGTERM (a supervisor) or Ctrl-C: the states in Redis are whole after every evaluation,
    # and notices not yet delivered wait in Redis for the next start.
    print("tidegauge alerts: stopped", flush=True)
    return 0
