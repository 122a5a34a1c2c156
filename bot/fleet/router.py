"""One client for SGLang's router (``sglang-router``), whichever worker API it speaks.

The worker API changed twice (each generation checked against its wheel, ``docs/router.md``):

========  ==========================================  ===========================================
0.1.x     ``POST /add_worker?url=U`` (answers once     ``GET /list_workers`` -> ``{"urls": [...]}``
          U is healthy), ``POST /remove_worker?url=U``  (a worker is listed once it was healthy)
0.2.x     ``POST /workers {"url": U}`` (202, queued),  ``GET /workers`` -> ``{"workers": [{"id": U,
          ``DELETE /workers/{U, percent-encoded}``      "url": U, "is_healthy": true, ...}]}``
0.3.x     ``POST /workers {"url": U}`` (202, a job),   the same list; ``id`` is a UUID the router
          ``DELETE /workers/{id}``                      gave, ``GET /workers/{id}`` shows the job
========  ==========================================  ===========================================

:meth:`RouterClient.api` detects the generation once: ``GET /workers`` answers 404 on 0.1.x
(which answers ``GET /list_workers``); on 0.2.x and 0.3.x it lists, and ``GET /workers/{id}``
with an id that is not a UUID tells them apart (0.3.x: 400 "expected UUID"; 0.2.x: 404). None of
the three tells its own version over HTTP, so a router that answers neither is refused with
what it answered. Adding and removing are idempotent, and 0.2.x/0.3.x queue them: the caller
waits on :meth:`RouterClient.worker` for the change to show.

:meth:`RouterClient.breakers` reads the circuit breakers from the router's Prometheus export
(:mod:`bot.fleet.breakers`), which 0.2.x and 0.3.x serve on a port of their own; 0.1.x has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import quote

import httpx

from bot.errors import RouterError, RouterUnsupported
from bot.fleet.breakers import Breaker, breaker_states

__all__ = ["RouterApi", "RouterClient", "RouterWorker", "default_metrics_url"]

#: Seconds for an ordinary router call.
DEFAULT_TIMEOUT_S = 15.0
#: 0.1.x's add answers only once the worker is healthy (its own wait defaults to 300 s); the
#: rollout adds a replica its agent already found ready, so this is a backstop.
ADD_TIMEOUT_S = 120.0
_PROBE_ID = "kimi-ops-probe"
#: Every generation's default ``--prometheus-port``.
DEFAULT_METRICS_PORT = 29000


class RouterApi(StrEnum):
    """The router's worker-API generation, named by the sglang-router releases that speak it."""

    QUERY = "0.1.x"  # /add_worker?url=, /remove_worker?url=, /list_workers
    BY_URL = "0.2.x"  # /workers, /workers/{url}
    BY_ID = "0.3.x"  # /workers (a job), /workers/{uuid}


@dataclass(frozen=True)
class RouterWorker:
    """A worker as the router reports it; ``id`` is what 0.3.x's DELETE takes."""

    url: str
    healthy: bool
    id: str


