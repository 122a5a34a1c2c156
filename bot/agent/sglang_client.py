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
"""

from __future__ import annotations

from typing import Any

import httpx

from bot.prometheus import ServerMetrics, prometheus_samples, prometheus_sums, server_metrics

__all__ = ["SGLangClient"]

DEFAULT_TIMEOUT_S = 5.0


class SGLangClient:
    """Talks to one SGLang server at ``base_url`` (``transport`` is for tests: MockTransport)."""

    def __init__(
        self,
        base_url: str,
        transport: httpx.BaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
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
