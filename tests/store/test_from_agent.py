"""The mapping from the agent's answers to the store's audit, fed with real agent answers.

Once per module, ``kimi-ops agent`` runs as a subprocess on the simulator (small two-GPU
profile, SGLang 0.5.23 behaviour, process backend, no headroom) and is driven over real HTTP:
resize to ``size 24``, which the planner lets through but SGLang 0.5.23 refuses at start (the
host-memory ValueError) with no earlier config to return to (failed); resize to ``size 12``
(ready); ask for ``size 300`` (refused); resize to ``size 24`` again, which now rolls back to
``size 12``. The answers it gave are then recorded in a migrated store.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from bot.agent.config import load_agent_settings
from bot.agent.service import make_control
from bot.errors import AgentError
from bot.hicache import HiCacheSetting
from bot.planner import StartSample, Verdict
from bot.store import (
    RevisionKind,
    RevisionOutcome,
    RolloutReplicaRecord,
    Store,
    record_agent_operation,
    record_agent_plan,
    record_agent_proposal,
)
from bot.vocab import (
    FINAL_OPERATION_STATES,
    EventPhase,
    FailureKind,
    OperationKind,
    OperationState,
    ReplicaPhase,
    RolloutState,
)
from tests.agent._api_helpers import SMALL, TOKEN, TOKEN_ENV, auth, run_agent, write_config
from tests.store.conftest import table_counts

pytestmark = pytest.mark.slow  # a real agent on the simulator, once per module

HOST = "kimi-test"


def _follow(http: httpx.Client, op_id: int) -> dict[str, Any]:
    """Long-poll until the operation ends; then its page with every event (after=0)."""
    after = 0
    for _ in range(120):
        page = http.get(f"/v1/operations/{op_id}", params={"wait": 10, "after": after}).json()
        after = page["last_seq"]
        if page["state"] in FINAL_OPERATION_STATES:
            whole: dict[str, Any] = http.get(f"/v1/operations/{op_id}").json()
            return whole
    pytest.fail(f"operation {op_id} did not end")


def _agent_env() -> dict[str, str]:
    # Module fixtures run before the suite's per-test environment cleaning: drop KIMI_* here.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "SLACK_"))}
    return {**clean, TOKEN_ENV: TOKEN, "KIMI_SIM_VERSION": "0.5.23"}


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the real agent answered: plans, the two operations' pages, and its revisions."""
    tmp = tmp_path_factory.mktemp("agent")
    config = write_config(tmp, profile=SMALL, time_scale=0.01, headroom_gb=0, host_name=HOST)
    settings = load_agent_settings(config, {TOKEN_ENV: TOKEN})
    out: dict[str, Any] = {}
    try:
        with (
            run_agent(tmp, ["--config", str(config)], _agent_env(), settings.state_dir) as agent,
            httpx.Client(base_url=agent.url, headers=auth(), timeout=30) as http,
        ):
            # No config has been ready yet, so this failure has nothing to roll back to.
            first = {"kind": "resize", "size_gb": 24, "actor": "U0BEN"}
            started = http.post("/v1/operations", json=first)
            assert started.status_code == 202, started.text
            out["failed"] = _follow(http, started.json()["id"])
            out["plan_12"] = http.post("/v1/plans", json={"size_gb": 12}).json()
            body = {"kind": "resize", "size_gb": 12, "actor": "U0ANA"}
            body["fingerprint"] = out["plan_12"]["fingerprint"]
            started = http.post("/v1/operations", json=body)
            assert started.status_code == 202, started.text
            out["ready"] = _follow(http, started.json()["id"])
            out["revisions_after_ready"] = http.get("/v1/revisions").json()
            out["plan_300"] = http.post("/v1/plans", json={"size_gb": 300}).json()
            failing = {"kind": "resize", "size_gb": 24, "actor": "U0BEN"}
            started = http.post("/v1/operations", json=failing)
            assert started.status_code == 202, started.text
            out["rolled_back"] = _follow(http, started.json()["id"])
            out["revisions"] = http.get("/v1/revisions").json()
    finally:
        make_control(settings).stop(grace_s=5)
    assert out["failed"]["state"] == "failed", out["failed"]["events"][-1]
    assert out["ready"]["state"] == "ready", out["ready"]["events"][-1]
    assert out["rolled_back"]["state"] == "rolled_back", out["rolled_back"]["events"][-1]
    return out


