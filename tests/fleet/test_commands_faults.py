"""The fleet commands through the bot core with a fleet that is not whole: kimi-01 a real agent
on the simulator, kimi-02's agent down (nothing listening on its port), kimi-03's agent hung (a
socket that accepts and never answers), kimi-01 out of the router. The router is an in-process
stand-in (the real sglang-router runs in test_commands.py); the store is SQLite through
Alembic."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from bot.chat.agent_client import AgentClient
from bot.chat.core import ChatCore
from bot.chat.fleet_commands import attach_fleets
from bot.chat.policy import Actor
from bot.chat.replies import (
    FleetProposalReply,
    FleetRefusalReply,
    FleetsReply,
    HostsReply,
    ProblemReply,
    ProposalReply,
    RejoinReply,
    ReportReply,
    RolloutReply,
    StatusReply,
)
from bot.chat.report_commands import REPORTS_PROPOSER
from bot.fleet import FleetSettings, ReplicaView, RouterApi
from bot.reports import ReportSettings
from bot.reports.runtime import attach_reports
from bot.settings import Secret
from bot.store import Store
from bot.terminal.cli import EXIT_REFUSED, exit_code
from bot.terminal.rollout_wording import fleet_reply_lines
from bot.vocab import OperationKind, ReplicaPhase, RolloutState
from tests.chat._core_fixtures import (
    RecordingFrontEnd,
    chat_settings,
    migrated_store,
    running_core,
)
from tests.chat.conftest import RunningAgent, SimHost, agent_on_sim
from tests.fleet._standins import StandInRouter, dead_url, hung_listener
from tests.reports._fixtures import T0, SetClock, series

ANA = Actor("ana")
pytestmark = pytest.mark.slow


class Front(RecordingFrontEnd):
    def rollout(self, view: object) -> None:
        pass

    def replica_ended(self, view: object, host: str) -> None:
        pass


@pytest.fixture(scope="module")
def kimi_01(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    """kimi-01's agent on the simulator, serving."""
    host = SimHost(host_name="kimi-01")
    with agent_on_sim(tmp_path_factory.mktemp("kimi-01"), host) as agent:
        yield agent


@pytest.fixture(scope="module")
def hung() -> Iterator[str]:
    with hung_listener() as url:
        yield url


def _server_url(agent: RunningAgent) -> str:
    with agent.http() as http:
        return str(http.get("/v1/status").json()["server"]["router_url"]).rstrip("/")


@contextmanager
def _core(
    tmp_path: Path, kimi_01: RunningAgent, hung: str, router: StandInRouter
) -> Iterator[tuple[ChatCore, Store]]:
    """The core over the three agents, fleets prod (all three) and solo (kimi-01 alone)."""
    hosts = {"kimi-01": kimi_01.url, "kimi-02": dead_url(), "kimi-03": hung}
    settings = replace(chat_settings(hosts), read_deadline_s=0.5)
    fleets = {
        "prod": FleetSettings("prod", "http://router.test:30000", tuple(hosts),
                              poll_interval_s=0.05, healthy_timeout_s=5.0),
        "solo": FleetSettings("solo", "http://router.test:30001", ("kimi-01",),
                              poll_interval_s=0.05, healthy_timeout_s=5.0),
    }  # fmt: skip
    front = Front()
    with migrated_store(tmp_path) as store, running_core(settings, store, front) as core:
        attach_fleets(core.context, store, fleets, front, event_wait_s=0.5,
                      router=lambda fleet: router)  # fmt: skip
        yield core, store


def _ran_by(agent: RunningAgent, actor: str) -> list[str]:
    with agent.http() as http:
        ops = http.get("/v1/operations").json()["operations"]
    return [op["kind"] for op in ops if op["actor"] == actor]


def _record_done(store: Store, fleet: str, kind: OperationKind, lines: tuple[ReplicaView, ...]):  # type: ignore[no-untyped-def]
    """A finished rollout of ``fleet`` as the store keeps one (each line as given)."""
    change = "hicache ratio 4" if kind is OperationKind.RESIZE else kind.value
    record = store.record_rollout(fleet, kind, change, lines, proposed_by="ana",
                                  state=RolloutState.RUNNING,
                                  ratio=4 if kind is OperationKind.RESIZE else None)  # fmt: skip
    return store.save_rollout(record.id, RolloutState.DONE, lines)


