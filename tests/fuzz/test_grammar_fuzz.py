"""Hypothesis on the ``/kimi`` grammar, 10,000 cases: every text is a command or a clean usage
error, and no text from Slack survives into a command except as a number or a configured host.

``tests/chat/test_grammar.py`` holds the grammar's examples and a short property run; this is the
long run, over text built to look like commands with shell syntax, flags, quotes, line breaks and
Unicode lookalikes mixed in, as well as arbitrary text.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.chat._usage import VERBS
from bot.chat.grammar import (
    MAX_COMMAND_CHARS,
    MAX_RATIO,
    MAX_SIZE_GB,
    Command,
    Resize,
    UsageError,
    parse,
)
from tests._examples import examples

HOSTS = ("kimi-01", "kimi-02")
CASES = 10_000
# What a person or an attacker might put around a command: shell syntax, a flag that must never
# reach the server's command line, quotes, lookalikes of digits and letters, invisible marks.
_HOSTILE = [
    *(";", "&&", "|", "`id`", "$(id)", "rm -rf /", "> /etc/passwd", "'", '"', "\\"),
    *("--model-path", "/x", "--model-path=/x", "--hicache-size=999", "--tp", "8", "-m"),
    *("４", "٤", "𝟒", "Ⅳ", "ｒａｔｉｏ", "rаtio", "kimi‐01", "kimi-0l", "4e0", "0x4", "4_0"),
    *("1e309", "1" * 40, "nan", "-0", "+4", ".5", "4.", "∞", "\u00a0", "\u2003"),
]
_WORDS = [
    *VERBS,
    *("ratio", "size", "every", "daily", "off", "schedules", "kimi", "/kimi", *HOSTS),
    *("4", "2.5", "48", "0", "-1", "44.5", "#12", "12", "09:30", "30m", "6h", "1d", "200"),
]
_SEPARATORS = st.sampled_from([" ", "  ", "\t", "\n", "\r\n", " \t "])

_NEAR_COMMANDS = st.builds(
    lambda words, seps: "".join(w + s for w, s in zip(words, seps, strict=False)).strip(),
    st.lists(st.sampled_from(_WORDS + _HOSTILE), min_size=1, max_size=7),
    st.lists(_SEPARATORS, min_size=7, max_size=7),
)
_TEXTS = st.one_of(
    _NEAR_COMMANDS,
    st.text(max_size=120),
    st.text(alphabet=st.characters(codec="ascii"), max_size=120),
    st.builds(lambda head, tail: head + tail, _NEAR_COMMANDS, st.text(max_size=40)),
)


def _outcome(text: str) -> Command | UsageError:
    try:
        return parse(text, HOSTS)
    except UsageError as error:
        return error


def _check_error(error: UsageError, text: str) -> None:
    # One line for the reason (words are quoted with repr, so a line break in the input cannot
    # forge a second line of the reply), the usage line, and nothing near the input's length.
    assert error.reason
    assert "\n" not in error.reason
    assert error.usage
    assert len(error.reason) < 400 + 30, (text, error.reason)


def _check_command(command: Command, text: str) -> None:
    # Every field is a number or a configured host: no other text from Slack is carried on.
    assert len(text) <= MAX_COMMAND_CHARS
    for field in dataclasses.fields(command):
        value = getattr(command, field.name)
        if isinstance(value, str):
            assert value in HOSTS, (text, command)
        else:
            assert value is None or isinstance(value, int | float), (text, command)
    if isinstance(command, Resize):
        if command.ratio is not None:
            assert 0 < command.ratio <= MAX_RATIO
            assert math.isfinite(command.ratio)
        if command.size_gb is not None:
            assert isinstance(command.size_gb, int)
            assert 1 <= command.size_gb <= MAX_SIZE_GB
        # The value came from ASCII digits the person typed, not from a lookalike.
        assert any(c in "0123456789" for c in text)


def _check(text: str) -> None:
    outcome = _outcome(text)
    if isinstance(outcome, UsageError):
        _check_error(outcome, text)
    else:
        _check_command(outcome, text)


@pytest.mark.long
@settings(max_examples=CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TEXTS)
def test_ten_thousand_texts_are_each_a_command_or_a_clean_usage_error(text: str) -> None:
    """10,000 texts, near-commands with hostile words and arbitrary ones: parse returns a
    command whose every field is a number or a configured host, or raises a UsageError with a
    one-line reason and a usage line, never anything else."""
    _check(text)


@settings(
    max_examples=examples(CASES // 10),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(_TEXTS)
def test_a_thousand_texts_are_each_a_command_or_a_clean_usage_error(text: str) -> None:
    """The same property on 1,000 texts, in every make test (the 10,000 run is marked long: it
    took 133 s at a load average of 15 on 2 cores, where 1,000 took 11 to 25 s)."""
    _check(text)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.sampled_from(["resize ratio 4", "resize size 48", "status", "restart", "rollback 3"]),
    st.sampled_from([word for word in _HOSTILE if word.strip()]),  # not bare whitespace
    _SEPARATORS,
)
def test_a_command_with_anything_appended_is_refused(base: str, extra: str, sep: str) -> None:
    """A valid command followed by shell syntax, a server flag or a lookalike is a usage error,
    never the command with the rest dropped."""
    text = f"{base}{sep}{extra}"
    outcome = _outcome(text)
    assert isinstance(outcome, UsageError), (text, outcome)
    _check_error(outcome, text)