def _agent_revision(answers: dict[str, Any], rev_id: int) -> dict[str, Any]:
    found: dict[str, Any] = next(r for r in answers["revisions"]["revisions"] if r["id"] == rev_id)
    return found


def test_a_ready_resize_keeps_the_logged_figures_ids_command_line_and_events(
    store: Store, answers: dict[str, Any]
) -> None:
    """A proposal applied by the agent ends ready with what the start logged, the agent's ids,
    the argv the agent wrote and every event once, in order."""
    proposal = record_agent_plan(store, HOST, answers["plan_12"], proposed_by="U0BEN")
    assert proposal.outcome is RevisionOutcome.PROPOSED
    page = answers["ready"]
    op = page["operation"]
    recorded = record_agent_operation(
        store, HOST, page, answers["revisions_after_ready"], revision_id=proposal.id
    )
    assert (recorded.agent_operation_id, recorded.kind) == (op["id"], OperationKind.RESIZE)
    assert recorded.state is OperationState.READY
    assert recorded.finished_at == datetime.fromisoformat(op["finished_at"])
    assert recorded.revision_id == proposal.id

    revision = store.revision(proposal.id)
    logged = page["events"][-1]["data"]
    assert revision.outcome is RevisionOutcome.READY
    assert (revision.proposed_by, revision.applied_by) == ("U0BEN", "U0ANA")
    assert revision.startup_seconds == logged["startup_s"]
    assert revision.device_tokens == logged["device_tokens"]
    assert revision.host_gb_per_rank == logged["host_gb_per_rank"] == 12.0
    assert revision.host_tokens_per_rank == logged["host_tokens_per_rank"]
    assert revision.agent_revision_id == op["revision"]
    assert revision.command_line == tuple(_agent_revision(answers, op["revision"])["argv"])
    assert revision.command_line[-2:] == ("--hicache-size", "12")
    assert revision.settings == HiCacheSetting(enabled=True, size_gb=12)

    events = store.operation_events(recorded.id)
    assert [e.seq for e in events] == [e["seq"] for e in page["events"]]
    assert [e.phase.value for e in events] == [e["phase"] for e in page["events"]]
    assert events[-1].phase is EventPhase.READY

    before = table_counts(store)
    again = record_agent_operation(
        store, HOST, page, answers["revisions_after_ready"], revision_id=proposal.id
    )
    assert (again, table_counts(store), store.revision(proposal.id)) == (recorded, before, revision)


def test_a_rolled_back_start_is_a_rollback_of_the_failed_revision(
    store: Store, answers: dict[str, Any]
) -> None:
    """rolled_back records the failed revision with its kind and lines (then rolled_back, not
    failed) and a rollback revision returning to the ready one, with the agent's ids."""
    ready_op = record_agent_operation(store, HOST, answers["ready"], answers["revisions"])
    page = answers["rolled_back"]
    op = page["operation"]
    recorded = record_agent_operation(store, HOST, page, answers["revisions"])
    assert recorded.state is OperationState.ROLLED_BACK

    failed = store.revision(recorded.revision_id or 0)
    assert failed.outcome is RevisionOutcome.ROLLED_BACK
    assert failed.failure_kind is FailureKind.HOST_MEMORY
    assert failed.failure_lines == tuple(op["failure"]["lines"])
    assert any("Not enough host memory available" in line for line in failed.failure_lines)
    assert failed.command_line[-2:] == ("--hicache-size", "24")
    assert failed.applied_by == "U0BEN"

    step = next(e for e in page["events"] if e["phase"] == "rolling_back")
    rollback = store.revision_by_agent_id(HOST, step["data"]["revision"])
    assert rollback is not None
    assert (rollback.rollback_of, rollback.returned_to) == (failed.id, ready_op.revision_id)
    ready_revision = answers["ready"]["operation"]["revision"]
    assert rollback.agent_returned_to == step["data"]["target_revision"] == ready_revision
    assert rollback.outcome is RevisionOutcome.READY
    assert rollback.applied_by is None
    assert rollback.startup_seconds == page["events"][-1]["data"]["startup_s"]
    assert rollback.host_gb_per_rank == 12.0
    assert rollback.command_line == tuple(_agent_revision(answers, ready_revision)["argv"])

    before = table_counts(store)
    record_agent_operation(store, HOST, page, answers["revisions"])
    assert table_counts(store) == before


