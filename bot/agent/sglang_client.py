"""The agent's HTTP client for the SGLang server it controls.

Three questions, each answered with ``None`` when the server cannot be reached (connection
refused, timeout: SGLang opens its port only once uvicorn starts, docs/sglang.md, startup
phases), never with an exception:

- ``health()``: the status code of ``GET /health``. The body is empty, so only the code counts
  (grepping it for "ok" never matches: the field notes' loop timed out twice on a healthy server).
- ``server_info()``: ``GET /server_info`` as a dict, falling back to the deprecated
  ``/get_server_info`` on 404 (the only one up to SGLang 0.5.5)::

      {"enable_hierarchical_cache": true, "hicache_ratio": 2.0, "hicache_size": 48,
       "max_total_num_tokens": 159274, "internal_states": [...], "version": "0.5.9", ...}

- ``metrics()``: ``GET /metrics`` (served with ``--enable-metrics``) parsed from Prometheus text::

      sglang:token_usage{model_name="kimi"} 0.42   ->   {"sglang:token_usage": 0.42}

  Series of one metric with different labels are summed under the bare name.
- ``server_metrics()``: the same text as the figures ``/v1/status`` carries
  (:func:`bot.prometheus.server_metrics`: fractions averaged over DP ranks, counts summed).
- ``load()``: the requests running and queued over every DP rank. SGLang 0.5.23 serves
  ``GET /v1/loads`` (``{"loads": [{"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 0,
  ...}]}``, ``entrypoints/v1_loads.py``); older servers and the router's workers ``GET /get_load``
  (``[{"dp_rank": 0, "num_reqs": 1, "num_waiting_reqs": 0, ...}]``). None when neither answers.

HiCache's runtime API (``entrypoints/http_server.py``, docs/sglang.md, Live changes), each sent
with ``Authorization: Bearer <admin key>`` when the client holds one and answered with
:class:`AdminReply` (SGLang's own status code and text, never an exception):

- ``storage_status()``: ``GET /hicache/storage-backend``, the live values in
  :class:`LiveHiCache`;
- ``attach_storage(...)``: ``PUT /hicache/storage-backend``; ``detach_storage()``: ``DELETE``;
- ``clear_storage()``: ``POST /hicache/storage-backend/clear``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from bot.prometheus import ServerMetrics, prometheus_samples, prometheus_sums, server_metrics
from bot.settings import Secret

__all__ = ["AdminReply", "LiveHiCache", "SGLangClient", "ServerLoad"]


@dataclass(frozen=True)
class LiveHiCache:
    """``GET /hicache/storage-backend``: the values in effect, as SGLang's tokenizer keeps them."""

    storage_backend: str | None
    extra_config: str | None
    prefetch_policy: str | None
    write_policy: str | None

    @classmethod
    def from_json(cls, body: object) -> LiveHiCache | None:
        if not isinstance(body, dict) or "hicache_storage_backend" not in body:
            return None

        def text(key: str) -> str | None:
            value = body.get(key)
            if value is None:
                return None
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True)

        return cls(
            storage_backend=text("hicache_storage_backend"),
            extra_config=text("hicache_storage_backend_extra_config"),
            prefetch_policy=text("hicache_storage_prefetch_policy"),
            write_policy=text("hicache_write_policy"),
        )


@dataclass(frozen=True)
class AdminReply:
    """SGLang's answer to one admin call: its status code (None: no answer) and its own text.

    ``message`` is what SGLang wrote, stripped: "Reject attach: scheduler is not idle.
    #queue-req=0 #running-req=1", "Unauthorized", the missing-admin-key sentence.
    """

    status_code: int | None
    message: str
    live: LiveHiCache | None = None

    @property
    def ok(self) -> bool:
        return self.status_code == 200


@dataclass(frozen=True)
class ServerLoad:
    """Requests running and queued, summed over every DP rank."""

    running: int
    waiting: int
    ranks: int

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.waiting == 0


DEFAULT_TIMEOUT_S = 5.0


