"""The agent's transport rule without a process: which listen addresses need TLS, and the
warnings logged at start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.agent.config import AgentSettings
from bot.agent.tls import plaintext_refusal, transport_warnings
from bot.agent.tokens import TokenSet
from bot.settings import Secret

GOOD_TOKEN = "0123456789abcdef" * 2  # MIN_TOKEN_CHARS of them, written out


def settings(host: str, token: str = GOOD_TOKEN, **keys: Any) -> AgentSettings:
    return AgentSettings(tokens=TokenSet.single(Secret(token)), listen_host=host, **keys)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_may_stay_plaintext_quietly(host: str) -> None:
    """On loopback plain HTTP is allowed without a word."""
    assert plaintext_refusal(settings(host)) is None
    assert transport_warnings(settings(host)) == []


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "kimi-01.internal"])
def test_any_other_address_needs_tls(host: str, tmp_path: Path) -> None:
    """Off loopback: refused naming tls_cert, unless TLS is set or plaintext is allowed (warned)."""
    refusal = plaintext_refusal(settings(host))
    assert refusal is not None
    assert "tls_cert" in refusal
    assert "\n" not in refusal
    tls = settings(host, tls_cert=tmp_path / "c", tls_key=tmp_path / "k")
    assert plaintext_refusal(tls) is None
    assert transport_warnings(tls) == []
    allowed = settings(host, allow_plaintext=True)
    assert plaintext_refusal(allowed) is None
    assert [w for w in transport_warnings(allowed) if "WITHOUT TLS" in w]


def test_a_key_readable_by_others_is_warned_about(tmp_path: Path) -> None:
    """A tls_key with group or other bits set is named in a warning with its mode; 0600 is quiet."""
    key = tmp_path / "agent.key"
    key.write_text("k")
    key.chmod(0o644)
    loose = transport_warnings(settings("127.0.0.1", tls_cert=tmp_path / "c", tls_key=key))
    assert len(loose) == 1
    assert "mode 0644" in loose[0]
    key.chmod(0o600)
    assert transport_warnings(settings("127.0.0.1", tls_cert=tmp_path / "c", tls_key=key)) == []


def test_a_token_short_enough_to_guess_is_warned_about_by_position_only() -> None:
    """A 5-character token is named by its entry and the variable in a warning, never by its
    text (it was accepted without a word); 32 characters are quiet."""
    warned = transport_warnings(settings("127.0.0.1", token="abcde"))
    assert len(warned) == 1
    assert "entry 1 of KIMI_AGENT_TOKEN" in warned[0]
    assert "shorter than 32 characters" in warned[0]
    assert "abcde" not in warned[0]
    assert transport_warnings(settings("127.0.0.1", token="x" * 32)) == []