def test_a_failure_with_nothing_to_roll_back_to_keeps_its_kind_lines_and_figures(
    store: Store, answers: dict[str, Any]
) -> None:
    """A start that failed with no earlier config is recorded failed, with the agent's failure
    kind, SGLang's decisive lines and the device pool it logged before dying."""
    page = answers["failed"]
    failure = page["operation"]["failure"]
    recorded = record_agent_operation(store, HOST, page, answers["revisions"])
    assert recorded.state is OperationState.FAILED
    revision = store.revision(recorded.revision_id or 0)
    assert revision.outcome is RevisionOutcome.FAILED
    assert revision.failure_kind is FailureKind.HOST_MEMORY
    assert revision.failure_lines == tuple(failure["lines"])
    assert any("Not enough host memory available" in line for line in revision.failure_lines)
    assert revision.device_tokens == failure["device_tokens"]
    assert revision.startup_seconds is None
    assert revision.command_line[-2:] == ("--hicache-size", "24")
    assert store.revision_by_agent_id(HOST, page["operation"]["revision"]) == revision


def test_a_failed_rollback_a_person_asked_for_is_a_plain_failure(
    store: Store, answers: dict[str, Any]
) -> None:
    """A rollback operation carries ``rollback_of``; failing with no automatic rollback (no
    'rolling_back' step) it is recorded failed with its kind, not refused as unreadable."""
    page = answers["failed"]
    asked = {**page, "operation": {**page["operation"], "kind": "rollback", "rollback_of": 1}}
    recorded = record_agent_operation(store, HOST, asked, answers["revisions"])
    assert (recorded.kind, recorded.state) == (OperationKind.ROLLBACK, OperationState.FAILED)
    revision = store.revision(recorded.revision_id or 0)
    assert (revision.outcome, revision.failure_kind) == (
        RevisionOutcome.FAILED,
        FailureKind.HOST_MEMORY,
    )


def test_the_rollback_target_is_recorded_when_the_store_never_saw_it(
    store: Store, answers: dict[str, Any]
) -> None:
    """A rollback to a config started before the store was used records that config as it
    ran (ready, its figures, the agent's id and argv) and links to it."""
    page = answers["rolled_back"]
    recorded = record_agent_operation(store, HOST, page, answers["revisions"])
    step = next(e for e in page["events"] if e["phase"] == "rolling_back")
    target = store.revision_by_agent_id(HOST, step["data"]["target_revision"])
    assert target is not None
    agent_target = _agent_revision(answers, step["data"]["target_revision"])
    assert target.outcome is RevisionOutcome.READY
    assert target.command_line == tuple(agent_target["argv"])
    assert target.startup_seconds == agent_target["startup_s"]
    assert target.plan.verdict is Verdict.FITS
    assert target.plan.per_rank_gb is None
    rollback = store.revision_by_agent_id(HOST, step["data"]["revision"])
    assert rollback is not None
    assert (rollback.rollback_of, rollback.returned_to) == (recorded.revision_id, target.id)


def test_both_estimates_of_startup_time_learn_from_the_same_starts(
    store: Store, answers: dict[str, Any]
) -> None:
    """The store's startup samples are the agent's (ready starts: seconds and logged GB/rank),
    so the planner's estimate is the same from either."""
    record_agent_operation(store, HOST, answers["ready"], answers["revisions"])
    record_agent_operation(store, HOST, answers["rolled_back"], answers["revisions"])
    # AgentState.startup_samples(), written out from the agent's revisions (newest first).
    agent_samples = [
        StartSample(seconds=r["startup_s"], host_gb_per_rank=r["host_gb_per_rank"] or 0.0)
        for r in answers["revisions"]["revisions"]
        if r["became_ready"] and r["startup_s"]
    ]
    assert len(agent_samples) == 2
    assert store.startup_durations(HOST) == agent_samples


