"""Tests for the Docker backend's pure parts: the server's argv from an inspected container,
its start time, and the log stream's reader. ``tests/docker/`` drives the backend against a
real Docker daemon (``make test-docker``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from bot.agent.control.docker import DockerLogSource, _started_at, container_argv
from bot.errors import BackendError


def test_the_servers_argv_is_the_entrypoint_then_the_command() -> None:
    """Entrypoint and Cmd are joined in that order; either may be absent (null)."""
    inspected = {
        "Config": {
            "Entrypoint": ["python3", "-m", "sglang.launch_server"],
            "Cmd": ["--tp", "8", "--hicache-ratio", "2"],
        }
    }
    assert container_argv(inspected) == [
        "python3", "-m", "sglang.launch_server", "--tp", "8", "--hicache-ratio", "2",
    ]  # fmt: skip
    assert container_argv({"Config": {"Entrypoint": None, "Cmd": ["sglang", "serve"]}}) == [
        "sglang",
        "serve",
    ]


def test_the_start_time_is_read_to_the_microsecond_and_never_is_none() -> None:
    """Docker's nanosecond RFC 3339 time becomes Unix time; the zero time of a container never
    started is None; anything else is a BackendError naming it."""
    expected = datetime(2026, 12, 1, 21, 53, 10, 389571, tzinfo=UTC).timestamp()
    got = _started_at({"State": {"StartedAt": "2026-12-01T21:53:10.389571885Z"}})
    assert got == pytest.approx(expected, abs=1e-6)
    assert _started_at({"State": {"StartedAt": "0001-01-01T00:00:00Z"}}) is None
    with pytest.raises(BackendError, match="'yesterday'"):
        _started_at({"State": {"StartedAt": "yesterday"}})


def _stream(chunks: list[bytes]) -> Iterator[bytes]:
    yield from chunks


def test_the_log_reader_hands_out_whole_characters_in_order() -> None:
    """A UTF-8 character split between two chunks of the stream comes out whole, once."""
    text = "Load weight end. μ=0.88 ✓\n"
    data = text.encode()
    cut = data.index("✓".encode()) + 1  # inside the three bytes of the check mark
    source = DockerLogSource(_stream([data[:cut], data[cut:]]))
    read = ""
    deadline = time.monotonic() + 5
    while read != text and time.monotonic() < deadline:
        read += source.read_new()
    source.close()
    assert read == text
