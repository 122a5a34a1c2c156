"""``kimi-ops agent --config FILE``: run the agent on a GPU host.

Loads ``[agent]`` (the file from ``--config`` or ``KIMI_OPS_CONFIG``, the tokens from the variable
``token_env`` names), re-attaches to an operation an earlier run left unfinished, and serves the
HTTP API with uvicorn on ``listen``, over TLS when ``tls_cert`` and ``tls_key`` are set. With port 0
the OS picks a free port; the agent logs::

    kimi-ops agent: TLS certificate sha256:3f1c0a9e...
    kimi-ops agent: listening on https://127.0.0.1:40123

and writes the same URL to ``<state_dir>/agent.addr`` so scripts, tests and the demo find it.
SIGTERM or SIGINT stops serving, then stops watching (the SGLang server keeps running) and exits 0.
Tokens are never logged: settings hold them as ``Secret``.

A non-loopback ``listen`` without TLS is refused before anything starts: one line naming
``tls_cert`` on stderr, exit 2 (:mod:`bot.agent.tls`). So is a second agent on a ``state_dir``
another agent holds: one line naming the holder's pid, exit 2 (:mod:`bot.agent.state_lock`); an
agent removes ``agent.addr`` on exit only while it still holds the address it wrote.

``kimi-ops agent gen-cert --out DIR [--host NAME ...]`` writes a self-signed pair for the agent
and prints its fingerprint, the line the bot's ``[hosts.NAME] fingerprint`` takes
(:mod:`bot.agent.certs`).

``kimi-ops agent adopt-command --config FILE`` makes an edited ``[agent] command`` the command the
process backend starts (its ``command.json``); until then the agent warns at start and in status
that the two differ (:func:`bot.agent.config.command_drift`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
import threading
from pathlib import Path

import anyio.to_thread
import uvicorn

from bot.agent.config import AgentSettings, load_agent_settings
from bot.agent.http._connections import ConnectionCounts, accept_error_handler, guarded_protocol
from bot.agent.http.app import create_app
from bot.agent.rlimits import (
    ACCEPT_BACKLOG,
    connection_cap,
    descriptors_needed,
    raise_descriptor_limit,
)
from bot.agent.service import build_service
from bot.agent.state_lock import StateDirLock
from bot.agent.tls import load_server_certificate, plaintext_refusal, transport_warnings
from bot.agent.write_hook import write_hook_from_environ
from bot.errors import ConfigError, StateDirLocked
from bot.log_throttle import LogThrottle
from bot.settings import CONFIG_ENV, find_config_path
from bot.stoppable_server import StoppableServer

__all__ = ["ADDR_FILE", "configure", "run"]

ADDR_FILE = "agent.addr"
#: Exit code of a start refused for its transport (as for any bad input: see ``bot.cli``).
EXIT_REFUSED = 2
_WORKER_THREADS = 100
log = logging.getLogger("bot.agent")


def configure(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    gen_cert = actions.add_parser(
        "gen-cert",
        help="write a self-signed TLS certificate and key, print the fingerprint to pin",
        description="Write agent.crt and agent.key (0600) into DIR and print the certificate's "
        "sha256: fingerprint, the line [hosts.NAME] fingerprint takes in the bot's config.",
    )
    gen_cert.add_argument("--out", required=True, metavar="DIR", help="where to write the pair")
    gen_cert.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="a DNS name or IP address the bot reaches the agent by (repeat for each; "
        "localhost and 127.0.0.1 are always included)",
    )
    adopt = actions.add_parser(
        "adopt-command",
        help="make an edited [agent] command the command the server is started with",
        description="Write [agent] command into the state directory's command.json (the "
        "recorded command kept as the previous one), so the next start (/kimi restart) runs "
        "it. Refused while an operation runs. Process backend only.",
    )
    adopt.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,  # given before the action, it is not reset here
        help=f"the kimi-ops TOML file (default: ${CONFIG_ENV})",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"the kimi-ops TOML file (default: ${CONFIG_ENV}); its [agent] section is used",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="log verbosity (default info)",
    )


def run(args: argparse.Namespace) -> int:
    if getattr(args, "action", None) == "gen-cert":
        return _gen_cert(Path(args.out), args.host)
    if getattr(args, "action", None) == "adopt-command":
        return _adopt_command(args.config)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    environ = dict(os.environ)
    settings = load_agent_settings(find_config_path(args.config, environ), environ)
    refusal = plaintext_refusal(settings)
    if refusal is not None:
        print(f"kimi-ops agent: {refusal}", file=sys.stderr)
        return EXIT_REFUSED
    for warning in transport_warnings(settings):
        log.warning("kimi-ops agent: %s", warning)
    if settings.tls:
        log.info("kimi-ops agent: TLS certificate %s", load_server_certificate(settings))
    try:
        # Before the state is opened: a second agent must not migrate, resume or serve it.
        lock = StateDirLock.acquire(settings.state_dir)
    except StateDirLocked as exc:
        print(f"kimi-ops agent: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        return _serve(settings, environ)
    finally:
        lock.release()


def _serve(settings: AgentSettings, environ: dict[str, str]) -> int:
    """Build the agent, resume what an earlier run left, and serve until stopped."""
    # A test hook only (bot.agent.write_hook): unset in production, read once here.
    service = build_service(settings, write_hook=write_hook_from_environ(environ))
    drift = service.manager.command_drift()
    if drift is not None:
        log.warning("kimi-ops agent: %s", drift)
    server: _Server | None = None
    try:
        # Bind first: a taken port must fail before any operation is resumed.
        sock = _bind(settings.listen_host, settings.listen_port)
        service.resume()
        app = create_app(service, settings.http)
        throttle = LogThrottle(log)
        config = uvicorn.Config(
            app,
            log_config=None,  # keep our logging; uvicorn's access lines carry no headers
            lifespan="off",
            timeout_graceful_shutdown=5,
            server_header=False,
            ssl_certfile=settings.tls_cert,
            ssl_keyfile=settings.tls_key,
            http=guarded_protocol(
                _connection_counts(settings), settings.http.header_timeout_s, throttle
            ),
            backlog=ACCEPT_BACKLOG,
        )
        server = _Server(config, settings, app.state.stopping, throttle)
        server.run(sockets=[sock])
    finally:
        _remove_addr(settings.state_dir, None if server is None else server.url)
        service.close()
    log.info("kimi-ops agent: stopped")
    return 0


def _adopt_command(config: str | None) -> int:
    """``adopt-command``: the configured command becomes the recorded one; prints what it did."""
    environ = dict(os.environ)
    settings = load_agent_settings(find_config_path(config, environ), environ)
    service = build_service(settings)
    try:
        print(service.manager.adopt_configured_command())
    finally:
        service.close()
    return 0


def _connection_counts(settings: AgentSettings) -> ConnectionCounts:
    """The caps on connections, the total lowered to what the descriptor limit leaves room for
    (bot.agent.rlimits), with a warning naming the fix when it is."""
    wanted = settings.http.max_connections
    soft = raise_descriptor_limit(descriptors_needed(wanted))
    total = connection_cap(wanted, soft)
    if total < wanted:
        log.warning(
            "kimi-ops agent: the open-file limit is %d; serving at most %d connections instead of "
            "max_connections %d (raise LimitNOFILE to %d or more)",
            soft,
            total,
            wanted,
            descriptors_needed(wanted),
        )
    return ConnectionCounts(total, settings.http.max_connections_per_client)


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one), before uvicorn takes it."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(ACCEPT_BACKLOG)
    except OSError as exc:
        raise ConfigError(f"[agent] listen {host}:{port} cannot be bound: {exc}") from exc
    sock.set_inheritable(True)
    return sock


def _gen_cert(out_dir: Path, hosts: list[str]) -> int:
    from bot.agent.certs import generate_certificate  # cryptography only for this command

    made = generate_certificate(out_dir, hosts)
    print(
        f"wrote {made.cert_path} and {made.key_path} (0600) for {', '.join(made.names)}; "
        "set [agent] tls_cert and tls_key to them, and in the bot's [hosts.NAME]:",
        file=sys.stderr,
    )
    print(made.fingerprint)
    return 0


def _url(host: str, port: int, tls: bool) -> str:
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _write_addr(state_dir: Path, url: str) -> None:
    """Write the URL atomically, so a reader never sees half of it."""
    path = state_dir / ADDR_FILE
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(url + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _remove_addr(state_dir: Path, written: str | None) -> None:
    """Remove ``agent.addr`` if it still holds the URL this agent wrote, never another's."""
    if written is None:
        return
    path = state_dir / ADDR_FILE
    try:
        if path.read_text(encoding="utf-8").strip() == written:
            path.unlink()
    except OSError:
        pass  # gone already, or unreadable: not ours to fix on the way out


