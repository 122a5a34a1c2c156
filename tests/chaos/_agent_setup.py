"""Building an agent chaos rig (:class:`~tests.chaos._agent_rig.AgentRig`) on a tmp dir: the
agent's TOML for either backend, the simulator's environment, and for the systemd backend the
unit and the stand-in ``systemctl``/``journalctl`` (systemd is not PID 1 here)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from bot.agent.config import load_agent_settings
from tests.agent._api_helpers import TOKEN, TOKEN_ENV, free_port, write_config
from tests.chaos._agent_rig import PROFILE, RATIO_2, UNIT, AgentRig

__all__ = ["FAKE_SYSTEMD", "TIME_SCALE", "build_agent_rig"]

REPO = Path(__file__).resolve().parents[2]
FAKE_SYSTEMD = REPO / "tests" / "agent" / "fake_systemd"
# A small-profile start takes well under a second of real time at this scale.
TIME_SCALE = 0.01


def _sim_env(tmp: Path, extra: Mapping[str, str]) -> dict[str, str]:
    return {
        "KIMI_SIM_PROFILE": PROFILE,
        "KIMI_SIM_TIME_SCALE": str(TIME_SCALE),
        "KIMI_SIM_VERSION": "0.5.9",
        "KIMI_SIM_STATE_DIR": str(tmp / "sim-host"),
        "PYTHONPATH": str(REPO),
        **extra,
    }


def build_agent_rig(
    tmp: Path,
    monkeypatch: pytest.MonkeyPatch,
    backend: str = "process",
    flags: Sequence[str] = RATIO_2,
    sim_env: Mapping[str, str] | None = None,
    **agent: Any,
) -> AgentRig:
    """A rig on ``tmp``: ``backend`` ("process" or "systemd"), the simulator's ``flags`` and
    extra ``sim_env``, [agent] overrides as keywords (``listen`` a fixed port for an agent the
    bot reaches through a link). ``monkeypatch`` points this process's own ``systemctl`` calls
    at the stand-in's state."""
    keys: dict[str, Any] = {
        "headroom_gb": 0,
        "stop_grace_s": 10,
        "gpu_free_timeout_s": 10,
        **agent,
    }
    extra = dict(sim_env or {})
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, TOKEN_ENV: TOKEN}
    if backend == "process":
        config = write_config(tmp, profile=PROFILE, time_scale=TIME_SCALE, hicache=tuple(flags),
                              **keys)  # fmt: skip
        settings = load_agent_settings(config, env)
        # write_config sets the simulator's profile, scale and host; the rest here.
        config.write_text(config.read_text() + "".join(
            f"{name} = {json.dumps(value)}\n"
            for name, value in _sim_env(tmp, extra).items()
            if name not in settings.env
        ))  # fmt: skip
        settings = load_agent_settings(config, env)
        return AgentRig(tmp, backend, config, settings, env, list(settings.command))
    units, fake = tmp / "units", tmp / "fake-systemd"
    units.mkdir()
    fake.mkdir()
    port = free_port()
    argv = [sys.executable, "-m", "bot.sim", "--model-path", "/models/m", "--tp", "2",
            "--port", str(port), *flags]  # fmt: skip
    lines = [f"Environment={name}={value}" for name, value in _sim_env(tmp, extra).items()]
    (units / UNIT).write_text("\n".join(["[Service]", *lines, f"ExecStart={' '.join(argv)}", ""]))
    # The stand-in executables read where their state lives from the environment: the agent's,
    # and this process's for the test's own systemctl calls.
    env.update(FAKE_SYSTEMD_STATE=str(fake), FAKE_SYSTEMD_UNIT_DIR=str(units))
    monkeypatch.setenv("FAKE_SYSTEMD_STATE", str(fake))
    monkeypatch.setenv("FAKE_SYSTEMD_UNIT_DIR", str(units))
    config = write_config(
        tmp, profile=PROFILE, time_scale=TIME_SCALE, hicache=tuple(flags), backend="systemd",
        unit=UNIT, unit_dir=str(units), systemctl=str(FAKE_SYSTEMD / "systemctl"),
        journalctl=str(FAKE_SYSTEMD / "journalctl"), server_url=f"http://127.0.0.1:{port}",
        **keys,
    )  # fmt: skip
    return AgentRig(tmp, backend, config, load_agent_settings(config, env), env, argv)
