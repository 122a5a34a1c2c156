"""Who holds the server's port, asked before anything is stopped.

SGLang binds its HTTP port last, after the weights, the pools and the CUDA graphs (docs/sglang.md,
startup phases): a port another process holds costs a whole start, then the rollback's. So the
agent looks first. A listener that is the running server (or one of its children) is no conflict:
the stop frees it. Anything else is::

    port_conflict("0.0.0.0", 30000, server_pids={4242})
    -> "port 30000 is held by pid 5150 (nc -l 30000), not by the server"
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Collection

import psutil

__all__ = ["port_conflict", "server_tree"]


def server_tree(pid: int | None) -> set[int]:
    """``pid`` and every descendant of it (SGLang's ranks and its detokenizer); empty if none."""
    if pid is None:
        return set()
    try:
        process = psutil.Process(pid)
        return {pid, *(child.pid for child in process.children(recursive=True))}
    except psutil.Error:
        return {pid}


def _describe(pid: int) -> str:
    try:
        process = psutil.Process(pid)
        command = " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        return f"pid {pid}"
    return f"pid {pid} ({command[:400]})"


def port_conflict(host: str, port: int, server_pids: Collection[int]) -> str | None:
    """Why the server could not bind ``host:port`` now, naming who holds it; None when it is
    free or held by ``server_pids`` (the running server's tree)."""
    holders: set[int] = set()
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="inet"):
            address = conn.laddr
            if conn.status != psutil.CONN_LISTEN or not isinstance(address, tuple) or not address:
                continue
            if getattr(address, "port", None) == port and conn.pid is not None:
                holders.add(conn.pid)
    foreign = sorted(holders - set(server_pids))
    if foreign:
        who = ", ".join(_describe(pid) for pid in foreign)
        return f"port {port} is held by {who}, not by the server"
    if holders:
        return None  # the server's own: the stop frees it
    return _bind_refused(host, port)


def _bind_refused(host: str, port: int) -> str | None:
    """A bind of the port as SGLang makes it (SO_REUSEADDR), for a holder psutil cannot see."""
    bind_host = "" if host in ("0.0.0.0", "") else host
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind_host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} is in use by a process the agent cannot see"
            return None  # not ours to judge (an address not on this host): let SGLang say
    return None
