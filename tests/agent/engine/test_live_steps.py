"""The pure part of a live change: target values, the API calls between two states, and the
command line that says the same."""

from __future__ import annotations

import pytest

from bot.agent.engine.live_change import (
    LiveState,
    Step,
    command_for,
    state_of_command,
    steps_between,
    target_state,
)
from bot.planner import LiveChange
from bot.vocab import LiveChangeKind

BARE = LiveState(None, None, "timeout", "write_through")
FILE = LiveState("file", None, "timeout", "write_through")
BASE = ["python", "-m", "sglang.launch_server", "--model-path", "/m", "--enable-hicache"]


def test_state_of_a_command_line_takes_sglangs_defaults() -> None:
    """No flag: no backend, prefetch timeout, write_through; the flags as written otherwise."""
    assert state_of_command(BASE) == BARE
    argv = [*BASE, "--hicache-storage-backend", "file",
            "--hicache-storage-backend-extra-config", "{}",
            "--hicache-storage-prefetch-policy", "best_effort"]  # fmt: skip
    assert state_of_command(argv) == LiveState("file", "{}", "best_effort", "write_through")


@pytest.mark.parametrize(
    ("before", "change", "after"),
    [
        (BARE, LiveChange(LiveChangeKind.STORAGE_ATTACH, backend="file"), FILE),
        (
            LiveState("file", '{"a": 1}', "timeout", "write_through"),
            LiveChange(LiveChangeKind.STORAGE_ATTACH, backend="file"),
            LiveState("file", '{"a": 1}', "timeout", "write_through"),
        ),
        (FILE, LiveChange(LiveChangeKind.STORAGE_DETACH), BARE),
        (
            FILE,
            LiveChange(LiveChangeKind.WRITE_POLICY, policy="write_back"),
            LiveState("file", None, "timeout", "write_back"),
        ),
        (FILE, LiveChange(LiveChangeKind.STORAGE_CLEAR), FILE),
    ],
)
def test_target_state(before: LiveState, change: LiveChange, after: LiveState) -> None:
    """Each change sets its own value and keeps the rest (a same-backend attach keeps the
    extra config it had)."""
    assert target_state(before, change) == after


def test_steps_between_states() -> None:
    """Attach is one PUT; a policy on an attached backend is a PUT sending only that policy;
    taking a backend and its policy back is a PUT of the old policy, then the DELETE; a
    policy with no backend to PUT through cannot be made."""
    assert steps_between(BARE, FILE) == [Step("attach", "file")]
    back = LiveState("file", None, "timeout", "write_back")
    assert steps_between(FILE, back) == [Step("attach", "file", None, None, "write_back")]
    assert steps_between(back, BARE) == [
        Step("attach", "file", None, None, "write_through"),
        Step("detach"),
    ]
    assert steps_between(FILE, FILE) == []
    assert steps_between(BARE, LiveState(None, None, "timeout", "write_back")) is None
    other = LiveState("mooncake", '{"m": 1}', "timeout", "write_through")
    assert steps_between(FILE, other) == [Step("detach"), Step("attach", "mooncake", '{"m": 1}')]


def test_command_for_writes_only_what_differs_and_a_detach_removes_the_backend() -> None:
    """The command line gains the flags that differ from what it resolves to; a detach drops
    the backend and its extra config."""
    attached = command_for(BASE, LiveState("file", "{}", "timeout", "write_back"))
    assert attached == [
        *BASE, "--hicache-storage-backend", "file",
        "--hicache-storage-backend-extra-config", "{}", "--hicache-write-policy", "write_back",
    ]  # fmt: skip
    assert command_for(attached, LiveState(None, None, "timeout", "write_back")) == [
        *BASE, "--hicache-write-policy", "write_back",
    ]  # fmt: skip
    assert command_for(BASE, BARE) == BASE
