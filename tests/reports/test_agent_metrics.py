"""SGLang's /metrics through the agent: the agent's /v1/status carries the simulator's gauges as
figures, the bot reads them (bot.agent_json) and a report shows them with no [reports]
metrics_urls; a URL there still wins; a server without --enable-metrics carries none."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from bot.agent_json import AgentStatus
from bot.chat.agent_client import AgentClient
from bot.errors import AgentError
from bot.prometheus import ServerMetrics
from bot.reports.runtime import ServerMetricsSource, collect_reports
from bot.vocab import OperationState
from tests.chat.conftest import RunningAgent, SimHost, write_agent_config
from tests.reports._fixtures import SetClock, status_json

# Each /generate holds the simulated server this long, so the requests are running while the
# agent is asked (under the 10 s the simulator's own warmup request waits); the server's drain
# on stop waits for them, so they are joined first.
GENERATE_S = 8
IN_FLIGHT = 3
METRICS_HOST = SimHost(
    hicache=("--enable-hierarchical-cache", "--hicache-size", "48", "--enable-metrics"),
    serving_ratio=None,
)


def _gauge(text: str, name: str) -> float:
    """One gauge of SGLang's exposition, read the plain way: its one line, its value."""
    (value,) = re.findall(rf"^sglang:{name}\{{[^}}]*\}} (\S+)$", text, flags=re.MULTILINE)
    return float(value)


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningAgent, str]]:
    """An agent on a simulator started with --enable-metrics, and the simulator's base URL."""
    root = tmp_path_factory.mktemp("kimi-metrics")
    config = write_agent_config(root, METRICS_HOST)
    with config.open("a", encoding="utf-8") as handle:  # [agent.env] is the last table
        handle.write(f'KIMI_SIM_GENERATE_S = "{GENERATE_S}"\n')
    found = re.search(r'"--port", "(\d+)"', config.read_text(encoding="utf-8"))
    assert found is not None
    agent = RunningAgent(root=root, config=config)
    try:
        agent.start()
        page = agent.run_to_end({"kind": "restart", "actor": "setup"})
        assert page["state"] == OperationState.READY, page["events"][-3:]
        yield agent, f"http://127.0.0.1:{found.group(1)}"
    finally:
        agent.close()


@pytest.mark.slow
def test_the_agent_carries_the_servers_gauges_and_a_report_shows_them(
    metered: tuple[RunningAgent, str],
) -> None:
    """With three /generate requests in flight, the simulator's /metrics says 3 running; the
    agent's status says the same figures, and a report built from the agent alone shows them."""
    agent, sim = metered
    calls = [
        threading.Thread(
            target=lambda: httpx.post(f"{sim}/generate", json={"text": "hi"}, timeout=60)
        )
        for _ in range(IN_FLIGHT)
    ]
    for call in calls:
        call.start()
    try:
        deadline = time.monotonic() + GENERATE_S / 2
        text = httpx.get(f"{sim}/metrics", timeout=10).text
        while _gauge(text, "num_running_reqs") < IN_FLIGHT:
            assert time.monotonic() < deadline, "the simulator never showed the requests running"
            time.sleep(0.05)
            text = httpx.get(f"{sim}/metrics", timeout=10).text
        with agent.http() as http:
            body = http.get("/v1/status").json()
        with AgentClient(agent.url, agent.token, host="kimi-01") as client:
            (report,) = collect_reports(
                ["kimi-01"], {"kimi-01": client}, ServerMetricsSource({}), SetClock()
            )
    finally:
        for call in calls:
            call.join(timeout=GENERATE_S * 10)
    expected = {
        "token_usage": _gauge(text, "token_usage"),
        "running_requests": IN_FLIGHT,
        "queued_requests": round(_gauge(text, "num_queue_reqs")),
        "cache_hit_rate": _gauge(text, "cache_hit_rate"),
        "host_total_tokens": None,  # SGLang 0.5.9 does not export the host pool's gauge
    }
    assert body["metrics"] == expected
    assert AgentStatus.from_json(body).metrics == ServerMetrics(**expected)
    assert report.answered, report.problem
    assert report.metrics == ServerMetrics(**expected)


@pytest.mark.slow
def test_a_server_without_metrics_carries_none(kimi: RunningAgent) -> None:
    """The shared agent's simulator runs without --enable-metrics: its status says metrics
    null and its report has none (the wording then says how to turn them on)."""
    with kimi.http() as http:
        body = http.get("/v1/status").json()
    assert body["server"]["state"] == "running"
    assert body["metrics"] is None
    with AgentClient(kimi.url, kimi.token, host="kimi-01") as client:
        (report,) = collect_reports(
            ["kimi-01"], {"kimi-01": client}, ServerMetricsSource({}), SetClock()
        )
    assert report.answered, report.problem
    assert report.metrics is None


def test_a_metrics_url_wins_over_the_agents_figures_and_falls_back_to_them() -> None:
    """[reports] metrics_urls names a server's /metrics: its gauges are used, not the agent's;
    when that URL fails, the agent's figures are."""
    served = {"status": 200}

    def sglang(request: httpx.Request) -> httpx.Response:
        text = 'sglang:num_queue_reqs{model_name="kimi"} 80.0\nsglang:token_usage{a="b"} 0.97\n'
        return httpx.Response(served["status"], text=text)

    agent_said = {"token_usage": 0.1, "running_requests": 2, "queued_requests": 0,
                  "cache_hit_rate": 0.5, "host_total_tokens": None}  # fmt: skip
    status = AgentStatus.from_json(status_json(metrics=agent_said))
    source = ServerMetricsSource(
        {"kimi-01": "http://10.0.0.5:30000/metrics"}, transport=httpx.MockTransport(sglang)
    )
    try:
        assert source.metrics("kimi-01", status) == ServerMetrics(
            token_usage=0.97, queued_requests=80
        )
        assert source.metrics("kimi-02", status) == ServerMetrics(**agent_said)
        served["status"] = 503
        assert source.metrics("kimi-01", status) == ServerMetrics(**agent_said)
    finally:
        source.close()


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"token_usage": 1.5}, "'token_usage' is 1.5, not a fraction between 0 and 1"),
        ({"running_requests": 2.5}, "'running_requests' is 2.5, not a whole number"),
        ({"queued_requests": -1}, "'queued_requests' is -1, not a count"),
        ({"cache_hit_rate": "high"}, "'cache_hit_rate'"),
        ([0.5], "metrics is list, not a JSON object"),
    ],
)
def test_bad_metrics_from_an_agent_are_refused_by_name(metrics: object, message: str) -> None:
    """A figure out of range or of the wrong type is an AgentError naming the field."""
    with pytest.raises(AgentError, match=re.escape(message)):
        AgentStatus.from_json(status_json(metrics=metrics))


def test_an_agent_without_the_field_or_with_null_has_no_metrics() -> None:
    """An older agent (no field) and a server serving none (null) both read as None."""
    assert AgentStatus.from_json(status_json()).metrics is None
    assert AgentStatus.from_json(status_json(metrics=None)).metrics is None
