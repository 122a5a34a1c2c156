"""``[fleets.NAME]``: SGLang replicas behind one router, resized one by one.

::

    [fleets.prod]
    router = "http://10.0.0.5:30000"        # the router's HTTP API
    hosts = ["kimi-01", "kimi-02", "kimi-03"]  # [hosts.*] sections, each an agent
    max_unavailable = 1                     # replicas out of the router at once
    drain_timeout_s = 600                   # then SGLang's own SIGTERM drain is the backstop
    router_metrics = "http://10.0.0.5:29000/metrics"  # its --prometheus-port (this default)
    breaker_timeout_s = 300                 # the other replicas' breakers must close by then

Each host's agent reports its server's URL as the router reaches it (``[agent] router_url``,
by default its ``server_url``) in ``/v1/status``, so the fleet needs no URL list. The older
``[fleets.prod.replica_urls]`` table (``kimi-01 = "http://10.0.0.11:30000"``) still works and
wins over what an agent reports; it may name some hosts only.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from bot.errors import ConfigError
from bot.settings import Section

__all__ = ["FleetSettings", "load_fleets"]

_KEYS = (
    "router",
    "hosts",
    "max_unavailable",
    "drain_timeout_s",
    "drain_polls",
    "poll_interval_s",
    "healthy_timeout_s",
    "replica_urls",
    "router_metrics",
    "breaker_timeout_s",
)


@dataclass(frozen=True)
class FleetSettings:
    """One fleet: its router, its hosts in rollout order and each one's URL in the router."""

    name: str
    router: str
    hosts: tuple[str, ...]
    replica_urls: Mapping[str, str] = field(default_factory=dict)
    max_unavailable: int = 1
    drain_timeout_s: float = 600.0
    #: A replica is idle once /get_load showed nothing running or waiting this many polls running.
    drain_polls: int = 3
    poll_interval_s: float = 1.0
    #: How long a replica added back may take to be reported healthy by the router.
    healthy_timeout_s: float = 300.0
    #: The router's Prometheus export, where its circuit breakers show; None: the router's
    #: host on port 29000, every generation's default.
    router_metrics: str | None = None
    #: Before a replica goes out, every other one must be healthy with its breaker closed in
    #: the router; the rollout stops when that takes longer than this.
    breaker_timeout_s: float = 300.0

    def url(self, host: str, reported: str | None = None) -> str | None:
        """``host``'s server as the router reaches it: ``replica_urls`` when it names it, else
        what its agent ``reported`` (``[agent] router_url``)."""
        found = self.replica_urls.get(host) or reported
        return None if found is None else found.rstrip("/")


def _http_url(where: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{where} {value!r} is not an http(s) URL (e.g. http://10.0.0.5:30000)")
    return value.rstrip("/")


def _fleet(name: str, table: object, host_names: Collection[str]) -> FleetSettings:
    section = Section({f"fleets.{name}": table}, f"fleets.{name}", _KEYS)
    where = f"[fleets.{name}]"
    router = _http_url(f"{where} router", section.text("router"))
    hosts = tuple(section.text_list("hosts"))
    if not hosts:
        raise ConfigError(f"{where} hosts is empty; name at least one [hosts.*] section")
    for host in hosts:
        if host not in host_names:
            known = ", ".join(sorted(host_names)) or "none"
            raise ConfigError(f"{where} hosts names {host!r}, which is no [hosts.*] ({known})")
    doubled = sorted({h for h in hosts if hosts.count(h) > 1})
    if doubled:
        raise ConfigError(f"{where} hosts names {doubled[0]!r} twice")
    raw_urls = table.get("replica_urls", {}) if isinstance(table, Mapping) else {}
    if not isinstance(raw_urls, Mapping):
        raise ConfigError(f"{where} replica_urls must be a table of host = URL")
    urls: dict[str, str] = {}
    for host, value in raw_urls.items():
        if not isinstance(value, str):
            raise ConfigError(f"{where} replica_urls.{host} must be a URL in quotes")
        urls[host] = _http_url(f"{where} replica_urls.{host}", value)
    stray = sorted(set(raw_urls) - set(hosts))
    if stray:
        raise ConfigError(f"{where} replica_urls names {stray[0]!r}, which is not in hosts")
    metrics = section.optional_text("router_metrics")
    if metrics is not None:
        metrics = _http_url(f"{where} router_metrics", metrics)
    max_unavailable = section.integer("max_unavailable", 1, minimum=1)
    if max_unavailable > len(hosts):
        raise ConfigError(
            f"{where} max_unavailable is {max_unavailable} but the fleet has {len(hosts)} "
            "hosts; at most all of them can be out at once"
        )
    return FleetSettings(
        name=name,
        router=router,
        hosts=hosts,
        replica_urls=urls,
        max_unavailable=max_unavailable,
        drain_timeout_s=section.number("drain_timeout_s", 600.0, minimum=0.0),
        drain_polls=section.integer("drain_polls", 3, minimum=1),
        poll_interval_s=section.number("poll_interval_s", 1.0, minimum=0.01),
        healthy_timeout_s=section.number("healthy_timeout_s", 300.0, minimum=1.0),
        router_metrics=metrics,
        breaker_timeout_s=section.number("breaker_timeout_s", 300.0, minimum=0.0),
    )


def load_fleets(config: Mapping[str, Any], host_names: Collection[str]) -> dict[str, FleetSettings]:
    """Every ``[fleets.NAME]``, checked against the ``[hosts.*]`` the bot knows."""
    raw = config.get("fleets", {})
    if not isinstance(raw, Mapping):
        raise ConfigError("[fleets] must hold one table per fleet, e.g. [fleets.prod]")
    fleets: dict[str, FleetSettings] = {}
    for name, table in raw.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"[fleets.{name}] must be a table")
        fleets[name] = _fleet(name, table, host_names)
    return fleets