def test_a_refused_plan_keeps_its_real_figures_and_verdict(
    store: Store, answers: dict[str, Any]
) -> None:
    """size 300 on two ranks is recorded refused with 2 x 300 GB and the planner's reason."""
    plan = answers["plan_300"]["plan"]
    revision = record_agent_plan(store, HOST, answers["plan_300"], proposed_by="U0BEN")
    assert revision.outcome is RevisionOutcome.REFUSED
    assert revision.plan.verdict is Verdict.REFUSED
    assert (revision.plan.per_rank_gb, revision.plan.total_gb) == (300.0, 2 * 300.0)
    assert revision.plan.per_rank_tokens == plan["per_rank_tokens"] > 0
    assert revision.plan.reason == plan["reason"]
    assert "refused" in revision.plan.reason
    assert revision.settings == HiCacheSetting(enabled=True, size_gb=300)
    assert revision.finished_at is not None


def test_a_figure_the_planner_could_not_work_out_stays_unknown(
    store: Store, answers: dict[str, Any]
) -> None:
    """Before any start logged the device pool, size 24's tokens per rank are unknown to the
    planner: None in the store, not 0, beside the GB it did work out."""
    plan = answers["failed"]["operation"]["plan"]
    assert plan["per_rank_tokens"] is None
    revision = record_agent_plan(store, HOST, {"plan": plan}, proposed_by="U0BEN")
    assert revision.plan.per_rank_tokens is None
    assert (revision.plan.per_rank_gb, revision.plan.total_gb) == (24.0, 2 * 24.0)


def test_pages_are_appended_by_seq_and_a_running_page_records_no_outcome(
    store: Store, answers: dict[str, Any]
) -> None:
    """Two overlapping pages of a running operation store each event once and leave the
    revision applied, as does a page whose state is final before its final event; the page
    bringing that event records ready."""
    final = answers["ready"]
    events = final["events"]
    running = {**final, "state": "running"}
    running["operation"] = {**final["operation"], "state": "running", "finished_at": None}
    revisions = answers["revisions_after_ready"]
    first = record_agent_operation(store, HOST, {**running, "events": events[:10]}, revisions)
    second = record_agent_operation(store, HOST, {**running, "events": events[5:20]}, revisions)
    assert first.id == second.id
    assert second.last_event_seq == 20
    assert second.state is OperationState.RUNNING
    assert [e.seq for e in store.operation_events(first.id)] == list(range(1, 21))
    assert store.revision(first.revision_id or 0).outcome is RevisionOutcome.APPLIED
    # The state already final, its final event not yet on the page: nothing ends yet.
    early = record_agent_operation(store, HOST, {**final, "events": events[15:-1]}, revisions)
    assert early.finished_at is None
    assert store.revision(first.revision_id or 0).outcome is RevisionOutcome.APPLIED
    done = record_agent_operation(store, HOST, {**final, "events": events[15:]}, revisions)
    assert done.finished_at is not None
    assert [e.seq for e in store.operation_events(done.id)] == [e["seq"] for e in events]
    assert store.revision(done.revision_id or 0).outcome is RevisionOutcome.READY


