"""The [reports] section: documented defaults, and clear errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import ConfigError
from bot.reports import RecommendRules, ReportSettings, load_report_settings
from bot.reports.settings import _KEYS
from bot.settings import load_config


def test_without_a_reports_section_every_default_applies() -> None:
    """Sampling every 5 minutes, UTC, a day's window, a day's misfire grace, the rule defaults."""
    settings = load_report_settings({})
    assert settings == ReportSettings()
    assert (settings.sample_every_minutes, settings.timezone) == (5, "UTC")
    assert settings.misfire_grace_minutes * 60 > 1  # not APScheduler's 1 s default
    assert settings.rules == RecommendRules()


def test_keys_are_read_with_their_types() -> None:
    """Every key given is taken, the URLs of servers' /metrics included."""
    settings = load_report_settings(
        {"reports": {"sample_every_minutes": 1, "timezone": "Europe/Paris", "high_usage": 0.8,
                     "metrics_urls": {"kimi-01": "http://10.0.0.5:30000/metrics"}}}
    )  # fmt: skip
    assert settings.sample_every_minutes == 1
    assert settings.zone.key == "Europe/Paris"
    assert settings.rules.high_usage == 0.8
    assert settings.metrics_urls == {"kimi-01": "http://10.0.0.5:30000/metrics"}


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"timezone": "Mars/Olympus"}, "timezone 'Mars/Olympus'"),
        ({"sample_every_minutes": 0}, "sample_every_minutes must be at least 1"),
        ({"high_usage": 1.5}, "high_usage is a fraction"),
        ({"low_usage": 0.95}, "low_usage (0.95) must be below high_usage"),
        ({"heartbeat_seconds": 60, "lock_stale_seconds": 90}, "lock_stale_seconds (90)"),
        ({"metrics_urls": {"kimi-01": "ftp://x"}}, "metrics_urls must map"),
        ({"sample_every": 5}, "unknown key 'sample_every'"),
    ],
)
def test_a_wrong_value_is_refused_naming_the_key(table: dict[str, object], named: str) -> None:
    """A bad [reports] key or value stops the start with the key named."""
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(")", r"\)")):
        load_report_settings({"reports": table})


def test_the_example_config_documents_and_reads_every_reports_key() -> None:
    """deploy/kimi-ops.example.toml's [reports] reads, and names every key the section takes."""
    example = Path(__file__).parents[2] / "deploy" / "kimi-ops.example.toml"
    assert load_report_settings(load_config(example)) == ReportSettings()
    text = example.read_text(encoding="utf-8")
    assert [key for key in _KEYS if f"{key} =" not in text] == []
