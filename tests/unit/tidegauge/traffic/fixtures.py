"""What the traffic unit tests share: the generator's start instant and the produce flags."""

from __future__ import annotations

import argparse

from tidegauge.traffic.cli import add_arguments

T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z


def parse_cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)
