"""The fleet commands through the bot core, end to end: a real sglang-router 0.3.2 in front of
three simulated replicas with their agents, a SQLite store through Alembic, and a load generator
through the router for the whole time."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bot.chat.core import ChatCore
from bot.chat.fleet_commands import attach_fleets
from bot.chat.policy import Actor
from bot.chat.replies import (
    CancelledReply,
    FleetProposalReply,
    FleetRefusalReply,
    FleetsReply,
    ProblemReply,
    RefusalReply,
    RejoinReply,
    RolloutReply,
)
from bot.fleet import (
    FleetChange,
    FleetRefusal,
    FleetSettings,
    RolloutView,
    RouterApi,
    RouterClient,
)
from bot.store import RevisionOutcome, Store
from bot.vocab import (
    OperationKind,
    ReplicaPhase,
    RolloutState,
)
from tests.chat._core_fixtures import (
    RecordingFrontEnd,
    chat_settings,
    migrated_store,
    running_core,
)
from tests.chat.conftest import SimHost, agent_on_sim
from tests.fleet._rig import Fleet, LoadGenerator, fleet_of, wait_for_traffic
from tests.fleet._routers import VERSIONS

ANA, BEN, EVE = Actor("ana"), Actor("ben"), Actor("eve")
#: The field notes' host (8 ranks): ratio 4 is 44.77 GB per rank, 8 x 44.77 = 358.2 GB in all.
RATIO_4 = re.compile(r"^ratio 4: 8 x 44\.77 GB/rank = 358\.2 GB of \d+\.\d GB budget$")


@dataclass
class FleetFront(RecordingFrontEnd):
    """The recording front end, which also keeps every rollout view and replica end."""

    rollouts: list[RolloutView] = field(default_factory=list)
    ended: list[tuple[int, str, ReplicaPhase]] = field(default_factory=list)

    def rollout(self, view: RolloutView) -> None:
        with self.lock:
            self.rollouts.append(view)

    def replica_ended(self, view: RolloutView, host: str) -> None:
        with self.lock:
            self.ended.append((view.id, host, view.replica(host).phase))


@contextmanager
def _core(tmp_path: Path, fleet: Fleet, front: FleetFront) -> Iterator[tuple[ChatCore, Store]]:
    """A bot core on the rig's agents with the fleet desk attached, its store migrated."""
    settings = chat_settings({r.host: r.agent.url for r in fleet.replicas})
    with migrated_store(tmp_path) as store, running_core(settings, store, front) as core:
        attach_fleets(core.context, store, {"prod": fleet.settings()}, front, event_wait_s=0.5)
        yield core, store


@pytest.mark.slow
def test_a_fleet_resize_is_refused_or_proposed_then_applied_and_listed(tmp_path: Path) -> None:
    """A size no host holds is refused naming each host; ratio 4 is proposed with a line per
    replica, refused to a non-applier, applied by an applier and rolled out with no failed
    request, each replica's own proposal ending ready; 'fleets' shows the new configs."""
    with fleet_of(tmp_path, VERSIONS[RouterApi.BY_ID]) as fleet:
        config = fleet.settings()
        front = FleetFront()
        with (
            _core(tmp_path, fleet, front) as (core, store),
            LoadGenerator(fleet.router.url) as load,
        ):
            desk = core.context.fleets
            assert desk is not None
            wait_for_traffic(load)

            unknown = core.handle("restart fleet staging", ANA)
            assert isinstance(unknown, ProblemReply)
            assert unknown.text == "there is no fleet 'staging' (fleets: prod)"

            too_big = core.handle("resize size 900 fleet prod", BEN)
            assert isinstance(too_big, FleetRefusalReply)
            assert [host for host, _ in too_big.refusal.reasons] == list(config.hosts)
            assert store.unfinished_rollouts() == []

            proposal = core.handle("resize ratio 4 fleet prod", BEN)
            assert isinstance(proposal, FleetProposalReply), proposal
            lines = proposal.rollout.replicas
            assert [line.host for line in lines] == list(config.hosts)
            for line in lines:
                assert RATIO_4.match(line.planned or ""), line.planned
                assert line.old_config == "size 20 GB/rank"
            assert proposal.id == lines[0].proposal_id

            refused = core.handle(f"apply {proposal.id}", EVE)
            assert isinstance(refused, RefusalReply)

            started = core.handle(f"apply {proposal.id}", ANA)
            assert isinstance(started, RolloutReply), started
            done = desk.wait(started.view.id, timeout_s=300)
            assert done is not None, "the rollout did not end within 300 s"
            assert done.state is RolloutState.DONE, done
            for line in store.rollout(done.id).replicas:
                assert line.proposal_id is not None
                revision = store.revision(store.proposal(line.proposal_id).revision_id)
                assert revision.outcome is RevisionOutcome.READY
                assert revision.applied_by == "ana"

            listed = core.handle("fleets", BEN)
            assert isinstance(listed, FleetsReply)
            (prod,) = listed.fleets
            assert prod.running is None
            configs = [h.status.effective for h in prod.replicas if h.status]
            assert configs == ["ratio 4 x device pool"] * 3
        assert load.failed == []


