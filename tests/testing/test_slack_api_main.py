"""``python -m bot.testing.slack_api --port 0`` serves the stand-in as its own process."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from slack_sdk import WebClient


@pytest.mark.slow
def test_run_as_a_module_it_prints_its_base_url_and_answers_the_sdk() -> None:
    """It prints a 127.0.0.1 base URL first, answers chat.postMessage, and exits 0 on Ctrl-C."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bot.testing.slack_api", "--port", "0", "--bot-token", "xoxb-t"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/api/")
        client = WebClient(token="xoxb-t", base_url=url, timeout=10)
        assert client.chat_postMessage(channel="C1", text="hi")["ok"] is True
    finally:
        # Ctrl-C, as a person stops it: a clean exit without a traceback.
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0
    assert "Traceback" not in stderr
