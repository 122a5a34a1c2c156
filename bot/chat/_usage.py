"""The usage line of each verb and the help text: the grammar as people read it.

Shared by every front end (Slack shows them in a code span, the terminal as plain lines), so the
grammar and its description cannot drift apart: ``tests/chat/test_grammar.py`` parses every
example shown here.
"""

from __future__ import annotations

__all__ = ["EXAMPLES", "HELP_LINES", "USAGE", "VERBS", "help_lines"]

#: The verbs, in the order help lists them.
VERBS: tuple[str, ...] = (
    "help",
    "status",
    "resize",
    "apply",
    "cancel",
    "restart",
    "rollback",
    "history",
    "hosts",
    "report",
    "fleets",
    "resume",
    "fleet",
    "storage",
    "hicache",
)

USAGE: dict[str, str] = {
    "help": "help | status [host] | resize ratio <R> [host] | resize size <GB> [host] | "
    "resize auto [host] | "
    "apply <proposal> | cancel <proposal> | restart [host] | rollback [revision] [host] | "
    "history [n] [host] | hosts | report [host] | report every <interval> | "
    "report daily HH:MM | report off [N] | report schedules | fleets | "
    "resize ratio <R> fleet <name> | restart fleet <name> | rollback fleet <name> | "
    "resume fleet <name> | fleet <name> rejoin <host> | "
    "storage attach <backend> [key=value ...] [host] | "
    "storage detach [host] | storage clear [host] | hicache write-policy <policy> [host] | "
    "hicache prefetch-policy <policy> [host]",
    "status": "status [host]",
    "resize": "resize ratio <R> [host] | resize size <GB> [host] | resize auto [host] | "
    "resize ratio <R> fleet <name> | resize size <GB> fleet <name>",
    "apply": "apply <proposal>",
    "cancel": "cancel <proposal>",
    "restart": "restart [host] | restart fleet <name>",
    "rollback": "rollback [revision] [host] | rollback fleet <name>",
    "history": "history [n] [host]",
    "hosts": "hosts",
    "report": "report [host] | report every <interval> | report daily HH:MM | report off [N] | "
    "report schedules",
    "fleets": "fleets",
    "resume": "resume fleet <name>",
    "fleet": "fleet <name> rejoin <host>",
    "storage": "storage attach <backend> [key=value ...] [host] | storage detach [host] | "
    "storage clear [host]",
    "hicache": "hicache write-policy <write_through|write_back|write_through_selective> [host] "
    "| hicache prefetch-policy <best_effort|wait_complete|timeout> [host]",
}

#: (example, what it does), as help shows them; ``{zone}`` is where ``report daily`` is read.
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("status", "config, health, KV capacity, host RAM and GPUs of the default host"),
    ("resize ratio 4", "propose host pool = 4 x device pool; shows the RAM it needs"),
    ("resize size 48 kimi-02", "propose 48 GB per rank on host kimi-02"),
    ("resize auto", "propose no ratio or size: SGLang 0.5.23 fits the pool to the host's RAM"),
    ("apply 12", "apply proposal #12 (allowed appliers only)"),
    ("cancel 12", "withdraw proposal #12"),
    ("restart", "restart with the current config, with progress"),
    ("rollback", "return to the last config that became ready"),
    ("rollback 7", "return to revision 7"),
    ("history 5", "the last 5 revisions: who, when, outcome, GB per rank planned and logged"),
    ("hosts", "the agents known and whether each answers"),
    ("report", "the capacity report now"),
    ("report every 6h", "a capacity report here every 6 hours"),
    ("report daily 09:30", "a capacity report here every day at 09:30 {zone}"),
    ("report off", "stop this channel's scheduled reports"),
    ("report off 2", "stop this channel's schedule #2 only"),
    ("report schedules", "the scheduled reports"),
    ("fleets", "the fleets, each replica with its config"),
    ("resize ratio 4 fleet prod", "propose ratio 4 on every replica of fleet prod, one by one"),
    ("restart fleet prod", "restart fleet prod's replicas one by one, out of the router"),
    ("rollback fleet prod", "undo the replicas fleet prod's last rollout changed"),
    ("resume fleet prod", "carry on fleet prod's stopped rollout, or put back its replicas"),
    ("fleet prod rejoin kimi-02", "put kimi-02 back in fleet prod's router once it is healthy"),
    ("storage attach file", "attach HiCache's file storage tier; no restart where SGLang allows"),
    ("storage detach", "detach the storage tier, with no restart"),
)


def help_lines(zone: str = "UTC") -> tuple[str, ...]:
    """The help text, ``report daily`` described in ``zone`` (``[reports] timezone``)."""
    return (
        "Commands (a host name may end any command that takes [host]; without one, the default):",
        *(f"  {example:<24} {what.format(zone=zone)}" for example, what in EXAMPLES),
    )


#: The help text where reports are read in UTC (the default ``[reports] timezone``).
HELP_LINES: tuple[str, ...] = help_lines()
