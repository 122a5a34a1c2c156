"""The simulator's environment: ``KIMI_SIM_*`` variables, validated into one frozen value."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.errors import SimError
from bot.sim._profile import PHASES, HostProfile, load_profile

__all__ = [
    "DEFAULT_PROFILE",
    "VERSIONS",
    "Failures",
    "SimSettings",
    "load_settings",
    "state_dir_for",
]

DEFAULT_PROFILE = "kimi-k25-8gpu"
#: SGLang versions whose log dialect and memory rules the simulator reproduces.
VERSIONS = ("0.5.9", "0.5.23")
FAIL_MODES = (
    "crash_loading",
    "gpu_oom_graph",
    "stall:<phase>",
    "slow_pin:<factor>",
    "host_pool_x:<factor>",
    "health_flap",
    "live_not_applied",
)


_FLAGS = ("crash_loading", "gpu_oom_graph", "health_flap", "live_not_applied")


@dataclass(frozen=True)
class Failures:
    """Failures injected with ``KIMI_SIM_FAIL`` (comma-separated)."""

    crash_loading: bool = False
    gpu_oom_graph: bool = False
    stall_after: str | None = None
    slow_pin: float = 1.0
    # SGLang sizes the host pool this many times its rule's figure (as a version with another
    # rule would) and logs the real figure: what the agent's guard must catch.
    host_pool_x: float = 1.0
    health_flap: bool = False
    # HiCache's runtime API answers an attach with 200 but leaves the live values unchanged.
    live_not_applied: bool = False


@dataclass(frozen=True)
class SimSettings:
    profile: HostProfile
    time_scale: float
    version: str
    state_dir: Path
    failures: Failures
    load_rate: float
    #: Wall-clock seconds each ``/generate`` takes (``KIMI_SIM_GENERATE_S``; 0 answers at once).
    generate_s: float = 0.0

    @property
    def new_dialect(self) -> bool:
        """True for 0.5.23's log lines and per-host memory budget."""
        return self.version_tuple >= (0, 5, 10)

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(part) for part in self.version.split("."))

    def seconds(self, at_real_time: float) -> float:
        """Wall-clock seconds for a duration given in real time."""
        return at_real_time * self.time_scale


def state_dir_for(profile: HostProfile, environ: Mapping[str, str]) -> Path:
    """Where simulators on ``profile`` share their host state (``KIMI_SIM_STATE_DIR`` wins)."""
    explicit = environ.get("KIMI_SIM_STATE_DIR", "").strip()
    if explicit:
        return Path(explicit)
    return Path(tempfile.gettempdir()) / f"kimi-sim-{profile.name}"


def load_settings(environ: Mapping[str, str]) -> SimSettings:
    """Read and check every ``KIMI_SIM_*`` variable; a bad one raises SimError naming it."""
    profile = load_profile(environ.get("KIMI_SIM_PROFILE", "").strip() or DEFAULT_PROFILE)
    time_scale = _positive_float(
        environ, "KIMI_SIM_TIME_SCALE", 1.0, "0.01 for tests, 1.0 for real time"
    )
    version = environ.get("KIMI_SIM_VERSION", "").strip() or VERSIONS[0]
    if version not in VERSIONS:
        raise SimError(f"KIMI_SIM_VERSION {version!r} is not simulated; use one of {VERSIONS}")
    load_text = environ.get("KIMI_SIM_LOAD", "").strip() or "0"
    load_rate = _number(load_text, "KIMI_SIM_LOAD", "1 to turn it on, or requests per second")
    if load_rate < 0:
        raise SimError(f"KIMI_SIM_LOAD {load_text!r} must be >= 0 (0 is off)")
    generate_text = environ.get("KIMI_SIM_GENERATE_S", "").strip() or "0"
    generate_s = _number(generate_text, "KIMI_SIM_GENERATE_S", "seconds per /generate, e.g. 0.5")
    if generate_s < 0:
        raise SimError(f"KIMI_SIM_GENERATE_S {generate_text!r} must be >= 0 (0 answers at once)")
    return SimSettings(
        profile=profile,
        time_scale=time_scale,
        version=version,
        state_dir=state_dir_for(profile, environ),
        failures=parse_failures(environ.get("KIMI_SIM_FAIL", "")),
        load_rate=load_rate,
        generate_s=generate_s,
    )


def parse_failures(text: str) -> Failures:
    """Parse ``KIMI_SIM_FAIL``, e.g. ``stall:load_weights``, ``slow_pin:3,health_flap`` or
    ``host_pool_x:2``."""
    values: dict[str, object] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, arg = item.partition(":")
        if name in _FLAGS and not arg:
            values[name] = True
        elif name == "stall" and arg in PHASES:
            values["stall_after"] = arg
        elif name == "stall":
            raise SimError(f"KIMI_SIM_FAIL {item!r}: stall takes a phase, one of {PHASES}")
        elif name in ("slow_pin", "host_pool_x"):
            factor = _number(arg, f"KIMI_SIM_FAIL {name}", f"a factor such as {name}:3")
            if factor <= 0:
                raise SimError(f"KIMI_SIM_FAIL {item!r}: the {name} factor must be > 0")
            values[name] = factor
        else:
            raise SimError(f"KIMI_SIM_FAIL {item!r} is not a failure mode; use {FAIL_MODES}")
    return Failures(**values)  # type: ignore[arg-type]


def _positive_float(environ: Mapping[str, str], name: str, default: float, hint: str) -> float:
    text = environ.get(name, "").strip()
    if not text:
        return default
    value = _number(text, name, hint)
    if value <= 0:
        raise SimError(f"{name} {text!r} must be > 0 ({hint})")
    return value


def _number(text: str, name: str, hint: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise SimError(f"{name} {text!r} is not a number ({hint})") from exc
    if not math.isfinite(value):
        raise SimError(f"{name} {text!r} must be finite ({hint})")
    return value
