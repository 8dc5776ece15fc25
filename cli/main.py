"""`tidegauge` command line: one subcommand per process of the pipeline.

Each subcommand lives in the module that owns the concept; that module exposes
`add_arguments(parser)` and `run(args) -> int`. Modules are imported lazily so `tidegauge query`
does not pay for importing PySpark.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from tidegauge.core.config import plugins_from_env
from tidegauge.core.plugins import PluginError, load_plugins

__all__ = ["main"]

_COMMANDS: dict[str, tuple[str, str]] = {
    "produce": ("tidegauge.traffic.cli", "send synthetic events (and heartbeats) to Kafka"),
    "job": ("jobs.cli", "run the Spark Structured Streaming job (Kafka -> Redis)"),
    "query": ("tidegauge.query", "read stored results from Redis"),
    "dashboard": ("dashboard.run", "serve the Streamlit dashboard"),
    "alerts": ("tidegauge.alerts.cli", "evaluate alert rules against the store, tell webhooks"),
    "demo": ("cli.local.demo", "start broker, Redis, generator, job and dashboard together"),
    "topic": ("tidegauge.traffic.topics", "create the events topic"),
    "catalog": ("tidegauge.catalog.cli", "write and read the service catalog (teams, tiers, SLOs)"),
    "cluster": (
        "cli.local.cluster",
        "start a Spark standalone master and workers from the installed pyspark",
    ),
}


def _parser(selected: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidegauge",
        description="Real-time stream analytics over event time: Kafka -> Spark -> Redis -> web.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `tidegauge` script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in args_list if a in _COMMANDS), None)
    args = _parser(selected).parse_args(args_list)
    # `kill -USR1 PID`: every thread's stack to stderr, the process goes on (a stop that hangs,
    # a batch that takes forever: where is it?)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        load_plugins(plugins_from_env())
    except PluginError as e:
        print(f"tidegauge {args.command}: {e}", file=sys.stderr)
        return 2
    module = importlib.import_module(_COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `tidegauge query ... | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
