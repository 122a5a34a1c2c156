"""The terminal's rollout block: a head, a line per replica with its phase, and for a stopped
rollout which replicas changed and what to type next."""

from __future__ import annotations

from bot.fleet import ReplicaView, RolloutView
from bot.terminal.rollout_wording import replica_end_line, rollout_lines
from bot.vocab import ReplicaPhase, RolloutState

URL = "http://10.0.0.1:30000"


def test_a_stopped_rollout_says_what_changed_and_what_to_do() -> None:
    """Each replica's phase is on its own line; the stop names the changed and unchanged ones."""
    view = RolloutView(
        3,
        "prod",
        "hicache ratio 4",
        "ana",
        RolloutState.STOPPED,
        (
            ReplicaView(
                "kimi-01",
                URL,
                ReplicaPhase.DONE,
                old_config="size 20 GB/rank",
                new_config="ratio 4",
                seconds=31.25,
            ),
            ReplicaView(
                "kimi-02",
                URL,
                ReplicaPhase.ROLLED_BACK,
                operation_id=7,
                detail="its new config failed",
            ),
            ReplicaView("kimi-03", URL, ReplicaPhase.UNCHANGED),
        ),
        reason="kimi-02's new config failed and was rolled back",
    )
    assert rollout_lines(view) == [
        "Rollout #3 of fleet prod: hicache ratio 4 (ana), stopped",
        "  kimi-01  done         size 20 GB/rank -> ratio 4  out of the router 31.2 s",
        "  kimi-02  rolled_back  agent operation 7  (its new config failed)",
        "  kimi-03  unchanged",
        "  stopped: kimi-02's new config failed and was rolled back",
        "  changed: kimi-01; not changed: kimi-02, kimi-03",
        "  'resume fleet prod' carries it on, 'rollback fleet prod' undoes it",
    ]
    assert replica_end_line(view, "kimi-02") == "rollout #3 of fleet prod: kimi-02 rolled_back"


def test_a_stopped_restart_shows_restarting_and_no_undo_advice() -> None:
    """A restart's replica under its agent's operation reads 'restarting' (not 'resizing'),
    and a stopped rollout that changed nothing does not advise 'rollback fleet' (it failed
    before: 'resizing', and "'rollback fleet prod' undoes it")."""
    view = RolloutView(
        5, "prod", "restart", "ana", RolloutState.STOPPED,
        (
            ReplicaView("kimi-01", URL, ReplicaPhase.RESIZING, operation_id=8),
            ReplicaView("kimi-02", URL, ReplicaPhase.UNCHANGED),
        ),
        reason="kimi-02's agent does not answer",
    )  # fmt: skip
    lines = rollout_lines(view)
    assert lines[1] == "  kimi-01  restarting   agent operation 8"
    assert lines[-1] == "  'resume fleet prod' carries it on"


def test_a_rollback_line_names_the_config_it_returns_to() -> None:
    """A rollback's replica line says which config it goes back to, and its phase under the
    agent's operation reads 'rolling back'."""
    view = RolloutView(
        6, "prod", "rollback", "ana", RolloutState.RUNNING,
        (ReplicaView("kimi-01", URL, ReplicaPhase.RESIZING, operation_id=9,
                     new_config="size 20 GB/rank"),),
    )  # fmt: skip
    assert rollout_lines(view)[1] == (
        "  kimi-01  rolling back  back to size 20 GB/rank  agent operation 9"
    )
