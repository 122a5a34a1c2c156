"""A taken port, end to end on the process backend with the real simulator as the server: seen
before anything stops when it is taken already, classified from the log when it is taken during
the start, and never rolled back into."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import pytest

from bot.agent.engine.manager import OperationManager
from tests.agent._ops_fixtures import Harness, free_port, harness_factory, sim_command, wait_final

__all__ = ["harness_factory"]

pytestmark = pytest.mark.slow

RATIO_2 = ("--mem-fraction-static", "0.7", "--enable-hierarchical-cache", "--hicache-ratio", "2")


def _listen(port: int) -> socket.socket:
    """Another program holding the server's port (this test process)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


@pytest.fixture
def held() -> Iterator[list[socket.socket]]:
    sockets: list[socket.socket] = []
    yield sockets
    for sock in sockets:
        sock.close()


def _wait_phase(manager: OperationManager, op_id: int, phase: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(e.phase == phase for e in manager.state.events(op_id)):
        assert time.monotonic() < deadline, f"no {phase} event in {timeout_s} s"
        time.sleep(0.01)


def test_a_port_held_by_another_process_refuses_the_start_before_anything_stops(
    harness_factory: Callable[..., Harness], held: list[socket.socket]
) -> None:
    """The server stopped and its port taken by another program: the resize fails at once,
    not started, kind port_in_use, naming the holder's pid; nothing is stopped or started and
    command.json is not rewritten (failed before the fix: the new server loaded to its HTTP
    phase, died of the bind error reported as an unknown death in host_pool, and the rollback
    died of it again)."""
    port = free_port()
    harness = harness_factory(sim_command(port, *RATIO_2))
    harness.start_server()
    control = harness.parts()[0]
    control.stop(5)
    command = control.read_command()
    held.append(_listen(port))
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", ratio=4)
    final = wait_final(manager, op.id)
    events = manager.state.events(op.id)
    assert final.state == "failed", events[-1].message
    assert final.failure is not None
    assert final.failure["kind"] == "port_in_use"
    assert f"port {port} is held by pid " in events[-1].message
    assert "stopping" not in [e.phase for e in events]
    assert harness.log_text().count("server_args=") == 1
    assert control.read_command() == command
    assert control.previous_command() is None


def test_a_port_taken_during_the_start_is_port_in_use_and_not_rolled_back(
    harness_factory: Callable[..., Harness], held: list[socket.socket]
) -> None:
    """The port taken after the old server stopped, while the new one loads: the start dies of
    the bind error, classified port_in_use with uvicorn's line, and no rollback is started
    (the old config would die of the same): one start lost, not two, the server stopped, and
    the message says why (failed before the fix: "unknown", then a rollback into the same)."""
    port = free_port()
    harness = harness_factory(sim_command(port, *RATIO_2), time_scale="0.2")
    harness.start_server()
    manager = harness.manager()
    op = manager.submit("resize", actor="ana", ratio=4)
    _wait_phase(manager, op.id, "starting")
    held.append(_listen(port))
    final = wait_final(manager, op.id, timeout_s=120)
    events = manager.state.events(op.id)
    assert final.state == "failed", events[-1].message
    assert final.failure is not None
    assert final.failure["kind"] == "port_in_use"
    assert any("address already in use" in line for line in final.failure["lines"])
    assert "not rolling back" in events[-1].message
    assert "rolling_back" not in [e.phase for e in events]
    assert harness.log_text().count("server_args=") == 2
    assert not harness.parts()[0].status().running