@pytest.mark.slow
def test_rollback_fleet_undoes_only_what_the_last_rollout_changed(tmp_path: Path) -> None:
    """With no rollout yet, 'rollback fleet' says there is nothing to undo; after a rollout that
    changed kimi-01 alone, it returns kimi-01 to its old config and leaves kimi-02 untouched."""
    with fleet_of(tmp_path, VERSIONS[RouterApi.BY_ID], count=2) as fleet:
        front = FleetFront()
        with (
            _core(tmp_path, fleet, front) as (core, _store),
            LoadGenerator(fleet.router.url) as load,
        ):
            desk = core.context.fleets
            assert desk is not None
            wait_for_traffic(load)
            nothing = core.handle("rollback fleet prod", ANA)
            assert nothing == ProblemReply("fleet prod's last rollout changed no replica to undo")

            planned = desk.plan("prod", FleetChange(OperationKind.RESIZE, ratio=4))
            assert not isinstance(planned, FleetRefusal), planned
            # A rollout over kimi-01 alone: the last rollout changed it and nothing else.
            only_first = planned.replicas[:1]
            record = desk.begin(
                "prod", FleetChange(OperationKind.RESIZE, ratio=4), only_first, "ana", "C0OPS"
            )
            changed = desk.wait(record.id, timeout_s=300)
            assert changed is not None, "the resize did not end within 300 s"
            assert changed.changed == ("kimi-01",)

            undo = core.handle("rollback fleet prod", ANA)
            assert isinstance(undo, RolloutReply), undo
            assert [line.host for line in undo.view.replicas] == ["kimi-01"]
            undone = desk.wait(undo.view.id, timeout_s=300)
            assert undone is not None, "the rollback did not end within 300 s"
            assert undone.state is RolloutState.DONE, undone
        assert load.failed == []
        ends = [(host, phase) for rid, host, phase in front.ended if rid == undone.id]
        assert ends == [("kimi-01", ReplicaPhase.DONE)]
        for replica in fleet.replicas:
            with replica.client() as client:
                hicache = client.status().hicache
                kinds = [op.kind for op in client.operations(20) if op.actor == "ana"]
            assert hicache is not None
            assert (hicache.ratio, hicache.size_gb) == (None, 20)
            if replica.host == "kimi-01":
                assert kinds == [OperationKind.ROLLBACK, OperationKind.RESIZE]
            else:
                assert kinds == []


def test_a_cancelled_fleet_proposal_cannot_be_applied(tmp_path: Path) -> None:
    """Cancel on a fleet proposal (its shown number) by someone who may not is refused and
    changes nothing; by its proposer it ends the rollout cancelled with every replica's
    proposal, a later apply is refused as cancelled and the agent runs nothing. One real agent
    on the simulator; the router is never called before an apply, so its URL names nothing."""
    with agent_on_sim(tmp_path / "kimi-01", SimHost()) as agent:
        settings = chat_settings({"kimi-01": agent.url})
        fleet = FleetSettings("prod", "http://127.0.0.1:9", ("kimi-01",))
        front = FleetFront()
        with migrated_store(tmp_path) as store, running_core(settings, store, front) as core:
            attach_fleets(core.context, store, {"prod": fleet}, front)
            proposal = core.handle("resize ratio 4 fleet prod", BEN)
            assert isinstance(proposal, FleetProposalReply), proposal
            with agent.http() as http:
                before = http.get("/v1/operations").json()
            assert isinstance(core.handle(f"cancel {proposal.id}", EVE), RefusalReply)
            assert store.rollout(proposal.rollout.id).state is RolloutState.PROPOSED
            assert isinstance(core.handle(f"cancel {proposal.id}", BEN), CancelledReply)
            cancelled = store.rollout(proposal.rollout.id)
            assert cancelled.state is RolloutState.CANCELLED
            assert cancelled.reason == "cancelled by ben"
            assert cancelled.ended_at is not None
            for line in cancelled.replicas:
                assert line.proposal_id is not None
                revision = store.revision(store.proposal(line.proposal_id).revision_id)
                assert revision.outcome is RevisionOutcome.CANCELLED
            refused = core.handle(f"apply {proposal.id}", ANA)
            assert isinstance(refused, RefusalReply), refused
            assert "cancelled" in refused.text
            assert store.rollout(proposal.rollout.id) == cancelled
            with agent.http() as http:
                assert http.get("/v1/operations").json() == before


