"""How busy a replica is, read as SGLang answers it: 0.5.23's /v1/loads, an earlier release's
/get_load, else /metrics; the answers are SGLang's shapes served by httpx's MockTransport (the
replica's HTTP alone is stood in for)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from bot.fleet.drain import ReplicaLoad

URL = "http://replica:30000"


def probe(routes: Mapping[str, tuple[int, Any]]) -> ReplicaLoad:
    def answer(request: httpx.Request) -> httpx.Response:
        status, body = routes.get(request.url.path, (404, {"detail": "Not Found"}))
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return ReplicaLoad(transport=httpx.MockTransport(answer))


def test_sglang_0_5_23s_v1_loads_counts_running_and_waiting_on_every_rank() -> None:
    """0.5.23 serves /v1/loads and no /get_load: 1 running on rank 0 and 2 waiting on rank 1
    are 3 busy (it was never seen as idle: /get_load is a 404 there)."""
    loads = {
        "loads": [
            {"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 0},
            {"dp_rank": 1, "num_running_reqs": 0, "num_waiting_reqs": 2},
        ]
    }
    assert probe({"/v1/loads": (200, loads)}).busy(URL) == 3
    idle = {"loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}]}
    assert probe({"/v1/loads": (200, idle)}).busy(URL) == 0


def test_an_earlier_release_is_read_from_get_load_then_metrics() -> None:
    """Without /v1/loads: /get_load's num_reqs and num_waiting_reqs; without both, /metrics'
    running and queued requests; with none of them, unknown (never idle)."""
    get_load = [{"dp_rank": 0, "num_reqs": 2, "num_waiting_reqs": 1, "num_tokens": 9}]
    assert probe({"/get_load": (200, get_load)}).busy(URL) == 3
    metrics = 'sglang:num_running_reqs{model_name="m"} 1.0\nsglang:num_queue_reqs 4.0\n'
    assert probe({"/metrics": (200, metrics)}).busy(URL) == 5
    assert probe({}).busy(URL) is None
