"""Fixed inputs for the fleet's Slack messages (:mod:`bot.slack.rollout_messages`), added to
``tests/slack/_samples.py``'s SAMPLES so each has its golden file."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from bot.chat.replies import (
    FleetAnswer,
    FleetProposalReply,
    FleetRefusalReply,
    FleetsReply,
    HostAnswer,
    RejoinReply,
    RolloutReply,
)
from bot.fleet import FleetRefusal, ReplicaView, RolloutView
from bot.fleet.rejoin import Rejoined
from bot.slack import rollout_messages
from bot.slack._blocks import SlackMessage
from bot.vocab import ReplicaPhase, RolloutState

__all__ = ["rollout_samples"]

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
#: The field notes' host: ratio 4 is 44.77 GB per rank, 8 ranks.
PLANNED = "ratio 4 x device pool: 8 x 44.77 GB/rank = 358.2 GB of 394.3 GB budget"
OLD, NEW = "size 20 GB/rank", "ratio 4 x device pool"


def _line(host: str, phase: ReplicaPhase = ReplicaPhase.WAITING, **more: object) -> ReplicaView:
    values: dict[str, object] = {"planned": PLANNED, "old_config": OLD, "new_config": NEW}
    values.update(more)
    return ReplicaView(host, f"http://10.0.0.{host[-1]}:30000", phase, **values)  # type: ignore[arg-type]


def _running() -> RolloutView:
    return RolloutView(
        3,
        "prod",
        "hicache ratio 4",
        "U0ANA",
        RolloutState.RUNNING,
        (
            _line("kimi-01", ReplicaPhase.DONE, operation_id=6, revision=9, seconds=31.25),
            _line("kimi-02", ReplicaPhase.RESIZING, operation_id=7),
            _line("kimi-03"),
        ),
    )


def _stopped() -> RolloutView:
    return RolloutView(4, "prod", "hicache ratio 4", "U0ANA", RolloutState.STOPPED, (
        _line("kimi-01", ReplicaPhase.DONE, operation_id=6, revision=9, seconds=31.25),
        _line("kimi-02", ReplicaPhase.ROLLED_BACK, operation_id=7, revision=8, seconds=44.5,
              detail="its new config failed; back on its old one: out of host memory"),
        _line("kimi-03", ReplicaPhase.UNCHANGED),
    ), reason="kimi-02's new config failed and was rolled back")  # fmt: skip


def _restart_stopped() -> RolloutView:
    """A restart that stopped before it changed anything: one replica restarting, when the
    rollout stopped, nothing to undo."""
    return RolloutView(5, "prod", "restart", "U0ANA", RolloutState.STOPPED, (
        _line("kimi-01", ReplicaPhase.RESIZING, operation_id=8, new_config=OLD),
        _line("kimi-02", ReplicaPhase.UNCHANGED, new_config=OLD,
              detail="not taken out: agent kimi-02: no answer in 1 s"),
    ), reason="kimi-02 was not taken out of the router: its agent does not answer")  # fmt: skip


def rollout_samples(
    answers: tuple[HostAnswer, ...],
) -> dict[str, Callable[[], SlackMessage | list[SlackMessage]]]:
    """Every fleet message kind; ``answers`` are the status samples' hosts (one silent)."""
    refusal = FleetRefusal(
        "prod",
        "hicache size 900",
        (("kimi-02", "REFUSED: size 900 needs 8 ranks x 900 GB = 7200.0 GB; 394.3 GB budget"),),
        (_line("kimi-01"), _line("kimi-02", planned="no plan")),
    )
    return {
        "rollout_running": lambda: rollout_messages.rollout_message(_running()),
        "rollout_stopped": lambda: rollout_messages.rollout_message(_stopped()),
        "rollout_replica_end": lambda: rollout_messages.replica_end(_stopped(), "kimi-02"),
        "rollout_started": lambda: rollout_messages.rollout_started(RolloutReply(_running())),
        "fleet_proposal": lambda: rollout_messages.fleet_proposal(
            FleetProposalReply(12, _running(), "U0BEN", T0)
        ),
        "fleet_refused": lambda: rollout_messages.fleet_refusal(FleetRefusalReply(refusal)),
        "fleets": lambda: rollout_messages.fleets_message(
            FleetsReply((FleetAnswer("prod", "http://10.0.0.5:30000", answers, _running()),))
        ),
        "rollout_restart_stopped": lambda: rollout_messages.rollout_message(_restart_stopped()),
        "fleets_out_of_router": lambda: rollout_messages.fleets_message(
            FleetsReply(
                (
                    FleetAnswer(
                        "prod",
                        "http://10.0.0.5:30000",
                        answers,
                        None,
                        stopped=_stopped(),
                        out_of_router=(answers[0].host,),
                    ),
                )
            )
        ),
        "fleets_router_down": lambda: rollout_messages.fleets_message(
            FleetsReply(
                (
                    FleetAnswer(
                        "prod",
                        "http://10.0.0.5:30000",
                        answers,
                        router_problem="router http://10.0.0.5:30000 cannot be "
                        "reached: [Errno 111] Connection refused",
                    ),
                )
            )
        ),
        "fleet_rejoined": lambda: rollout_messages.rejoined(
            RejoinReply(
                "prod",
                (
                    Rejoined("kimi-02", "http://10.0.0.2:30000"),
                    Rejoined(
                        "kimi-03",
                        "http://10.0.0.3:30000",
                        "its server is not healthy (server failed, health None); fix it first",
                    ),
                ),
            )
        ),
    }
