"""The whole of kimi-ops under faults: the real bot and agent as processes, and the checker every
chaos scenario ends with.

- The agent: ``kimi-ops agent`` on the simulator (process backend), listening on a fixed port
  so that, killed and started again, it is found at the same place (``tests.chat.conftest``).
- Between them an :class:`~tests.chaos._bot_link.AgentLink` the test can cut or make hold.
- The bot: ``kimi-ops bot --http --port N --config F`` as a process, its store a SQLite file
  migrated by Alembic, ``KIMI_SLACK_API_URL`` the Web API stand-in served in the test process;
  requests to it are signed with the signing secret as Slack signs them.
- :func:`check_agreement`: the store, the agent's ``/v1/operations/...`` and the messages the
  stand-in recorded tell one story, and no event, revision or audit row is lost or doubled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text

from bot.db import make_engine
from bot.slack.spec import APPLY_ACTION
from bot.store import RevisionOutcome, Store
from bot.testing import SlackApiStandIn, SlackRequestSigner, StoredMessage
from bot.vocab import FINAL_OPERATION_STATES, OperationState
from tests.chaos._bot_link import AgentLink
from tests.chat._core_fixtures import migrated_store
from tests.chat.conftest import TOKEN, TOKEN_ENV, RunningAgent, SimHost, agent_on_sim, free_port
from tests.slack._harness import (
    ANA,
    BEN,
    CHANNEL,
    SIGNING_SECRET,
    click_payload,
    posted_proposal_id,
    proposal_message,
    text_of,
    top_level,
    wait_until,
)

__all__ = [
    "ANA",
    "BEN",
    "CHANNEL",
    "BotProcess",
    "ChaosRig",
    "chaos_rig",
    "check_agreement",
    "proposal_id",
]

HOST = "kimi-01"
#: The simulator's KIMI_SIM_TIME_SCALE for the chaos suite.
PACE = 0.004
_READY_LINE = "kimi-ops bot: listening on "


def proposal_id(message: StoredMessage) -> int:
    """The id in a proposal message's text (``Proposal #12 for kimi-01: ...``)."""
    return int(message.text.split("#", 1)[1].split(" ", 1)[0])


def _bot_config(root: Path, agent_url: str) -> Path:
    path = root / "bot.toml"
    path.write_text(
        f'[store]\nurl = "sqlite:///{root / "kimi-ops.db"}"\n\n'
        "[bot]\nupdate_interval_s = 1\n\n"
        f'[policy]\nappliers = ["{ANA}", "{BEN}"]\n\n'
        f'[hosts.{HOST}]\nurl = "{agent_url}"\ntoken_env = "{TOKEN_ENV}"\n',
        encoding="utf-8",
    )
    return path