def test_restart_and_rollback_fleet_with_agents_down_or_hung_are_refusals_naming_them(
    tmp_path: Path, kimi_01: RunningAgent, hung: str
) -> None:
    """'restart fleet prod' and 'rollback fleet prod' are refused naming kimi-02 (down) and
    kimi-03 (no answer in 0.5 s), exit 3, with no rollout running and nothing run on kimi-01
    (it failed before: an AssertionError traceback)."""
    router = StandInRouter({}, RouterApi.BY_ID)
    with _core(tmp_path, kimi_01, hung, router) as (core, store):
        url = _server_url(kimi_01)
        done = (ReplicaView("kimi-01", url, phase=ReplicaPhase.DONE, old_config="size 48"),)
        _record_done(store, "prod", OperationKind.RESIZE, done)
        for text in ("restart fleet prod", "rollback fleet prod"):
            reply = core.handle(text, ANA)
            assert isinstance(reply, FleetRefusalReply), (text, reply)
            reasons = dict(reply.refusal.reasons)
            assert sorted(reasons) == ["kimi-02", "kimi-03"]
            assert reasons["kimi-03"] == (
                "its agent does not answer (agent kimi-03: no answer in 0.5 s); nothing was touched"
            )
            assert exit_code(reply) == EXIT_REFUSED
        assert store.unfinished_rollouts() == []
        assert router.removed == []
    assert _ran_by(kimi_01, "ana") == []


def test_a_fleet_resize_with_an_agent_down_is_a_refusal(
    tmp_path: Path, kimi_01: RunningAgent, hung: str
) -> None:
    """'resize ratio 2.5 fleet prod' with kimi-02 down is refused naming it and recorded (it
    failed before: "replica URL is empty; give a non-empty value")."""
    with _core(tmp_path, kimi_01, hung, StandInRouter({})) as (core, _store):
        reply = core.handle("resize ratio 2.5 fleet prod", ANA)
        assert isinstance(reply, FleetRefusalReply), reply
        assert "kimi-02" in dict(reply.refusal.reasons)
        lines = fleet_reply_lines(reply)
        assert lines[0] == "REFUSED: fleet prod hicache ratio 2.5; no replica was touched"


def test_fleets_shows_the_silent_agents_the_replica_out_of_the_router_and_a_stopped_rollout(
    tmp_path: Path, kimi_01: RunningAgent, hung: str
) -> None:
    """kimi-01 serves but the router does not hold it: 'fleets' says so and how to put it back,
    names kimi-03's silence, and shows the stopped rollout; with the router down it says the
    router is unreachable (it failed before: 'no rollout running', 'server running', and no
    word of the router)."""
    router = StandInRouter({})
    with _core(tmp_path, kimi_01, hung, router) as (core, store):
        url = _server_url(kimi_01)
        record = store.record_rollout("prod", OperationKind.RESTART, "restart",
                                      (ReplicaView("kimi-01", url),), proposed_by="ana",
                                      state=RolloutState.RUNNING)  # fmt: skip
        store.save_rollout(record.id, RolloutState.STOPPED,
                           (ReplicaView("kimi-01", url, phase=ReplicaPhase.UNCHANGED),),
                           "kimi-02's agent does not answer")  # fmt: skip
        listed = core.handle("fleets", ANA)
        assert isinstance(listed, FleetsReply)
        prod = next(f for f in listed.fleets if f.name == "prod")
        assert prod.out_of_router[0] == "kimi-01"
        assert prod.stopped is not None
        assert prod.stopped.id == record.id
        silent = {a.host: a.problem for a in prod.replicas if a.status is None}
        assert silent["kimi-03"] == "agent kimi-03: no answer in 0.5 s"
        lines = fleet_reply_lines(listed)
        assert lines[0] == (
            f"fleet prod (router http://router.test:30000): rollout #{record.id} (restart) "
            "stopped: kimi-02's agent does not answer; 'resume fleet prod' retries it"
        )
        assert "OUT OF THE ROUTER ('fleet prod rejoin kimi-01' puts it back)" in lines[1]

        router.down = "router http://router.test:30000 cannot be reached: refused"
        down = core.handle("fleets", ANA)
        assert isinstance(down, FleetsReply)
        assert down.fleets[0].router_problem == router.down
        assert fleet_reply_lines(down)[1] == f"  router unreachable: {router.down}"


