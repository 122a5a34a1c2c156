"""The agent's HTTP API (FastAPI): status, plans, operations with a long-poll, revisions.

Other tools script against it, so routes and fields are extended, never renamed. Every route but
``GET /healthz`` needs ``Authorization: Bearer <token>`` with one of the agent's tokens (else
``401 {"detail": "unauthorized"}``); a read-only token gets ``403`` on ``POST /v1/operations``.
An operation records the name of the token that started it as its ``caller``.
Bodies are JSON objects checked by pydantic models that forbid unknown fields; a wrong body is
``422`` naming the field and changes nothing. Errors of the agent map to status codes:

====================  ====  =========================================================
PlanRefused           422   ``{"detail": reason, "plan": {...}}``
InputError            422   ``{"detail": message}``
StaleProposal         409   ``{"detail": message}``
OperationConflict     409   ``{"detail": message, "holder": actor, "since": time}``
NotFound              404   ``{"detail": message}``
any other KimiOpsError 503  ``{"detail": message}`` (the host or the server could not answer)
====================  ====  =========================================================

A 503 is also logged as a warning with the same message: the operator on the host sees in the
agent's log what the caller was told (a full disk under the state file, a backend refusing).

Routes are plain ``def`` functions, which FastAPI runs in its thread pool, but for the long-poll:
it waits on the event loop and reads through a pool of its own (:mod:`bot.agent.http._long_polls`),
so any number of waiting polls leaves the pool to ``/v1/status``. A token with
``[agent] max_polls_per_token`` polls waiting gets ``429`` with ``Retry-After`` for one more.
Bodies over ``[agent] max_body_bytes`` get ``413`` before they are read (:mod:`._auth`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Annotated, Any, Protocol

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.types import Receive

from bot.agent.config import HttpLimits
from bot.agent.http._auth import CALLER_STATE, TOKEN_STATE, BearerAuth, BodyLimit, CatchAll
from bot.agent.http._long_polls import RECHECK_S, ChangeFeed, PollSlots, client_gone
from bot.agent.tokens import TokenSet
from bot.errors import (
    InputError,
    KimiOpsError,
    NotFound,
    OperationConflict,
    PlanRefused,
    StaleProposal,
)
from bot.planner import ChangeRequest, LiveChange, Plan
from bot.vocab import LiveChangeKind, OperationKind, OperationState, RefusedBy

__all__ = ["MAX_WAIT_S", "ApiService", "OperationBody", "PlanBody", "create_app"]

log = logging.getLogger(__name__)

#: The longest a long-poll is held open; a larger ``wait`` is cut to this.
MAX_WAIT_S = 60.0
# Far beyond any host (a PB per rank), small enough that the planner's arithmetic stays finite.
_MAX_RATIO = 1e6
_MAX_SIZE_GB = 1e6
#: What a long-poll refused for its token's cap is told to wait before asking again.
POLL_RETRY_AFTER_S = 2


class _Dict(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


class _Operation(_Dict, Protocol):
    @property
    def id(self) -> int: ...

    @property
    def state(self) -> OperationState: ...


class ApiService(Protocol):
    """What the API asks of the agent (``bot.agent.service.AgentService`` provides it)."""

    @property
    def tokens(self) -> TokenSet: ...

    def status(self) -> dict[str, Any]: ...

    def plan(self, request: ChangeRequest) -> tuple[Plan, str]: ...

    def submit(
        self,
        kind: OperationKind,
        actor: str,
        ratio: float | None = None,
        size_gb: float | None = None,
        revision: int | None = None,
        fingerprint: str | None = None,
        caller: str | None = None,
        auto: bool = False,
    ) -> _Operation: ...

    def get(self, op_id: int) -> _Operation: ...

    def wait_events(
        self, op_id: int, after: int, wait_s: float
    ) -> tuple[_Operation, list[Any]]: ...

    def wait_changed(self, timeout_s: float) -> bool: ...

    def recent(self, limit: int) -> list[Any]: ...

    def revisions(self) -> list[Any]: ...

    def plan_live(self, change: LiveChange) -> dict[str, Any]: ...

    def submit_live(
        self, change: LiveChange, actor: str, caller: str | None = None
    ) -> _Operation: ...


Ratio = Annotated[
    float,
    Field(
        allow_inf_nan=False,
        le=_MAX_RATIO,
        description="host pool = ratio x device pool (SGLang --hicache-ratio), e.g. 4",
    ),
]
SizeGb = Annotated[
    float,
    Field(
        allow_inf_nan=False,
        le=_MAX_SIZE_GB,
        description="host pool GB (1e9 bytes) per rank, a whole number (SGLang --hicache-size)",
    ),
]


class PlanBody(BaseModel):
    """A HiCache change to size: ``{"ratio": 4}`` or ``{"size_gb": 48}`` (both: size wins), or
    ``{"auto": true}``: neither flag, SGLang 0.5.23 sizes the pool at start."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ratio: Ratio | None = None
    size_gb: SizeGb | None = None
    auto: bool = False

    @model_validator(mode="after")
    def _one_of(self) -> PlanBody:
        _check_auto(self.auto, self.ratio, self.size_gb)
        if self.ratio is None and self.size_gb is None and not self.auto:
            raise ValueError(
                'give "ratio" (e.g. 4), "size_gb" (GB per rank, e.g. 48) or "auto": true'
            )
        return self


