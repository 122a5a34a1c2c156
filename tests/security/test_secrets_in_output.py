"""A whole scenario through the real parts, then every output searched for every secret.

The bot runs in HTTP mode against the Slack stand-in, with a real store; the agent runs as a
subprocess (``python -m bot agent``) on the simulator, with a read-write and a read-only token.
The scenario: a status of two hosts, one nobody serves, a usage error, a forged request, a
refused Apply, a resize applied to ready, a resize whose start fails and is rolled back, and the
agent asked with a wrong token and with the read-only one. Then the log records of every logger
at DEBUG, the agent's and simulator's stdout, stderr and log, both state databases, every body
Slack received, the reprs of the settings objects and the texts of the errors are searched for
the bot token, the app token, the signing secret and both agent tokens: none may appear.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bot.agent.config import load_agent_settings
from bot.agent.tokens import parse_tokens
from bot.errors import ConfigError
from bot.settings import load_config
from bot.slack import SlackSettings, read_tokens
from bot.store import Store
from bot.testing import SlackApiStandIn, SlackRequestSigner
from bot.vocab import OperationState
from tests.chat._core_fixtures import chat_settings, migrated_store
from tests.chat.conftest import TOKEN, TOKEN_ENV, RunningAgent, free_port
from tests.chat.conftest import write_agent_config as agent_config
from tests.security._capture import HOST, Exposure, all_logs
from tests.slack._harness import (
    ANA,
    APPLY,
    BEN,
    CHANNEL,
    EVE,
    SIGNING_SECRET,
    RunningBot,
    http_bot,
    posted_proposal_id,
    proposal_message,
    text_of,
    top_level,
    wait_ephemeral,
    wait_until,
)

pytestmark = pytest.mark.slow  # real subprocesses and a simulated start

BOT_TOKEN = "xoxb-4471-s3cr3t-b0t-t0ken-9c2e"
APP_TOKEN = "xapp-1-A0KIMI-s3cr3t-app-t0ken-77d1"
VIEWER = "v13wer-s3cr3t-t0ken-5b8f"
SECRETS = (BOT_TOKEN, APP_TOKEN, SIGNING_SECRET, TOKEN, VIEWER)


@dataclass
class CapturedAgent(RunningAgent):
    """The agent subprocess with two tokens (its stdout and stderr go to files in ``root``)."""

    def env(self) -> dict[str, str]:
        return {**os.environ, TOKEN_ENV: f"slack-bot:{TOKEN},grafana:{VIEWER}:ro"}


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[CapturedAgent]:
    """The small simulated host serving size 8 through its captured agent."""
    root = tmp_path / "small-01"
    running = CapturedAgent(root=root, config=agent_config(root, HOST))
    try:
        running.start()
        page = running.run_to_end({"kind": "restart", "actor": "setup"})
        assert page["state"] == OperationState.READY, page["events"][-3:]
        yield running
    finally:
        running.close()


def _apply(bot: RunningBot, slack: SlackApiStandIn, text: str, signer: SlackRequestSigner) -> str:
    """Propose ``text`` as ben, apply it as ana; the proposal message's ts."""
    before = len(top_level(slack))
    bot.command(text, BEN, signer)
    pid = posted_proposal_id(slack, before)
    bot.click(APPLY, pid, ANA, signer)
    return proposal_message(slack, pid).ts


def _ended(slack: SlackApiStandIn, ts: str, word: str) -> None:
    wait_until(
        lambda: word in text_of(slack.message(CHANNEL, ts) or {}),
        timeout=120,
        what=f"the operation's message to say {word}",
    )


def _error_texts() -> list[str]:
    """The errors a malformed secret gives at start: each names the variable, never the value."""
    texts = []
    bad_app = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN[1:]}
    for attempt in (
        lambda: parse_tokens(f"slack-bot:{TOKEN}:rw", TOKEN_ENV),
        lambda: parse_tokens(f"{TOKEN} {VIEWER}", TOKEN_ENV),
        lambda: parse_tokens(f"a:{TOKEN},b:{TOKEN}", TOKEN_ENV),
        lambda: read_tokens({"SLACK_BOT_TOKEN": BOT_TOKEN + " x"}, http=True),
        lambda: read_tokens({"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": "a b"}, True),
        lambda: read_tokens(bad_app, http=False),
    ):
        with pytest.raises(ConfigError) as caught:
            attempt()
        texts.append(str(caught.value))
    return texts


