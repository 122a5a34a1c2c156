"""The simulator's ``/generate`` (plain and streamed), ``/get_load`` and SIGTERM's drain, as a
real subprocess over real HTTP."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.sim.conftest import Sim

READY = "The server is fired up and ready to roll!"
ARGS = ["--model-path", "/models/kimi", "--tp", "2", "--host", "127.0.0.1", "--port", "0"]
GENERATE_S = 1.0


def _serving(run_sim: Callable[..., Sim], env: dict[str, str], *extra: str) -> tuple[Sim, str]:
    sim = run_sim([*ARGS, *extra], dict(env, KIMI_SIM_GENERATE_S=str(GENERATE_S)))
    sim.wait_for(READY)
    return sim, f"http://127.0.0.1:{sim.port()}"


def _wait_running(base: str, count: int) -> list[dict[str, int]]:
    """Poll ``/get_load`` until ``count`` requests run in all; its last answer."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        loads: list[dict[str, int]] = httpx.get(f"{base}/get_load").json()
        if sum(rank["num_reqs"] for rank in loads) == count:
            return loads
        time.sleep(0.02)
    raise AssertionError(f"{count} requests never ran at once: {loads}")


@pytest.mark.slow
def test_generate_takes_its_duration_and_get_load_counts_it_on_each_dp_rank(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """Two requests at once on DP 2 run one per rank in /get_load, each takes the duration."""
    sim, base = _serving(run_sim, sim_env, "--tp", "1", "--dp", "2")
    idle = httpx.get(f"{base}/get_load").json()
    assert idle == [
        {"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0},
        {"dp_rank": 1, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0},
    ]
    answers: list[tuple[float, dict[str, object]]] = []

    def one() -> None:
        started = time.monotonic()
        reply = httpx.post(f"{base}/generate", json={"text": "The capital of France is"})
        answers.append((time.monotonic() - started, reply.json()))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    loads = _wait_running(base, 2)
    assert [rank["num_reqs"] for rank in loads] == [1, 1]
    for thread in threads:
        thread.join()
    assert all(took >= GENERATE_S for took, _ in answers)
    assert all(body["text"] == " Paris." for _, body in answers)
    assert sum(rank["num_reqs"] for rank in httpx.get(f"{base}/get_load").json()) == 0
    assert sim.terminate() == 0


@pytest.mark.slow
def test_a_streamed_generate_sends_events_then_done(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """``"stream": true`` answers server-sent events, growing text, ending in ``[DONE]``."""
    sim, base = _serving(run_sim, sim_env)
    with httpx.stream("POST", f"{base}/generate", json={"text": "x", "stream": True}) as reply:
        assert reply.headers["content-type"] == "text/event-stream"
        events = [line[len("data: ") :] for line in reply.iter_lines() if line]
    assert events[-1] == "[DONE]"
    texts = [json.loads(event)["text"] for event in events[:-1]]
    assert texts[-1] == " Paris."
    assert len(texts) > 1
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(texts))
    assert sim.terminate() == 0


@pytest.mark.slow
def test_sigterm_refuses_new_requests_and_finishes_those_running(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """After SIGTERM a running request (plain and streamed) still finishes 200; a new one is
    refused 503, /health is 503, and the process exits 0 only after they finished."""
    sim, base = _serving(run_sim, sim_env)
    plain_replies: list[httpx.Response] = []
    streamed_replies: list[tuple[int, list[str]]] = []

    def plain() -> None:
        plain_replies.append(httpx.post(f"{base}/generate", json={"text": "x"}, timeout=30))

    def streamed() -> None:
        with httpx.stream(
            "POST", f"{base}/generate", json={"text": "x", "stream": True}, timeout=30
        ) as reply:
            streamed_replies.append((reply.status_code, [ln for ln in reply.iter_lines() if ln]))

    threads = [threading.Thread(target=plain), threading.Thread(target=streamed)]
    for thread in threads:
        thread.start()
    _wait_running(base, 2)
    sim.proc.terminate()
    sim.wait_for("Draining requests")
    refused = httpx.post(f"{base}/generate", json={"text": "late"})
    assert refused.status_code == 503
    assert httpx.get(f"{base}/health").status_code == 503
    for thread in threads:
        thread.join()
    assert [reply.status_code for reply in plain_replies] == [200]
    assert [(status, lines[-1]) for status, lines in streamed_replies] == [(200, "data: [DONE]")]
    assert sim.wait() == 0
    assert "Gracefully exiting... Remaining number of requests 0." in sim.stdout()


@pytest.mark.slow
def test_a_negative_generate_duration_is_refused_by_name(
    run_sim: Callable[..., Sim], sim_env: dict[str, str]
) -> None:
    """KIMI_SIM_GENERATE_S below zero stops the simulator at once with exit 2, naming it."""
    sim = run_sim(ARGS, dict(sim_env, KIMI_SIM_GENERATE_S="-1"))
    assert sim.wait() == 2
    assert "KIMI_SIM_GENERATE_S '-1' must be >= 0" in sim.stderr()
