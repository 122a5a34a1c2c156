"""KIMI_SIM_* variables: defaults and a clear error for each bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import SimError
from bot.sim import load_profile, state_dir_for
from bot.sim._settings import load_settings


def test_defaults() -> None:
    """With nothing set: the Kimi profile, real time, SGLang 0.5.9, no failure, no load."""
    settings = load_settings({})
    assert settings.profile.name == "kimi-k25-8gpu"
    assert settings.time_scale == 1.0
    assert settings.version == "0.5.9"
    assert settings.load_rate == 0
    assert not settings.failures.crash_loading


def test_state_dir_default_and_override(tmp_path: Path) -> None:
    """The state folder is per profile under the temp dir unless KIMI_SIM_STATE_DIR names one."""
    profile = load_profile("small-2gpu")
    assert state_dir_for(profile, {}).name == "kimi-sim-small-2gpu"
    assert state_dir_for(profile, {"KIMI_SIM_STATE_DIR": str(tmp_path)}) == tmp_path


def test_failure_modes_parse() -> None:
    """Several failure modes can be combined with commas."""
    failures = load_settings(
        {"KIMI_SIM_FAIL": "stall:load_weights, slow_pin:3,health_flap,host_pool_x:2.5"}
    ).failures
    assert failures.stall_after == "load_weights"
    assert failures.slow_pin == 3.0
    assert failures.host_pool_x == 2.5
    assert failures.health_flap


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KIMI_SIM_TIME_SCALE": "fast"}, "KIMI_SIM_TIME_SCALE 'fast' is not a number"),
        ({"KIMI_SIM_TIME_SCALE": "0"}, "must be > 0"),
        ({"KIMI_SIM_TIME_SCALE": "inf"}, "must be finite"),
        ({"KIMI_SIM_VERSION": "0.4.0"}, "KIMI_SIM_VERSION '0.4.0' is not simulated"),
        ({"KIMI_SIM_FAIL": "explode"}, "'explode' is not a failure mode"),
        ({"KIMI_SIM_FAIL": "stall:lunch"}, "stall takes a phase"),
        ({"KIMI_SIM_FAIL": "slow_pin:-2"}, "must be > 0"),
        ({"KIMI_SIM_FAIL": "host_pool_x:0"}, "the host_pool_x factor must be > 0"),
        ({"KIMI_SIM_FAIL": "host_pool_x:twice"}, "KIMI_SIM_FAIL host_pool_x 'twice'"),
        ({"KIMI_SIM_LOAD": "-1"}, "KIMI_SIM_LOAD"),
        ({"KIMI_SIM_PROFILE": "nowhere"}, "host profile 'nowhere' not found"),
    ],
)
def test_bad_values_are_named(env: dict[str, str], message: str) -> None:
    """Each bad variable is refused with its name and value in the message."""
    with pytest.raises(SimError, match=message):
        load_settings(env)
