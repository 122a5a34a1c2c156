"""Only fixed actions: Slack text never becomes part of the server's command line, and a forged
click starts nothing. The real bot in HTTP mode, the Slack stand-in, a real store, and the agent
as a subprocess on the simulator.

``tests/security/test_source.py`` shows no module runs a shell; ``tests/agent/test_cmdline.py``
checks the rewrite itself on generated command lines. Here the whole path is driven: hostile text
typed into ``/kimi`` gets a clean usage error and nothing anywhere changes, and a resize that does
run changes the HiCache flags of the server's argv and nothing else.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.testing import REPLAY_WINDOW_S, SlackApiStandIn, SlackRequestSigner
from bot.vocab import OperationState
from tests.chat._core_fixtures import migrated_store
from tests.chat.conftest import RunningAgent, agent_on_sim
from tests.security._capture import HOST
from tests.slack._harness import (
    ANA,
    APPLY,
    BEN,
    CHANNEL,
    SIGNING_SECRET,
    click_payload,
    http_bot,
    posted_proposal_id,
    settings_for,
    wait_ephemeral,
    wait_until,
)

pytestmark = pytest.mark.slow  # real subprocesses and a simulated start

SIGNER = SlackRequestSigner(SIGNING_SECRET)
HOSTILE = [
    "resize ratio 4 --model-path /x",
    "resize ratio 4 --model-path=/x",
    "resize ratio 4 --hicache-size=999",
    "resize ratio 4; rm -rf /",
    "resize ratio 4 && reboot",
    "resize size 10 $(reboot)",
    "restart `id`",
    "resize ratio '4'",
    'resize ratio "4"',
    "resize ratio 4\nrestart",
    "resize ratio 4\r\n--tp 1",
    "resize ratio ４",  # fullwidth digit four
    "resize ratio 𝟒",  # mathematical bold digit four
    "resize ratio 4 small‐01",  # U+2010 hyphen for '-'
    "rеsize ratio 4",  # Cyrillic e
    "resize ratio 4\u200b",  # zero-width space
    "status small-01 | sh",
]
# The argv words that are HiCache's: the only ones an operation may change.
HICACHE_FLAGS = ("--enable-hierarchical-cache", "--hicache-ratio", "--hicache-size")


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    """The small simulated host serving size 8 GB/rank, and its agent."""
    with agent_on_sim(tmp_path_factory.mktemp("small-01"), HOST) as running:
        yield running


def _agent_state(agent: RunningAgent) -> dict[str, Any]:
    """What the agent would show changed: its operations, its revisions, its server's argv."""
    with agent.http() as http:
        return {
            "operations": http.get("/v1/operations", params={"limit": 500}).json(),
            "revisions": http.get("/v1/revisions").json(),
        }


def _rows(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return list(db.iterdump())


def _not_replies(slack: SlackApiStandIn) -> list[str]:
    """Calls other than replies to the sender and Bolt's token check: what a change would make."""
    return [c.method for c in slack.calls() if c.method not in ("response_url", "auth.test")]


def test_hostile_text_gets_a_usage_error_and_changes_nothing(
    agent: RunningAgent, tmp_path: Path
) -> None:
    """Server flags, shell syntax, quotes, line breaks and lookalike characters in /kimi from
    an applier each get one line, the reason and the usage, ephemeral; afterwards the store's
    rows, the agent's operations and revisions, and Slack's channel are as they were."""
    before = _agent_state(agent)
    with (
        SlackApiStandIn() as slack,
        migrated_store(tmp_path) as store,
        http_bot(slack, settings_for(agent.url, host="small-01"), store) as bot,
    ):
        rows = _rows(tmp_path / "kimi-ops.db")
        for text in HOSTILE:
            reply = wait_ephemeral(slack, bot.command(text, ANA, SIGNER))
            assert "(usage: /kimi " in reply, (text, reply)
            assert "\n" not in reply, (text, reply)  # the input's line breaks are not echoed
            assert "Traceback" not in reply
        assert _not_replies(slack) == []
        assert slack.history(CHANNEL) == []
        assert _rows(tmp_path / "kimi-ops.db") == rows
    assert _agent_state(agent) == before


@pytest.mark.parametrize("forgery", ["unsigned", "wrong secret", "replayed"])
def test_a_forged_apply_click_starts_nothing(
    agent: RunningAgent, tmp_path: Path, forgery: str
) -> None:
    """An Apply click on a real, fitting proposal, as an applier, but unsigned, signed with
    another secret or signed over 5 minutes ago, gets 401: no operation starts, the proposal
    stays open and the store records nothing."""
    before = _agent_state(agent)
    with (
        SlackApiStandIn() as slack,
        migrated_store(tmp_path) as store,
        http_bot(slack, settings_for(agent.url, host="small-01"), store) as bot,
    ):
        bot.command("resize size 10", BEN, SIGNER)
        pid = posted_proposal_id(slack)
        wait_until(lambda: store.proposal(pid).message_ts is not None, what="the proposal's ts")
        calls = len(slack.calls())
        rows = _rows(tmp_path / "kimi-ops.db")
        payload = click_payload(APPLY, pid, ANA, slack.new_response_url())
        age = REPLAY_WINDOW_S + 5 if forgery == "replayed" else 0
        click = SIGNER.interactive(payload, age_s=age)
        if forgery == "unsigned":
            click = click.unsigned()
        elif forgery == "wrong secret":
            click = click.signed_with("0" * 32)
        answer = bot.post(click)
        assert answer.status_code == 401
        assert len(slack.calls()) == calls
        assert _rows(tmp_path / "kimi-ops.db") == rows
        assert store.refusals() == []
    assert _agent_state(agent) == before


def _without_hicache(argv: list[str]) -> list[str]:
    """``argv`` with HiCache's flags and their values taken out (written either way)."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        name = word.partition("=")[0]
        if name in HICACHE_FLAGS:
            skip = "=" not in word and name != "--enable-hierarchical-cache"
            continue
        out.append(word)
    return out


def test_a_resize_changes_only_the_hicache_flags_of_the_servers_argv(
    agent: RunningAgent,
) -> None:
    """A resize run to ready leaves the new revision's argv equal to the previous one once the
    HiCache flags are taken out of both: --model-path and every other flag are the config's."""
    page = agent.run_to_end({"kind": "resize", "size_gb": 10, "actor": "U0ANA"})
    assert page["state"] == OperationState.READY, page["events"][-3:]
    with agent.http() as http:
        newest, previous = http.get("/v1/revisions").json()["revisions"][:2]
    assert newest["argv"] != previous["argv"]
    assert _without_hicache(newest["argv"]) == _without_hicache(previous["argv"])
    assert "--model-path" in newest["argv"]
    assert newest["argv"][newest["argv"].index("--hicache-size") + 1] == "10"