BAD_ANSWERS = [
    ("unknown state", lambda a: {**a["ready"], "operation": {**a["ready"]["operation"],
     "state": "exploded"}}, "state 'exploded' is not one kimi-ops knows"),
    ("unknown phase", lambda a: {**a["ready"], "events": [{**a["ready"]["events"][0],
     "phase": "loading_weights"}]}, "phase 'loading_weights' is not one kimi-ops knows"),
    ("naive time", lambda a: {**a["ready"], "operation": {**a["ready"]["operation"],
     "created_at": "2026-11-30T07:41:27"}}, "has no time zone"),
    ("id as text", lambda a: {**a["ready"], "operation": {**a["ready"]["operation"],
     "id": "7"}}, "'id' is '7'"),
    ("no events", lambda a: {k: v for k, v in a["ready"].items() if k != "events"},
     "has no 'events'"),
    ("unknown failure kind", lambda a: {**a["rolled_back"], "operation": {
     **a["rolled_back"]["operation"], "failure": {**a["rolled_back"]["operation"]["failure"],
     "kind": "host_ram"}}}, "kind 'host_ram' is not one kimi-ops knows"),
    ("rollback without its step", lambda a: {**a["rolled_back"], "events": [
     e for e in a["rolled_back"]["events"] if e["phase"] != "rolling_back"]},
     "no 'rolling_back' step"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("make", "message"), [case[1:] for case in BAD_ANSWERS], ids=[c[0] for c in BAD_ANSWERS]
)
def test_an_answer_that_cannot_be_read_is_refused_and_changes_nothing(
    store: Store, answers: dict[str, Any], make: Any, message: str
) -> None:
    """Each malformed answer raises AgentError naming the field, and no table changes."""
    before = table_counts(store)
    with pytest.raises(AgentError, match=message):
        record_agent_operation(store, HOST, make(answers), answers["revisions"])
    assert table_counts(store) == before


def test_an_operation_whose_revision_the_answer_lacks_is_refused(
    store: Store, answers: dict[str, Any]
) -> None:
    """The revisions answer must hold the operation's revision; otherwise nothing is written."""
    before = table_counts(store)
    with pytest.raises(AgentError, match="do not include revision"):
        record_agent_operation(store, HOST, answers["ready"], {"revisions": []})
    assert table_counts(store) == before


def test_a_fleet_replicas_change_reported_by_its_agent_is_one_row_with_its_proposer(
    store: Store, answers: dict[str, Any]
) -> None:
    """A replica's change proposed by U0BEN, applied by U0ANA through a rollout whose line holds
    the agent's operation, recorded ready by the rollout, then the agent's report of it read
    (as history imports it): one row, U0BEN's and U0ANA's, with the figures the start logged.
    Failed before the fix: a second row 'U0ANA U0ANA' took the logged figures, the proposal's
    row kept '?'."""
    page = answers["ready"]
    op = page["operation"]
    proposal = record_agent_proposal(
        store, HOST, answers["plan_12"], proposed_by="U0BEN", channel="C0OPS",
        expires_at=datetime.fromisoformat(op["created_at"]) + timedelta(hours=1),
        at=datetime.fromisoformat(op["created_at"]) - timedelta(minutes=1),
    )  # fmt: skip
    store.record_apply(proposal.revision_id, "U0ANA")
    line = RolloutReplicaRecord(
        host=HOST, url="http://10.0.0.11:30000", phase=ReplicaPhase.DONE,
        proposal_id=proposal.id, operation_id=op["id"], revision=op["revision"],
    )  # fmt: skip
    store.record_rollout(
        "prod", OperationKind.RESIZE, "hicache size 12", [line], proposed_by="U0BEN",
        state=RolloutState.DONE,
    )  # fmt: skip
    store.record_outcome(proposal.revision_id, RevisionOutcome.READY)
    record_agent_operation(store, HOST, page, answers["revisions_after_ready"])
    rows = [r for r in store.history(HOST, 50) if r.agent_revision_id == op["revision"]]
    assert [r.id for r in rows] == [proposal.revision_id]
    (row,) = rows
    assert (row.proposed_by, row.applied_by) == ("U0BEN", "U0ANA")
    assert row.host_gb_per_rank == page["events"][-1]["data"]["host_gb_per_rank"] == 12.0
    assert row.outcome is RevisionOutcome.READY


def test_a_restart_is_recorded_as_a_restart_not_a_config_change(
    store: Store, answers: dict[str, Any]
) -> None:
    """The agent's restart operation makes a revision of kind 'restart'; a resize a change.
    Failed before the fix: every revision read as a config change."""
    page = answers["ready"]
    as_restart = {**page, "operation": {**page["operation"], "kind": "restart"}}
    restart = record_agent_operation(store, HOST, as_restart, answers["revisions_after_ready"])
    assert store.revision(restart.revision_id or 0).kind is RevisionKind.RESTART
