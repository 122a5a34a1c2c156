"""The agent SIGKILLed at random points of an operation the bot started, and started again: the
operation resumes, the server is started at most once per config, the operation ends ready or
rolled back, and the Slack message reaches that end. Each seed draws the points; the test id
carries it, so a failure replays by its node id, ``<this file>::<test name>[seed=N]``
(``-k`` cannot select it: its expressions take no ``=``)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from bot.vocab import OperationState
from tests.chaos._rig import ANA, CHANNEL, ChaosRig, check_agreement, proposal_id
from tests.slack._harness import text_of, wait_until

QUICK_SEEDS = (1, 2, 3)
LONG_SEEDS = tuple(range(4, 21))
#: The kills fall within this many seconds of the Apply, the span of a start at the rig's pace.
_SPAN_S = 4.0
_ENDS = {OperationState.READY: "*READY*", OperationState.ROLLED_BACK: "*ROLLED BACK*"}
#: SGLang's first startup line, once per start of the server (written out in its log).
_START_LINE = "server_args=ServerArgs("


def _starts(log: Path, offset: int) -> list[str]:
    """The startup lines the server logged after ``offset``: one per start."""
    text = log.read_bytes()[offset:].decode(errors="replace")
    return [line for line in text.splitlines() if _START_LINE in line]


def _seeds() -> list[object]:
    quick = [pytest.param(seed, id=f"seed={seed}") for seed in QUICK_SEEDS]
    long = [pytest.param(seed, id=f"seed={seed}", marks=pytest.mark.long) for seed in LONG_SEEDS]
    return [*quick, *long]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", _seeds())
def test_an_agent_killed_at_random_points_resumes_to_one_end(rig: ChaosRig, seed: int) -> None:
    """One or two SIGKILLs of the agent at seeded points after Apply, each followed by a start
    of the agent: the new config started at most once and the server at most twice (the
    rollback's), the operation ends ready or rolled back, and its message says so."""
    print(f"seed={seed}")  # shown with the failure: replay by the test id ending [seed=N]
    draws = random.Random(seed)
    points = sorted(draws.uniform(0.0, _SPAN_S) for _ in range(draws.randint(1, 2)))
    log = rig.agent.root / "server.log"
    offset = log.stat().st_size
    posted = rig.propose()
    rig.click_apply(proposal_id(posted), ANA)
    wait_until(lambda: len(rig.agent_operations()) == 1, what="the operation at the agent")
    applied = time.monotonic()
    for point in points:
        # The point of each kill is the fault: sleep to it, whatever the operation does.
        time.sleep(max(0.0, point - (time.monotonic() - applied)))
        rig.agent.kill()
        rig.agent.start()
    (operation,) = rig.agent_operations()
    wait_until(
        lambda: any(word in _text(rig, posted.ts) for word in _ENDS.values()),
        timeout=150,
        what=f"the message to end (seed={seed}, kills at {points})",
    )
    (operation,) = check_agreement(rig)
    state = OperationState(operation["state"])
    assert state in _ENDS, f"seed={seed}: the operation ended {state}"
    starts = _starts(log, offset)
    assert sum("hicache_ratio=4.0" in line for line in starts) <= 1, starts
    assert len(starts) <= 2, f"seed={seed}: {len(starts)} starts"
    assert _ENDS[state] in _text(rig, posted.ts)


def _text(rig: ChaosRig, ts: str) -> str:
    return text_of(rig.slack.message(CHANNEL, ts) or {})
