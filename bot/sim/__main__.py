"""``python -m bot.sim [SGLang launch_server arguments]``: run one simulated SGLang server."""

from __future__ import annotations

from bot.sim._server import main

raise SystemExit(main())
