"""Payloads Slack sends to an app, shaped as Slack sends them (fields and their string types).

Shared by the Socket Mode stand-in (inside an envelope) and the signed-request builder (as the
form body of an HTTP request), so both modes see the same slash command.
"""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["TEAM_ID", "block_actions_payload", "new_trigger_id", "slash_command_payload"]

TEAM_ID = "T0KIMIOPS"
APP_ID = "A0KIMIOPS"
_triggers = itertools.count(1)


def new_trigger_id() -> str:
    """A ``trigger_id`` in Slack's ``<digits>.<digits>.<hex>`` shape, unique in this process."""
    n = next(_triggers)
    return f"{1767000000 + n}.{4242424242}.{n:032x}"


def slash_command_payload(
    *,
    command: str,
    text: str,
    user_id: str,
    channel_id: str,
    response_url: str,
    user_name: str = "alice",
    channel_name: str = "ops",
    trigger_id: str | None = None,
) -> dict[str, Any]:
    """The fields of a slash command, every value a string as in Slack's form body."""
    return {
        "token": "verification-token-unused",
        "team_id": TEAM_ID,
        "team_domain": "kimi-ops-test",
        "channel_id": channel_id,
        "channel_name": channel_name,
        "user_id": user_id,
        "user_name": user_name,
        "command": command,
        "text": text,
        "api_app_id": APP_ID,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id or new_trigger_id(),
    }


def block_actions_payload(
    *,
    user_id: str,
    channel_id: str,
    message_ts: str,
    action_id: str,
    value: str,
    block_id: str,
    response_url: str,
    channel_name: str = "ops",
) -> dict[str, Any]:
    """A ``block_actions`` payload for a click on a button of the message ``message_ts``."""
    return {
        "type": "block_actions",
        "user": {"id": user_id, "username": user_id.lower(), "team_id": TEAM_ID},
        "api_app_id": APP_ID,
        "team": {"id": TEAM_ID, "domain": "kimi-ops-test"},
        "channel": {"id": channel_id, "name": channel_name},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel_id},
        "trigger_id": new_trigger_id(),
        "response_url": response_url,
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": block_id,
                "value": value,
                "action_ts": "1767000001.000000",
            }
        ],
    }
