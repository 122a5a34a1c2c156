"""The Slack app's settings: ``[slack]`` in the config file and its tokens from the environment.

::

    [slack]
    api_url = "https://slack.com/api/"   # Slack's Web API; KIMI_SLACK_API_URL wins
    channel = "C0123456789"              # where proposals go (default: the command's channel)

Tokens never live in the file: ``SLACK_BOT_TOKEN`` (``xoxb-``) always, ``SLACK_APP_TOKEN``
(``xapp-``) in Socket Mode, ``SLACK_SIGNING_SECRET`` in HTTP mode. A missing or malformed one
is a :class:`~bot.errors.ConfigError` naming the variable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.errors import ConfigError
from bot.settings import Secret, Section
from bot.slack.spec import (
    API_URL_ENV,
    APP_TOKEN_ENV,
    BOT_TOKEN_ENV,
    DEFAULT_API_URL,
    SIGNING_SECRET_ENV,
)

__all__ = ["SlackSettings", "SlackTokens", "load_slack_settings", "read_tokens"]

_KEYS = ("api_url", "channel")
_CHANNEL = re.compile(r"[CDG][A-Z0-9]{2,20}")
_MIN_SECRET = 16


@dataclass(frozen=True)
class SlackSettings:
    """Where the Web API is, and the channel proposals go to (None: the command's)."""

    api_url: str = DEFAULT_API_URL
    channel: str | None = None


@dataclass(frozen=True)
class SlackTokens:
    """The bot token, and the app token (Socket Mode) or signing secret (HTTP mode)."""

    bot: Secret
    app: Secret | None = None
    signing_secret: Secret | None = None


def load_slack_settings(config: Mapping[str, Any], environ: Mapping[str, str]) -> SlackSettings:
    """``[slack]`` of a parsed config file; ``KIMI_SLACK_API_URL`` wins over ``api_url``."""
    section = Section(config, "slack", _KEYS)
    api_url = environ.get(API_URL_ENV) or section.text("api_url", DEFAULT_API_URL)
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", api_url):
        raise ConfigError(
            f"the Slack Web API URL must be http:// or https:// and a host, not {api_url!r} "
            f"(from {API_URL_ENV if environ.get(API_URL_ENV) else '[slack] api_url'})"
        )
    channel = section.optional_text("channel")
    if channel is not None and not _CHANNEL.fullmatch(channel):
        raise ConfigError(
            f"[slack] channel must be a channel id such as C0123456789 (not a #name), "
            f"not {channel!r}"
        )
    return SlackSettings(
        api_url=api_url if api_url.endswith("/") else api_url + "/", channel=channel
    )


def read_tokens(environ: Mapping[str, str], http: bool) -> SlackTokens:
    """The tokens the chosen mode needs, each checked for its shape."""
    bot = _token(environ, BOT_TOKEN_ENV, "xoxb-", "the Bot User OAuth Token (OAuth & Permissions)")
    if http:
        secret = environ.get(SIGNING_SECRET_ENV, "")
        if not secret:
            raise ConfigError(
                f"{SIGNING_SECRET_ENV} is not set; HTTP mode needs the app's Signing Secret "
                "(Basic Information > App Credentials)"
            )
        if len(secret) < _MIN_SECRET or any(c.isspace() for c in secret):
            raise ConfigError(
                f"{SIGNING_SECRET_ENV} does not look like a Slack signing secret (at least "
                f"{_MIN_SECRET} characters, no spaces); copy it from Basic Information"
            )
        return SlackTokens(bot=bot, signing_secret=Secret(secret))
    app = _token(
        environ, APP_TOKEN_ENV, "xapp-", "an app-level token with connections:write (Socket Mode)"
    )
    return SlackTokens(bot=bot, app=app)


def _token(environ: Mapping[str, str], variable: str, prefix: str, what: str) -> Secret:
    value = environ.get(variable, "")
    if not value:
        raise ConfigError(f"{variable} is not set; it must hold {what}, {prefix}...")
    if not value.startswith(prefix) or any(c.isspace() for c in value) or len(value) <= len(prefix):
        raise ConfigError(
            f"{variable} does not start with {prefix!r}; it must hold {what}, {prefix}..."
        )
    return Secret(value)
