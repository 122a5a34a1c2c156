"""What the Slack app registers and relies on: its command, scopes, action ids and Slack's limits.

The manifests in ``deploy/`` are checked against these values (``tests/deploy``), so the app and
what a workspace installs cannot drift apart.
"""

from __future__ import annotations

__all__ = [
    "API_URL_ENV",
    "APPLY_ACTION",
    "APP_TOKEN_ENV",
    "BOT_SCOPES",
    "BOT_TOKEN_ENV",
    "CANCEL_ACTION",
    "DEFAULT_API_URL",
    "MAX_BLOCKS",
    "MAX_SECTION_CHARS",
    "MAX_TEXT_CHARS",
    "REQUEST_PATH",
    "SIGNING_SECRET_ENV",
    "SLASH_COMMAND",
]

#: The one slash command.
SLASH_COMMAND = "/kimi"
#: Bot scopes: the command, posting and editing messages, uploading a report's chart, reading
#: the members of ``[policy] usergroups``.
BOT_SCOPES = frozenset({"commands", "chat:write", "files:write", "usergroups:read"})
#: Bolt's path for commands and interactivity alike (HTTP mode).
REQUEST_PATH = "/slack/events"

#: ``action_id`` of a proposal's buttons; their ``value`` is the proposal id.
APPLY_ACTION = "kimi_apply"
CANCEL_ACTION = "kimi_cancel"

BOT_TOKEN_ENV = "SLACK_BOT_TOKEN"  # xoxb-...
APP_TOKEN_ENV = "SLACK_APP_TOKEN"  # xapp-..., Socket Mode only
SIGNING_SECRET_ENV = "SLACK_SIGNING_SECRET"  # HTTP mode only
API_URL_ENV = "KIMI_SLACK_API_URL"  # wins over [slack] api_url
DEFAULT_API_URL = "https://slack.com/api/"

# Slack's limits (docs/slack.md): a message holds at most 50 blocks, a section's text at most
# 3,000 characters, and a message's text fails with msg_too_long at about 4,000 in practice.
MAX_BLOCKS = 50
MAX_SECTION_CHARS = 3000
MAX_TEXT_CHARS = 3500
