"""What a chaos scenario does through Slack, and what it reads back: the part of a rig shared by
the scenarios that fault the bot (:mod:`tests.chaos._rig`) and those that fault the agent
(:mod:`tests.chaos._host_bot`).

Requests to the bot are signed with the signing secret as Slack signs them; the agent is read
straight at its own address (not through the link), so a cut link does not hide it from the
test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bot.slack.spec import APPLY_ACTION
from bot.store import Store
from bot.testing import SlackApiStandIn, SlackRequestSigner, StoredMessage
from tests.chaos._bot_link import AgentLink
from tests.chaos._bot_process import BotProcess
from tests.slack._harness import (
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

__all__ = ["BotDriver", "proposal_id"]


def proposal_id(message: StoredMessage) -> int:
    """The id in a proposal message's text (``Proposal #12 for kimi-01: ...``)."""
    return int(message.text.split("#", 1)[1].split(" ", 1)[0])


@dataclass
class BotDriver:
    """The bot, the link to the agent, the Slack stand-in and the store of one scenario.

    ``baseline`` is the newest agent operation before the scenario and ``refusals_before`` the
    refusals the store held then: the checker looks only at what came after (:meth:`begin`
    sets both, for a rig that serves several scenarios).
    """

    root: Path
    agent_url: str
    link: AgentLink
    slack: SlackApiStandIn
    store: Store
    bot: BotProcess
    baseline: int = 0
    refusals_before: int = 0
    signer: SlackRequestSigner = field(
        init=False, default_factory=lambda: SlackRequestSigner(SIGNING_SECRET)
    )

    def begin(self) -> None:
        """Start a scenario: what exists now is the checker's past."""
        with self.agent_http() as http:
            found = http.get("/v1/operations", params={"limit": 500}).json()["operations"]
        self.baseline = max((op["id"] for op in found), default=0)
        self.refusals_before = len(self.store.refusals(limit=1000))

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
        return httpx.Client(
            base_url=self.agent_url,
            headers={"Authorization": f"Bearer {self.bot.agent_token}"},
            timeout=30,
        )

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
