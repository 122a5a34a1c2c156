"""One typed client for one agent's HTTP API: the only way the bot talks to a GPU host.

Every call returns a frozen value of :mod:`bot.agent_json` or raises a kind of
:class:`~bot.errors.AgentError` (the kinds and their status codes are drawn in :mod:`bot.errors`)
carrying the agent's body; httpx's own errors never leave this module. Tests pass ``transport=``
(``httpx.MockTransport``, or real HTTP to an agent subprocess). ``tls=`` says how an
``https://`` agent's certificate is checked (:mod:`bot.chat.agent_tls`); a certificate refused
there is :class:`~bot.errors.AgentCertificateError`, raised before any request is sent::

    client = AgentClient("http://127.0.0.1:7300", Secret("..."))
    change = client.plan(ratio=4)                   # PlannedChange(plan=..., fingerprint=...)
    op = client.submit(OperationKind.RESIZE, actor="U1", ratio=4, fingerprint=change.fingerprint)
    page = client.events(op.id, after=0, wait_s=20)  # long-poll: returns on the first new event
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import httpx

from bot.agent_json import (
    AgentEvent,
    AgentOperation,
    AgentPlan,
    AgentStatus,
    OperationPage,
    PlannedChange,
)
from bot.chat.agent_tls import PinMismatch, TlsPolicy, client_context, find_certificate_error
from bot.chat.config import DEFAULT_READ_DEADLINE_S, ChatSettings
from bot.errors import (
    AgentAuthError,
    AgentBusy,
    AgentCertificateError,
    AgentError,
    AgentNotFound,
    AgentPlanRefused,
    AgentRejected,
    AgentStale,
    AgentUnavailable,
    AgentUnreachable,
)
from bot.settings import Secret
from bot.store import AgentRevision, read_revisions
from bot.tls import short_fingerprint
from bot.vocab import OperationKind

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "KEEPALIVE_S",
    "LONG_POLL_MARGIN_S",
    "READ_DEADLINE_S",
    "AgentClient",
    "connect",
    "revisions_source",
]

#: Seconds to connect, send and read an ordinary answer (status reads NVML and psutil: ~1 s).
DEFAULT_TIMEOUT_S = 15.0
#: The deadline of a status-like read (status, the operation list): a hung agent (its process
#: stopped, its socket still accepting) is marked silent after this long, never holding a
#: ``status``, ``hosts``, ``fleets`` or ``report`` for the ordinary timeout.
READ_DEADLINE_S = DEFAULT_READ_DEADLINE_S
#: A long-poll's read timeout is its ``wait`` plus this margin (the agent answers at ``wait``).
LONG_POLL_MARGIN_S = 15.0
#: The agent holds a long-poll at most this long (``bot.agent.api.MAX_WAIT_S``).
MAX_WAIT_S = 60.0
#: An idle connection to an agent is reused for at most this long. The agent's uvicorn closes a
#: connection idle for 5 s (its ``timeout_keep_alive``); httpx's own default is also 5 s, so a
#: request could go out on a connection the agent was closing that instant and fail with
#: "connection reset by peer" (a report over 50 hosts did, asking again after 5 s).
KEEPALIVE_S = 2.0

_T = TypeVar("_T")


class AgentClient:
    """The agent at ``base_url``; ``host`` names it in messages. Thread-safe (httpx.Client is);
    close it, or use it as a context manager."""

    def __init__(
        self,
        base_url: str,
        token: Secret,
        host: str = "",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        tls: TlsPolicy | None = None,
        read_deadline_s: float = READ_DEADLINE_S,
    ) -> None:
        self.base_url = base_url
        self.host = host or base_url
        self._timeout_s = timeout_s
        self._read_deadline_s = read_deadline_s
        self._http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token.reveal()}"},
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(
                max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_S
            ),
            transport=transport,
            verify=client_context(tls or TlsPolicy(), f"[hosts.{self.host}]"),
        )

    def __repr__(self) -> str:  # never the token
        return f"AgentClient({self.base_url!r}, host={self.host!r})"

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- the API ----------------------------------------------------------------------------

    def status(self) -> AgentStatus:
        """The host's status, within the read deadline."""
        body = self._call("GET", "/v1/status", timeout=self._read_timeout())
        return self._parse(AgentStatus.from_json, body, "status")

    def plan(self, ratio: float | None = None, size_gb: int | None = None) -> PlannedChange:
        """Size a change on live facts; neither a ratio nor a size is ``auto`` (SGLang 0.5.23
        sizes the pool itself). A value SGLang itself rejects is :class:`AgentPlanRefused`; an
        over-budget change comes back as a refused plan."""
        body = self._call("POST", "/v1/plans", json=_sizing(ratio, size_gb))
        return self._parse(
            lambda b: PlannedChange(AgentPlan.from_json(b["plan"]), str(b["fingerprint"])),
            body,
            "plan",
        )

    def submit(
        self,
        kind: OperationKind,
        actor: str,
        ratio: float | None = None,
        size_gb: int | None = None,
        revision: int | None = None,
        fingerprint: str | None = None,
    ) -> AgentOperation:
        """Start an operation (the agent re-plans on fresh facts first)."""
        payload: dict[str, Any] = {"kind": kind.value, "actor": actor}
        payload.update(_sizing(ratio, size_gb) if kind is OperationKind.RESIZE else {})
        if revision is not None:
            payload["revision"] = revision
        if fingerprint is not None:
            payload["fingerprint"] = fingerprint
        body = self._call("POST", "/v1/operations", json=payload)
        return self._parse(lambda b: AgentOperation.from_json(b["operation"]), body, "operation")

    def plan_live(self, change: Mapping[str, Any]) -> dict[str, Any]:
        """Live (no restart) or restart for a HiCache runtime change: the agent's ``mode``,
        ``reason`` and ``expected_wait_s`` (``POST /v1/live/plans``)."""
        body = self._call("POST", "/v1/live/plans", json=dict(change))
        return self._parse(lambda b: dict(b), body, "live plan")

    def submit_live(self, change: Mapping[str, Any], actor: str) -> AgentOperation:
        """Start a live change; the agent refuses (422, with why) one that is not live."""
        body = self._call(
            "POST", "/v1/live/operations", json={"actor": actor, "change": dict(change)}
        )
        return self._parse(lambda b: AgentOperation.from_json(b["operation"]), body, "operation")

    def events(self, operation_id: int, after: int = 0, wait_s: float = 0.0) -> OperationPage:
        """The operation and its events after seq ``after``; with ``wait_s`` the agent holds the
        request until an event comes or ``wait_s`` (at most 60 s) passes."""
        wait = max(0.0, min(wait_s, MAX_WAIT_S))
        body = self._call(
            "GET",
            f"/v1/operations/{int(operation_id)}",
            params={"after": max(0, int(after)), "wait": wait},
            timeout=httpx.Timeout(self._timeout_s, read=wait + LONG_POLL_MARGIN_S),
        )
        return self._parse(
            lambda b: OperationPage(
                operation=AgentOperation.from_json(b["operation"]),
                events=tuple(AgentEvent.from_json(event) for event in b["events"]),
                last_seq=int(b["last_seq"]),
            ),
            body,
            "operation",
        )

    def operations(self, limit: int = 20) -> tuple[AgentOperation, ...]:
        body = self._call(
            "GET",
            "/v1/operations",
            params={"limit": max(1, min(limit, 500))},
            timeout=self._read_timeout(),
        )
        return self._parse(
            lambda b: tuple(AgentOperation.from_json(op) for op in b["operations"]),
            body,
            "operations",
        )

    def revisions_answer(self) -> Mapping[str, Any]:
        """``GET /v1/revisions`` as sent (the store records from it), once it reads whole."""
        body = self._call("GET", "/v1/revisions")
        read_revisions(body)
        return body

    def revisions(self) -> dict[int, AgentRevision]:
        """Every config the host ran, by the agent's revision id."""
        return read_revisions(self.revisions_answer())

    # -- the seam ---------------------------------------------------------------------------

    def _read_timeout(self) -> httpx.Timeout:
        """A status-like read's timeout: the whole answer within the read deadline."""
        return httpx.Timeout(self._read_deadline_s)

    def _call(self, method: str, path: str, **kwargs: Any) -> Mapping[str, Any]:
        timeout = kwargs.get("timeout")
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            if isinstance(timeout, httpx.Timeout) and timeout.read == self._read_deadline_s:
                raise AgentUnreachable(
                    f"agent {self.host}: no answer in {self._read_deadline_s:g} s"
                ) from exc
            raise AgentUnreachable(f"agent {self.host} did not answer in time ({exc})") from exc
        except httpx.ConnectError as exc:
            refused = find_certificate_error(exc)
            if refused is not None:
                raise self._certificate_error(refused) from exc
            raise AgentUnreachable(f"agent {self.host} cannot be reached: {exc}") from exc
        except httpx.HTTPError as exc:
            raise AgentUnreachable(f"agent {self.host} cannot be reached: {exc}") from exc
        body = _json(response)
        if response.is_success:
            if not isinstance(body, Mapping):
                raise AgentError(f"agent {self.host} sent a body that is not a JSON object")
            return body
        raise self._error(response.status_code, body)

    def _certificate_error(self, refused: ssl.SSLCertVerificationError) -> AgentCertificateError:
        where = f"agent {self.host}"
        if isinstance(refused, PinMismatch):
            return AgentCertificateError(
                f"{where} presented certificate {short_fingerprint(refused.presented)} but "
                f"[hosts.{self.host}] fingerprint pins {short_fingerprint(refused.expected)}; "
                "nothing was sent. If the agent's certificate was replaced on purpose, put the "
                "fingerprint `kimi-ops agent gen-cert` printed in the config"
            )
        reason = refused.verify_message or refused.reason or str(refused)
        return AgentCertificateError(
            f"{where}'s certificate failed verification ({reason}); nothing was sent. Pin it "
            f"with [hosts.{self.host}] fingerprint, or trust its CA with ca_file"
        )

    def _error(self, code: int, body: Any) -> AgentError:
        fields: Mapping[str, Any] = body if isinstance(body, Mapping) else {}
        detail = _detail(fields.get("detail", body))
        where = f"agent {self.host}"
        if code == 401:
            return AgentAuthError(f"{where} refused the token (401); check its token_env")
        if code == 404:
            return AgentNotFound(f"{where}: {detail}", status_code=404, body=body)
        if code == 409 and fields.get("holder"):
            return AgentBusy(
                f"{where}: {detail}", fields, str(fields["holder"]), str(fields.get("since", ""))
            )
        if code == 409:
            return AgentStale(f"{where}: {detail}", status_code=409, body=body)
        if code == 422 and isinstance(fields.get("plan"), Mapping):
            return AgentPlanRefused(detail, fields, fields["plan"])
        if 400 <= code < 500:
            return AgentRejected(f"{where} rejected the request: {detail}", code, body)
        return AgentUnavailable(f"{where} could not answer ({code}): {detail}", body)

    def _parse(self, build: Callable[[Any], _T], body: Mapping[str, Any], what: str) -> _T:
        try:
            return build(body)
        except AgentError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise AgentError(
                f"agent {self.host} sent a {what} kimi-ops cannot read ({exc!r}); "
                "is it another kimi-ops version?"
            ) from exc


