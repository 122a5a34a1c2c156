"""Planning a fleet as a whole with an agent down or hung, over real HTTP: a port with nothing
listening, and a socket that accepts and never answers (what an agent stopped by SIGSTOP looks
like from the bot). Every kind of change is refused naming the host, before anything is
touched; the hung agent is given up after the read deadline."""

from __future__ import annotations

import pytest

from bot.chat.agent_client import AgentClient
from bot.errors import AgentUnreachable
from bot.fleet import FleetChange, FleetRefusal, FleetSettings, plan_fleet
from bot.settings import Secret
from bot.vocab import OperationKind
from tests.fleet._standins import StandInAgent, dead_url, hung_listener

HOSTS = ("kimi-01", "kimi-02", "kimi-03")
FLEET = FleetSettings("prod", "http://127.0.0.1:9", HOSTS)


@pytest.mark.parametrize("kind", [OperationKind.RESTART, OperationKind.ROLLBACK])
def test_an_agent_down_refuses_a_restart_or_rollback_naming_it(kind: OperationKind) -> None:
    """kimi-02's agent has nothing listening: the plan is a refusal naming kimi-02 and saying
    its agent does not answer, and every line keeps a URL the store can record (it failed
    before: the refusal spoke only of a missing URL, and its empty URL could not be recorded)."""
    with AgentClient(dead_url(), Secret("t"), host="kimi-02") as down:
        agents = {
            "kimi-01": StandInAgent("kimi-01", "http://10.0.0.11:30000"),
            "kimi-02": down,
            "kimi-03": StandInAgent("kimi-03", "http://10.0.0.13:30000"),
        }
        planned = plan_fleet(FLEET, agents, FleetChange(kind))
    assert isinstance(planned, FleetRefusal), planned
    ((host, why),) = planned.reasons
    assert host == "kimi-02"
    assert why.startswith("its agent does not answer (agent kimi-02 cannot be reached")
    assert all(line.url for line in planned.replicas)


def test_a_hung_agent_is_given_up_after_the_read_deadline_and_named() -> None:
    """kimi-03's socket accepts and never answers: its status read ends after the client's
    read deadline, saying so, and the fleet's plan refuses naming kimi-03 (before, the read
    waited the ordinary 15 s timeout)."""
    with (
        hung_listener() as url,
        AgentClient(url, Secret("t"), host="kimi-03", read_deadline_s=0.3) as hung,
    ):
        with pytest.raises(AgentUnreachable, match=r"^agent kimi-03: no answer in 0\.3 s$"):
            hung.status()
        agents = {
            "kimi-01": StandInAgent("kimi-01", "http://10.0.0.11:30000"),
            "kimi-02": StandInAgent("kimi-02", "http://10.0.0.12:30000"),
            "kimi-03": hung,
        }
        planned = plan_fleet(FLEET, agents, FleetChange(OperationKind.RESTART))
    assert isinstance(planned, FleetRefusal), planned
    assert planned.reasons == (
        ("kimi-03", "its agent does not answer (agent kimi-03: no answer in 0.3 s); nothing "
         "was touched"),
    )  # fmt: skip
