"""What the Slack listeners hand over: a command or a click, parsed, checked, and queued for the
core on the app's own executor.

Bolt's listener threads are few and shared (five by default), and Slack wants an ack within
3 s: a listener acks first, then calls :meth:`Dispatch.command` or :meth:`Dispatch.click`,
which only read the payload and submit the work. Agent calls, long-polls and restarts run in
the executor's threads and the core's watchers, never in a listener thread.

A handler that fails unexpectedly still answers: the person gets an error naming the command
and the failure (:func:`bot.slack.messages.command_failed`), and the traceback is logged once.
Nothing is left unanswered, and the future holds that answer, not the exception.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from bot.chat.core import ChatCore
from bot.chat.policy import Actor
from bot.chat.replies import ProblemReply, Reply
from bot.slack.front import Origin, SlackFrontEnd
from bot.slack.messages import command_failed
from bot.slack.spec import APPLY_ACTION, CANCEL_ACTION

__all__ = ["Dispatch"]

log = logging.getLogger(__name__)

_VERB = {APPLY_ACTION: "apply", CANCEL_ACTION: "cancel"}


class Dispatch:
    """Queues commands and clicks for ``core``; replies go through ``front``; ``actors`` makes
    the person behind a user id (with their user groups: :class:`~bot.slack.usergroups.UserGroups`),
    called in the executor's threads since it may ask Slack."""

    def __init__(
        self,
        core: ChatCore,
        front: SlackFrontEnd,
        executor: ThreadPoolExecutor,
        actors: Callable[[str], Actor] = Actor,
    ) -> None:
        self._core = core
        self._front = front
        self._executor = executor
        self._actors = actors

    def command(self, payload: Mapping[str, Any]) -> Future[Reply] | None:
        """A ``/kimi`` slash command (its form fields); None when it names no user or channel."""
        user, channel = payload.get("user_id"), payload.get("channel_id")
        if not isinstance(user, str) or not user or not isinstance(channel, str) or not channel:
            log.warning("a slash command without user_id or channel_id was ignored")
            return None
        origin = Origin(channel, user, _text(payload.get("response_url")))
        return self._submit(str(payload.get("text") or ""), origin)

    def click(self, body: Mapping[str, Any]) -> Future[Reply] | None:
        """An Apply or Cancel button (a ``block_actions`` payload): ``apply <id>``/``cancel <id>``
        as the person who clicked, in the proposal's channel."""
        user = (body.get("user") or {}).get("id")
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get(
            "channel_id"
        )
        actions = body.get("actions") or []
        if not user or not channel or not actions:
            log.warning("a click without user, channel or action was ignored")
            return None
        action = actions[0]
        verb = _VERB.get(str(action.get("action_id")))
        value = str(action.get("value") or "")
        if verb is None or not value.isdigit():
            log.warning("a click on %r with value %r was ignored", action.get("action_id"), value)
            return None
        origin = Origin(str(channel), str(user), _text(body.get("response_url")))
        return self._submit(f"{verb} {value}", origin)

    def _submit(self, text: str, origin: Origin) -> Future[Reply]:
        return self._executor.submit(self._run, text, origin)

    def _run(self, text: str, origin: Origin) -> Reply:
        answered = False
        answer = self._front.answer(origin)

        def reply_to(actor: Actor, reply: Reply) -> None:
            nonlocal answered
            answered = True
            answer(actor, reply)

        try:
            actor = self._actors(origin.user)
            return self._core.handle(
                text, actor, channel=self._front.channel_for(origin), reply_to=reply_to
            )
        except Exception as exc:
            log.exception("the command %r from %s failed", text[:80], origin.user)
            failed = ProblemReply(command_failed(text, exc))
            if not answered:
                try:
                    answer(Actor(origin.user), failed)
                except Exception:
                    log.warning("the failure of %r could not be answered", text[:80])
            return failed


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
