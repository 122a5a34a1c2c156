"""The agent's HTTP API: the FastAPI app, its token check and the ``/v1/status`` body.

- :mod:`bot.agent.http.app`: routes, request bodies, error answers (``create_app``);
- :mod:`bot.agent.http.status`: the ``/v1/status`` body built from a facts snapshot;
- :mod:`bot.agent.http._auth`: the bearer-token check and the last-resort catch.
"""

from __future__ import annotations

from bot.agent.http.app import MAX_WAIT_S, ApiService, OperationBody, PlanBody, create_app
from bot.agent.http.status import status_body

__all__ = ["MAX_WAIT_S", "ApiService", "OperationBody", "PlanBody", "create_app", "status_body"]
