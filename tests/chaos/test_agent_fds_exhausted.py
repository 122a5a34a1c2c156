"""The agent out of file descriptors: half-open connections from one client, and a descriptor
table filled mid-start.

No token is read before a request's headers end, so a client that opens 1,100 connections and
sends part of their headers is the cheapest fault there is. The agent caps what one client holds
and closes connections whose headers are late, so an authorised status answers, and a resize runs
to ready meanwhile. Should the descriptors still run out (a limit lowered on the running agent,
here with ``prlimit``), the follower and the guard retry their reads and say so: a start is
never failed for it.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest

from bot.vocab import EventPhase, OperationState
from tests.chaos._agent_rig import RATIO_2, AgentRig, replace_flag

# Real processes throughout: minutes under a load of 15 on 2 cores, still bounded.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

_PARTIAL = b"GET /v1/status HTTP/1.1\r\nHost: agent\r\nX-Slow: "
_STARVED_S = 5.0
# What the agent holds of the flood: max_connections_per_client.
_FLOOD_HELD = 64


def _phase(name: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: any(event["phase"] == name for event in events)


def _half_open(url: str, count: int, source: str) -> list[socket.socket]:
    """``count`` connections from ``source`` sending part of their headers, never the rest."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    socks: list[socket.socket] = []
    poller = select.poll()
    for _ in range(count):
        sock = socket.socket()
        socks.append(sock)
        sock.setblocking(False)
        sock.bind((source, 0))
        code = sock.connect_ex((host, int(port)))
        assert code in (0, errno.EINPROGRESS), errno.errorcode.get(code)
        poller.register(sock, select.POLLOUT)
    by_fd = {sock.fileno(): sock for sock in socks}
    deadline = time.monotonic() + 20
    while by_fd and time.monotonic() < deadline:
        for fd, _ in poller.poll(500):
            poller.unregister(fd)
            with contextlib.suppress(OSError):
                by_fd.pop(fd).send(_PARTIAL)
    return socks


def test_half_open_connections_and_a_full_descriptor_table_fail_nothing(
    agent_rig: Callable[..., AgentRig],
) -> None:
    """1,100 half-open connections from one client while a resize to ratio 3 runs, and the
    agent's open-file limit cut below what it holds for 5 s of the start: status answers during
    the flood, the agent logs the exhaustion once a minute (not thousands of lines), the resize
    ends ready with every event once, and the server serves ratio 3. Failed before the fix: the
    follower's EMFILE failed the operation ("the server's state is unknown") and the log grew
    by 595,187 lines in 40 s."""
    # A slow pin: the start is still following its log when the descriptors run out.
    rig = agent_rig("process", RATIO_2, sim_env={"KIMI_SIM_FAIL": "slow_pin:150"})
    rig.start_server()
    agent = rig.start_agent()
    old = rig.command_on_disk()
    new = replace_flag(old, "--hicache-ratio", "3")
    process = psutil.Process(agent.process.pid)
    soft, hard = process.rlimit(psutil.RLIMIT_NOFILE)

    flood: list[socket.socket] = []
    try:
        flood += _half_open(agent.url, 1100, "127.0.0.2")
        assert agent.status()["server"]["health_code"] == 200
        submitted = agent.submit(kind="resize", ratio=3)
        assert submitted.status_code == 202, submitted.text
        op_id = int(submitted.json()["id"])
        agent.follow(op_id, until=_phase(EventPhase.HOST_POOL))
        # Below what it holds even once the flood's 64 connections time out: nothing opens.
        process.rlimit(psutil.RLIMIT_NOFILE, (max(8, process.num_fds() - _FLOOD_HELD - 16), hard))
        time.sleep(_STARVED_S)
        process.rlimit(psutil.RLIMIT_NOFILE, (soft, hard))
        final, _ = agent.follow(op_id)
    finally:
        for sock in flood:
            sock.close()
        with contextlib.suppress(psutil.Error):
            process.rlimit(psutil.RLIMIT_NOFILE, (soft, hard))

    assert final["state"] == OperationState.READY, (
        final["operation"].get("failure"),
        "\n".join(line for line in agent.log().splitlines() if "uvicorn.access" not in line)[
            -5000:
        ],
    )
    log = agent.log()
    assert "the agent is out of file descriptors, retrying" in log, log[-3000:]
    assert "the startup guard could not read host RAM" in log
    assert "out of system resource" not in log
    assert len(log.splitlines()) < 400, log[-3000:]
    assert "max_connections_per_client 64" in log
    rig.check(agent, op_id, known=(old, new))
    assert rig.command_on_disk() == new
    info = rig.server_info()
    assert info is not None
    assert info["hicache_ratio"] == 3
    assert agent.stop() == 0
