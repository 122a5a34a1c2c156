"""Stand-ins for a fleet's faults: a replica's agent in process (serving, silent, its last
operation failed, running one), a router in memory, a clock that moves when slept, and the two
real network faults a fleet meets: an agent with nothing listening on its port, and one whose
socket accepts but never answers (a process stopped by SIGSTOP looks so from outside).

The in-process stand-ins drive the rollout's timing logic only; the real agents, simulator and
sglang-router are in test_rollout.py and test_commands.py."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.agent_json import AgentOperation, AgentStatus, OperationPage, PlannedChange
from bot.errors import AgentUnreachable, RouterError
from bot.fleet import Breaker, RouterApi, RouterWorker
from bot.vocab import OperationKind, OperationState
from tests._ports import free_port
from tests.reports._fixtures import status_json

START = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)


class FakeClock:
    """Time that moves only when someone sleeps."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> datetime:
        return START + timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def operation(
    op_id: int, state: OperationState, kind: OperationKind = OperationKind.RESIZE
) -> AgentOperation:
    return AgentOperation(
        id=op_id, kind=kind, state=state, actor="by-hand", created_at=START,
        finished_at=None if state is OperationState.RUNNING else START, plan=None, revision=None,
        rollback_of=None, outcome=None, failure=None, raw={},
    )  # fmt: skip


class StandInAgent:
    """A replica's agent: its server ``serving`` (running, health 200) or not, ``silent`` (every
    call fails as an agent that does not answer), ``last`` its newest operation (``running`` it
    while it runs). It records each submit and refuses them: the tests stop the rollout there."""

    def __init__(self, host: str, url: str, serving: bool = True) -> None:
        self.host = host
        self.url = url
        self.serving = serving
        self.silent = False
        self.last: AgentOperation | None = None
        self.asked = 0
        self.submitted: list[OperationKind] = []

    def _answer(self) -> None:
        self.asked += 1
        if self.silent:
            raise AgentUnreachable(f"agent {self.host}: no answer in 1 s")

    def status(self) -> AgentStatus:
        self._answer()
        body: dict[str, Any] = status_json(self.host)
        body["server"] = {
            **body["server"],
            "router_url": self.url,
            "state": "running" if self.serving else "failed",
            "health_code": 200 if self.serving else None,
        }
        running = self.last is not None and not self.last.finished
        body["operation"] = _raw(self.last) if running and self.last is not None else None
        return AgentStatus.from_json(body)

    def plan(self, ratio: float | None = None, size_gb: int | None = None) -> PlannedChange:
        raise AssertionError("no plan is asked in these tests")

    def submit(
        self,
        kind: OperationKind,
        actor: str,
        ratio: float | None = None,
        size_gb: int | None = None,
        revision: int | None = None,
        fingerprint: str | None = None,
    ) -> AgentOperation:
        self._answer()
        self.submitted.append(kind)
        raise AgentUnreachable(f"agent {self.host}: refused by the test")

    def events(self, operation_id: int, after: int = 0, wait_s: float = 0.0) -> OperationPage:
        raise AssertionError("no operation is followed in these tests")

    def operations(self, limit: int = 20) -> tuple[AgentOperation, ...]:
        self._answer()
        return () if self.last is None else (self.last,)


def _raw(op: AgentOperation) -> dict[str, Any]:
    return {
        "id": op.id, "kind": op.kind.value, "state": op.state.value, "actor": op.actor,
        "created_at": op.created_at.isoformat(), "finished_at": None, "plan": None,
        "revision": None, "rollback_of": None, "outcome": None, "failure": None,
    }  # fmt: skip


class StandInRouter:
    """A router in memory: ``listed`` maps each worker's URL to its health, ``breaker`` each
    one's breaker; ``down`` makes every call a RouterError. Removals and adds are recorded;
    ``refuse_removal`` refuses each removal after recording it (the rollout stops there)."""

    def __init__(self, urls: Mapping[str, bool], api: RouterApi = RouterApi.BY_ID) -> None:
        self.listed = dict(urls)
        self.breaker: dict[str, Breaker] = {}
        self._api = api
        self.down: str | None = None
        self.refuse_removal = True
        self.removed: list[str] = []
        self.added: list[str] = []
        #: How many worker listings an added worker takes to show healthy.
        self.healthy_after = 0
        self.closed = 0

    def _check(self) -> None:
        if self.down is not None:
            raise RouterError(self.down)

    def api(self) -> RouterApi:
        self._check()
        return self._api

    def workers(self) -> tuple[RouterWorker, ...]:
        self._check()
        return tuple(RouterWorker(url, healthy, url) for url, healthy in self.listed.items())

    def worker(self, url: str) -> RouterWorker | None:
        found = next((w for w in self.workers() if w.url == url), None)
        if found is not None and not found.healthy and self.healthy_after > 0:
            self.healthy_after -= 1
            if self.healthy_after == 0:
                self.listed[url] = True
        return found

    def breakers(self) -> Mapping[str, Breaker] | None:
        self._check()
        return dict(self.breaker)

    def add(self, url: str) -> None:
        self._check()
        self.added.append(url)
        self.listed[url] = self.healthy_after == 0

    def remove(self, url: str) -> None:
        self._check()
        self.removed.append(url)
        if self.refuse_removal:
            raise RouterError("refused by the test")
        self.listed.pop(url, None)

    def close(self) -> None:
        self.closed += 1


@contextlib.contextmanager
def hung_listener() -> Iterator[str]:
    """A URL whose socket accepts connections and never answers (the kernel completes the
    handshake from the backlog; nothing reads): an agent stopped by SIGSTOP, from outside."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def dead_url() -> str:
    """A URL with nothing listening: a free port of this worker's range, never bound."""
    return f"http://127.0.0.1:{free_port()}"
