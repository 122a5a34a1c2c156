"""The agent: the one component on the GPU host that touches the SGLang server.

Where things are (each subpackage lists its modules in its own docstring):

- settings: :mod:`bot.agent.config`; the server's command line: :mod:`bot.agent.cmdline`
- transport security: the accepted tokens :mod:`bot.agent.tokens`, the TLS rule checked at start
  :mod:`bot.agent.tls`, ``gen-cert``'s certificate :mod:`bot.agent.certs` (see docs/security.md)
- the composition root: :mod:`bot.agent.service` (``build_service``, the backend and probe
  factories); the command: :mod:`bot.agent.cli`
- host facts: :mod:`bot.agent.host` (``HostProbe``; the real host, the simulated one)
- server control: :mod:`bot.agent.control` (``ServerControl``; process and systemd backends)
- facts, fingerprints and plans: :mod:`bot.agent.facts`
- operations (stop, wait, start, follow, roll back, resume): :mod:`bot.agent.engine`
- the agent's state file (operations, events, revisions, resume points): :mod:`bot.agent.state`
- the HTTP API and the ``/v1/status`` body: :mod:`bot.agent.http`
- SGLang's HTTP endpoints: :mod:`bot.agent.sglang_client`
"""

from __future__ import annotations

from bot.agent.cmdline import (
    HiCacheSetting,
    Topology,
    read_hicache,
    read_topology,
    rewrite_hicache,
    validate_command,
)
from bot.agent.config import AgentSettings, load_agent_settings
from bot.agent.control import LogSource, ServerControl, ServerProcessState, StopResult
from bot.agent.engine import OperationManager, WaitResult, wait_for_gpus_free
from bot.agent.facts import FactsService, FactsSnapshot, fingerprint_of
from bot.agent.host import (
    GpuFacts,
    GpuInfo,
    GpuProcess,
    HostProbe,
    ProcessInfo,
    RamFacts,
    SystemProbe,
)
from bot.agent.http import create_app
from bot.agent.service import AgentService, build_service, make_control, make_probe
from bot.agent.sglang_client import SGLangClient
from bot.agent.state import AgentState, OperationView, ProgressEvent, ResumePoint, RevisionView
from bot.agent.tokens import AgentToken, TokenSet, parse_tokens

__all__ = [
    "AgentService",
    "AgentSettings",
    "AgentState",
    "AgentToken",
    "FactsService",
    "FactsSnapshot",
    "GpuFacts",
    "GpuInfo",
    "GpuProcess",
    "HiCacheSetting",
    "HostProbe",
    "LogSource",
    "OperationManager",
    "OperationView",
    "ProcessInfo",
    "ProgressEvent",
    "RamFacts",
    "ResumePoint",
    "RevisionView",
    "SGLangClient",
    "ServerControl",
    "ServerProcessState",
    "StopResult",
    "SystemProbe",
    "TokenSet",
    "Topology",
    "WaitResult",
    "build_service",
    "create_app",
    "fingerprint_of",
    "load_agent_settings",
    "make_control",
    "make_probe",
    "parse_tokens",
    "read_hicache",
    "read_topology",
    "rewrite_hicache",
    "validate_command",
    "wait_for_gpus_free",
]