def _check_auto(auto: bool, ratio: float | None, size_gb: float | None) -> None:
    if auto and (ratio is not None or size_gb is not None):
        raise ValueError('"auto" writes neither a ratio nor a size; give "auto" alone')


class OperationBody(BaseModel):
    """An operation to start: resize (ratio or size_gb), restart, or rollback (revision)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Annotated[OperationKind, Field(strict=False)]  # JSON gives the value, not the enum
    actor: str = Field(min_length=1, max_length=200, description="who asked, for the audit")
    ratio: Ratio | None = None
    size_gb: SizeGb | None = None
    auto: bool = False
    revision: int | None = Field(default=None, ge=1, le=2**62, description="rollback target")
    fingerprint: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="the fingerprint of the plan this request was proposed on",
    )

    @model_validator(mode="after")
    def _fits_kind(self) -> OperationBody:
        _check_auto(self.auto, self.ratio, self.size_gb)
        sizing = self.ratio is not None or self.size_gb is not None or self.auto
        if self.kind is OperationKind.RESIZE and not sizing:
            raise ValueError('a resize needs "ratio", "size_gb" or "auto": true')
        if self.kind is not OperationKind.RESIZE and sizing:
            raise ValueError(f'a {self.kind} takes no "ratio" or "size_gb"; use kind "resize"')
        if self.kind is not OperationKind.ROLLBACK and self.revision is not None:
            raise ValueError(f'"revision" belongs to a rollback, not a {self.kind}')
        return self


class LiveChangeBody(BaseModel):
    """A change through HiCache's runtime API: ``{"kind": "storage_attach", "backend": "file",
    "extra_config": "{}"}``, ``{"kind": "write_policy", "policy": "write_back"}``, ..."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Annotated[LiveChangeKind, Field(strict=False)]
    backend: str | None = Field(default=None, min_length=1, max_length=64)
    extra_config: str | None = Field(default=None, max_length=16384, description="JSON text")
    policy: str | None = Field(default=None, min_length=1, max_length=64)

    def change(self) -> LiveChange:
        return LiveChange(self.kind, self.backend, self.extra_config, self.policy)


class LiveOperationBody(BaseModel):
    """A live change to start, and who asked."""

    model_config = ConfigDict(extra="forbid", strict=True)

    actor: str = Field(min_length=1, max_length=200, description="who asked, for the audit")
    change: LiveChangeBody


