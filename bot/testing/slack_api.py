"""The Slack Web API stand-in, and ``python -m bot.testing.slack_api --port 0`` to run it alone.

Run alone, it prints its base URL (for ``WebClient(base_url=...)``) on the first line and serves
until interrupted; see :class:`SlackApiStandIn` for what it answers and what it does not.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence

from bot.testing._web_api import RESPONSE_URL_LIMIT, RESPONSE_URL_WINDOW_S, SlackApiStandIn

__all__ = ["RESPONSE_URL_LIMIT", "RESPONSE_URL_WINDOW_S", "SlackApiStandIn", "main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Serve until interrupted, printing the base URL first (``--port 0`` picks a free port)."""
    parser = argparse.ArgumentParser(prog="python -m bot.testing.slack_api")
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free)")
    parser.add_argument("--bot-token", default="xoxb-kimi-ops-test")
    parser.add_argument("--app-token", default="xapp-kimi-ops-test")
    args = parser.parse_args(argv)
    stand_in = SlackApiStandIn(port=args.port, bot_token=args.bot_token, app_token=args.app_token)
    print(stand_in.url, flush=True)
    # Ctrl-C is how a person stops it; no traceback for that.
    with contextlib.suppress(KeyboardInterrupt):
        stand_in.serve_forever()


if __name__ == "__main__":
    main()