@dataclass
class BotProcess:
    """``kimi-ops bot --http`` on a fixed port, started (again) and killed by the test."""

    config: Path
    port: int
    slack: SlackApiStandIn
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    def start(self, timeout_s: float = 60) -> None:
        """Start the bot and wait (bounded) for its ready line in the log."""
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": self.slack.bot_token,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "KIMI_SLACK_API_URL": self.slack.url,
            TOKEN_ENV: TOKEN,
        }
        argv = ["--http", "--port", str(self.port), "--listen", "127.0.0.1"]
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bot", "bot", *argv, "--config", str(self.config)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )
        deadline = time.monotonic() + timeout_s
        while _READY_LINE not in self.log.read_bytes()[offset:].decode(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"kimi-ops bot did not start:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed or closed."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM, and the exit code (bounded)."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@dataclass
class ChaosRig:
    """One scenario's running parts and how the test talks to them."""

    root: Path
    agent: RunningAgent
    link: AgentLink
    slack: SlackApiStandIn
    store: Store
    bot: BotProcess
    baseline: int  # agent operations run before the scenario (the setup's)
    signer: SlackRequestSigner = field(default_factory=lambda: SlackRequestSigner(SIGNING_SECRET))

    def post(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        response = httpx.post(self.bot.url, content=body, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return response

    def command(self, text: str, user: str) -> str:
        """``/kimi text`` from ``user``, signed; its response_url."""
        url = self.slack.new_response_url()
        request = self.signer.slash_command(
            text, response_url=url, user_id=user, channel_id=CHANNEL
        )
        self.post(request.body, dict(request.headers))
        return url

    def propose(self, user: str = BEN, text: str = "resize ratio 4") -> StoredMessage:
        """A proposal made in the channel, as its message reads once posted."""
        before = len(top_level(self.slack))
        self.command(text, user)
        return proposal_message(self.slack, posted_proposal_id(self.slack, before))

    def click_apply(self, proposal: int, user: str) -> str:
        """``user`` clicks Apply on ``proposal``; the click's response_url."""
        url = self.slack.new_response_url()
        request = self.signer.interactive(click_payload(APPLY_ACTION, proposal, user, url))
        self.post(request.body, dict(request.headers))
        return url

    def apply_unheard(self, proposal: int, user: str) -> None:
        """``user`` applies ``proposal`` with the agent's answer held by the link: returns once
        the agent has accepted the operation, which the bot has not heard of yet."""
        self.link.hold_answers_to(b"POST /v1/operations ")
        self.click_apply(proposal, user)
        assert self.link.held.wait(30), "the Apply never reached the agent"
        wait_until(lambda: len(self.agent_operations()) == 1, what="the operation at the agent")

    def agent_http(self) -> httpx.Client:
        """Straight to the agent, not through the link."""
        return self.agent.http()

    def agent_operations(self) -> list[dict[str, Any]]:
        """The operations the scenario started at the agent, oldest first."""
        with self.agent_http() as http:
            found = http.get("/v1/operations", params={"limit": 500}).json()["operations"]
        return sorted((op for op in found if op["id"] > self.baseline), key=lambda op: op["id"])

    def wait_message(self, ts: str, word: str, timeout_s: float = 90) -> StoredMessage:
        """The operation's message once its text has ``word`` (bounded)."""
        wait_until(
            lambda: word in text_of(self.slack.message(CHANNEL, ts) or {}),
            timeout=timeout_s,
            what=f"the message {ts} to say {word}",
        )
        message = self.slack.message(CHANNEL, ts)
        assert message is not None
        return message


@contextmanager
def chaos_rig(root: Path, host: SimHost | None = None) -> Iterator[ChaosRig]:
    """Agent (serving size 48), link, stand-in, store and a started bot; all stopped after."""
    # At this pace a start of the field notes' host takes about 3 s: long enough to fault in
    # its middle, short enough for make test. The server serves size 48 (one setup start).
    sim = host or SimHost(time_scale=PACE, serving_ratio=None)
    if sim.listen_port == 0:
        sim = SimHost(**{**sim.__dict__, "listen_port": free_port()})
    with ExitStack() as stack:
        agent = stack.enter_context(agent_on_sim(root / HOST, sim))
        link = AgentLink(sim.listen_port)
        stack.callback(link.close)
        slack = stack.enter_context(SlackApiStandIn())
        store = migrated_store(root)
        stack.callback(store.close)
        bot = BotProcess(_bot_config(root, link.url), free_port(), slack, root / "bot.log")
        stack.callback(bot.kill)
        with agent.http() as http:
            ops = http.get("/v1/operations", params={"limit": 500}).json()["operations"]
        bot.start()
        yield ChaosRig(root, agent, link, slack, store, bot, max(op["id"] for op in ops))


# -- the checker ---------------------------------------------------------------------------------

#: What the operation's message says once it has ended, by the operation's final state: the
#: headline a person reads in Slack (bot/slack/messages.py words it; written out here).
FINAL_WORDS = {
    OperationState.READY: "*READY*",
    OperationState.ROLLED_BACK: "*ROLLED BACK*",
    OperationState.FAILED: "*FAILED*",
}
#: The revision of an operation the bot started, by how the operation ended.
_REVISION_OUTCOMES = {
    OperationState.READY: RevisionOutcome.READY,
    OperationState.ROLLED_BACK: RevisionOutcome.FAILED,
    OperationState.FAILED: RevisionOutcome.FAILED,
}
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


def check_agreement(rig: ChaosRig, refusals: int = 0) -> list[dict[str, Any]]:
    """Every operation the scenario started has ended, and the agent, the store and Slack agree
    on it; no row is doubled, and the store holds exactly ``refusals`` refusals. Returns the
    agent's operations (oldest first) for the scenario's own checks."""
    operations = rig.agent_operations()
    wait_until(
        lambda: all(_settled(rig, op["id"]) for op in rig.agent_operations()),
        timeout=60,
        what="the store to record every operation's end",
    )
    for operation in operations:
        _check_operation(rig, operation["id"])
    engine = make_engine(_db_url(rig.root))
    try:
        with engine.connect() as connection:
            for what, query in _DOUBLES:
                doubled = connection.execute(text(query)).all()
                assert not doubled, f"{what} rows held twice: {doubled}"
            count = connection.execute(text("SELECT COUNT(*) FROM operations")).scalar_one()
    finally:
        engine.dispose()
    assert count == len(operations), f"the store has {count} operations, the agent ran " \
        f"{len(operations)} for the bot"  # fmt: skip
    assert len(rig.store.refusals(limit=1000)) == refusals
    _check_messages(rig)
    return operations


def _db_url(root: Path) -> str:
    return f"sqlite:///{root / 'kimi-ops.db'}"


def _settled(rig: ChaosRig, agent_id: int) -> bool:
    record = rig.store.operation_by_agent_id(HOST, agent_id)
    return record is not None and record.finished_at is not None


def _check_operation(rig: ChaosRig, agent_id: int) -> None:
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
        revision = rig.store.revision(record.revision_id)
        assert revision.outcome is _REVISION_OUTCOMES[state], (revision.outcome, state)
    assert record.channel == CHANNEL, record
    assert record.message_ts is not None, f"operation {agent_id} has no message"
    message = rig.slack.message(CHANNEL, record.message_ts)
    assert message is not None, f"operation {agent_id}'s message was never posted"
    assert FINAL_WORDS[state] in text_of(message), (state, text_of(message)[:600])


def _check_messages(rig: ChaosRig) -> None:
    """Each top-level message is a proposal's (an operation shows in its proposal's message),
    and no thread holds the same notice of a state twice (an agent silent twice in one minute
    is told twice in the same words, rightly)."""
    for message in top_level(rig.slack):
        assert rig.store.proposal_by_message(CHANNEL, message.ts) is not None, message.text
        replies = rig.slack.replies(CHANNEL, message.ts)
        notices = [reply.text for reply in replies if "agent unreachable" not in reply.text]
        assert len(notices) == len(set(notices)), f"a notice posted twice: {notices}"
