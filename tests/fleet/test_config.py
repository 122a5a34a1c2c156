"""``[fleets.NAME]``: a good section is read, each bad one refused naming the key and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from bot.errors import ConfigError
from bot.fleet import load_fleets

HOSTS = ("kimi-01", "kimi-02")
URLS = {"kimi-01": "http://10.0.0.11:30000", "kimi-02": "http://10.0.0.12:30000"}


def _fleet(**changes: Any) -> dict[str, Any]:
    table: dict[str, Any] = {
        "router": "http://10.0.0.5:30000",
        "hosts": list(HOSTS),
        "max_unavailable": 1,
        "drain_timeout_s": 600,
        "replica_urls": dict(URLS),
    }
    table.update(changes)
    return {"fleets": {"prod": table}}


def test_a_fleet_is_read_with_its_hosts_in_order() -> None:
    """The section gives the router, the hosts in rollout order and each one's URL."""
    fleet = load_fleets(_fleet(), HOSTS)["prod"]
    assert fleet.router == "http://10.0.0.5:30000"
    assert fleet.hosts == HOSTS
    assert fleet.url("kimi-02") == "http://10.0.0.12:30000"
    assert (fleet.max_unavailable, fleet.drain_timeout_s) == (1, 600.0)


def test_a_replica_url_comes_from_the_setting_or_else_from_its_agent() -> None:
    """replica_urls may name some hosts or none: the others take the URL their agent reports
    ([agent] router_url), and a host with neither has no URL."""
    fleet = load_fleets(_fleet(replica_urls={"kimi-01": URLS["kimi-01"]}), HOSTS)["prod"]
    assert fleet.url("kimi-01", "http://ignored:1") == "http://10.0.0.11:30000"
    assert fleet.url("kimi-02", "http://10.0.0.12:30000/") == "http://10.0.0.12:30000"
    assert fleet.url("kimi-02") is None
    bare = {k: v for k, v in _fleet()["fleets"]["prod"].items() if k != "replica_urls"}
    assert load_fleets({"fleets": {"prod": bare}}, HOSTS)["prod"].replica_urls == {}


def test_the_router_s_metrics_and_breaker_timeout_are_read_or_defaulted() -> None:
    """router_metrics and breaker_timeout_s are read when given; unset, the metrics URL is left
    to the router's default port and the breakers get 300 s."""
    fleet = load_fleets(
        _fleet(router_metrics="http://10.0.0.5:9100/metrics", breaker_timeout_s=45), HOSTS
    )["prod"]
    assert (fleet.router_metrics, fleet.breaker_timeout_s) == ("http://10.0.0.5:9100/metrics", 45)
    plain = load_fleets(_fleet(), HOSTS)["prod"]
    assert (plain.router_metrics, plain.breaker_timeout_s) == (None, 300.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"router": "10.0.0.5:30000"}, "[fleets.prod] router '10.0.0.5:30000' is not an http(s)"),
        ({"hosts": ["kimi-09"]}, "[fleets.prod] hosts names 'kimi-09', which is no [hosts.*]"),
        ({"hosts": ["kimi-01", "kimi-01"]}, "[fleets.prod] hosts names 'kimi-01' twice"),
        ({"hosts": []}, "[fleets.prod] hosts is empty"),
        ({"max_unavailable": 3}, "max_unavailable is 3 but the fleet has 2 hosts"),
        ({"max_unavailable": 0}, "[fleets.prod] max_unavailable must be at least 1"),
        ({"drain_timeout_s": -1}, "[fleets.prod] drain_timeout_s must be at least 0"),
        ({"replica_urls": {"kimi-09": URLS["kimi-01"]}}, "replica_urls names 'kimi-09', which"),
        ({"replica_urls": {"kimi-01": "10.0.0.11"}}, "replica_urls.kimi-01 '10.0.0.11' is not"),
        ({"drain": 5}, "unknown key 'drain' in [fleets.prod]"),
        ({"router_metrics": "10.0.0.5:29000"}, "router_metrics '10.0.0.5:29000' is not an http"),
        ({"breaker_timeout_s": -1}, "[fleets.prod] breaker_timeout_s must be at least 0"),
    ],
)
def test_a_bad_fleet_is_refused_naming_the_key(changes: dict[str, Any], message: str) -> None:
    """Each mistake stops the load with a ConfigError that names the section and the key."""
    with pytest.raises(ConfigError) as caught:
        load_fleets(_fleet(**changes), HOSTS)
    assert message in str(caught.value)
