"""``resize auto`` through the operation engine against the real simulator (SGLang 0.5.23's
dialect), on both control backends: the command line loses its ratio and size flags and the
plan is sized on the ratio SGLang's auto-sizing picks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bot.agent.cmdline import HiCacheSetting, read_hicache
from bot.errors import InputError
from tests.agent._ops_fixtures import wait_final
from tests.agent.engine._backends import (
    SMALL,
    BackendRig,
    backend_rig,
    harness_factory,
    systemd_rig,
)

__all__ = ["backend_rig", "harness_factory", "systemd_rig"]

pytestmark = pytest.mark.slow

Rigs = Callable[..., BackendRig]
V0523 = {"KIMI_SIM_VERSION": "0.5.23"}


def test_resize_auto_drops_the_flags_and_is_planned_on_sglang_s_ratio(backend_rig: Rigs) -> None:
    """From --hicache-ratio 4 to auto: the plan is "auto: ratio R", its ratio at most SGLang's
    default 2, the new command writes neither --hicache-ratio nor --hicache-size, and the
    server comes up serving it."""
    rig = backend_rig(*SMALL, "--hicache-ratio", "4", env=V0523)
    rig.start_server()
    manager = rig.manager()
    op = manager.submit("resize", actor="ana", auto=True)
    assert op.plan is not None
    assert op.plan["mode"] == "auto"
    assert op.plan["request"] == {"ratio": None, "size_gb": None, "auto": True}
    assert op.plan["setting"].startswith("auto: ratio ")
    assert 0 < op.plan["auto_size"]["ratio"] <= 2.0
    final = wait_final(manager, op.id)
    assert final.state == "ready", manager.state.events(op.id)[-1].message
    command = rig.control().read_command()
    assert "--hicache-ratio" not in command
    assert "--hicache-size" not in command
    assert read_hicache(command) == HiCacheSetting(enabled=True)


def test_auto_beside_a_ratio_is_refused_and_changes_nothing(backend_rig: Rigs) -> None:
    """auto with a ratio is two settings at once: InputError, and the command stays."""
    rig = backend_rig(env=V0523)
    rig.start_server()
    before = rig.control().read_command()
    with pytest.raises(InputError, match="give it alone"):
        rig.manager().submit("resize", actor="ana", ratio=2, auto=True)
    assert rig.control().read_command() == before


@pytest.mark.parametrize(
    ("version", "setting"),
    [("0.5.23", "auto: ratio "), ("0.5.9", "auto: ratio 2 (SGLang 0.5.9's default)")],
)
def test_a_restart_of_a_server_without_flags_is_planned_as_sglang_sizes_it(
    backend_rig: Rigs, version: str, setting: str
) -> None:
    """A 0.5.23 server started with neither flag is restarted on the ratio SGLang's auto-sizing
    picks; on 0.5.9 the same command is planned on its default ratio 2, with a warning."""
    rig = backend_rig(*SMALL, env={"KIMI_SIM_VERSION": version})
    rig.start_server()
    manager = rig.manager()
    op = manager.submit("restart", actor="ana")
    assert op.plan is not None
    assert op.plan["setting"].startswith(setting), op.plan["setting"]
    assert op.plan["mode"] == "auto"
    assert (op.plan["auto_size"] is None) == (version == "0.5.9")
    assert any("no HiCache auto-sizing" in w for w in op.plan["warnings"]) == (version == "0.5.9")
    final = wait_final(manager, op.id)
    assert final.state == "ready", manager.state.events(op.id)[-1].message