def _same(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


class RouterClient:
    """The router at ``base_url``. Thread-safe (httpx.Client is); close it after use."""

    def __init__(
        self,
        base_url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        metrics_url: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.metrics_url = metrics_url or default_metrics_url(self.base_url)
        self._http = httpx.Client(
            base_url=self.base_url, timeout=httpx.Timeout(timeout_s), transport=transport
        )
        self._api: RouterApi | None = None

    def __enter__(self) -> RouterClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- detection --------------------------------------------------------------------------

    def api(self) -> RouterApi:
        """The worker-API generation, asked of the router on the first call only."""
        if self._api is None:
            self._api = self._detect()
        return self._api

    def _detect(self) -> RouterApi:
        listing = self._send("GET", "/workers")
        if listing.status_code == 200 and isinstance(_body(listing).get("workers"), list):
            probe = self._send("GET", f"/workers/{_PROBE_ID}")
            if probe.status_code == 400 and "UUID" in probe.text:
                return RouterApi.BY_ID
            if probe.status_code == 404:
                return RouterApi.BY_URL
            seen = f"GET /workers/{_PROBE_ID} answered {probe.status_code}"
        elif listing.status_code == 404:
            old = self._send("GET", "/list_workers")
            if old.status_code == 200 and isinstance(_body(old).get("urls"), list):
                return RouterApi.QUERY
            seen = f"GET /workers answered 404, GET /list_workers {old.status_code}"
        else:
            seen = f"GET /workers answered {listing.status_code}"
        raise RouterUnsupported(
            f"the router at {self.base_url} speaks no worker API kimi-ops knows ({seen}; "
            f"{self._version()}); kimi-ops drives sglang-router "
            f"{', '.join(api.value for api in RouterApi)}"
        )

    def _version(self) -> str:
        """The router's own word on its version, where it gives one."""
        reply = self._send("GET", "/version")
        if reply.status_code == 200 and reply.text.strip():
            return f"it says it is version {reply.text.strip()[:80]}"
        return "it does not tell its version at GET /version"

    # -- workers ----------------------------------------------------------------------------

    def workers(self) -> tuple[RouterWorker, ...]:
        """Every worker the router holds, with its health as the router reports it."""
        if self.api() is RouterApi.QUERY:
            urls = self._json("GET", "/list_workers").get("urls")
            if not isinstance(urls, list):
                raise RouterError(f"router {self.base_url}: /list_workers has no 'urls' list")
            return tuple(RouterWorker(str(url), True, str(url)) for url in urls)
        listed = self._json("GET", "/workers").get("workers")
        if not isinstance(listed, list):
            raise RouterError(f"router {self.base_url}: /workers has no 'workers' list")
        try:
            return tuple(
                RouterWorker(str(w["url"]), bool(w.get("is_healthy", False)), str(w["id"]))
                for w in listed
            )
        except (KeyError, TypeError) as exc:
            raise RouterError(
                f"router {self.base_url} listed a worker kimi-ops cannot read ({exc!r})"
            ) from exc

    def worker(self, url: str) -> RouterWorker | None:
        """The worker at ``url``, or None when the router does not hold it."""
        return next((w for w in self.workers() if _same(w.url, url)), None)

    def add(self, url: str) -> None:
        """Put ``url`` in the router (nothing when it is there). 0.2.x and 0.3.x queue it."""
        if self.worker(url) is not None:
            return
        if self.api() is RouterApi.QUERY:
            self._json(
                "POST", "/add_worker", params={"url": url}, timeout=httpx.Timeout(ADD_TIMEOUT_S)
            )
        else:
            self._json("POST", "/workers", json={"url": url})

    def remove(self, url: str) -> None:
        """Take ``url`` out of the router: new requests stop going to it at once, those it runs
        go on. Nothing when it is not there. 0.2.x and 0.3.x queue it."""
        found = self.worker(url)
        if found is None:
            return
        api = self.api()
        if api is RouterApi.QUERY:
            self._json("POST", "/remove_worker", params={"url": found.url})
        elif api is RouterApi.BY_URL:
            self._json("DELETE", f"/workers/{quote(found.url, safe='')}")
        else:
            self._json("DELETE", f"/workers/{found.id}")

    def breakers(self) -> Mapping[str, Breaker] | None:
        """Each worker's circuit breaker by URL, from the router's Prometheus export; None when
        the router has no breakers (0.1.x). A RouterError when the export cannot be read."""
        if self.api() is RouterApi.QUERY:
            return None
        try:
            reply = self._http.get(self.metrics_url)
        except httpx.HTTPError as exc:
            raise RouterError(
                f"the router's metrics at {self.metrics_url} cannot be read: {exc} "
                "(set router_metrics to its --prometheus-host/--prometheus-port)"
            ) from exc
        if reply.status_code != 200:
            raise RouterError(
                f"the router's metrics at {self.metrics_url} answered {reply.status_code}"
            )
        return breaker_states(reply.text)

    # -- the seam ---------------------------------------------------------------------------

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise RouterError(f"router {self.base_url} cannot be reached: {exc}") from exc

    def _json(self, method: str, path: str, **kwargs: Any) -> Mapping[str, Any]:
        reply = self._send(method, path, **kwargs)
        if not reply.is_success:
            raise RouterError(
                f"router {self.base_url} refused {method} {path} ({reply.status_code}): "
                f"{reply.text.strip()[:300]}"
            )
        return _body(reply)


def default_metrics_url(router_url: str) -> str:
    """Where a router exports Prometheus unless told otherwise: its host, port 29000."""
    host = httpx.URL(router_url).host
    if ":" in host:  # an IPv6 address goes in brackets
        host = f"[{host}]"
    return f"http://{host}:{DEFAULT_METRICS_PORT}/metrics"


def _body(reply: httpx.Response) -> Mapping[str, Any]:
    """The JSON object answered, or an empty one (0.1.x answers some calls in plain text)."""
    try:
        body = reply.json()
    except ValueError:
        return {}
    return body if isinstance(body, Mapping) else {}