def connect(
    settings: ChatSettings,
    host: str,
    environ: Mapping[str, str],
    transport: httpx.BaseTransport | None = None,
) -> AgentClient:
    """A client for the configured ``host``, on the token its ``token_env`` names."""
    spec = settings.host(host)
    return AgentClient(
        spec.url,
        settings.token_for(spec, environ),
        host=spec.name,
        transport=transport,
        tls=spec.tls,
        read_deadline_s=settings.read_deadline_s,
    )


def revisions_source(
    settings: ChatSettings,
    environ: Mapping[str, str],
    transports: Mapping[str, httpx.BaseTransport] | None = None,
) -> Callable[[str], Mapping[str, Any]]:
    """host -> its agent's ``GET /v1/revisions`` answer, each asked on a client of its own (the
    audit asks once per operation recorded or ended)."""

    def answer(host: str) -> Mapping[str, Any]:
        with connect(settings, host, environ, (transports or {}).get(host)) as client:
            return client.revisions_answer()

    return answer


def _sizing(ratio: float | None, size_gb: int | None) -> dict[str, float | bool]:
    """The body's sizing: a size, a ratio, or neither, which is auto-sizing (``resize auto``,
    a proposal recorded with neither)."""
    if size_gb is not None:
        return {"size_gb": float(size_gb)}
    if ratio is not None:
        return {"ratio": float(ratio)}
    return {"auto": True}


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:500]


def _detail(detail: Any) -> str:
    """The agent's ``detail``: a sentence, or pydantic's list of field errors."""
    if isinstance(detail, list):
        parts = []
        for error in detail:
            if isinstance(error, Mapping):
                loc = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
                parts.append(f"{loc}: {error.get('msg', '')}" if loc else str(error.get("msg")))
        return "; ".join(parts) or "invalid request"
    return str(detail)
