"""The Bolt app: its Web API client (with retry handlers) and the listeners, wired to a
:class:`~bot.slack.dispatch.Dispatch`. Listeners ack at once and hand over; nothing else.

The app runs its listeners with ``process_before_response=True``: Bolt then calls a listener in
the request's own thread and answers Slack as soon as it returns. Bolt's default instead hands
each listener to a pool of five threads and polls every 10 ms for the ack, so twenty requests at
once queued behind five threads and waited for the poll; our listeners only ack and queue the
command (:meth:`~bot.slack.dispatch.Dispatch.command` never blocks), so answering after them is
answering at the ack. Nothing that may block (the store, an agent, Slack) may run in a listener.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.error import URLError

from slack_bolt import Ack, App
from slack_bolt.error import BoltError
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
)

from bot.errors import SlackStartError
from bot.settings import Secret
from bot.slack.dispatch import Dispatch
from bot.slack.spec import APPLY_ACTION, CANCEL_ACTION, SLASH_COMMAND

__all__ = ["RATE_LIMIT_RETRIES", "bot_user_id", "build_app", "web_client"]

#: 429s retried by the client (after Retry-After) before the caller sees the error.
RATE_LIMIT_RETRIES = 3
_TIMEOUT_S = 15


def bot_user_id(client: WebClient) -> str | None:
    """The bot's own Slack user id (``auth.test``), so what the bot proposes mentions a real
    user; None when Slack does not say (the bot then names itself in plain text)."""
    try:
        found = client.auth_test().get("user_id")
    except (SlackApiError, SlackClientError, OSError):
        return None
    return found if isinstance(found, str) and found else None


def web_client(token: Secret, api_url: str) -> WebClient:
    """The Web API client: on ``api_url``, retrying connection errors and 429s."""
    return WebClient(
        token=token.reveal(),
        base_url=api_url,
        timeout=_TIMEOUT_S,
        retry_handlers=[
            ConnectionErrorRetryHandler(max_retry_count=2),
            RateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES),
        ],
    )


def build_app(client: WebClient, dispatch: Dispatch, signing_secret: Secret | None) -> App:
    """The Bolt app; ``signing_secret`` for HTTP mode (None: Socket Mode, where Slack's own
    connection stands for the signature)."""
    _quiet_token_warning()
    try:
        # Bolt checks the token with auth.test here, before any listener exists.
        app = App(
            client=client,
            signing_secret=None if signing_secret is None else signing_secret.reveal(),
            request_verification_enabled=signing_secret is not None,
            process_before_response=True,
        )
    except BoltError as exc:
        raise SlackStartError(
            f"Slack refused the bot token ({_slack_error(exc)}); check SLACK_BOT_TOKEN: the "
            "Bot User OAuth Token (xoxb-...) of the app installed in the workspace"
        ) from exc
    except (URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SlackStartError(
            f"cannot reach Slack's Web API at {client.base_url} ({reason}); check the network, "
            "a proxy, or [slack] api_url / KIMI_SLACK_API_URL"
        ) from exc

    @app.command(SLASH_COMMAND)
    def kimi(ack: Ack, command: dict[str, Any]) -> None:
        ack()
        dispatch.command(command)

    @app.action(APPLY_ACTION)
    @app.action(CANCEL_ACTION)
    def button(ack: Ack, body: dict[str, Any]) -> None:
        ack()
        dispatch.click(body)

    return app


def _slack_error(exc: BoltError) -> str:
    """Slack's error code in Bolt's message (``... invalid_auth``), else the message."""
    match = re.search(r"'error': '([a-z_]+)'", str(exc))
    return match.group(1) if match else str(exc)


class _DropTokenSkipped(logging.Filter):
    """Bolt reads ``SLACK_BOT_TOKEN`` itself and warns on every start that the client given
    wins over it; the client carries that very token, so the warning says nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


def _quiet_token_warning() -> None:
    bolt_log = logging.getLogger("slack_bolt.App")
    if not any(isinstance(f, _DropTokenSkipped) for f in bolt_log.filters):
        bolt_log.addFilter(_DropTokenSkipped())
