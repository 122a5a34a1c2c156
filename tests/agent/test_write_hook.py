"""The test hook ``KIMI_AGENT_CRASH_AT``: what it arms, what it refuses, and that it kills."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bot.agent.write_hook import (
    CRASH_AT_ENV,
    NO_WRITE_HOOK,
    KillAtWrite,
    WriteMoment,
    write_hook_from_environ,
)
from bot.errors import ConfigError


@pytest.mark.parametrize("value", [None, "", "   "])
def test_unset_or_empty_arms_nothing(value: str | None) -> None:
    """No variable, or an empty one, gives the production hook that does nothing."""
    environ = {} if value is None else {CRASH_AT_ENV: value}
    assert write_hook_from_environ(environ) is NO_WRITE_HOOK


@pytest.mark.parametrize(
    ("value", "target", "moment", "occurrence"),
    [
        ("command.json:written", "command.json", WriteMoment.WRITTEN, 1),
        ("server.json:renamed#2", "server.json", WriteMoment.RENAMED, 2),
        (
            "agent.sqlite3/save_resume_point:uncommitted",
            "agent.sqlite3/save_resume_point",
            WriteMoment.UNCOMMITTED,
            1,
        ),
    ],
)
def test_a_point_is_read_as_file_moment_and_count(
    value: str, target: str, moment: WriteMoment, occurrence: int
) -> None:
    """``<file>:<moment>[#n]`` arms a kill at that file, moment and n-th time."""
    hook = write_hook_from_environ({CRASH_AT_ENV: value})
    assert isinstance(hook, KillAtWrite)
    assert (hook.target, hook.moment, hook.occurrence) == (target, moment, occurrence)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("command.json", "not <file>:<moment>[#n]"),
        ("command.json:halfway", "not <file>:<moment>[#n]"),
        ("command.json:written#two", "not <file>:<moment>[#n]"),
        (":written", "names no file"),
        ("server.json:renamed#0", "count below 1"),
    ],
)
def test_a_malformed_point_stops_the_start_naming_the_variable(value: str, named: str) -> None:
    """A malformed value is a ConfigError naming the variable and the rule, not a run without
    the hook the test meant to arm."""
    with pytest.raises(ConfigError, match=CRASH_AT_ENV) as caught:
        write_hook_from_environ({CRASH_AT_ENV: value})
    assert named in str(caught.value)


@pytest.mark.slow
def test_the_armed_point_kills_the_process_the_nth_time_only() -> None:
    """A real process passes the point once (nothing happens), then a second time: SIGKILL."""
    script = (
        "from bot.agent.write_hook import KillAtWrite, WriteMoment\n"
        "hook = KillAtWrite('server.json', WriteMoment.RENAMED, 2)\n"
        "hook.reach('server.json', WriteMoment.WRITTEN)\n"
        "hook.reach('command.json', WriteMoment.RENAMED)\n"
        "hook.reach('server.json', WriteMoment.RENAMED)\n"
        "print('passed once', flush=True)\n"
        "hook.reach('server.json', WriteMoment.RENAMED)\n"
        "print('survived')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -9, done.stderr
    assert done.stdout == "passed once\n"
