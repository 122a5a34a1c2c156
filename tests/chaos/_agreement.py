"""The ending check of every chaos scenario run through the bot: the store, the agent's
``/v1/operations/...`` and the messages the Slack stand-in recorded tell one story, and no
event, revision or audit row is lost or doubled."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from bot.db import make_engine
from bot.store import RevisionOutcome, RevisionRecord
from bot.vocab import FINAL_OPERATION_STATES, EventPhase, OperationState
from tests.chaos._bot_driver import BotDriver
from tests.chaos._bot_process import HOST, store_url
from tests.slack._harness import CHANNEL, text_of, top_level, wait_until

__all__ = ["FINAL_WORDS", "check_agreement"]

#: What the operation's message says once it has ended, by the operation's final state: the
#: headline a person reads in Slack (bot/slack/messages.py words it; written out here).
FINAL_WORDS = {
    OperationState.READY: "*READY*",
    OperationState.ROLLED_BACK: "*ROLLED BACK*",
    OperationState.FAILED: "*FAILED*",
}
#: The revision of an operation the bot started, by how the operation ended, when the agent
#: did not roll back (bot/store/from_agent.py's rule, written out here).
_REVISION_OUTCOMES = {
    OperationState.READY: RevisionOutcome.READY,
    OperationState.FAILED: RevisionOutcome.FAILED,
}
#: When the agent rolled back (a 'rolling_back' event), the operation's revision is rolled back
#: and a revision ``rollback_of`` it records the rollback's own start: ready when the operation
#: ended rolled back, failed when the rollback's start failed too.
_ROLLBACK_OUTCOMES = {
    OperationState.ROLLED_BACK: RevisionOutcome.READY,
    OperationState.FAILED: RevisionOutcome.FAILED,
}
_ROLLBACKS_OF = "SELECT outcome FROM revisions WHERE rollback_of = :revision"
# Rows that must be one of a kind: (what, SQL counting the keys held more than once).
_DOUBLES = (
    ("operation", "SELECT host, agent_operation_id FROM operations "
     "GROUP BY host, agent_operation_id HAVING COUNT(*) > 1"),
    ("event", "SELECT operation_id, seq FROM operation_events "
     "GROUP BY operation_id, seq HAVING COUNT(*) > 1"),
    ("revision", "SELECT host, agent_revision_id FROM revisions WHERE agent_revision_id "
     "IS NOT NULL GROUP BY host, agent_revision_id HAVING COUNT(*) > 1"),
    ("operation per revision", "SELECT revision_id FROM operations WHERE revision_id IS NOT "
     "NULL GROUP BY revision_id HAVING COUNT(*) > 1"),
    ("refusal", "SELECT user_id, action, reason, at FROM refusals "
     "GROUP BY user_id, action, reason, at HAVING COUNT(*) > 1"),
)  # fmt: skip
_SINCE = "SELECT COUNT(*) FROM operations WHERE agent_operation_id > :baseline"


def check_agreement(rig: BotDriver, refusals: int = 0) -> list[dict[str, Any]]:
    """Every operation the scenario started has ended, and the agent, the store and Slack agree
    on it; no row is doubled, and the scenario added exactly ``refusals`` refusals. Returns the
    agent's operations (oldest first) for the scenario's own checks."""
    operations = rig.agent_operations()
    wait_until(
        lambda: all(_settled(rig, op["id"]) for op in rig.agent_operations()),
        timeout=60,
        what="the store to record every operation's end",
    )
    engine = make_engine(store_url(rig.root))
    try:
        with engine.connect() as connection:
            for operation in operations:
                _check_operation(rig, connection, operation["id"])
            for what, query in _DOUBLES:
                doubled = connection.execute(text(query)).all()
                assert not doubled, f"{what} rows held twice: {doubled}"
            count = connection.execute(text(_SINCE), {"baseline": rig.baseline}).scalar_one()
    finally:
        engine.dispose()
    assert count == len(operations), f"the store has {count} operations, the agent ran " \
        f"{len(operations)} for the bot"  # fmt: skip
    assert len(rig.store.refusals(limit=1000)) == rig.refusals_before + refusals
    _check_messages(rig)
    return operations


def _settled(rig: BotDriver, agent_id: int) -> bool:
    record = rig.store.operation_by_agent_id(HOST, agent_id)
    return record is not None and record.finished_at is not None


def _check_operation(rig: BotDriver, connection: Connection, agent_id: int) -> None:
    with rig.agent_http() as http:
        page = http.get(f"/v1/operations/{agent_id}", params={"after": 0}).json()
    state = OperationState(page["state"])
    assert state in FINAL_OPERATION_STATES, f"operation {agent_id} is still {state}"
    events = page["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "the agent lost events"
    record = rig.store.operation_by_agent_id(HOST, agent_id)
    assert record is not None, f"the store lost operation {agent_id}"
    assert record.state is state, (record.state, state)
    assert record.last_event_seq == page["last_seq"] == len(events)
    stored = rig.store.operation_events(record.id)
    assert [(e.seq, e.phase.value) for e in stored] == [(e["seq"], e["phase"]) for e in events]
    if record.revision_id is not None:
        _check_revisions(connection, rig.store.revision(record.revision_id), state, events)
    assert record.channel == CHANNEL, record
    assert record.message_ts is not None, f"operation {agent_id} has no message"
    message = rig.slack.message(CHANNEL, record.message_ts)
    assert message is not None, f"operation {agent_id}'s message was never posted"
    assert FINAL_WORDS[state] in text_of(message), (state, text_of(message)[:600])


def _check_revisions(
    connection: Connection,
    revision: RevisionRecord,
    state: OperationState,
    events: list[dict[str, Any]],
) -> None:
    """The operation's revision, and its rollback's if the agent rolled back, ended as the
    operation did (:data:`_REVISION_OUTCOMES`, :data:`_ROLLBACK_OUTCOMES`)."""
    rollbacks = connection.execute(text(_ROLLBACKS_OF), {"revision": revision.id}).scalars().all()
    if not any(event["phase"] == EventPhase.ROLLING_BACK for event in events):
        assert revision.outcome is _REVISION_OUTCOMES[state], (revision.outcome, state)
        assert rollbacks == [], f"a rollback recorded for revision {revision.id}: {rollbacks}"
        return
    assert revision.outcome is RevisionOutcome.ROLLED_BACK, (revision.outcome, state)
    assert rollbacks == [_ROLLBACK_OUTCOMES[state].value], (rollbacks, state)


def _check_messages(rig: BotDriver) -> None:
    """Each top-level message is a proposal's (an operation shows in its proposal's message),
    and no thread holds the same notice of a state twice (an agent silent twice in one minute
    is told twice in the same words, rightly)."""
    for message in top_level(rig.slack):
        assert rig.store.proposal_by_message(CHANNEL, message.ts) is not None, message.text
        replies = rig.slack.replies(CHANNEL, message.ts)
        notices = [reply.text for reply in replies if "agent unreachable" not in reply.text]
        assert len(notices) == len(set(notices)), f"a notice posted twice: {notices}"