def create_app(service: ApiService, limits: HttpLimits | None = None) -> FastAPI:
    """The ASGI app serving ``service``, guarded by its token, within ``limits`` (default: the
    settings' defaults)."""
    limits = HttpLimits() if limits is None else limits
    app = FastAPI(
        title="kimi-ops agent",
        version="1",
        description="Plan, apply and watch SGLang HiCache changes on one GPU host.",
        docs_url=None,
        redoc_url=None,
        responses={
            401: {"description": 'missing or wrong bearer token: {"detail": "unauthorized"}'},
            403: {"description": "a read-only token asked to start an operation"},
            503: {"description": "the host, the server control or the state could not answer"},
        },
    )
    _add_error_handlers(app)
    # Set by the server on shutdown: long-polls then answer at once.
    stopping = threading.Event()
    app.state.stopping = stopping
    feed = ChangeFeed(service.wait_changed, stopping)
    slots = PollSlots(limits.max_polls_per_token)

    @app.get("/healthz", summary="liveness of the agent itself (no token needed)")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/status", summary="host, server, config, capacity, RAM, GPUs, operation")
    def status() -> dict[str, Any]:
        return service.status()

    @app.post(
        "/v1/plans",
        summary="size a HiCache change on live facts",
        description=(
            "200 with the Plan (verdict fits or refused, the reason showing the arithmetic) and "
            "the fingerprint of the facts used; 422 with the Plan when SGLang itself would "
            'reject the value (the Plan\'s refused_by is "sglang": a size that is not a whole '
            "number of GB, a ratio <= 0, a host pool not larger than the device pool on <= 0.5.12)."
        ),
    )
    def plan(body: PlanBody) -> dict[str, Any]:
        request = ChangeRequest(ratio=body.ratio, size_gb=body.size_gb, auto=body.auto)
        result, fingerprint = service.plan(request)
        if result.refused_by is RefusedBy.SGLANG:
            raise PlanRefused(result.reason, plan=result)
        return {"plan": result.to_dict(), "fingerprint": fingerprint}

    @app.post(
        "/v1/operations",
        status_code=202,
        summary="start a resize, restart or rollback",
        description="Re-plans on fresh facts: 422 if refused, 409 if stale or busy, else 202.",
        responses={
            404: {"description": "rollback to a revision that does not exist"},
            409: {"description": "stale fingerprint, or another operation holds the server"},
            422: {"description": "invalid body, or the plan is refused (with the Plan)"},
        },
    )
    def submit(body: OperationBody, request: Request) -> JSONResponse:
        operation = service.submit(
            kind=body.kind,
            actor=body.actor,
            ratio=body.ratio,
            size_gb=body.size_gb,
            auto=body.auto,
            revision=body.revision,
            fingerprint=body.fingerprint,
            caller=getattr(request.state, CALLER_STATE, None),
        )
        return JSONResponse(
            {"id": operation.id, "operation": operation.to_dict()},
            status_code=202,
            headers={"location": f"/v1/operations/{operation.id}"},
        )

    @app.get(
        "/v1/operations/{op_id}",
        summary="an operation and its events after SEQ (long-poll up to WAIT seconds)",
        description=f"WAIT is cut to {MAX_WAIT_S:g} s; events are kept, so nothing is lost.",
        responses={
            404: {"description": "no such operation"},
            429: {"description": "this token has max_polls_per_token long-polls waiting"},
        },
    )
    async def operation(
        request: Request,
        op_id: Annotated[int, Path(ge=1, le=2**62)],
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        wait: Annotated[float, Query(ge=0, allow_inf_nan=False)] = 0.0,
    ) -> Any:
        token = request.scope.get("state", {}).get(TOKEN_STATE)
        if wait > 0 and not slots.take(token):
            return JSONResponse(
                {
                    "detail": f"this token already has {slots.per_token} long-polls waiting "
                    f"([agent] max_polls_per_token); retry in {POLL_RETRY_AFTER_S} s"
                },
                status_code=429,
                headers={"retry-after": str(POLL_RETRY_AFTER_S)},
            )
        try:
            view, events = await _long_poll(
                feed, service, op_id, after, wait, stopping, request.receive
            )
        finally:
            if wait > 0:
                slots.give_back(token)
        listed = [event.to_dict() for event in events]
        return {
            "id": view.id,
            "state": view.state,
            "operation": view.to_dict(),
            "events": listed,
            "last_seq": listed[-1]["seq"] if listed else after,
        }

    @app.post(
        "/v1/live/plans",
        summary="live (no restart) or restart for a HiCache runtime change, and why",
    )
    def plan_live(body: LiveChangeBody) -> dict[str, Any]:
        return service.plan_live(body.change())

    @app.post(
        "/v1/live/operations",
        status_code=202,
        summary="start a HiCache storage or policy change: live, or else with a restart",
        description=(
            "Runs as kind live (SGLang's runtime API, no restart) or reconfigure (the flags "
            "written, then a restart); 422 when refused (the reason says why), 409 if busy."
        ),
    )
    def submit_live(body: LiveOperationBody, request: Request) -> JSONResponse:
        operation = service.submit_live(
            body.change.change(), body.actor, getattr(request.state, CALLER_STATE, None)
        )
        return JSONResponse(
            {"id": operation.id, "operation": operation.to_dict()},
            status_code=202,
            headers={"location": f"/v1/operations/{operation.id}"},
        )

    @app.get("/v1/operations", summary="recent operations with their outcome, newest first")
    def operations(limit: Annotated[int, Query(ge=1, le=500)] = 20) -> dict[str, Any]:
        return {"operations": [view.to_dict() for view in service.recent(limit)]}

    @app.get("/v1/revisions", summary="the configurations this host has run, newest first")
    def revisions() -> dict[str, Any]:
        return {"revisions": [revision.to_dict() for revision in service.revisions()]}

    # Added innermost first: the catch-all wraps the token check, which runs before the body
    # limit (a request without a token learns nothing, not even the limit) and any routing.
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    app.add_middleware(BearerAuth, tokens=service.tokens, open_paths=("/healthz",))
    app.add_middleware(CatchAll)
    return app


