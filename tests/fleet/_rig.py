"""A fleet on one machine: three simulated SGLang replicas, each with its own agent (``python -m
bot agent`` over real HTTP, as the bot core's tests run it), behind a real sglang-router, and a
load generator sending requests through the router."""

from __future__ import annotations

import contextlib
import threading
import time
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bot.chat.agent_client import AgentClient
from bot.fleet import FleetSettings
from bot.vocab import OperationState
from tests.chat.conftest import RunningAgent, SimHost, write_agent_config
from tests.fleet._routers import RunningRouter, start_router

HOSTS = ("kimi-01", "kimi-02", "kimi-03")
#: Every replica starts at 20 GB/rank: ratio 4 (44.77 GB/rank on the field notes' host) fits.
START = ("--enable-hierarchical-cache", "--hicache-size", "20")


@dataclass
class Replica:
    host: str
    agent: RunningAgent
    server_url: str

    def client(self) -> AgentClient:
        return AgentClient(self.agent.url, self.agent.token, host=self.host)


@dataclass
class Fleet:
    replicas: list[Replica]
    router: RunningRouter

    def settings(self, hosts: int | None = None, **overrides: float) -> FleetSettings:
        values: dict[str, float] = {
            "drain_timeout_s": 30.0,
            "poll_interval_s": 0.05,
            "healthy_timeout_s": 60.0,
        }
        values.update(overrides)
        return FleetSettings(
            name="prod",
            router=self.router.url,
            router_metrics=self.router.metrics_url,
            # No replica_urls: each agent reports its server's URL (``[agent] router_url``
            # defaults to its server_url), as a fleet set up today is.
            hosts=tuple(r.host for r in self.replicas[:hosts]),
            drain_polls=3,
            **values,  # type: ignore[arg-type]
        )

    def url(self, host: str) -> str:
        """``host``'s server as the router reaches it."""
        return next(r.server_url for r in self.replicas if r.host == host)

    def agents(self) -> dict[str, AgentClient]:
        return {r.host: r.client() for r in self.replicas}


def _replica(root: Path, host: str, sim_fail: str, generate_s: float) -> Replica:
    spec = SimHost(host_name=host, hicache=START, serving_ratio=None, sim_fail=sim_fail)
    config = write_agent_config(root, spec)
    # [agent.env] is the file's last table: each /generate takes generate_s seconds.
    with config.open("a", encoding="utf-8") as out:
        out.write(f'KIMI_SIM_GENERATE_S = "{generate_s}"\n')
    server_url = tomllib.loads(config.read_text(encoding="utf-8"))["agent"]["server_url"]
    agent = RunningAgent(root=root, config=config)
    agent.start()
    page = agent.run_to_end({"kind": "restart", "actor": "setup"})
    assert page["state"] == OperationState.READY, page["events"][-3:]
    return Replica(host, agent, server_url)


@contextlib.contextmanager
def fleet_of(
    root: Path,
    router_version: str,
    count: int = 3,
    generate_s: float = 0.2,
    failing: dict[str, str] | None = None,
    router_flags: tuple[str, ...] = (),
) -> Iterator[Fleet]:
    """``count`` replicas serving behind the router, brought up at once; ``failing`` maps a host
    to its KIMI_SIM_FAIL, ``router_flags`` are more of the router's flags."""
    replicas: list[Replica] = []
    router: RunningRouter | None = None
    hosts = HOSTS[:count]
    try:
        with ThreadPoolExecutor(max_workers=count) as pool:
            futures = [
                pool.submit(_replica, root / h, h, (failing or {}).get(h, ""), generate_s)
                for h in hosts
            ]
            for future in futures:
                with contextlib.suppress(Exception):
                    replicas.append(future.result())
            for future in futures:
                future.result()  # the first failure, once every agent started is known
        router = start_router(router_version, [r.server_url for r in replicas], root, router_flags)
        yield Fleet(replicas, router)
    finally:
        if router is not None:
            router.stop()
        for replica in replicas:
            replica.agent.close()


@dataclass
class LoadGenerator:
    """``workers`` clients sending ``/generate`` through the router back to back, every third one
    streamed, until stopped; every answer that is not a whole 200 counts as failed."""

    router_url: str
    workers: int = 4
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> LoadGenerator:
        for n in range(self.workers):
            thread = threading.Thread(target=self._loop, args=(n,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _loop(self, worker: int) -> None:
        with httpx.Client(base_url=self.router_url, timeout=60) as http:
            sent = 0
            while not self._stop.is_set():
                sent += 1
                problem = self._one(http, stream=(worker + sent) % 3 == 0)
                with self._lock:
                    if problem is None:
                        self.ok += 1
                    else:
                        self.failed.append(problem)

    @staticmethod
    def _one(http: httpx.Client, stream: bool) -> str | None:
        body = {"text": "The capital of France is", "stream": stream}
        try:
            if not stream:
                reply = http.post("/generate", json=body)
                if reply.status_code != 200 or reply.json().get("text") != " Paris.":
                    return f"{reply.status_code} {reply.text[:200]}"
                return None
            with http.stream("POST", "/generate", json=body) as reply:
                lines = [line for line in reply.iter_lines() if line]
            if reply.status_code != 200 or not lines or lines[-1] != "data: [DONE]":
                return f"stream {reply.status_code} {lines[-2:]}"
            return None
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"


def wait_for_traffic(load: LoadGenerator, count: int = 10) -> None:
    deadline = time.monotonic() + 30
    while load.ok < count:
        assert time.monotonic() < deadline, f"no traffic through the router: {load.failed[:3]}"
        time.sleep(0.05)
