"""The parser's phases against the operation's event phases in ``bot.vocab``.

The agent's watcher turns a parsed ``PhaseStarted`` into an operation event with
``EventPhase(event.phase.value)``: a ``Phase`` renamed on one side only would raise there in
the middle of a start. These tests keep the two lists in step.
"""

from __future__ import annotations

from bot.startup import Phase
from bot.vocab import EventPhase


def test_every_parser_phase_is_an_event_phase() -> None:
    """Each Phase's value names an EventPhase, so the watcher can record every phase it parses."""
    event_phases = {phase.value for phase in EventPhase}
    missing = [phase.value for phase in Phase if phase.value not in event_phases]
    assert missing == [], f"Phase values with no EventPhase of the same value: {missing}"


def test_parser_phases_come_in_the_event_phases_order() -> None:
    """The parser's phases stand in EventPhase in the order a start goes through them."""
    order = [phase.value for phase in EventPhase]
    shared = [phase.value for phase in Phase if phase.value in order]
    assert shared == sorted(shared, key=order.index)