def test_no_secret_appears_in_any_output_of_a_whole_scenario(
    tmp_path: Path, agent: CapturedAgent
) -> None:
    """Commands, a forged request, a refusal, a resize to ready, a failed start rolled back and
    agent calls with wrong and read-only tokens leave no secret in logs, process output, state,
    Slack bodies, reprs or error texts; the secrets were in use (the Slack calls carried the bot
    token, the agent answered the bot), so the search looked where they could have leaked."""
    exposure = Exposure()
    signer = SlackRequestSigner(SIGNING_SECRET)
    settings = chat_settings(
        {"small-01": agent.url, "dead-01": f"http://127.0.0.1:{free_port()}"}, appliers=(ANA, BEN)
    )
    with (
        all_logs() as logs,
        SlackApiStandIn(bot_token=BOT_TOKEN, app_token=APP_TOKEN) as slack,
        migrated_store(tmp_path) as store,
    ):
        with http_bot(slack, settings, store) as bot:
            bot.command("status", EVE, signer)  # answered in the channel, unreachable host too
            wait_until(lambda: "dead-01" in str(slack.history(CHANNEL)), what="the status")
            usage = bot.command("resize ratio abc", EVE, signer)
            exposure.add("usage error", wait_ephemeral(slack, usage))
            forged = signer.slash_command("restart", response_url=slack.new_response_url())
            assert bot.post(forged.signed_with("0" * 32)).status_code == 401
            assert bot.post(forged.unsigned()).status_code == 401
            refused = bot.command("restart", EVE, signer)
            exposure.add("refusal", wait_ephemeral(slack, refused))
            _ended(slack, _apply(bot, slack, "resize size 10", signer), "READY")
            _ended(slack, _apply(bot, slack, "resize size 24", signer), "ROLLED BACK")
            wait_until(lambda: store.unfinished_operations() == [], what="the watches to end")
        with httpx.Client(base_url=agent.url, timeout=30) as http:
            for token in ("", "wrong-t0ken", VIEWER):
                answer = http.post(
                    "/v1/operations",
                    json={"kind": "restart", "actor": EVE},
                    headers={"Authorization": f"Bearer {token}"} if token else {},
                )
                assert answer.status_code in (401, 403)
                exposure.add(f"agent answer to {token or 'no token'}", answer.text)
        exposure.add_slack(slack)
        exposure.add("reprs", _reprs(agent, settings, store))
        used_bot_token = any(call.token == BOT_TOKEN for call in slack.calls("chat.postMessage"))
    for error in _error_texts():
        exposure.add("errors", error)
    exposure.add("logs", "\n".join(logs.lines))
    exposure.add_files(agent.root)
    exposure.add_files(tmp_path / "kimi-ops.db")  # the bot's store, as rows
    assert used_bot_token
    assert {"agent.out", "agent.err", "server.log"} <= {Path(w).name for w in exposure.texts}
    assert len(logs.lines) > 50
    assert "READY" in exposure.texts["slack chat.update"]
    assert "unauthorized" in exposure.texts["agent answer to wrong-t0ken"]
    assert exposure.hits(SECRETS) == []
    # The search finds a secret where there is one: the agent's tokens are in its environment.
    assert len(Exposure({"env": str(agent.env())}).hits(SECRETS)) == 2


def _reprs(agent: CapturedAgent, settings: object, store: Store) -> str:
    """repr and str of each settings object that holds or names a secret."""
    environ = agent.env()
    config = load_config(agent.config)
    slack_env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SIGNING_SECRET}
    objects = [
        load_agent_settings(agent.config, environ),
        load_agent_settings(agent.config, environ).tokens,
        settings,
        read_tokens(slack_env, http=True),
        read_tokens({"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_APP_TOKEN": APP_TOKEN}, http=False),
        SlackSettings(),
        store,
    ]
    assert config["agent"]["token_env"] == TOKEN_ENV
    return "\n".join(f"{obj!r}\n{obj}" for obj in objects)