async def _long_poll(
    feed: ChangeFeed,
    service: ApiService,
    op_id: int,
    after: int,
    wait: float,
    stopping: threading.Event,
    receive: Receive,
) -> tuple[Any, list[Any]]:
    """The operation and its events after ``after``, waiting up to ``wait`` (cut to MAX_WAIT_S)
    for one on the event loop, never in a worker thread; a client that left ends the wait."""
    deadline = time.monotonic() + min(wait, MAX_WAIT_S)
    gone = asyncio.ensure_future(client_gone(receive)) if wait > 0 else None
    try:
        while True:
            woken = feed.subscribe()  # before the read: a change right after it still wakes us
            try:
                view, events = await feed.read(service.wait_events, op_id, after, 0.0)
            except BaseException:
                feed.unsubscribe(woken)
                raise
            remaining = deadline - time.monotonic()
            left = gone is not None and gone.done()
            if events or remaining <= 0 or stopping.is_set() or left:
                feed.unsubscribe(woken)
                return view, events
            await feed.wait(woken, min(remaining, RECHECK_S), gone)
    finally:
        if gone is not None:
            gone.cancel()


def _add_error_handlers(app: FastAPI) -> None:
    def detail(status: int, exc: Exception, **extra: Any) -> JSONResponse:
        return JSONResponse({"detail": str(exc), **extra}, status_code=status)

    async def plan_refused(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, PlanRefused)
        plan = exc.plan.to_dict() if isinstance(exc.plan, Plan) else exc.plan
        return detail(422, exc, plan=plan)

    async def conflict(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, OperationConflict)
        return detail(409, exc, holder=exc.holder, since=exc.since)

    async def invalid(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        # Name the field and the rule; never echo the input back (it may be 10 kB of anything).
        errors = [
            {"loc": list(error.get("loc", ())), "msg": error.get("msg", ""), "type": error["type"]}
            for error in exc.errors()
        ]
        return JSONResponse({"detail": errors}, status_code=422)

    def fixed(status: int) -> Any:
        async def handler(_request: Request, exc: Exception) -> JSONResponse:
            return detail(status, exc)

        return handler

    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(PlanRefused, plan_refused)
    app.add_exception_handler(OperationConflict, conflict)
    app.add_exception_handler(StaleProposal, fixed(409))
    app.add_exception_handler(NotFound, fixed(404))
    app.add_exception_handler(InputError, fixed(422))

    async def unavailable(request: Request, exc: Exception) -> JSONResponse:
        log.warning("%s %s answered 503: %s", request.method, request.url.path, exc)
        return detail(503, exc)

    # The rest of the tree: the host, the backend or the store could not answer.
    app.add_exception_handler(KimiOpsError, unavailable)