@pytest.mark.slow
def test_a_replica_left_out_of_the_real_router_is_shown_counted_and_rejoined(
    tmp_path: Path,
) -> None:
    """kimi-02 taken out of sglang-router 0.3.2 by hand while it serves: 'fleets' marks it out,
    'restart fleet prod' stops at once without taking kimi-01 out (max_unavailable 1 counts
    kimi-02), 'fleet prod rejoin kimi-02' puts it back healthy, and the restart then runs
    through with no failed request (it failed before: kimi-02 was invisible, the restart
    waited breaker_timeout_s, and nothing but a manual POST /workers brought it back)."""
    with fleet_of(tmp_path, VERSIONS[RouterApi.BY_ID], count=2) as fleet:
        front = FleetFront()
        with (
            _core(tmp_path, fleet, front) as (core, _store),
            LoadGenerator(fleet.router.url) as load,
            RouterClient(fleet.router.url) as router,
        ):
            desk = core.context.fleets
            assert desk is not None
            wait_for_traffic(load)
            router.remove(fleet.url("kimi-02"))
            deadline = time.monotonic() + 30
            while router.worker(fleet.url("kimi-02")) is not None:
                assert time.monotonic() < deadline, "the router kept kimi-02"
                time.sleep(0.1)

            listed = core.handle("fleets", BEN)
            assert isinstance(listed, FleetsReply)
            assert listed.fleets[0].out_of_router == ("kimi-02",)

            stopped = core.handle("restart fleet prod", ANA)
            assert isinstance(stopped, RolloutReply), stopped
            ended = desk.wait(stopped.view.id, timeout_s=60)
            assert ended is not None
            assert ended.state is RolloutState.STOPPED
            assert "kimi-02 (not in the router)" in (ended.reason or "")
            assert "'fleet prod rejoin kimi-02' does" in (ended.reason or "")
            assert router.worker(fleet.url("kimi-01")) is not None

            back = core.handle("fleet prod rejoin kimi-02", ANA)
            assert isinstance(back, RejoinReply), back
            assert [(r.host, r.refused) for r in back.outcomes] == [("kimi-02", None)]
            found = router.worker(fleet.url("kimi-02"))
            assert found is not None
            assert found.healthy

            again = core.handle("restart fleet prod", ANA)
            assert isinstance(again, RolloutReply), again
            done = desk.wait(again.view.id, timeout_s=300)
            assert done is not None, "the restart did not end within 300 s"
            assert done.state is RolloutState.DONE, done
        assert load.failed == []


@pytest.mark.slow
def test_an_agent_stopped_by_sigstop_is_named_and_refuses_the_fleet(tmp_path: Path) -> None:
    """kimi-02's agent process stopped with SIGSTOP (its socket still accepts): 'fleets' marks
    it "no answer in 1 s" and shows kimi-01, and 'restart fleet prod' is a refusal naming it,
    kimi-01 never leaving the router (it failed before: 15 s per read, then an
    AssertionError)."""
    with fleet_of(tmp_path, VERSIONS[RouterApi.BY_ID], count=2) as fleet:
        front = FleetFront()
        with _core(tmp_path, fleet, front) as (core, store):
            process = fleet.replicas[1].agent.process
            assert process is not None
            process.send_signal(signal.SIGSTOP)
            try:
                listed = core.handle("fleets", BEN)
                refused = core.handle("restart fleet prod", ANA)
            finally:
                process.send_signal(signal.SIGCONT)
            assert isinstance(listed, FleetsReply)
            answers = {a.host: a for a in listed.fleets[0].replicas}
            assert answers["kimi-01"].status is not None
            assert answers["kimi-02"].problem == "agent kimi-02: no answer in 1 s"
            assert isinstance(refused, FleetRefusalReply), refused
            assert [host for host, _ in refused.refusal.reasons] == ["kimi-02"]
            assert store.unfinished_rollouts() == []
            with RouterClient(fleet.router.url) as router:
                assert router.worker(fleet.url("kimi-01")) is not None
