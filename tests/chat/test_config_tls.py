"""The bot's TLS settings per host: fingerprint, ca_file, insecure, and plain http's warning."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest

from bot.chat.agent_tls import TlsPolicy
from bot.chat.config import ChatSettings, load_chat_settings
from bot.errors import ConfigError

HEX = "3f1c0a9e5d7b2c41" * 4


def _load(text: str) -> ChatSettings:
    return load_chat_settings(tomllib.loads(text), "kimi-ops.toml")


def _host(url: str, **keys: object) -> str:
    lines = ["[hosts.kimi-01]", f'url = "{url}"']
    for key, value in keys.items():
        lines.append(f"{key} = " + ("true" if value is True else f'"{value}"'))
    return "\n".join(lines) + "\n"


def test_a_pinned_fingerprint_is_read_in_canonical_form() -> None:
    """fingerprint in OpenSSL's spelling is kept as 'sha256:' and lowercase hex."""
    openssl = "SHA256:" + ":".join(HEX[i : i + 2].upper() for i in range(0, 64, 2))
    host = _load(_host("https://kimi-01.internal:7300", fingerprint=openssl)).default_host
    assert host.tls == TlsPolicy(fingerprint="sha256:" + HEX)


def test_a_ca_file_is_read(tmp_path: Path) -> None:
    """ca_file names an existing PEM bundle."""
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    host = _load(_host("https://kimi-01:7300", ca_file=bundle)).default_host
    assert host.tls == TlsPolicy(ca_file=bundle)


def test_https_without_settings_verifies_against_the_system_store() -> None:
    """No TLS key on an https host: default verification, nothing turned off."""
    assert _load(_host("https://kimi-01:7300")).default_host.tls == TlsPolicy()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (_host("https://k:1", fingerprint="sha1:abcd"), "[hosts.kimi-01] fingerprint must be"),
        (_host("https://k:1", fingerprint=HEX), "[hosts.kimi-01] fingerprint must be"),
        (_host("https://k:1", fingerprint=""), "[hosts.kimi-01] fingerprint must be"),
        (_host("http://k:1", fingerprint=f"sha256:{HEX}"), "fingerprint needs an https:// url"),
        (_host("http://127.0.0.1:1", insecure=True), "insecure needs an https:// url"),
        (_host("https://k:1", ca_file="/no/such/ca.pem"), "ca_file '/no/such/ca.pem' does not"),
        (
            _host("https://k:1", fingerprint=f"sha256:{HEX}", insecure=True),
            "sets fingerprint and insecure; choose one",
        ),
        ('[hosts.kimi-01]\nurl = "https://k:1"\ninsecure = "yes"\n', "insecure must be true or"),
    ],
)
def test_bad_tls_settings_are_refused_naming_the_key(text: str, fragment: str) -> None:
    """Each wrong TLS setting is a ConfigError naming the file, the host's table and the key."""
    with pytest.raises(ConfigError) as caught:
        _load(text)
    assert str(caught.value).startswith("kimi-ops.toml: ")
    assert fragment in str(caught.value)


def test_insecure_is_logged_loudly(caplog: pytest.LogCaptureFixture) -> None:
    """insecure = true loads, with a warning that says the certificate is not checked."""
    caplog.set_level(logging.WARNING, logger="bot.chat.config")
    host = _load(_host("https://kimi-01:7300", insecure=True)).default_host
    assert host.tls == TlsPolicy(insecure=True)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "NOT checked" in caplog.records[0].getMessage()
    assert "[hosts.kimi-01]" in caplog.records[0].getMessage()


def test_plain_http_off_loopback_is_a_warning_and_loopback_is_quiet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """http:// to another host warns that the token crosses in clear; to loopback it does not."""
    caplog.set_level(logging.WARNING, logger="bot.chat.config")
    _load(_host("http://127.0.0.1:7300"))
    _load(_host("http://localhost:7300"))
    assert caplog.records == []
    _load(_host("http://10.0.0.7:7300"))
    assert len(caplog.records) == 1
    assert "in clear" in caplog.records[0].getMessage()
