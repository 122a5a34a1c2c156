"""The live-or-restart decision for HiCache changes through SGLang's runtime API."""

from __future__ import annotations

import doctest

import pytest

from bot.errors import PlanInputError
from bot.planner import (
    GB,
    AdminKey,
    HostMemory,
    LiveChange,
    LiveFacts,
    SGLangVersion,
    decide_live,
)
from bot.planner import _live as module
from bot.vocab import ApplyMode, LiveChangeKind

NEW = SGLangVersion.parse("0.5.23")
ATTACH_FILE = LiveChange(LiveChangeKind.STORAGE_ATTACH, backend="file")
WRITE_BACK = LiveChange(LiveChangeKind.WRITE_POLICY, policy="write_back")


def _facts(**changes: object) -> LiveFacts:
    values: dict[str, object] = {
        "version": NEW,
        "hicache_enabled": True,
        "admin_key": AdminKey.HELD,
        "attached_backend": None,
    }
    values.update(changes)
    return LiveFacts(**values)  # type: ignore[arg-type]


def test_the_module_example_holds() -> None:
    """The docstring's example is what the decision gives."""
    assert doctest.testmod(module).failed == 0


@pytest.mark.parametrize(
    "change",
    [
        ATTACH_FILE,
        LiveChange(LiveChangeKind.STORAGE_ATTACH, backend="file", extra_config='{"a": 1}'),
    ],
)
def test_an_attach_on_0_5_23_with_the_key_held_is_live(change: LiveChange) -> None:
    """Attach is live on 0.5.23 with HiCache on and the admin key held, and says so."""
    decision = decide_live(change, _facts())
    assert decision.mode is ApplyMode.LIVE
    assert decision.reason.startswith("live (no restart):")
    assert decision.added_host_bytes == 0


@pytest.mark.parametrize(
    ("facts", "why"),
    [
        (_facts(version=SGLangVersion.parse("0.5.9")), "SGLang 0.5.9 has no HiCache runtime API"),
        (_facts(hicache_enabled=False), "without HiCache"),
        (_facts(admin_key=AdminKey.SERVER_HAS_NONE), "started without --admin-api-key"),
        (_facts(admin_key=AdminKey.AGENT_HAS_NONE), "holds no admin key"),
        (_facts(admin_key=AdminKey.DIFFERS), "not the server's --admin-api-key"),
        (_facts(attached_backend="mooncake"), "storage backend mooncake is attached"),
    ],
)
def test_an_attach_needs_a_restart_and_says_why(facts: LiveFacts, why: str) -> None:
    """Each missing condition makes the attach a restart, named in the reason."""
    decision = decide_live(ATTACH_FILE, facts)
    assert decision.mode is ApplyMode.RESTART
    assert decision.reason.startswith("needs a restart: ")
    assert why in decision.reason


def test_a_policy_change_is_live_only_with_a_backend_attached() -> None:
    """SGLang sets a policy at run time only through an attached backend's PUT."""
    assert decide_live(WRITE_BACK, _facts(attached_backend="file")).mode is ApplyMode.LIVE
    without = decide_live(WRITE_BACK, _facts())
    assert without.mode is ApplyMode.RESTART
    assert "none is" in without.reason
    prefetch = LiveChange(LiveChangeKind.PREFETCH_POLICY, policy="wait_complete")
    assert decide_live(prefetch, _facts(attached_backend="file")).live


def test_detach_and_clear_are_live_with_a_backend_and_refused_without() -> None:
    """Detach and clear act on an attached backend; with none there is nothing to do."""
    for kind in (LiveChangeKind.STORAGE_DETACH, LiveChangeKind.STORAGE_CLEAR):
        assert decide_live(LiveChange(kind), _facts(attached_backend="file")).live
        refused = decide_live(LiveChange(kind), _facts())
        assert (refused.mode, refused.reason) == (
            ApplyMode.REFUSED,
            "no storage backend is attached",
        )


def _mooncake(segment: str) -> LiveChange:
    extra = f'{{"master_server_address": "m:50051", "global_segment_size": "{segment}"}}'
    return LiveChange(LiveChangeKind.STORAGE_ATTACH, backend="mooncake", extra_config=extra)


def test_a_mooncake_attach_is_planned_against_the_memory_domain_now() -> None:
    """Mooncake's 16 GiB segment over TP 8 on 8 local ranks adds 16 GiB; it is live when the
    domain has it beside the headroom and refused, with the shortfall, when it has not."""
    memory = HostMemory(available_bytes=60 * GB)
    facts = _facts(memory=memory, headroom_gb=40.0, storage_ranks=8, local_ranks=8)
    fits = decide_live(_mooncake("16gb"), facts)
    assert fits.live
    assert fits.added_host_bytes == 16 * 1024**3
    assert "adding 17.2 GB of host RAM" in fits.reason
    short = decide_live(_mooncake("32gb"), facts)
    assert short.mode is ApplyMode.REFUSED
    # 32 GiB = 34.4 GB against 60 - 40 = 20 GB: 14.4 GB short.
    assert "14.4 GB short" in short.reason


def test_a_cgroup_headroom_binds_the_mooncake_attach() -> None:
    """A cgroup leaving less than the host is what the segment is planned against."""
    memory = HostMemory(
        available_bytes=500 * GB, cgroup_limit_bytes=400 * GB, cgroup_headroom_bytes=10 * GB
    )
    decision = decide_live(_mooncake("16gb"), _facts(memory=memory))
    assert decision.mode is ApplyMode.REFUSED
    assert "has 10.0 GB now" in decision.reason


def test_a_mooncake_attach_with_no_known_segment_is_refused() -> None:
    """No extra config and no Mooncake environment: the segment is unknown, so refused."""
    change = LiveChange(LiveChangeKind.STORAGE_ATTACH, backend="mooncake")
    decision = decide_live(change, _facts(memory=HostMemory(available_bytes=500 * GB)))
    assert decision.mode is ApplyMode.REFUSED
    assert "global_segment_size is unknown" in decision.reason


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": LiveChangeKind.WRITE_POLICY, "policy": "write_sideways"}, "write_sideways"),
        ({"kind": LiveChangeKind.PREFETCH_POLICY, "policy": None}, "prefetch policy None"),
        ({"kind": LiveChangeKind.STORAGE_ATTACH, "backend": ""}, "storage backend ''"),
        ({"kind": LiveChangeKind.STORAGE_ATTACH, "backend": "file;rm"}, "file;rm"),
        (
            {"kind": LiveChangeKind.STORAGE_ATTACH, "backend": "file", "extra_config": "{"},
            "is not JSON",
        ),
        (
            {"kind": LiveChangeKind.STORAGE_ATTACH, "backend": "file", "extra_config": "[1]"},
            "not a JSON object",
        ),
    ],
)
def test_bad_values_are_refused_naming_them(kwargs: dict[str, object], message: str) -> None:
    """A policy, backend or extra config SGLang would not take is a PlanInputError naming it."""
    with pytest.raises(PlanInputError, match=message.replace("(", r"\(")):
        LiveChange(**kwargs)  # type: ignore[arg-type]
