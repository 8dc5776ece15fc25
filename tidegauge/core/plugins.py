"""Plugins: modules that register event fields and metrics, named in `TIDEGAUGE_PLUGINS`.

A plugin is an importable module whose import calls `tidegauge.core.events.register_field` and
`tidegauge.core.registry.register_metric` (docs/extending.md). Every Tidegauge process loads
the same list at its start (the command line does, and so does the dashboard's page), so the
job computes the metric, the sink stores it, and `tidegauge query` and the dashboard show it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

__all__ = ["PluginError", "ensure_plugins", "load_plugins", "loaded_plugins"]

_LOADED: list[str] = []


class PluginError(RuntimeError):
    """A plugin could not be imported or registered; the message names it and says why."""


def load_plugins(names: Sequence[str]) -> list[str]:
    """Import each plugin module once, in order; returns the names loaded so far.

    The built-in metrics are registered first, so a plugin's come after them whatever it
    imports.
    """
    importlib.import_module("tidegauge.core.metrics")
    for name in names:
        if name in _LOADED:
            continue
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise PluginError(
                f"plugin {name!r} cannot be imported ({e}); is it installed, or on PYTHONPATH?"
            ) from None
        except ValueError as e:  # a field or metric clashing with one already there
            raise PluginError(f"plugin {name!r}: {e}") from None
        _LOADED.append(name)
    return list(_LOADED)


def loaded_plugins() -> tuple[str, ...]:
    """The plugin modules this process has loaded, in order."""
    return tuple(_LOADED)


def ensure_plugins(
    names: Sequence[str], metric_names: Sequence[str], field_names: Sequence[str]
) -> None:
    """Load `names` here (an executor) and check the result is the driver's registry.

    The job ships plugin module names, not metric objects, to its executors: each worker
    imports the same modules, so it registers the same metrics and fields in the same order.
    A worker that cannot import a plugin, or ends up with other metrics, fails the batch with
    a message saying so instead of computing something else.
    """
    from tidegauge.core.events import event_fields
    from tidegauge.core.registry import metrics

    load_plugins(names)
    got_metrics = tuple(m.name for m in metrics())
    got_fields = tuple(f.name for f in event_fields())
    if got_metrics != tuple(metric_names) or got_fields != tuple(field_names):
        raise PluginError(
            f"this worker has metrics {got_metrics} and fields {got_fields} after loading "
            f"plugins {tuple(names)}, the driver {tuple(metric_names)} and {tuple(field_names)}: "
            "install the same plugins on every machine of the cluster"
        )
