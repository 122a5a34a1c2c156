"""``kimi-ops bot`` as a process, in both modes, against the Slack stand-ins (its agent a port
nobody listens on): it reads its tokens and KIMI_SLACK_API_URL, answers signed commands over
HTTP or envelopes over Socket Mode, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from bot.testing import SlackApiStandIn, SlackRequestSigner, SocketModeStandIn
from tests.chat.conftest import free_port
from tests.slack._harness import EVE, SIGNING_SECRET, wait_ephemeral


def _config(root: Path) -> Path:
    path = root / "kimi-ops.toml"
    path.write_text(
        f'[store]\nurl = "sqlite:///{root / "kimi-ops.db"}"\n\n'
        f'[hosts.kimi-01]\nurl = "http://127.0.0.1:{free_port()}"\n',
        encoding="utf-8",
    )
    return path


@contextmanager
def _bot(
    root: Path, slack: SlackApiStandIn, *argv: str, **variables: str
) -> Iterator[subprocess.Popen[str]]:
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": slack.bot_token,
        "SLACK_APP_TOKEN": slack.app_token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "KIMI_SLACK_API_URL": slack.url,
        "KIMI_AGENT_TOKEN": "unused",
        **variables,
    }
    command = [sys.executable, "-m", "bot", "bot", "--config", str(_config(root)), *argv]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        assert process.stderr is not None
        process.stderr.close()


def _listening_url(process: subprocess.Popen[str]) -> str:
    assert process.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if "listening on " in line:
            return line.rsplit("listening on ", 1)[1].strip()
        assert line or process.poll() is None, "the bot exited before listening"
    raise AssertionError("the bot never said where it listens")


@pytest.mark.slow
def test_http_mode_answers_a_signed_command_and_stops_on_sigterm(
    tmp_path: Path, slack: SlackApiStandIn
) -> None:
    """kimi-ops bot --http --port 0 says where it listens, answers /kimi help through the
    stand-in named by KIMI_SLACK_API_URL, refuses an unsigned request, and exits 0 on
    SIGTERM."""
    with _bot(tmp_path, slack, "--http", "--port", "0", "--listen", "127.0.0.1") as process:
        url = _listening_url(process)
        signer = SlackRequestSigner(SIGNING_SECRET)
        response_url = slack.new_response_url()
        request = signer.slash_command("help", response_url=response_url, user_id=EVE)
        assert httpx.post(url, content=request.body, headers=request.headers).status_code == 200
        wait_ephemeral(slack, response_url)
        assert "resize ratio 4" in str(slack.response_posts(response_url)[0].body["blocks"])
        forged = request.unsigned()
        assert httpx.post(url, content=forged.body, headers=forged.headers).status_code == 401
        assert [c.method for c in slack.calls("auth.test")]  # the token checked at start
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0


@pytest.mark.slow
def test_socket_mode_is_the_default_and_acks_an_envelope(
    tmp_path: Path, slack: SlackApiStandIn, socket_mode: SocketModeStandIn
) -> None:
    """Without --http the bot opens Socket Mode through apps.connections.open with the app
    token, acks a pushed /kimi help, answers on its response_url, and exits 0 on SIGTERM."""
    with _bot(tmp_path, slack) as process:
        socket_mode.wait_for_connection(timeout=30)
        sent = socket_mode.push_slash_command("help", user_id=EVE)
        socket_mode.wait_for_ack(sent.envelope_id)
        wait_ephemeral(slack, sent.payload["response_url"])
        help_ = slack.response_posts(sent.payload["response_url"])[0].body
        assert "resize ratio 4" in str(help_["blocks"])
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    (opened,) = slack.calls("apps.connections.open")[:1]
    assert opened.token == slack.app_token


@pytest.mark.slow
def test_a_second_bot_on_the_same_database_is_refused_unless_no_scheduler(
    tmp_path: Path, slack: SlackApiStandIn
) -> None:
    """While one kimi-ops bot runs the report scheduler, a second on the same database exits 2
    with one line naming the first's process and --no-scheduler; with --no-scheduler it runs;
    once SIGTERM stops the first, its lock is given up and the next bot takes the scheduler."""
    http = ("--http", "--port", "0", "--listen", "127.0.0.1")
    with _bot(tmp_path, slack, *http) as first:
        _listening_url(first)
        with _bot(tmp_path, slack, *http) as second:
            assert second.wait(30) == 2
            assert second.stderr is not None
            err = second.stderr.read()
        assert "Traceback" not in err
        said = [line for line in err.splitlines() if line.startswith("kimi-ops bot:")]
        assert len(said) == 1, err
        assert said[0].startswith("kimi-ops bot: another kimi-ops bot (")
        assert f":{first.pid}:" in said[0]  # the lock's owner is host:pid:nonce
        assert "--no-scheduler" in said[0]
        with _bot(tmp_path, slack, *http, "--no-scheduler") as third:
            _listening_url(third)
            third.send_signal(signal.SIGTERM)
            assert third.wait(20) == 0
        first.send_signal(signal.SIGTERM)
        assert first.wait(20) == 0
    with _bot(tmp_path, slack, *http) as next_one:
        _listening_url(next_one)  # a refused start would exit 2 before this line
        next_one.send_signal(signal.SIGTERM)
        assert next_one.wait(20) == 0


def _one_line_exit_2(process: subprocess.Popen[str]) -> str:
    """The process exits 2 with one ``kimi-ops bot:`` line and no traceback; that line."""
    assert process.wait(60) == 2
    assert process.stderr is not None
    err = process.stderr.read()
    assert "Traceback" not in err, err
    said = [
        line
        for line in err.splitlines()
        if line.startswith("kimi-ops bot:") and "connecting in Socket Mode" not in line
    ]
    assert len(said) == 1, err
    return said[0]


@pytest.mark.slow
@pytest.mark.parametrize("mode", [(), ("--http", "--port", "0", "--listen", "127.0.0.1")])
def test_a_token_slack_refuses_is_one_line_and_exit_2(
    tmp_path: Path, slack: SlackApiStandIn, mode: tuple[str, ...]
) -> None:
    """A well-formed bot token Slack refuses (invalid_auth) ends the start in one line naming
    Slack's error and the variable to check, exit 2, in both modes (it was a 51-line BoltError
    traceback, exit 1)."""
    with _bot(tmp_path, slack, *mode, SLACK_BOT_TOKEN="xoxb-wrong") as process:
        line = _one_line_exit_2(process)
    assert "invalid_auth" in line
    assert "SLACK_BOT_TOKEN" in line


@pytest.mark.slow
def test_a_slack_that_cannot_be_reached_is_one_line_and_exit_2(
    tmp_path: Path, slack: SlackApiStandIn
) -> None:
    """With Slack's Web API on a port nobody listens on, Socket Mode's start is one line naming
    the address and what to check, exit 2 (it was a 101-line URLError traceback)."""
    nobody = f"http://127.0.0.1:{free_port()}/api/"
    with _bot(tmp_path, slack, KIMI_SLACK_API_URL=nobody) as process:
        line = _one_line_exit_2(process)
    assert "cannot reach Slack" in line
    assert nobody in line


@pytest.mark.slow
def test_an_app_token_slack_refuses_is_one_line_and_exit_2(
    tmp_path: Path, slack: SlackApiStandIn
) -> None:
    """An app-level token Slack refuses when Socket Mode opens is one line naming
    SLACK_APP_TOKEN, exit 2."""
    with _bot(tmp_path, slack, SLACK_APP_TOKEN="xapp-wrong") as process:
        line = _one_line_exit_2(process)
    assert "SLACK_APP_TOKEN" in line


@pytest.mark.slow
def test_the_start_does_not_log_that_the_token_is_unused(
    tmp_path: Path, slack: SlackApiStandIn
) -> None:
    """A start with SLACK_BOT_TOKEN set logs no 'token will be unused' line: the client the app
    is given carries that token."""
    http = ("--http", "--port", "0", "--listen", "127.0.0.1")
    with _bot(tmp_path, slack, *http) as process:
        _listening_url(process)
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        assert process.stderr is not None
        rest = process.stderr.read()
    assert "will be unused" not in rest
