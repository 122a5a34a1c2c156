"""The agent's bearer tokens: several at once, so a token rotates without downtime.

The variable ``[agent] token_env`` names holds comma-separated entries, each one of::

    TOKEN               accepted; operations record no caller
    NAME:TOKEN          accepted; operations it starts record NAME as their caller
    NAME:TOKEN:ro       read-only: status, plans and reads; 403 on starting an operation

e.g. ``KIMI_AGENT_TOKEN="slack-bot:9f2c...,oncall:71ab...,grafana:c0de...:ro"``. Rotating is two
restarts of the agent (the SGLang server keeps running): add the new token beside the old, move
the bot to it, then drop the old. Tokens hold no ``,`` or ``:`` (``openssl rand -hex 32`` or
``python -c 'import secrets; print(secrets.token_urlsafe(32))'`` make good ones).

A malformed list fails at start naming the variable and the entry's position, never its text.
Matching compares against every token in constant time, so timing tells nothing either.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from bot.errors import ConfigError
from bot.settings import Secret

__all__ = ["MIN_TOKEN_CHARS", "READ_ONLY_FLAG", "AgentToken", "TokenSet", "parse_tokens"]

READ_ONLY_FLAG = "ro"
#: A token shorter than this is accepted with a warning at every start: 32 random characters
#: (what the commands in the module docstring make) cannot be guessed over the network.
MIN_TOKEN_CHARS = 32
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}", re.ASCII)
# Printable ASCII without the separators and whitespace: what goes in an Authorization header.
_TOKEN = re.compile(r"[!-~]+", re.ASCII)


@dataclass(frozen=True)
class AgentToken:
    """One accepted token: its caller name (None when unnamed) and whether it may only read."""

    secret: Secret = field(repr=False)
    name: str | None = None
    read_only: bool = False


@dataclass(frozen=True)
class TokenSet:
    """The tokens the agent accepts, in the order the variable lists them."""

    tokens: tuple[AgentToken, ...]

    def __post_init__(self) -> None:
        if not self.tokens:
            raise ValueError("a TokenSet needs at least one token")

    def __iter__(self) -> Iterator[AgentToken]:
        return iter(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def match(self, presented: bytes) -> AgentToken | None:
        """The token ``presented`` is, or None. Every token is compared, each in constant time,
        so how long this takes does not depend on which token (if any) matched."""
        found: AgentToken | None = None
        for token in self.tokens:
            if hmac.compare_digest(presented, token.secret.reveal().encode()):
                found = token if found is None else found
        return found

    def short_entries(self) -> list[int]:
        """The 1-based positions of the tokens shorter than :data:`MIN_TOKEN_CHARS`."""
        return [
            index
            for index, token in enumerate(self.tokens, 1)
            if len(token.secret.reveal()) < MIN_TOKEN_CHARS
        ]

    @classmethod
    def single(cls, secret: Secret) -> TokenSet:
        """One unnamed read-write token (tests, and agents configured before names existed)."""
        return cls((AgentToken(secret),))


def parse_tokens(value: str, variable: str) -> TokenSet:
    """Read the variable's value (see the module docstring); errors name ``variable`` and the
    entry's position, never a token."""
    entries = value.split(",")
    tokens = [
        _entry(raw.strip(), variable, index, len(entries)) for index, raw in enumerate(entries, 1)
    ]
    _no_repeats(tokens, variable)
    return TokenSet(tuple(tokens))


def _entry(raw: str, variable: str, index: int, count: int) -> AgentToken:
    where = f"environment variable {variable}, entry {index} of {count}"
    if not raw:
        raise ConfigError(
            f"{where} is empty; separate tokens with single commas and no trailing comma"
        )
    parts = raw.split(":")
    if len(parts) > 3:
        raise ConfigError(
            f"{where} has {len(parts) - 1} colons; write TOKEN, NAME:TOKEN or NAME:TOKEN:ro "
            "(a token holds no ':' or ',')"
        )
    if len(parts) == 1:
        return AgentToken(_secret(parts[0], where))
    name, secret, *flags = parts
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"{where} has a caller name that is not 1-64 letters, digits, '.', '_', '@' or '-' "
            "before its first ':'"
        )
    if flags and flags[0] != READ_ONLY_FLAG:
        raise ConfigError(
            f"{where} ends in an unknown flag; the only flag is ':{READ_ONLY_FLAG}' (read-only)"
        )
    return AgentToken(_secret(secret, where), name=name, read_only=bool(flags))


def _secret(text: str, where: str) -> Secret:
    if not text or not _TOKEN.fullmatch(text):
        raise ConfigError(f"{where} has an empty token or one with spaces or non-ASCII characters")
    return Secret(text)


def _no_repeats(tokens: Sequence[AgentToken], variable: str) -> None:
    # One token under two names (or two rights) would make the caller a matter of list order.
    for index, token in enumerate(tokens, 1):
        for earlier in range(index - 1):
            if tokens[earlier].secret == token.secret:
                raise ConfigError(
                    f"environment variable {variable}: entries {earlier + 1} and {index} hold the "
                    "same token; give each token once"
                )
