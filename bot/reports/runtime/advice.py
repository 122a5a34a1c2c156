"""Recommendations checked by the planner: the agent plans each candidate on the host's live
facts (``POST /v1/plans``, the same planner ``resize`` uses) and the first one it accepts is the
advice; so a recommendation is never one the planner refuses.

For growth the candidates come largest first, and a plan must also leave ``margin_gb`` of
headroom after it ("fits with margin"); for shrinking, any plan that fits will do.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bot.chat.agent_client import AgentClient
from bot.chat.reporting import Advice
from bot.errors import AgentError, AgentPlanRefused
from bot.reports import HostReport, Need, RecommendRules, assess, candidates
from bot.store.records import CapacitySample

__all__ = ["advise"]


def advise(
    report: HostReport,
    samples: Sequence[CapacitySample],
    client: AgentClient,
    rules: RecommendRules,
    now: datetime,
) -> Advice | None:
    """The change ``samples`` call for that the planner accepts, or None."""
    if not report.answered:
        return None
    assessment = assess(samples, now, rules)
    if assessment is None:
        return None
    for candidate in candidates(report.hicache, assessment.need):
        try:
            change = client.plan(ratio=candidate.ratio, size_gb=candidate.size_gb)
        except AgentPlanRefused:  # a value this SGLang rejects: try the next one
            continue
        except AgentError:  # the agent stopped answering: no advice this time
            return None
        plan = change.plan
        if not plan.fits:
            continue
        if assessment.need is Need.GROW and (
            plan.headroom_left_gb is None or plan.headroom_left_gb < rules.margin_gb
        ):
            continue
        return Advice(assessment.evidence, candidate.command, change, report.setting)
    return None
