"""The planner's answer as a host agent sends it (``POST /v1/plans``), for :mod:`bot.agent_json`.

A figure the planner could not work out arrives as null and is read as None, never 0; the
fingerprint names the facts the plan was made on, so an Apply on changed facts is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bot._agent_fields import Json, enum_value, field_of, mapping, number, optional, texts
from bot.errors import AgentError
from bot.hicache import HiCacheSetting
from bot.planner import Verdict

__all__ = ["AgentPlan", "PlannedChange"]


@dataclass(frozen=True)
class AgentPlan:
    """The planner's answer, as the agent sends it (GB = 1e9 bytes); a figure it could not work
    out is None, never 0."""

    verdict: Verdict
    reason: str
    setting: str
    ratio: float | None
    size_gb: float | None
    ranks: int
    per_rank_tokens: int | None
    per_rank_gb: float | None
    total_gb: float | None
    free_after_stop_gb: float | None
    budget_gb: float | None
    headroom_left_gb: float | None
    device_tokens: int | None
    host_tokens_before: int | None
    expected_startup_s: float | None
    warnings: tuple[str, ...]
    raw: Json = field(repr=False, compare=False)

    @property
    def fits(self) -> bool:
        return self.verdict is Verdict.FITS

    @property
    def requested_setting(self) -> HiCacheSetting:
        """The HiCache setting the plan was asked for. A size that is not a whole number of GB
        (which SGLang's parser refuses: docs/sglang.md#flags) is left out; ``raw`` keeps the
        request as sent."""
        size = self.size_gb
        whole = int(size) if size is not None and size.is_integer() else None
        return HiCacheSetting(enabled=True, ratio=self.ratio, size_gb=whole)

    @classmethod
    def from_json(cls, body: object) -> AgentPlan:
        where = "the agent's plan"
        plan = mapping(body, where)
        request = mapping(field_of(plan, "request", Mapping, where), f"{where}'s request")
        return cls(
            verdict=enum_value(
                Verdict, field_of(plan, "verdict", str, where), f"{where}'s verdict"
            ),
            reason=field_of(plan, "reason", str, where),
            setting=str(plan.get("setting") or ""),
            ratio=number(request, "ratio", f"{where}'s request"),
            size_gb=number(request, "size_gb", f"{where}'s request"),
            ranks=field_of(plan, "ranks", int, where),
            per_rank_tokens=optional(plan, "per_rank_tokens", int, where),
            per_rank_gb=number(plan, "per_rank_gb", where),
            total_gb=number(plan, "total_gb", where),
            free_after_stop_gb=number(plan, "free_after_stop_gb", where),
            budget_gb=number(plan, "budget_gb", where),
            headroom_left_gb=number(plan, "headroom_left_gb", where),
            device_tokens=optional(plan, "device_tokens", int, where),
            host_tokens_before=optional(plan, "host_tokens_before", int, where),
            expected_startup_s=number(plan, "expected_startup_s", where),
            warnings=texts(plan, "warnings", where),
            raw=dict(plan),
        )


@dataclass(frozen=True)
class PlannedChange:
    """``POST /v1/plans``: the plan and the fingerprint of the facts it was made on."""

    plan: AgentPlan
    fingerprint: str

    @classmethod
    def from_json(cls, body: object) -> PlannedChange:
        answer = mapping(body, "the agent's plan answer")
        fingerprint = field_of(answer, "fingerprint", str, "the agent's plan answer")
        if not fingerprint:
            raise AgentError("the agent's plan answer has an empty 'fingerprint'")
        return cls(AgentPlan.from_json(answer.get("plan")), fingerprint)
