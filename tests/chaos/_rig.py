"""The whole of kimi-ops under faults of the bot and of the link: the real bot and agent as
processes, and the checker every chaos scenario ends with.

- The agent: ``kimi-ops agent`` on the simulator (process backend, the field notes' host),
  listening on a fixed port so that, killed and started again, it is found at the same place
  (``tests.chat.conftest``).
- Between them an :class:`~tests.chaos._bot_link.AgentLink` the test can cut or make hold.
- The bot: ``kimi-ops bot --http`` as a process (:mod:`tests.chaos._bot_process`), driven
  through signed Slack requests (:mod:`tests.chaos._bot_driver`).
- :func:`~tests.chaos._agreement.check_agreement`: the store, the agent's
  ``/v1/operations/...`` and the messages the stand-in recorded tell one story, and no event,
  revision or audit row is lost or doubled.

The agent-side faults (config writes, a failing rollback, a full disk, RAM eaten) run through
the bot on a small host instead: :mod:`tests.chaos._host_bot`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bot.testing import SlackApiStandIn
from tests.chaos._agreement import FINAL_WORDS, check_agreement
from tests.chaos._bot_driver import BotDriver, proposal_id
from tests.chaos._bot_link import AgentLink
from tests.chaos._bot_process import HOST, BotProcess, bot_config
from tests.chat._core_fixtures import migrated_store
from tests.chat.conftest import RunningAgent, SimHost, agent_on_sim, free_port
from tests.slack._harness import ANA, BEN, CHANNEL

__all__ = [
    "ANA",
    "BEN",
    "CHANNEL",
    "FINAL_WORDS",
    "HOST",
    "BotProcess",
    "ChaosRig",
    "chaos_rig",
    "check_agreement",
    "proposal_id",
]

#: The simulator's KIMI_SIM_TIME_SCALE for the chaos suite.
PACE = 0.004


@dataclass
class ChaosRig(BotDriver):
    """One scenario's running parts and how the test talks to them; ``agent`` is the agent
    process the scenario may kill and start again."""

    agent: RunningAgent = field(kw_only=True)


@contextmanager
def chaos_rig(root: Path, host: SimHost | None = None) -> Iterator[ChaosRig]:
    """Agent (serving size 48), link, stand-in, store and a started bot; all stopped after."""
    # At this pace a start of the field notes' host takes about 3 s: long enough to fault in
    # its middle, short enough for make test. The server serves size 48 (one setup start).
    sim = host or SimHost(time_scale=PACE, serving_ratio=None)
    if sim.listen_port == 0:
        sim = SimHost(**{**sim.__dict__, "listen_port": free_port()})
    with ExitStack() as stack:
        agent = stack.enter_context(agent_on_sim(root / HOST, sim))
        link = AgentLink(sim.listen_port)
        stack.callback(link.close)
        slack = stack.enter_context(SlackApiStandIn())
        store = migrated_store(root)
        stack.callback(store.close)
        bot = BotProcess(bot_config(root, link.url), free_port(), slack, root / "bot.log")
        stack.callback(bot.kill)
        rig = ChaosRig(root, agent.url, link, slack, store, bot, agent=agent)
        rig.begin()
        bot.start()
        yield rig