class SGLangClient:
    """Talks to one SGLang server at ``base_url`` (``transport`` is for tests: MockTransport)."""

    def __init__(
        self,
        base_url: str,
        transport: httpx.BaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        admin_api_key: Secret | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # Kept as a Secret: the key reaches only the Authorization header, never a log or a body.
        self._admin_api_key = admin_api_key
        # /health runs a 1-token generation and answers 503 after 20 s without one; a timeout
        # shorter than that reads a slow answer as "unreachable", which is the same verdict.
        self._client = httpx.Client(
            base_url=self.base_url, transport=transport, timeout=timeout, trust_env=False
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SGLangClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def holds_admin_key(self) -> bool:
        return bool(self._admin_api_key)

    def _get(self, path: str) -> httpx.Response | None:
        try:
            return self._client.get(path)
        except httpx.TransportError:
            # Refused, reset, timed out, or the server died mid-answer: all "no answer".
            return None

    def health(self) -> int | None:
        """The status code of ``/health`` (200 ready, 503 starting or stopping), None if no
        answer."""
        response = self._get("/health")
        return None if response is None else response.status_code

    def server_info(self) -> dict[str, Any] | None:
        """``/server_info`` (or ``/get_server_info`` on 404) as a dict; None if unavailable."""
        response = self._get("/server_info")
        if response is not None and response.status_code == 404:
            response = self._get("/get_server_info")
        if response is None or response.status_code != 200:
            return None
        try:
            body = response.json()
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def metrics(self) -> dict[str, float] | None:
        """Prometheus metrics by name; None when the server does not serve them."""
        response = self._get("/metrics")
        if response is None or response.status_code != 200:
            return None
        return prometheus_sums(response.text)

    def server_metrics(self) -> ServerMetrics | None:
        """Token usage, running and queued requests, cache hit rate from ``/metrics``; None when
        the server does not serve them (no ``--enable-metrics``) or exports none of them."""
        response = self._get("/metrics")
        if response is None or response.status_code != 200:
            return None
        return server_metrics(prometheus_samples(response.text))

    def load(self) -> ServerLoad | None:
        """Running and queued requests over every DP rank; None when the server cannot tell."""
        response = self._get("/v1/loads")
        if response is not None and response.status_code == 200:
            found = _loads(response, "loads", "num_running_reqs")
            if found is not None:
                return found
        response = self._get("/get_load")
        if response is None or response.status_code != 200:
            return None
        return _loads(response, None, "num_reqs")

    def _admin_headers(self) -> dict[str, str]:
        if not self._admin_api_key:
            return {}
        return {"Authorization": f"Bearer {self._admin_api_key.reveal()}"}

    def _admin(self, method: str, path: str, body: dict[str, Any] | None = None) -> AdminReply:
        headers = self._admin_headers()
        try:
            response = self._client.request(method, path, json=body, headers=headers)
        except httpx.TransportError as exc:
            return AdminReply(None, f"no answer from {self.base_url}{path}: {type(exc).__name__}")
        return AdminReply(response.status_code, _message(response))

    def storage_status(self) -> AdminReply:
        """``GET /hicache/storage-backend``; ``live`` holds the values when SGLang gave them."""
        headers = self._admin_headers()
        try:
            response = self._client.get("/hicache/storage-backend", headers=headers)
        except httpx.TransportError as exc:
            return AdminReply(None, f"no answer from {self.base_url}: {type(exc).__name__}")
        live = None
        if response.status_code == 200:
            try:
                live = LiveHiCache.from_json(response.json())
            except ValueError:
                live = None
            if live is None:
                return AdminReply(None, "GET /hicache/storage-backend gave no HiCache fields")
        return AdminReply(response.status_code, _message(response), live)

    def attach_storage(
        self,
        backend: str,
        extra_config_json: str | None = None,
        prefetch_policy: str | None = None,
        write_policy: str | None = None,
    ) -> AdminReply:
        """``PUT /hicache/storage-backend``: attach ``backend``, or (the same backend already
        attached) change its policies. A field left None is not sent and stays as it is."""
        body: dict[str, Any] = {"hicache_storage_backend": backend}
        if extra_config_json is not None:
            body["hicache_storage_backend_extra_config_json"] = extra_config_json
        if prefetch_policy is not None:
            body["hicache_storage_prefetch_policy"] = prefetch_policy
        if write_policy is not None:
            body["hicache_write_policy"] = write_policy
        return self._admin("PUT", "/hicache/storage-backend", body)

    def detach_storage(self) -> AdminReply:
        """``DELETE /hicache/storage-backend``."""
        return self._admin("DELETE", "/hicache/storage-backend")

    def clear_storage(self) -> AdminReply:
        """``POST /hicache/storage-backend/clear``."""
        return self._admin("POST", "/hicache/storage-backend/clear")


def _message(response: httpx.Response) -> str:
    """SGLang's own words: the text body, or a JSON body's ``error``/``detail``/``message``."""
    text = response.text.strip()
    try:
        body = response.json()
    except ValueError:
        return text
    if isinstance(body, dict):
        for key in ("error", "detail", "message"):
            value = body.get(key)
            if isinstance(value, str):
                return value
            if isinstance(value, dict) and isinstance(value.get("message"), str):
                return str(value["message"])
    return text


def _loads(response: httpx.Response, envelope: str | None, running_key: str) -> ServerLoad | None:
    try:
        body = response.json()
    except ValueError:
        return None
    if envelope is not None:
        body = body.get(envelope) if isinstance(body, dict) else None
    ranks = body if isinstance(body, list) else [body]
    running = waiting = 0
    for rank in ranks:
        if not isinstance(rank, dict) or running_key not in rank:
            return None
        running += int(rank.get(running_key) or 0)
        waiting += int(rank.get("num_waiting_reqs") or 0)
    return ServerLoad(running, waiting, len(ranks))
