"""Stand-ins for Slack that kimi-ops' Slack app is tested against, shipped like ``bot.sim``.

- :class:`SlackApiStandIn`: Slack's Web API on 127.0.0.1 (``WebClient(base_url=stand_in.url)``),
  recording every call, keeping each channel's messages, with injectable 429/500 answers.
- :class:`SocketModeStandIn`: Slack's Socket Mode WebSocket, reached through the Web API
  stand-in's ``apps.connections.open``; pushes envelopes, collects acks, disconnects.
- :class:`SlackRequestSigner`: Slack-signed HTTP requests (slash commands, interactivity) for
  HTTP mode, including unsigned, wrongly signed and replayed ones.
- :mod:`bot.testing.web_channel`: the Web API stand-in's channel page, a Slack channel in the
  browser that sends what a person types and clicks to the app as Slack would.

And for the store: :func:`throwaway_cluster`, a PostgreSQL cluster in a temp dir (when
:func:`postgres_unavailable` gives no reason), for the store's tests and its bench.
"""

from __future__ import annotations

from bot.testing._channels import StoredEphemeral, StoredMessage
from bot.testing._faults import Fault, FaultPlan
from bot.testing._methods import Upload
from bot.testing._payloads import block_actions_payload
from bot.testing._records import RecordedCall
from bot.testing._web_api import (
    RESPONSE_URL_LIMIT,
    RESPONSE_URL_WINDOW_S,
    ResponsePost,
    SlackApiStandIn,
)
from bot.testing.postgres import PgCluster, postgres_unavailable, throwaway_cluster
from bot.testing.signing import REPLAY_WINDOW_S, SignedRequest, SlackRequestSigner, slack_signature
from bot.testing.socket_mode import Envelope, EnvelopeAck, SocketModeStandIn

__all__ = [
    "REPLAY_WINDOW_S",
    "RESPONSE_URL_LIMIT",
    "RESPONSE_URL_WINDOW_S",
    "Envelope",
    "EnvelopeAck",
    "Fault",
    "FaultPlan",
    "PgCluster",
    "RecordedCall",
    "ResponsePost",
    "SignedRequest",
    "SlackApiStandIn",
    "SlackRequestSigner",
    "SocketModeStandIn",
    "StoredEphemeral",
    "StoredMessage",
    "Upload",
    "block_actions_payload",
    "postgres_unavailable",
    "slack_signature",
    "throwaway_cluster",
]
