"""The Slack dispatch: a command whose handler fails inside kimi-ops still gets an answer, and
its traceback is logged once. A core that raises and a front end that records what it was
asked to send stand in for the real ones (the real handlers' failures are fixed where they
start; this is the net under all of them)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from bot.chat.policy import Actor
from bot.chat.replies import ProblemReply, Reply
from bot.slack.dispatch import Dispatch
from bot.slack.front import Origin

PAYLOAD = {"user_id": "U0ANA", "channel_id": "C0OPS", "text": "restart fleet prod",
           "response_url": "https://hooks.slack.test/1"}  # fmt: skip


class Front:
    """Records each answer by the origin it was for."""

    def __init__(self) -> None:
        self.answers: list[tuple[Origin, Reply]] = []

    def channel_for(self, origin: Origin) -> str:
        return origin.channel

    def answer(self, origin: Origin) -> Callable[[Actor, Reply], None]:
        return lambda actor, reply: self.answers.append((origin, reply))


class FailingCore:
    """A core whose handler raises; ``answer_first`` has it answer before it fails."""

    def __init__(self, answer_first: bool = False) -> None:
        self.answer_first = answer_first

    def handle(self, text: str, actor: Actor, channel: str | None = None,
               reply_to: Callable[[Actor, Reply], None] | None = None) -> Reply:  # fmt: skip
        if self.answer_first and reply_to is not None:
            reply_to(actor, ProblemReply("first answer"))
        raise AssertionError("assert not isinstance(planned, FleetRefusal)")


def _dispatch(core: Any, front: Front) -> tuple[Dispatch, ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(max_workers=1)
    return Dispatch(core, front, executor), executor  # type: ignore[arg-type]


def test_a_handler_that_fails_answers_the_person_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The failure becomes an error answer naming the command and the failure, the future
    holds that answer, and one log record carries the traceback (it failed before: the
    exception was logged and re-raised, and Slack got nothing)."""
    front = Front()
    dispatch, executor = _dispatch(FailingCore(), front)
    with executor, caplog.at_level(logging.ERROR, logger="bot.slack.dispatch"):
        future = dispatch.command(PAYLOAD)
        assert future is not None
        reply = future.result(timeout=10)
    assert isinstance(reply, ProblemReply)
    assert reply.text.startswith(
        "`restart fleet prod` failed inside kimi-ops (AssertionError: assert not isinstance("
    )
    assert [r for _, r in front.answers] == [reply]
    assert front.answers[0][0].response_url == PAYLOAD["response_url"]
    records = [r for r in caplog.records if r.name == "bot.slack.dispatch"]
    assert len(records) == 1
    assert records[0].exc_info is not None


def test_a_handler_that_answered_before_failing_is_not_answered_twice() -> None:
    """The person already has an answer: the failure is logged, and no second one is sent."""
    front = Front()
    dispatch, executor = _dispatch(FailingCore(answer_first=True), front)
    with executor:
        future = dispatch.command(PAYLOAD)
        assert future is not None
        future.result(timeout=10)
    assert [r for _, r in front.answers] == [ProblemReply("first answer")]
