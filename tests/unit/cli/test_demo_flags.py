"""The demo's generator and job flags for each `--format` (cli/local/demo.py): what the demo runs
must be a configuration `tidegauge produce` and `tidegauge job` accept, in the same format."""

from __future__ import annotations

import argparse

import pytest

from cli.local import demo
from jobs.cli import add_arguments as job_arguments
from tidegauge.core.config import job_config_from_args
from tidegauge.core.control import INCIDENT_DIMENSIONS
from tidegauge.core.events import event_fields, unregister_field
from tidegauge.traffic.cli import add_arguments as produce_arguments
from tidegauge.traffic.cli import config_from_args


@pytest.mark.parametrize("record_format", demo.DEMO_FORMATS)
def test_each_demo_format_is_a_valid_generator_and_job(record_format: str) -> None:
    generator, job = demo.format_flags(record_format)
    p = argparse.ArgumentParser()
    produce_arguments(p)
    g = config_from_args(p.parse_args([*demo._GENERATOR_KNOBS, *generator]), now_ms=0)
    assert g.record_format == record_format
    before = {f.name for f in event_fields()}
    j = argparse.ArgumentParser()
    job_arguments(j)
    try:
        cfg = job_config_from_args(
            j.parse_args([*demo._JOB_KNOBS, *job, "--checkpoint", "/tmp/ckpt"])
        )
        assert cfg.record_format.name == record_format
        names = [d.name for d in cfg.dimensions]
        assert names == ["route", "region", "version", "status_class", "team"]
        # the records carry them, and the demo's incident can hit a value of each but the
        # status class and the team, which the catalog gives (dashboard/app.py, "only where")
        assert set(names) - {"status_class", "team"} <= set(INCIDENT_DIMENSIONS)
        assert g.attributes == (record_format == "tidegauge")
        if record_format != "tidegauge":
            assert g.heartbeat_interval_ms == 0 and g.malformed_fraction == 0
        else:
            assert g.heartbeat_interval_ms > 0 and g.malformed_fraction > 0
    finally:
        for name in {f.name for f in event_fields()} - before:
            unregister_field(name)


def test_the_demo_catalog_covers_every_generated_service_within_budget() -> None:
    """Every service the demo generates has a team and SLOs its normal traffic keeps: 1 %
    errors against an availability budget of at least 1.5 %, and the p99 of its lognormal
    latency under the latency objective."""
    import math

    from tidegauge.traffic.config import DEFAULT_LATENCY, DEFAULT_SERVICES, GeneratorConfig

    assert set(demo.DEMO_CATALOG) == {name for name, _ in DEFAULT_SERVICES}
    for name, entry in demo.DEMO_CATALOG.items():
        slo = entry.slo
        assert entry.team and slo is not None and slo.availability and slo.latency_ms
        assert 100 - slo.availability >= 1.5 * GeneratorConfig().error_rate * 100
        median, sigma = DEFAULT_LATENCY[name]
        p99 = median * math.exp(2.326 * sigma)
        assert p99 < slo.latency_ms, name
