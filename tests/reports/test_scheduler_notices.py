"""The sampling turn posts the agents' memory notices: a real agent on the simulator, its
server ready at ratio 1, another process eating the simulated host's RAM after ready, and the
report scheduler's sampling turn run against it.

small-2gpu: 60 GB available; the server holds 5 GB of its own and 2 x 5.27 GB of host pool at
ratio 1, leaving 44.5 GB; a 40 GB eater leaves 4.5 GB, under the guard's floor (10.74 GB).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.chat.replies import MemoryNoticeReply
from bot.reports import ReportSettings
from bot.reports.runtime import ReportScheduler, attach_reports
from bot.store import Store
from bot.vocab import OperationKind, OperationState
from tests.chat._core_fixtures import RecordingFrontEnd, chat_settings, running_core
from tests.chat.conftest import RunningAgent, SimHost, agent_on_sim
from tests.reports._fixtures import RecordingPoster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SMALL = SimHost(
    profile="small-2gpu",
    hicache=("--mem-fraction-static", "0.7", "--enable-hierarchical-cache", "--hicache-size", "6"),
    serving_ratio=1.0,
    headroom_gb=0,
    time_scale=0.01,
)
SETTINGS = ReportSettings(sample_every_minutes=60, heartbeat_seconds=1, lock_stale_seconds=3)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[RunningAgent]:
    with agent_on_sim(tmp_path / "kimi-01", SMALL) as agent:
        yield agent


def _notices(agent: RunningAgent) -> list[dict[str, object]]:
    with agent.http() as http:
        body = http.get("/v1/status").json()
    return list((body.get("memory_watch") or {}).get("notices") or [])


def test_a_notice_raised_after_ready_is_posted_once_where_the_last_operation_was(
    small: RunningAgent, store: Store, tmp_path: Path
) -> None:
    """RAM eaten after ready: the agent lists one notice; the next sampling turn posts it in the
    channel of the host's last operation (as the bot recorded it), with its figures, and the
    turn after posts nothing new."""
    with small.http() as http:
        last_op = http.get("/v1/operations", params={"limit": 1}).json()
    last_id = int(last_op["operations"][0]["id"])
    store.record_operation(
        "kimi-01", last_id, OperationKind.RESIZE, state=OperationState.READY, channel="C0OPS"
    )
    poster = RecordingPoster()
    with running_core(chat_settings({"kimi-01": small.url}), store, RecordingFrontEnd()) as core:
        desk = attach_reports(core, store, SETTINGS)
        scheduler = ReportScheduler(core.context, desk, poster, store, SETTINGS)
        env = {
            **os.environ,
            "KIMI_SIM_PROFILE": "small-2gpu",
            "KIMI_SIM_STATE_DIR": str(small.root / "sim-host"),
        }
        eater = subprocess.Popen(
            [sys.executable, "-m", "bot.sim.stray", "--ram-gb", "40"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert eater.stdout is not None
            assert "host RAM" in eater.stdout.readline()
            deadline = time.monotonic() + 60
            while not _notices(small):
                assert time.monotonic() < deadline, "no memory notice within 60 s"
                time.sleep(0.5)
            scheduler.run_sample()
            scheduler.run_sample()
        finally:
            eater.kill()
            eater.wait(timeout=30)
            assert eater.stdout is not None
            eater.stdout.close()
    posts = [(channel, reply) for channel, reply in poster.posts]
    assert len(posts) == 1, posts
    channel, reply = posts[0]
    assert channel == "C0OPS"
    assert isinstance(reply, MemoryNoticeReply)
    assert reply.host == "kimi-01"
    assert reply.notice.headroom_gb == pytest.approx(60 - 5 - 2 * 5.27 - 40, abs=0.05)
    assert reply.notice.floor_gb == 10.74
    assert reply.operation_id is not None
