"""Plugins (tidegauge/core/plugins.py): loading, clear errors, and the executors' check."""

from __future__ import annotations

import sys

import pytest

from tidegauge.core.events import event_fields
from tidegauge.core.plugins import PluginError, ensure_plugins, load_plugins
from tidegauge.core.registry import metrics


def test_a_missing_plugin_is_a_clear_error() -> None:
    with pytest.raises(PluginError, match=r"plugin 'no_such_plugin_xyz' cannot be imported"):
        load_plugins(["no_such_plugin_xyz"])


def test_a_plugin_clashing_with_a_built_in_metric_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code = (
        "from tidegauge.core.metrics import COUNT\n"
        "from tidegauge.core.registry import register_metric\n"
        "register_metric(COUNT)\n"
    )

    class Finder:
        @staticmethod
        def find_spec(name: str, path: object = None, target: object = None) -> object:
            if name != "clashing_plugin":
                return None
            import importlib.util

            loader = type(
                "L",
                (),
                {
                    "create_module": lambda self, spec: None,
                    "exec_module": lambda self, m: exec(code, m.__dict__),
                },
            )()
            return importlib.util.spec_from_loader(name, loader)

    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    with pytest.raises(PluginError, match=r"plugin 'clashing_plugin': metric 'count' is already"):
        load_plugins(["clashing_plugin"])


def test_an_executor_with_other_metrics_refuses_to_compute() -> None:
    names = [m.name for m in metrics()]
    fields = [f.name for f in event_fields()]
    ensure_plugins([], names, fields)  # the same registry: fine
    with pytest.raises(PluginError, match="install the same plugins on every machine"):
        ensure_plugins([], [*names, "response_bytes"], fields)
