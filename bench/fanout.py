"""Does `/kimi status` and a capacity report over 50 hosts take about as long as over one?

What runs: 50 agents, each the real agent (``build_service`` + ``create_app``, its own state
file and SGLang client) on its own real uvicorn server on 127.0.0.1 port 0, all in ONE child
process, so the agents take one core and the bot the other (50 agent processes would fight
for 2 cores, which 50 GPU hosts do not). The agents share one simulated server (small-2gpu,
started by the first, its process control handed to all), so every host reports a running
server with HiCache. The bot is the real chat core in this process (``build_core``, the
report desk on a SQLite store, ``/kimi status`` and ``/kimi report`` through ``core.handle``)
configured with the first 1, 10 and 50 of those hosts. Each figure is the median of
``--repeat`` commands (3; 2 with ``--quick``, which also stops at 10 hosts).

A report also draws each host's chart (matplotlib, in the bot's process, one host after
another): that part grows with the host count, so ``report_gather_s`` (the agents asked in
parallel, samples stored) is given beside the whole report, and ``chart_one_host_s`` (one
host's chart drawn from its stored samples) says what each host adds.

    .venv/bin/python bench/fanout.py [--hosts 1,10,50] [--repeat N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from _report import BenchLine, median

from bot.agent.config import agent_settings_from_config
from bot.agent.http.app import create_app
from bot.agent.service import AgentService, build_service, make_control
from bot.chat import SilentFront, StoreAudit, revisions_source
from bot.chat.config import ChatSettings, HostSettings
from bot.chat.core import build_core
from bot.chat.policy import Actor
from bot.chat.replies import ReportReply, StatusReply
from bot.reports import ReportSettings
from bot.reports.runtime import attach_reports
from bot.store import Store, upgrade_to_head

TOKEN_ENV, TOKEN = "KIMI_AGENT_TOKEN", "bench-t0ken"
TARGET_RATIO = 2.0
ACTOR = Actor("U0BENCH")


# -- the agents' process ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _agent_section(root: Path, n: int, port: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "bot.sim", "--model-path", "/models/m", "--tp", "2",
               "--port", str(port), "--mem-fraction-static", "0.7",
               "--enable-hierarchical-cache", "--hicache-ratio", "2"]  # fmt: skip
    env = {"KIMI_SIM_PROFILE": "small-2gpu", "KIMI_SIM_TIME_SCALE": "0.01",
           "KIMI_SIM_STATE_DIR": str(root / "sim")}  # fmt: skip
    return {
        "backend": "process", "command": command, "server_url": f"http://127.0.0.1:{port}",
        "state_dir": str(root / f"agent-{n:02d}"), "log_file": str(root / "server.log"),
        "probe": "sim", "sim_profile": "small-2gpu", "sim_state_dir": str(root / "sim"),
        "host_name": f"kimi-{n:02d}", "env": env,
    }  # fmt: skip


@contextmanager
def _served(service: AgentService) -> Iterator[str]:
    config = uvicorn.Config(create_app(service), log_config=None, lifespan="off",
                            access_log=False, timeout_graceful_shutdown=2)  # fmt: skip
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise SystemExit("an agent's uvicorn did not start within 60 s")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def serve_agents(root: Path, count: int) -> None:
    """The child: ``count`` agents on one simulated server; their URLs to ``root/urls.json``;
    serves until its stdin closes."""
    port = _free_port()
    environ = {TOKEN_ENV: TOKEN}
    settings = [
        agent_settings_from_config({"agent": _agent_section(root, n, port)}, environ)
        for n in range(1, count + 1)
    ]
    control = make_control(settings[0])
    with ExitStack() as stack:
        services = [build_service(s, control=control) for s in settings]
        for service in services:
            stack.callback(service.close)
        stack.callback(control.stop, 10)
        control.start("bench:1")
        deadline = time.monotonic() + 60
        while services[0].sglang.health() != 200:
            if time.monotonic() > deadline:
                raise SystemExit("the simulator did not become healthy within 60 s")
            time.sleep(0.05)
        urls = [stack.enter_context(_served(service)) for service in services]
        # Written aside then renamed: the bench reads the file as soon as it exists.
        (root / "urls.json.tmp").write_text(json.dumps(urls))
        (root / "urls.json.tmp").rename(root / "urls.json")
        sys.stdin.read()  # until the bench closes our stdin


@contextmanager
def agents(root: Path, count: int) -> Iterator[list[str]]:
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve-agents", str(count), "--root", str(root)],
        stdin=subprocess.PIPE,
    )
    urls_file = root / "urls.json"
    try:
        deadline = time.monotonic() + 180
        while not urls_file.is_file():
            if child.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the {count} agents did not start (exit {child.poll()})")
            time.sleep(0.1)
        yield json.loads(urls_file.read_text())
    finally:
        assert child.stdin is not None
        child.stdin.close()
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(10)


# -- the bot ------------------------------------------------------------------------------------


def _timed(run: Callable[[], Any], repeat: int) -> float:
    took = []
    for _ in range(repeat):
        began = time.perf_counter()
        run()
        took.append(time.perf_counter() - began)
    return median(took)


def _status(core: Any, hosts: int) -> None:
    reply = core.handle("status", ACTOR)
    if not isinstance(reply, StatusReply) or len(reply.hosts) != hosts:
        raise SystemExit(f"status did not answer for {hosts} hosts: {reply}")
    silent = [h.problem for h in reply.hosts if h.status is None]
    if silent:
        raise SystemExit(f"status: {len(silent)} hosts did not answer: {silent[0]}")


def _report(core: Any, hosts: int) -> None:
    reply = core.handle("report", ACTOR)
    if not isinstance(reply, ReportReply) or len(reply.hosts) != hosts:
        raise SystemExit(f"report did not answer for {hosts} hosts: {reply}")
    silent = [v.report.problem for v in reply.hosts if not v.report.answered]
    if silent:
        raise SystemExit(f"report: {len(silent)} hosts did not answer: {silent[0]}")


def over_hosts(root: Path, urls: list[str], repeat: int) -> dict[str, float]:
    """Median seconds of status, report and the report's gathering over these hosts."""
    hosts = tuple(
        HostSettings(f"kimi-{n:02d}", url, TOKEN_ENV, default=n == 1)
        for n, url in enumerate(urls, start=1)
    )
    db = f"sqlite:///{root / f'bot-{len(urls)}.db'}"
    upgrade_to_head(db)
    environ = {TOKEN_ENV: TOKEN}
    with Store(db) as store:
        settings = ChatSettings(hosts=hosts)
        audit = StoreAudit(store, revisions_source(settings, environ))
        core = build_core(settings, audit, SilentFront(), environ)
        try:
            desk = attach_reports(core, store, ReportSettings())
            names = tuple(h.name for h in hosts)
            _status(core, len(urls))  # warm: connections open, the agents' first reads done
            core.handle("report kimi-01", ACTOR)  # and matplotlib's first chart drawn
            first = desk.gather(names[:1])[0]
            return {
                "status_s": _timed(lambda: _status(core, len(urls)), repeat),
                "report_s": _timed(lambda: _report(core, len(urls)), repeat),
                "report_gather_s": _timed(lambda: desk.gather(names), repeat),
                # What each host adds to a report in the bot's process, drawn one after another.
                "chart_one_host_s": _timed(lambda: desk.chart(first), repeat),
            }
        finally:
            core.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,10,50", help="host counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 and 10 hosts, 2 repeats")
    parser.add_argument("--serve-agents", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_agents is not None:
        serve_agents(args.root, args.serve_agents)
        return
    counts = [1, 10] if args.quick else sorted({int(c) for c in args.hosts.split(",")})
    repeat = 2 if args.quick else args.repeat
    if counts[0] < 1 or repeat < 1:
        parser.error("host counts and --repeat must be at least 1")
    line = BenchLine("fanout")
    with tempfile.TemporaryDirectory(prefix="kimi-ops-fanout-bench-") as tmp:
        root = Path(tmp)
        with agents(root / "agents", counts[-1]) as urls:
            by_count = {n: over_hosts(root, urls[:n], repeat) for n in counts}
    one, most = by_count[counts[0]], by_count[counts[-1]]
    line.figures.update(
        agents="the agent's ASGI app on real uvicorn, all in one child process",
        repeat=repeat,
        seconds={
            str(n): {k: round(v, 3) for k, v in figures.items()} for n, figures in by_count.items()
        },
    )
    for what in ("status_s", "report_s", "report_gather_s"):
        line.check(f"{what[:-2]}: {counts[-1]} hosts / {counts[0]}", most[what] / one[what],
                   at_most=TARGET_RATIO, unit="x")  # fmt: skip
    line.emit()


if __name__ == "__main__":
    main()
