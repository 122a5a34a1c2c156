"""A simulated SGLang server for tests and the demo (``python -m bot.sim``).

It prints SGLang's real startup log lines with configurable timings, serves ``/health``,
``/server_info``, ``/metrics``, ``/get_load`` and ``/generate`` (drained on SIGTERM as SGLang
does), and applies SGLang's HiCache sizing and host-memory rules against a host profile,
sharing the simulated host's RAM and GPU memory with other simulators through a small state
file. It never allocates the memory it reports.

Environment: ``KIMI_SIM_PROFILE`` (a shipped name such as ``kimi-k25-8gpu``, ``small-2gpu`` and
its ``-draft``, ``-hybrid`` and ``-dsa`` variants, or a JSON path; ``model_dir(name)`` holds the
profile's ``config.json`` for ``--model-path``),
``KIMI_SIM_TIME_SCALE`` (duration scale, 1.0 = real time), ``KIMI_SIM_VERSION`` (``0.5.9`` or
``0.5.23``), ``KIMI_SIM_STATE_DIR``, ``KIMI_SIM_FAIL``, ``KIMI_SIM_LOAD`` and
``KIMI_SIM_GENERATE_S`` (wall-clock seconds per ``/generate``).
"""

from __future__ import annotations

from bot.sim._profile import HostProfile, load_profile, model_dir, profile_names
from bot.sim._settings import state_dir_for
from bot.sim._state import (
    HostSnapshot,
    SimGpu,
    SimGpuProcess,
    SimServerRecord,
    read_host_state,
)

__all__ = [
    "HostProfile",
    "HostSnapshot",
    "SimGpu",
    "SimGpuProcess",
    "SimServerRecord",
    "load_profile",
    "model_dir",
    "profile_names",
    "read_host_state",
    "state_dir_for",
]