class _Server(StoppableServer):
    """The agent's uvicorn: announces its real address, and lets long-polls answer at once when
    it stops (exiting 0 on SIGTERM, as every :class:`StoppableServer`)."""

    def __init__(
        self,
        config: uvicorn.Config,
        settings: AgentSettings,
        stopping: threading.Event,
        throttle: LogThrottle,
    ) -> None:
        super().__init__(config, "kimi-ops agent")
        self._settings = settings
        self._stopping = stopping
        self._throttle = throttle
        #: The URL written to ``agent.addr`` once listening (None before).
        self.url: str | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # Routes run in worker threads (long-polls wait on the loop: bot.agent.http._long_polls).
        anyio.to_thread.current_default_thread_limiter().total_tokens = _WORKER_THREADS
        asyncio.get_running_loop().set_exception_handler(accept_error_handler(self._throttle))
        await super().startup(sockets=sockets)
        if self.should_exit or not sockets:
            return
        host, port = sockets[0].getsockname()[:2]
        url = _url(str(host), int(port), self._settings.tls)
        _write_addr(self._settings.state_dir, url)
        self.url = url
        log.info("kimi-ops agent: listening on %s", url)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._stopping.set()  # long-polls answer now instead of holding the shutdown
        await super().shutdown(sockets=sockets)
