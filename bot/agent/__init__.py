"""The agent: the one component on the GPU host that touches the SGLang server.

Its edges, each behind a small seam so the operation runner above them can be tested:

- settings: :mod:`bot.agent.config` (``AgentSettings``, ``load_agent_settings``)
- host facts: :mod:`bot.agent.probe` (``HostProbe``, ``SystemProbe``, ``make_probe``)
- command line: :mod:`bot.agent.cmdline` (read, rewrite and validate SGLang's HiCache flags)
- server control: :mod:`bot.agent.control` (``ServerControl``, ``make_control``)
- waiting for GPUs: :mod:`bot.agent.gpu_wait` (``wait_for_gpus_free``)
- facts, status and plans: :mod:`bot.agent.facts` (``FactsService``, ``fingerprint_of``)
- the HTTP API and the composed agent: :mod:`bot.agent.api` (``create_app``),
  :mod:`bot.agent.service` (``AgentService``, ``build_service``)
- operations: :mod:`bot.agent.operations` (``OperationManager``), their state
  :mod:`bot.agent.state` (``AgentState``, views) and :mod:`bot.agent.sglang_client`
"""

from __future__ import annotations

from bot.agent.api import create_app
from bot.agent.cmdline import (
    HiCacheSetting,
    Topology,
    read_hicache,
    read_topology,
    rewrite_hicache,
    validate_command,
)
from bot.agent.config import AgentSettings, load_agent_settings
from bot.agent.control import (
    LogSource,
    ServerControl,
    ServerProcessState,
    StopResult,
    make_control,
)
from bot.agent.facts import FactsService, HostSnapshot, fingerprint_of
from bot.agent.gpu_wait import WaitResult, wait_for_gpus_free
from bot.agent.operations import OperationManager
from bot.agent.probe import (
    GpuFacts,
    GpuInfo,
    GpuProcess,
    HostProbe,
    ProcessInfo,
    RamFacts,
    SystemProbe,
    make_probe,
)
from bot.agent.service import AgentService, build_service
from bot.agent.sglang_client import SGLangClient
from bot.agent.state import AgentState, OperationEvent, OperationView, RevisionView

__all__ = [
    "AgentService",
    "AgentSettings",
    "AgentState",
    "FactsService",
    "GpuFacts",
    "GpuInfo",
    "GpuProcess",
    "HiCacheSetting",
    "HostProbe",
    "HostSnapshot",
    "LogSource",
    "OperationEvent",
    "OperationManager",
    "OperationView",
    "ProcessInfo",
    "RamFacts",
    "RevisionView",
    "SGLangClient",
    "ServerControl",
    "ServerProcessState",
    "StopResult",
    "SystemProbe",
    "Topology",
    "WaitResult",
    "build_service",
    "create_app",
    "fingerprint_of",
    "load_agent_settings",
    "make_control",
    "make_probe",
    "read_hicache",
    "read_topology",
    "rewrite_hicache",
    "validate_command",
    "wait_for_gpus_free",
]
