"""The ``[reports]`` section: sampling, schedules, the chart's window and the recommendation rules.

Every key has a default (documented in ``deploy/kimi-ops.example.toml``), so a config without
``[reports]`` gets capacity reports every 5 minutes' worth of samples and the thresholds below::

    [reports]
    sample_every_minutes = 5       # the sampling job's period
    timezone = "Europe/Paris"      # what 'report daily 09:00' means
    misfire_grace_minutes = 1440   # a report missed while the bot was down still runs (once)
    keep_days = 30                 # the sampling job deletes samples older than this
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.errors import ConfigError
from bot.settings import Section

__all__ = ["RecommendRules", "ReportSettings", "load_report_settings"]


@dataclass(frozen=True)
class RecommendRules:
    """When the samples call for a change (fractions are 0..1, RAM in GB = 1e9 bytes).

    - grow: token usage at or above ``high_usage`` in every sample of the last
      ``sustained_minutes``, with at least ``min_queue`` requests queued on average, and the
      planner accepting a larger host pool with ``margin_gb`` of headroom left after it;
    - shrink: token usage below ``low_usage`` in every sample of the window (the device pool never
      filled, so nothing was evicted to the host pool) while available RAM is under
      ``ram_tight_fraction`` of the total;
    - nothing otherwise, and nothing from fewer than ``min_samples`` samples.
    """

    high_usage: float = 0.90
    min_queue: float = 1.0
    sustained_minutes: int = 30
    margin_gb: float = 20.0
    low_usage: float = 0.30
    ram_tight_fraction: float = 0.10
    min_samples: int = 3


@dataclass(frozen=True)
class ReportSettings:
    """How and when capacity is sampled and reported."""

    sample_every_minutes: int = 5
    timezone: str = "UTC"
    window_hours: int = 24
    misfire_grace_minutes: int = 1440
    heartbeat_seconds: int = 30
    lock_stale_seconds: int = 120
    #: Samples older than this many days are deleted by the sampling job.
    keep_days: int = 30
    rules: RecommendRules = field(default_factory=RecommendRules)
    #: host name -> the SGLang server's own ``/metrics`` URL, read by the bot instead of the
    #: figures the agent's status carries (an override; the agent's are used if it fails).
    metrics_urls: Mapping[str, str] = field(default_factory=dict)

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


_KEYS = (
    "sample_every_minutes",
    "timezone",
    "window_hours",
    "misfire_grace_minutes",
    "heartbeat_seconds",
    "lock_stale_seconds",
    "keep_days",
    "high_usage",
    "min_queue",
    "sustained_minutes",
    "margin_gb",
    "low_usage",
    "ram_tight_fraction",
    "min_samples",
    "metrics_urls",
)


def _fraction(section: Section, key: str, default: float) -> float:
    value = section.number(key, default, minimum=0.0)
    if value > 1:
        raise ConfigError(f"[reports] {key} is a fraction between 0 and 1, not {value:g}")
    return value


def _urls(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(u, str) and u.startswith(("http://", "https://"))
        for k, u in raw.items()
    ):
        raise ConfigError(
            "[reports] metrics_urls must map host names to http(s) URLs, e.g. "
            '{ kimi-01 = "http://10.0.0.5:30000/metrics" }'
        )
    return dict(raw)


def load_report_settings(config: Mapping[str, Any]) -> ReportSettings:
    """``[reports]`` of a parsed config file; a wrong key or value is a :class:`ConfigError`."""
    section = Section(config, "reports", _KEYS)
    timezone = section.text("timezone", "UTC")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: a name over 255 bytes
        raise ConfigError(
            f"[reports] timezone {timezone!r} is not an IANA time zone (e.g. 'UTC', 'Europe/Paris')"
        ) from exc
    heartbeat = section.integer("heartbeat_seconds", 30, minimum=1)
    stale = section.integer("lock_stale_seconds", 120, minimum=1)
    if stale <= 2 * heartbeat:
        raise ConfigError(
            f"[reports] lock_stale_seconds ({stale}) must exceed twice heartbeat_seconds "
            f"({heartbeat}), or a live scheduler could lose its lock to a second one"
        )
    window = section.integer("window_hours", 24, minimum=1)
    keep_days = section.integer("keep_days", 30, minimum=1)
    if keep_days * 24 < window:
        raise ConfigError(
            f"[reports] keep_days ({keep_days}) keeps less than the chart's window_hours "
            f"({window}); keep at least {-(-window // 24)} days"
        )
    low = _fraction(section, "low_usage", 0.30)
    high = _fraction(section, "high_usage", 0.90)
    if low >= high:
        raise ConfigError(f"[reports] low_usage ({low:g}) must be below high_usage ({high:g})")
    rules = RecommendRules(
        high_usage=high,
        min_queue=section.number("min_queue", 1.0, minimum=0.0),
        sustained_minutes=section.integer("sustained_minutes", 30, minimum=1),
        margin_gb=section.number("margin_gb", 20.0, minimum=0.0),
        low_usage=low,
        ram_tight_fraction=_fraction(section, "ram_tight_fraction", 0.10),
        min_samples=section.integer("min_samples", 3, minimum=1),
    )
    raw = config.get("reports", {})
    return ReportSettings(
        sample_every_minutes=section.integer("sample_every_minutes", 5, minimum=1),
        timezone=timezone,
        window_hours=window,
        misfire_grace_minutes=section.integer("misfire_grace_minutes", 1440, minimum=1),
        heartbeat_seconds=heartbeat,
        lock_stale_seconds=stale,
        keep_days=keep_days,
        rules=rules,
        metrics_urls=_urls(raw.get("metrics_urls") if isinstance(raw, Mapping) else None),
    )
