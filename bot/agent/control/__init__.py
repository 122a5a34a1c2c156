"""Server control: the ``ServerControl`` seam and its three backends.

- :mod:`bot.agent.control.protocol`: the seam (``ServerControl``, ``LogSource``, the process
  state and how a stop ended);
- :mod:`bot.agent.control.process`: the agent launches the argv itself (``ProcessControl``);
- :mod:`bot.agent.control.docker`: a container, replaced by a new one for each change
  (``DockerControl``; the container's cgroup is the server's memory domain);
- :mod:`bot.agent.control.systemd`: a drop-in on a systemd unit (``SystemdControl``), with the
  drop-in's text in ``_unit_file``, ``systemctl show``'s answers in ``_systemctl_show`` and the
  journal's reader in ``_journal``.

The backend ``[agent] backend`` names is picked by the composition root (``bot.agent.service``).
"""

from __future__ import annotations

from bot.agent.control.docker import DockerControl, DockerLogSource
from bot.agent.control.process import FileLogSource, ProcessControl
from bot.agent.control.protocol import (
    MARKER_ENV,
    LogSource,
    ServerControl,
    ServerProcessState,
    StopHow,
    StopResult,
)
from bot.agent.control.systemd import JournalLogSource, SystemdControl

__all__ = [
    "MARKER_ENV",
    "DockerControl",
    "DockerLogSource",
    "FileLogSource",
    "JournalLogSource",
    "LogSource",
    "ProcessControl",
    "ServerControl",
    "ServerProcessState",
    "StopHow",
    "StopResult",
    "SystemdControl",
]
