"""The storage tier in the agent's status, read by the bot and shown by both surfaces."""

from __future__ import annotations

import dataclasses
import json

import pytest

from bot._agent_live import LiveStorage, StorageValues
from bot.chat.replies import HostAnswer, StatusReply
from bot.errors import AgentError
from bot.slack import messages
from bot.terminal.wording import reply_lines
from tests.slack._samples import _status

LIVE = {
    "live": {
        "storage_backend": "file",
        "extra_config": None,
        "prefetch_policy": "timeout",
        "write_policy": "write_back",
    },
    "command_line": {
        "storage_backend": None,
        "extra_config": None,
        "prefetch_policy": "timeout",
        "write_policy": "write_through",
    },
    "status_code": 200,
    "message": None,
}


def test_live_storage_is_read_and_a_difference_noticed() -> None:
    """The live values and the command line's are read; they differ here."""
    storage = LiveStorage.from_json(LIVE)
    assert storage is not None
    assert storage.live == StorageValues("file", "timeout", "write_back")
    assert storage.command_line == StorageValues(None, "timeout", "write_through")
    assert storage.differs
    assert LiveStorage.from_json(None) is None
    with pytest.raises(AgentError):
        LiveStorage.from_json({"command_line": "file"})


def test_status_shows_the_live_values_beside_the_command_lines_on_both_surfaces() -> None:
    """The terminal and Slack status both show the live tier, the command line's, and that a
    restart would go back to the command line."""
    status = dataclasses.replace(_status(), storage=LiveStorage.from_json(LIVE))
    reply = StatusReply((HostAnswer("kimi-01", "http://10.0.0.1:7300", True, status, None),))
    expected = (
        "live file, write back, prefetch timeout; command line none, write through, "
        "prefetch timeout"
    )
    lines = reply_lines(reply)
    assert any(expected in line and "differs" in line for line in lines), lines
    slack = json.dumps(messages.status_card(reply).blocks)
    assert "storage live *file, write back, prefetch timeout*" in slack
    assert "a restart goes back to the command line" in slack
    plain = dataclasses.replace(_status(), storage=None)
    bare = StatusReply((HostAnswer("kimi-01", "http://10.0.0.1:7300", True, plain, None),))
    assert not any("storage" in line for line in reply_lines(bare))
