"""The agent-side faults through the bot and Slack: a small simulated host's agent
(:class:`~tests.chaos._agent_rig.AgentRig`, either backend) behind a link, the real bot as a
process, the Slack stand-in and the bot's store.

A scenario proposes with ``/kimi resize``, applies by a signed click, faults the agent (its
write hook, a crashing server, a full disk, RAM eaten) and starts it again where the fault
killed it; it ends with the bot's check (:func:`~tests.chaos._agreement.check_agreement`: store,
agent and Slack message agree, nothing lost or doubled) and the agent's
(:meth:`~tests.chaos._agent_rig.AgentRig.check`: config old or new, never partial; state intact).

One rig serves a whole test module where its scenarios allow (:meth:`BotDriver.begin` starts
each scenario's count): the bot, the stand-in and the first server are started once, and each
scenario only starts the agents it kills.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.testing import SlackApiStandIn
from tests.agent._api_helpers import TOKEN
from tests.chaos._agent_process import AgentProcess
from tests.chaos._agent_rig import RATIO_2, AgentRig
from tests.chaos._agent_setup import build_agent_rig
from tests.chaos._bot_driver import BotDriver
from tests.chaos._bot_link import AgentLink
from tests.chaos._bot_process import HOST, BotProcess, bot_config
from tests.chat._core_fixtures import migrated_store
from tests.chat.conftest import free_port

__all__ = ["HostBotRig", "hicache_ratio", "host_bot_rig"]


def hicache_ratio(argv: Sequence[str]) -> str:
    """The ``--hicache-ratio`` value of a server's command line."""
    return argv[list(argv).index("--hicache-ratio") + 1]


@dataclass
class HostBotRig(BotDriver):
    """The bot's side (:class:`BotDriver`) on ``host``, whose current agent is ``agent``."""

    host: AgentRig = field(kw_only=True)
    agent: AgentProcess = field(kw_only=True)

    def restart_agent(self, crash_at: str | None = None) -> AgentProcess:
        """Stop the current agent if it runs (SIGTERM, exit 0) and start another on the same
        port, armed with ``crash_at`` when given."""
        if self.agent.process.poll() is None:
            assert self.agent.stop() == 0, self.agent.log()[-2000:]
        self.agent = self.host.start_agent(crash_at=crash_at)
        return self.agent


@contextmanager
def host_bot_rig(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    backend: str = "process",
    flags: Sequence[str] = RATIO_2,
    sim_env: Mapping[str, str] | None = None,
    **agent: Any,
) -> Iterator[HostBotRig]:
    """The host's server started and its agent serving on a fixed port, the link, the stand-in,
    the store and a started bot; everything stopped after."""
    port = free_port()
    with ExitStack() as stack:
        host = build_agent_rig(
            root / HOST, monkeypatch, backend, flags, sim_env,
            listen=f"127.0.0.1:{port}", host_name=HOST, **agent,
        )  # fmt: skip
        stack.callback(host.close)
        host.start_server()
        first = host.start_agent()
        link = AgentLink(port)
        stack.callback(link.close)
        slack = stack.enter_context(SlackApiStandIn())
        store = migrated_store(root)
        stack.callback(store.close)
        bot = BotProcess(
            bot_config(root, link.url), free_port(), slack, root / "bot.log", agent_token=TOKEN
        )
        stack.callback(bot.kill)
        rig = HostBotRig(root, first.url, link, slack, store, bot, host=host, agent=first)
        rig.begin()
        bot.start()
        yield rig
