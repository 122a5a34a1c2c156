"""Tests for the agent's lock on its state directory (``bot.agent.state_lock``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.agent.state_lock import LOCK_FILE, StateDirLock
from bot.errors import StateDirLocked, StoreError


def test_a_held_lock_refuses_a_second_holder_naming_the_first_pid(tmp_path: Path) -> None:
    """While one holder has the directory, a second acquire raises StateDirLocked with its pid."""
    first = StateDirLock.acquire(tmp_path / "state", pid=4711)
    try:
        with pytest.raises(StateDirLocked, match=r"pid 4711") as caught:
            StateDirLock.acquire(tmp_path / "state", pid=4712)
        assert caught.value.holder_pid == 4711
        assert (tmp_path / "state" / LOCK_FILE).read_text() == "4711\n"
    finally:
        first.release()


def test_a_released_lock_is_taken_again_and_rewritten(tmp_path: Path) -> None:
    """After release the next holder gets the lock and its pid replaces the old one."""
    StateDirLock.acquire(tmp_path, pid=123456).release()
    second = StateDirLock.acquire(tmp_path, pid=7)
    try:
        assert (tmp_path / LOCK_FILE).read_text() == "7\n"
    finally:
        second.release()


def test_a_state_dir_that_cannot_be_made_is_a_store_error_naming_it(tmp_path: Path) -> None:
    """A file where the directory should be: StoreError naming the path and the setting."""
    (tmp_path / "taken").write_text("not a directory")
    with pytest.raises(StoreError, match=r"taken.*state_dir"):
        StateDirLock.acquire(tmp_path / "taken")
