"""TLS between the bot and the agent, for real: ``kimi-ops agent`` in a subprocess serving a
certificate ``kimi-ops agent gen-cert`` made, and the bot's agent client connecting to it.

The agent drives the simulator through the process backend (``probe = "sim"``); no server is
started here. The bot's side is built from a ``[hosts.NAME]`` table through ``connect``, the way
the bot itself makes its clients.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.chat.agent_client import AgentClient, connect
from bot.chat.config import load_chat_settings
from bot.errors import AgentCertificateError, AgentUnreachable
from bot.settings import Secret
from bot.vocab import OperationKind
from tests.agent._api_helpers import (
    SMALL,
    TOKEN,
    TOKEN_ENV,
    AgentProcess,
    agent_env,
    run_agent,
    write_config,
)

# Real subprocesses: not in the fast loop.
pytestmark = pytest.mark.slow


@dataclass
class TlsAgent:
    agent: AgentProcess
    fingerprint: str  # what gen-cert printed
    cert: Path

    def client(self, **host: Any) -> AgentClient:
        """The bot's client for this agent, from a [hosts.kimi-01] table with ``host``'s keys."""
        table = {"url": self.agent.url, "token_env": TOKEN_ENV, **host}
        settings = load_chat_settings({"hosts": {"kimi-01": table}}, "bot.toml")
        return connect(settings, "kimi-01", {TOKEN_ENV: TOKEN})


def gen_cert(out: Path) -> str:
    """Run ``kimi-ops agent gen-cert`` for 127.0.0.1; return the fingerprint it printed."""
    result = subprocess.run(
        [sys.executable, "-m", "bot", "agent", "gen-cert", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.strip()


@pytest.fixture
def tls_agent(tmp_path: Path) -> Iterator[TlsAgent]:
    """``kimi-ops agent`` on 127.0.0.1, port 0, serving a gen-cert certificate."""
    fingerprint = gen_cert(tmp_path / "tls")
    cert, key = tmp_path / "tls" / "agent.crt", tmp_path / "tls" / "agent.key"
    config = write_config(tmp_path, profile=SMALL, tls_cert=str(cert), tls_key=str(key))
    args = ["--config", str(config)]
    with run_agent(tmp_path, args, agent_env(), tmp_path / "agent-state") as agent:
        yield TlsAgent(agent, fingerprint, cert)
        assert agent.stop(signal.SIGTERM) == 0


def test_status_over_tls_with_the_pinned_fingerprint(tls_agent: TlsAgent) -> None:
    """The agent serves https and logs the fingerprint gen-cert printed; the bot's client pinned
    to it gets the status."""
    assert tls_agent.agent.url.startswith("https://127.0.0.1:")
    assert f"TLS certificate {tls_agent.fingerprint}" in tls_agent.agent.stderr()
    with tls_agent.client(fingerprint=tls_agent.fingerprint) as client:
        status = client.status()
    assert status.host == "kimi-test"
    assert TOKEN not in tls_agent.agent.stderr()


def test_a_wrong_fingerprint_is_refused_before_any_request(tls_agent: TlsAgent) -> None:
    """A pin that is not the agent's certificate ends the connection in the handshake: the error
    names the host and both fingerprints' first digits, and the agent never saw a request (no
    access line, no operation)."""
    wrong = "sha256:" + "ab" * 32
    with (
        tls_agent.client(fingerprint=wrong) as client,
        pytest.raises(AgentCertificateError) as caught,
    ):
        client.submit(OperationKind.RESTART, actor="U0ANA")
    message = str(caught.value)
    assert "kimi-01" in message
    assert tls_agent.fingerprint[:23] in message  # "sha256:" and 16 hex digits
    assert wrong[:23] in message
    assert "nothing was sent" in message
    with tls_agent.client(fingerprint=tls_agent.fingerprint) as good:
        assert good.operations() == ()
    log = tls_agent.agent.stderr()
    assert '"GET /v1/operations?limit=20 HTTP/1.1" 200' in log  # access lines are logged ...
    assert "POST /v1/operations" not in log  # ... and the refused one never arrived


def test_the_certificate_as_ca_file_verifies_the_host_name(tls_agent: TlsAgent) -> None:
    """ca_file = the agent's certificate verifies it (127.0.0.1 is among its names)."""
    with tls_agent.client(ca_file=str(tls_agent.cert)) as client:
        assert client.status().host == "kimi-test"


