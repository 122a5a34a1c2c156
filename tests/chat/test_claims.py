"""Finding the operation a claimed proposal started, from the agent's operations answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from bot.chat.agent_client import AgentClient
from bot.chat.claims import operation_for_claim
from bot.chat.policy import ProposalState, ProposalTerms
from bot.settings import Secret

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _operation(op_id: int, kind: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": op_id, "kind": kind, "state": "running", "actor": "ana",
        "created_at": (AT + timedelta(seconds=op_id)).isoformat(), "finished_at": None,
        "plan": None, "revision": 10 + op_id, "request": {"kind": kind, **request},
    }  # fmt: skip


class _NothingKnown:
    def known(self, host: str, operation_id: int) -> bool:
        return False


def _client(operations: list[dict[str, Any]]) -> AgentClient:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/operations"
        return httpx.Response(200, json={"operations": operations})

    return AgentClient(
        "http://agent", Secret("t0ken"), "kimi-01", transport=httpx.MockTransport(answer)
    )


def test_a_rollback_proposal_s_claim_finds_the_rollback_to_its_agent_revision() -> None:
    """An applied rollback proposal (the history's revision 7, the agent's 3) is matched to the
    agent's rollback with revision 3, not to a resize nor to a rollback to another revision.
    Failed before the fix: only resizes were matched, so a lost answer left it unwatched."""
    terms = ProposalTerms(
        id=5, host="kimi-01", proposed_by="ben", created_at=AT, fits=True,
        state=ProposalState.APPLIED, settled_by="ana", settled_at=AT, ratio=4.0,
        fingerprint="f", returns_to=7, agent_revision=3,
    )  # fmt: skip
    answered = [
        _operation(1, "resize", {"ratio": 4.0, "size_gb": None, "revision": None}),
        _operation(2, "rollback", {"ratio": None, "size_gb": None, "revision": 2}),
        _operation(3, "rollback", {"ratio": None, "size_gb": None, "revision": 3}),
    ]
    with _client(answered) as client:
        found = operation_for_claim(client, terms, _NothingKnown())  # type: ignore[arg-type]
    assert found is not None
    assert found.id == 3