def test_resume_fleet_puts_back_a_replica_that_serves_out_of_the_router(
    tmp_path: Path, kimi_01: RunningAgent, hung: str
) -> None:
    """With nothing to resume, 'resume fleet solo' puts kimi-01 back once its health is
    checked (it failed before: "nothing to resume" and the replica stayed out); 'fleet prod
    rejoin kimi-03' is refused, kimi-03's agent silent, exit 3."""
    router = StandInRouter({})
    with _core(tmp_path, kimi_01, hung, router) as (core, _store):
        url = _server_url(kimi_01)
        back = core.handle("resume fleet solo", ANA)
        assert isinstance(back, RejoinReply), back
        assert [(r.host, r.refused) for r in back.outcomes] == [("kimi-01", None)]
        assert router.added == [url]
        assert fleet_reply_lines(back) == [
            f"kimi-01: back in fleet solo's router ({url}), healthy, breaker closed"
        ]
        refused = core.handle("fleet prod rejoin kimi-03", ANA)
        assert isinstance(refused, RejoinReply)
        assert refused.outcomes[0].refused == (
            "its agent does not answer (agent kimi-03: no answer in 0.5 s)"
        )
        assert exit_code(refused) == EXIT_REFUSED
        assert router.added == [url]


def test_a_single_host_change_on_a_replica_is_refused_naming_the_fleet_command(
    tmp_path: Path, kimi_01: RunningAgent, hung: str
) -> None:
    """'restart kimi-01', 'resize ratio 4 kimi-01' and the apply of a proposal made before
    kimi-01 was in a fleet are refused, each naming the fleet's command; kimi-01's agent runs
    nothing (it failed before: the single-host path restarted it in the router)."""
    router = StandInRouter({})
    hosts = {"kimi-01": kimi_01.url}
    front = Front()
    with migrated_store(tmp_path) as store, running_core(chat_settings(hosts), store,
                                                         front) as core:  # fmt: skip
        early = core.handle("resize ratio 4 kimi-01", ANA)
        assert isinstance(early, ProposalReply), early
        fleet = FleetSettings("solo", "http://router.test:30001", ("kimi-01",))
        attach_fleets(core.context, store, {"solo": fleet}, front,
                      router=lambda fleet: router)  # fmt: skip
        restart = core.handle("restart kimi-01", ANA)
        assert isinstance(restart, FleetRefusalReply), restart
        ((host, why),) = restart.refusal.reasons
        assert host == "kimi-01"
        assert why.startswith("kimi-01 is a replica of fleet solo: a single-host restart")
        assert "use 'restart fleet solo'" in why
        resize = core.handle("resize ratio 4 kimi-01", ANA)
        assert isinstance(resize, FleetRefusalReply)
        assert "use 'resize ratio 4 fleet solo'" in resize.refusal.reasons[0][1]
        applied = core.handle(f"apply {early.id}", ANA)
        assert isinstance(applied, FleetRefusalReply), applied
        assert "use 'resize ratio 4 fleet solo'" in applied.refusal.reasons[0][1]
    assert _ran_by(kimi_01, "ana") == []


def test_rollback_fleet_after_a_restart_undoes_nothing_and_a_busy_fleet_refuses(
    tmp_path: Path, kimi_01: RunningAgent, hung: str
) -> None:
    """After a restart rollout, 'rollback fleet solo' says there is no config to undo (it failed
    before: the agents' rollbacks reverted the resize before the restart); while a rollout of
    solo runs, 'restart fleet solo' is a refusal, exit 3 (it was an error, exit 1)."""
    with _core(tmp_path, kimi_01, hung, StandInRouter({})) as (core, store):
        url = _server_url(kimi_01)
        line = ReplicaView("kimi-01", url, phase=ReplicaPhase.DONE)
        restarted = _record_done(store, "solo", OperationKind.RESTART, (line,))
        nothing = core.handle("rollback fleet solo", ANA)
        assert nothing == ProblemReply(
            f"fleet solo's last rollout (#{restarted.id}, restart) changed no config to undo; "
            "'rollback <revision> <host>' returns one replica to a config of its history"
        )
        running = store.record_rollout("solo", OperationKind.RESTART, "restart",
                                       (ReplicaView("kimi-01", url),), proposed_by="ben",
                                       state=RolloutState.RUNNING)  # fmt: skip
        busy = core.handle("restart fleet solo", ANA)
        assert isinstance(busy, FleetRefusalReply), busy
        assert f"fleet solo is in rollout #{running.id}" in busy.refusal.reasons[0][1]
        assert exit_code(busy) == EXIT_REFUSED
    assert _ran_by(kimi_01, "ana") == []


