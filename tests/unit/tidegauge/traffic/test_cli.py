"""`tidegauge produce`'s flags (tidegauge/traffic/cli.py): the `GeneratorConfig` they build."""

from __future__ import annotations

import pytest

from tests.unit.tidegauge.traffic.fixtures import T0, parse_cli
from tidegauge.traffic.cli import config_from_args
from tidegauge.traffic.config import SKEWED_CLOCKS_FRACTION, GeneratorConfig


def test_config_from_flags() -> None:
    args = parse_cli(
        "--pace",
        "fast",
        "--count",
        "100",
        "--seed",
        "3",
        "--max-delay",
        "2s",
        "--lateness",
        "1m",
        "--late-fraction",
        "0.1",
        "--services",
        "a:1,b:2",
        "--latency",
        "a=10:0.1",
        "--heartbeat-interval",
        "0",
        "--start-time",
        "2027-01-15T08:00:00Z",
    )
    cfg = config_from_args(args, now_ms=T0 + 123_456)
    assert cfg.start_time_ms == T0
    assert (cfg.count, cfg.seed, cfg.max_delay_ms, cfg.lateness_ms) == (100, 3, 2_000, 60_000)
    assert cfg.services == (("a", 1.0), ("b", 2.0))
    assert cfg.latency_of("a") == (10.0, 0.1)
    assert cfg.heartbeat_interval_ms == 0


def test_fast_pace_defaults_to_now_rounded_down() -> None:
    cfg = config_from_args(parse_cli("--pace", "fast"), now_ms=T0 + 1_234)
    assert cfg.start_time_ms == T0 + 1_000
    assert config_from_args(parse_cli(), now_ms=T0).start_time_ms is None  # realtime: at start


def test_defaults_match_the_documented_flags() -> None:
    cfg = config_from_args(parse_cli(), now_ms=T0)
    assert cfg == GeneratorConfig()
    assert (cfg.rate, cfg.users, cfg.zipf, cfg.partitions) == (200.0, 10_000, 1.1, 3)
    assert (cfg.out_of_order_fraction, cfg.max_delay_ms, cfg.lateness_ms) == (0.05, 5_000, 30_000)
    assert (cfg.iso_fraction, cfg.heartbeat_interval_ms, cfg.max_skew_ms) == (0.1, 1_000, 120_000)


@pytest.mark.parametrize("argv", [["--max-delay", "5x"], ["--services", "api:x"]])
def test_bad_flag_values_are_argparse_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_cli(*argv)
    err = capsys.readouterr().err
    assert "not a duration" in err or "--services wants name:weight" in err


def test_default_network_delay_is_50ms() -> None:
    assert GeneratorConfig().network_delay_ms == 50
    assert config_from_args(parse_cli("--network-delay", "120ms")).network_delay_ms == 120


def test_heartbeat_tail_flag() -> None:
    cfg = config_from_args(parse_cli("--pace", "fast", "--heartbeat-tail", "45s"), now_ms=T0)
    assert cfg.heartbeat_tail_ms == 45_000
    with pytest.raises(ValueError, match="--heartbeat-tail needs heartbeats"):
        config_from_args(
            parse_cli("--heartbeat-tail", "1s", "--heartbeat-interval", "0"), now_ms=T0
        )


# --- scenario presets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "skew_fraction", "max_skew_ms"),
    [
        ([], 0.0, 120_000),
        (["--skew-fraction", "0.2"], 0.2, 120_000),
        (["--scenario", "skewed-clocks"], SKEWED_CLOCKS_FRACTION, 120_000),
        (["--scenario", "skewed-clocks", "--skew-fraction", "0.05"], 0.05, 120_000),
        (["--scenario", "skewed-clocks", "--max-skew", "10s"], SKEWED_CLOCKS_FRACTION, 10_000),
    ],
)
def test_skewed_clocks_preset(argv: list[str], skew_fraction: float, max_skew_ms: int) -> None:
    cfg = config_from_args(parse_cli("--pace", "fast", *argv), now_ms=T0)
    assert (cfg.skew_fraction, cfg.max_skew_ms) == (skew_fraction, max_skew_ms)
    assert SKEWED_CLOCKS_FRACTION == 0.3


def test_skewed_clocks_explicit_zero_is_a_contradiction() -> None:
    args = parse_cli("--pace", "fast", "--scenario", "skewed-clocks", "--skew-fraction", "0")
    with pytest.raises(ValueError, match="skewed-clocks needs --skew-fraction > 0"):
        config_from_args(args, now_ms=T0)


@pytest.mark.parametrize(
    ("argv", "burst_at", "span", "rate"),
    [
        ([], 60_000, 3_600_000, 1.0),
        (["--duration", "10m"], 300_000, 3_600_000, 1.0),
        (["--duration", "10m", "--burst-at", "2m"], 120_000, 3_600_000, 1.0),
        (["--burst-span", "30m", "--burst-rate", "2.5"], 60_000, 1_800_000, 2.5),
    ],
)
def test_late_burst_preset(argv: list[str], burst_at: int, span: int, rate: float) -> None:
    cfg = config_from_args(parse_cli("--pace", "fast", "--scenario", "late-burst", *argv), T0)
    assert cfg.scenarios == ("late-burst",)
    assert (cfg.burst_offset_ms, cfg.burst_span_ms, cfg.burst_rate) == (burst_at, span, rate)
    assert cfg.burst_count == round(span * rate / 1000)
    assert cfg.max_send_delay_ms == span


@pytest.mark.parametrize(
    ("argv", "backlog_at", "pause"),
    [
        ([], 20_000, 30_000),
        (["--duration", "90s"], 30_000, 30_000),
        (["--duration", "90s", "--backlog-at", "5s", "--backlog-pause", "2s"], 5_000, 2_000),
    ],
)
def test_backlog_preset(argv: list[str], backlog_at: int, pause: int) -> None:
    cfg = config_from_args(parse_cli("--scenario", "backlog", *argv), T0)
    assert cfg.pace == "realtime" and cfg.scenarios == ("backlog",)
    assert (cfg.backlog_offset_ms, cfg.backlog_pause_ms) == (backlog_at, pause)


def test_scenarios_combine() -> None:
    args = parse_cli(
        "--scenario", "skewed-clocks", "--scenario", "late-burst", "--scenario", "backlog"
    )
    cfg = config_from_args(args, T0)
    assert cfg.scenarios == ("skewed-clocks", "late-burst", "backlog")
    assert cfg.skew_fraction == SKEWED_CLOCKS_FRACTION


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--burst-at", "5s"], "--burst-at only applies to --scenario late-burst"),
        (["--burst-span", "5m"], "--burst-span only applies to --scenario late-burst"),
        (["--burst-rate", "3"], "--burst-rate only applies to --scenario late-burst"),
        (["--backlog-at", "5s"], "--backlog-at only applies to --scenario backlog"),
        (["--scenario", "late-burst", "--backlog-pause", "5s"], "--backlog-pause only applies"),
        (["--pace", "fast", "--scenario", "backlog"], "backlog needs --pace realtime"),
    ],
)
def test_scenario_flags_need_their_scenario(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config_from_args(parse_cli(*argv), T0)


def test_unknown_scenario_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_cli("--scenario", "thundering-herd")
    assert "invalid choice: 'thundering-herd'" in capsys.readouterr().err
