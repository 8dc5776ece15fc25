"""What machine a benchmark ran on: printed with every figure, so figures are never orphaned."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version


def describe(libraries: Sequence[str] = ()) -> str:
    """Platform, Python, CPU model, usable cores and the versions of `libraries`."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    libs = []
    for name in libraries:
        try:
            libs.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            libs.append(f"{name} (not installed)")
    text = (
        f"{platform.platform()} | Python {platform.python_version()} | CPU: {cpu} | "
        f"{usable} usable of {os.cpu_count()} cores"
    )
    return text + (f"\n{', '.join(libs)}" if libs else "")