def test_rollback_fleet_lines_name_the_config_each_replica_returns_to(
    tmp_path: Path, kimi_01: RunningAgent, hung: str
) -> None:
    """After a resize that changed kimi-01 from 'size 48 GB/rank', the rollback's line names
    that config as its target (it failed before: the line showed none)."""
    router = StandInRouter({})
    with _core(tmp_path, kimi_01, hung, router) as (core, store):
        url = _server_url(kimi_01)
        router.listed[url] = True
        line = ReplicaView("kimi-01", url, phase=ReplicaPhase.DONE, old_config="size 48 GB/rank",
                           new_config="ratio 4 x device pool")  # fmt: skip
        _record_done(store, "solo", OperationKind.RESIZE, (line,))
        undo = core.handle("rollback fleet solo", ANA)
        assert isinstance(undo, RolloutReply), undo
        assert [(r.host, r.new_config) for r in undo.view.replicas] == [
            ("kimi-01", "size 48 GB/rank")
        ]
        desk = core.context.fleets
        assert desk is not None
        ended = desk.wait(undo.view.id, timeout_s=60)  # the stand-in refuses the removal
        assert ended is not None
        assert ended.state is RolloutState.STOPPED
    assert _ran_by(kimi_01, "ana") == []


def test_a_report_s_recommendation_for_a_replica_is_a_fleet_proposal(
    tmp_path: Path, kimi_01: RunningAgent
) -> None:
    """Samples of kimi-01 calling for growth, kimi-01 a replica of fleet solo: the report's
    advice is a fleet proposal by kimi-ops (one rollout through the router), not a single-host
    proposal (it failed before: a single-host proposal whose apply restarted kimi-01 in the
    router)."""
    clock = SetClock(T0 + timedelta(hours=2))
    front = Front()
    with migrated_store(tmp_path) as store:
        for sample in series("kimi-01", clock.now() - timedelta(minutes=1), 7, usage=0.97,
                             queued=80):  # fmt: skip
            store.add_capacity_sample(sample)
        settings = chat_settings({"kimi-01": kimi_01.url})
        with running_core(settings, store, front, clock=clock) as core:
            attach_reports(core, store, ReportSettings())
            fleet = FleetSettings("solo", "http://router.test:30001", ("kimi-01",))
            attach_fleets(core.context, store, {"solo": fleet}, front,
                          router=lambda fleet: StandInRouter({}))  # fmt: skip
            reply = core.handle("report", ANA)
        assert isinstance(reply, ReportReply), reply
        [view] = reply.hosts
        assert view.proposal is None
        assert isinstance(view.fleet_proposal, FleetProposalReply), view.fleet_proposal
        assert view.fleet_proposal.proposed_by == REPORTS_PROPOSER
        rollout = store.rollout_by_proposal(view.fleet_proposal.id)
        assert rollout is not None
        assert rollout.fleet == "solo"
        assert rollout.state is RolloutState.PROPOSED
    assert _ran_by(kimi_01, "ana") == []


def test_status_and_hosts_mark_the_hung_agent_and_answer_the_others(
    tmp_path: Path, kimi_01: RunningAgent, hung: str
) -> None:
    """With kimi-03's agent hung, 'status' and 'hosts' mark it "no answer in 0.5 s" (the read
    deadline), kimi-02 unreachable, and kimi-01 answered (before, the hung agent held every
    read for the client's 15 s timeout)."""
    with _core(tmp_path, kimi_01, hung, StandInRouter({})) as (core, _store):
        for text in ("status", "hosts"):
            reply = core.handle(text, ANA)
            assert isinstance(reply, StatusReply | HostsReply), reply
            by_host = {answer.host: answer for answer in reply.hosts}
            assert by_host["kimi-01"].status is not None
            assert by_host["kimi-03"].problem == "agent kimi-03: no answer in 0.5 s"
            assert by_host["kimi-02"].status is None


def test_applying_a_fleet_proposal_with_an_agent_down_is_a_refusal_naming_it(
    tmp_path: Path, kimi_01: RunningAgent, hung: str
) -> None:
    """kimi-01's agent stops answering between the proposal and its apply: the apply is a
    refusal naming kimi-01 (exit 3) and no rollout starts (it was an error, exit 1)."""
    with _core(tmp_path, kimi_01, hung, StandInRouter({})) as (core, store):
        proposal = core.handle("resize ratio 4 fleet solo", ANA)
        assert isinstance(proposal, FleetProposalReply), proposal
        with AgentClient(dead_url(), Secret("t"), host="kimi-01") as down:
            live = core.context.clients["kimi-01"]
            core.context.clients["kimi-01"] = down  # the same mapping the desk reads
            try:
                refused = core.handle(f"apply {proposal.id}", ANA)
            finally:
                core.context.clients["kimi-01"] = live
        assert isinstance(refused, FleetRefusalReply), refused
        ((host, why),) = refused.refusal.reasons
        assert host == "kimi-01"
        assert why.startswith("its agent does not answer (agent kimi-01 cannot be reached")
        assert exit_code(refused) == EXIT_REFUSED
        assert store.unfinished_rollouts() == []
    assert _ran_by(kimi_01, "ana") == []