def test_the_system_trust_store_refuses_a_self_signed_agent(tls_agent: TlsAgent) -> None:
    """Without a pin or a CA file the self-signed certificate fails verification, by default."""
    with tls_agent.client() as client, pytest.raises(AgentCertificateError) as caught:
        client.status()
    assert "failed verification" in str(caught.value)
    assert "fingerprint" in str(caught.value)


def test_plain_http_to_a_tls_agent_gets_no_answer(tls_agent: TlsAgent) -> None:
    """The TLS port does not answer plain HTTP: the token is never accepted in clear."""
    plain = tls_agent.agent.url.replace("https://", "http://")
    with (
        AgentClient(plain, Secret(TOKEN), host="kimi-01") as client,
        pytest.raises(AgentUnreachable, match="agent kimi-01 cannot be reached"),
    ):
        client.status()


def _run_agent_once(tmp_path: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", "agent", "--config", str(config)],
        env=agent_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_plaintext_on_every_interface_is_refused_with_exit_2(tmp_path: Path) -> None:
    """listen 0.0.0.0 without tls_cert: one line on stderr naming tls_cert, exit 2, nothing
    listened (no address file)."""
    config = write_config(tmp_path, profile=SMALL, listen="0.0.0.0:0")
    result = _run_agent_once(tmp_path, config)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "tls_cert" in lines[0]
    assert "0.0.0.0:0" in lines[0]
    assert not (tmp_path / "agent-state" / "agent.addr").exists()


def test_allow_plaintext_starts_with_a_warning(tmp_path: Path) -> None:
    """allow_plaintext = true lets the agent listen on 0.0.0.0 without TLS, warning at start."""
    config = write_config(tmp_path, profile=SMALL, listen="0.0.0.0:0", allow_plaintext=True)
    args = ["--config", str(config)]
    with run_agent(tmp_path, args, agent_env(), tmp_path / "agent-state") as agent:
        assert agent.url.startswith("http://0.0.0.0:")
        log = agent.stderr()
        assert "WARNING" in log
        assert "WITHOUT TLS because [agent] allow_plaintext = true" in log
        assert agent.stop(signal.SIGTERM) == 0


@pytest.mark.parametrize(
    ("keys", "fragment"),
    [
        ({"tls_cert": "/no/such/agent.crt", "tls_key": "/no/such/agent.key"}, "tls_cert"),
        ({"tls_cert": "CERT"}, "tls_cert is set but tls_key is not"),
        ({"tls_cert": "KEY", "tls_key": "CERT"}, "do not load as a PEM certificate and its key"),
        ({"allow_plaintext": "yes"}, "allow_plaintext must be true or false"),
    ],
)
def test_bad_tls_settings_stop_the_start_clearly(
    tmp_path: Path, keys: dict[str, str], fragment: str
) -> None:
    """A missing file, half a pair, a swapped pair or a wrong type: exit 1 with one line naming
    the key, no traceback, nothing listening."""
    gen_cert(tmp_path / "tls")
    paths = {
        "CERT": str(tmp_path / "tls" / "agent.crt"),
        "KEY": str(tmp_path / "tls" / "agent.key"),
    }
    config = write_config(tmp_path, profile=SMALL, **{k: paths.get(v, v) for k, v in keys.items()})
    result = _run_agent_once(tmp_path, config)
    assert result.returncode == 1
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "agent-state" / "agent.addr").exists()
