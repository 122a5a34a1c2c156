"""Tests for the agent's token list: several tokens, names, read-only ones, and clear errors."""

from __future__ import annotations

import pytest

from bot.agent.tokens import AgentToken, TokenSet, parse_tokens
from bot.errors import ConfigError
from bot.settings import Secret

VAR = "KIMI_AGENT_TOKEN"
A = "9f2c4e1b7a3d5c8e"
B = "71ab0c9d3e5f7a2b"
C = "c0de5eed1234abcd"


def test_several_entries_each_with_its_name_and_rights() -> None:
    """A bare token, a named one and a read-only one are all read, in order."""
    tokens = parse_tokens(f"{A}, oncall:{B},grafana:{C}:ro", VAR)
    assert list(tokens) == [
        AgentToken(Secret(A)),
        AgentToken(Secret(B), name="oncall"),
        AgentToken(Secret(C), name="grafana", read_only=True),
    ]


def test_match_finds_the_presented_token_and_nothing_else() -> None:
    """Each token matches itself; a prefix, an extension or a name does not match."""
    tokens = parse_tokens(f"bot:{A},oncall:{B}", VAR)
    assert tokens.match(A.encode()) == AgentToken(Secret(A), name="bot")
    assert tokens.match(B.encode()) == AgentToken(Secret(B), name="oncall")
    for wrong in (A[:-1], A + "0", "bot", f"bot:{A}", ""):
        assert tokens.match(wrong.encode()) is None, wrong


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f"{A},", r"entry 2 of 2 is empty"),
        (f"{A},,{B}", r"entry 2 of 3 is empty"),
        ("", r"entry 1 of 1 is empty"),
        (f"bot:{A}:rw", r"entry 1 of 1 ends in an unknown flag; the only flag is ':ro'"),
        (f"bot:{A}:ro:x", r"entry 1 of 1 has 3 colons"),
        (f"bad name:{A}", r"entry 1 of 1 has a caller name that is not"),
        (f":{A}", r"entry 1 of 1 has a caller name that is not"),
        ("bot:", r"entry 1 of 1 has an empty token"),
        (f"bot:{A[:4]} {A[4:]}", r"entry 1 of 1 has an empty token or one with spaces"),
        (f"a:{A},b:{A}:ro", r"entries 1 and 2 hold the same token"),
    ],
)
def test_malformed_lists_name_the_variable_and_entry_never_a_token(
    value: str, expected: str
) -> None:
    """Each malformed list is a ConfigError naming the variable and the entry, without a token."""
    with pytest.raises(ConfigError, match=expected) as caught:
        parse_tokens(value, VAR)
    message = str(caught.value)
    assert VAR in message
    for secret in (A, A[:4], A[4:]):
        assert secret not in message


def test_tokens_stay_out_of_repr() -> None:
    """Neither a token nor the set shows a secret in its repr."""
    tokens = parse_tokens(f"bot:{A},{B}", VAR)
    assert A not in repr(tokens)
    assert B not in repr(tokens)


def test_an_empty_set_cannot_be_made() -> None:
    """A TokenSet without tokens is a programming error, refused at once."""
    with pytest.raises(ValueError, match="at least one"):
        TokenSet(())
