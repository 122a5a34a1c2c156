"""Tests for the agent's and its server's resource limits (``bot.agent.rlimits``)."""

from __future__ import annotations

import errno
import resource

from bot.agent.rlimits import (
    ACCEPT_BACKLOG,
    RESERVED_FDS,
    Limit,
    connection_cap,
    fitted,
    out_of_descriptors,
)
from bot.errors import BackendError

INF = resource.RLIM_INFINITY
NOFILE = Limit("NOFILE", resource.RLIMIT_NOFILE, 65535, 65535)
MEMLOCK = Limit("MEMLOCK", resource.RLIMIT_MEMLOCK, INF, INF)


def _limits(**by_resource: tuple[int, int]) -> object:
    table = {resource.RLIMIT_NOFILE: by_resource["nofile"], resource.RLIMIT_MEMLOCK:
             by_resource["memlock"]}  # fmt: skip
    return table.__getitem__


def test_wanted_limits_are_cut_to_the_hard_limits() -> None:
    """65535 files under a hard 20,000 give 20,000; memlock infinity under a hard 8 MiB gives
    8 MiB; the hard limits stay."""
    got = fitted((NOFILE, MEMLOCK), _limits(nofile=(1024, 20000), memlock=(65536, 8 << 20)))  # type: ignore[arg-type]
    assert [(limit.soft, limit.hard) for limit in got] == [(20000, 20000), (8 << 20, 8 << 20)]


def test_wanted_limits_are_given_in_full_under_higher_hard_limits() -> None:
    """With hard limits of 1M files and no memlock limit the server gets 65535 and infinity."""
    got = fitted((NOFILE, MEMLOCK), _limits(nofile=(1024, 1 << 20), memlock=(65536, INF)))  # type: ignore[arg-type]
    assert [(limit.soft, limit.hard) for limit in got] == [(65535, 1 << 20), (INF, INF)]


def test_a_soft_limit_already_higher_is_never_lowered() -> None:
    """A soft limit of 100,000 files stays 100,000."""
    got = fitted((NOFILE,), _limits(nofile=(100000, 200000), memlock=(0, 0)))  # type: ignore[arg-type]
    assert (got[0].soft, got[0].hard) == (100000, 200000)


def test_the_connection_cap_leaves_the_reserve_free() -> None:
    """Under 256 files the agent serves 256 - 96 - 32 connections; under plenty, what is
    configured; never fewer than 8."""
    assert (RESERVED_FDS, ACCEPT_BACKLOG) == (96, 32)
    assert connection_cap(512, 256) == 128
    assert connection_cap(512, 65535) == 512
    assert connection_cap(512, INF) == 512
    assert connection_cap(512, 100) == 8


def test_descriptor_exhaustion_is_found_in_the_causes() -> None:
    """EMFILE behind a BackendError counts, and ENFILE; another OSError does not."""
    wrapped = BackendError("cannot read the server log")
    wrapped.__cause__ = OSError(errno.EMFILE, "Too many open files")
    assert out_of_descriptors(wrapped)
    assert out_of_descriptors(OSError(errno.ENFILE, "File table overflow"))
    assert not out_of_descriptors(OSError(errno.ENOENT, "No such file"))
    assert not out_of_descriptors(None)
