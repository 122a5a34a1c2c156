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

A report's charts are drawn when a front end that shows pictures uploads them, after the
message (``SilentFront`` draws none), so ``report_s`` is the message's figures;
``chart_one_host_s`` (one host's chart drawn from its stored samples) says what each host's
chart adds to the thread after it. ``sim_server_info_ms`` is the simulator's ``/server_info``
answer on a kept-alive connection (median of 20), one of the calls each agent's status makes.
``report_gather_s`` is the gathering (every agent asked in parallel, each answer stored as a
sample); ``report_ask_s`` the asking alone.

The same commands are then timed against stand-in agents (``--stand-in-delay-s``, 0.1 s: about
what one real agent on the simulator takes for ``/v1/status`` here), each answering the real
agent's own ``/v1/status`` and ``/v1/operations`` bodies, captured from the first agent, after
that fixed delay, in a child process of their own: ``seconds_stand_in`` is the bot's own share
of a fan-out, without the 50 agents' work, which one machine serialises and 50 hosts do at
once. Both ratios are checked against the target.

    .venv/bin/python bench/fanout.py [--hosts 1,10,50] [--repeat N] [--stand-in-delay-s S]
                                     [--quick]
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
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from _agent_stand_in import agent_stand_in
from _ports import free_port
from _report import BenchLine, median

from bot.agent.config import agent_settings_from_config
from bot.agent.http.app import create_app
from bot.agent.service import AgentService, build_service, make_control
from bot.chat import SilentFront, StoreAudit, revisions_source
from bot.chat.config import ChatSettings, HostSettings
from bot.chat.core import build_core
from bot.chat.policy import Actor
from bot.chat.replies import ReportReply, StatusReply
from bot.clock import SystemClock
from bot.reports import ReportSettings
from bot.reports.runtime import ServerMetricsSource, attach_reports, collect_reports
from bot.store import Store, upgrade_to_head

TOKEN_ENV, TOKEN = "KIMI_AGENT_TOKEN", "bench-t0ken"
TARGET_RATIO = 2.0
ACTOR = Actor("U0BENCH")
STAND_IN_DELAY_S = 0.1


# -- the agents' process ------------------------------------------------------------------------


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
    port = free_port()
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
        (root / "sim_url").write_text(settings[0].server_url)
        _serve_until_closed(root, urls)


def _serve_until_closed(root: Path, urls: list[str]) -> None:
    # Written aside then renamed: the bench reads the file as soon as it exists.
    (root / "urls.json.tmp").write_text(json.dumps(urls))
    (root / "urls.json.tmp").rename(root / "urls.json")
    sys.stdin.read()  # until the bench closes our stdin


def serve_stand_ins(root: Path, count: int, delay_s: float) -> None:
    """The child: ``count`` stand-in agents answering the bodies in ``root/bodies.json`` after
    ``delay_s``; their URLs to ``root/urls.json``; serves until its stdin closes."""
    bodies = json.loads((root / "bodies.json").read_text())
    with ExitStack() as stack:
        urls = [stack.enter_context(_stand_in(n, bodies, delay_s)) for n in range(1, count + 1)]
        _serve_until_closed(root, urls)


def _stand_in(n: int, bodies: dict[str, Any], delay_s: float) -> AbstractContextManager[str]:
    status = {**bodies["status"], "host": {**bodies["status"]["host"], "name": f"kimi-{n:02d}"}}
    answers = {
        "/v1/status": json.dumps(status).encode(),
        "/v1/operations": json.dumps(bodies["operations"]).encode(),
    }
    return agent_stand_in(answers, dict.fromkeys(answers, delay_s))


def sim_answer_ms(url: str, repeat: int = 20) -> float:
    """Median milliseconds for the simulator's small ``/server_info`` answer on a kept-alive
    connection: what each agent's status waits for it (about 40 ms while Nagle's algorithm held
    the body back for the delayed ACK)."""
    with httpx.Client(base_url=url, timeout=60) as http:
        http.get("/server_info").raise_for_status()  # the connection opened
        return 1000 * _timed(lambda: http.get("/server_info").raise_for_status(), repeat)


def capture_bodies(url: str, root: Path) -> None:
    """The first real agent's ``/v1/status`` and ``/v1/operations`` answers, for stand-ins."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        bodies = {
            "status": http.get("/v1/status").raise_for_status().json(),
            "operations": http.get("/v1/operations", params={"limit": 50})
            .raise_for_status()
            .json(),
        }
    root.mkdir(parents=True, exist_ok=True)
    (root / "bodies.json").write_text(json.dumps(bodies))


@contextmanager
def agents(root: Path, count: int, stand_in_delay_s: float | None = None) -> Iterator[list[str]]:
    """``count`` real agents in a child process (``stand_in_delay_s`` given: stand-ins
    answering ``root/bodies.json`` after that delay); their URLs."""
    serve = ["--serve-agents", str(count)]
    if stand_in_delay_s is not None:
        serve = ["--serve-stand-ins", str(count), "--stand-in-delay-s", str(stand_in_delay_s)]
    child = subprocess.Popen(
        [sys.executable, __file__, *serve, "--root", str(root)], stdin=subprocess.PIPE
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


def _drawn(desk: Any, report: Any) -> bytes:
    """One host's chart drawn anew (a fresh ChartImage: its PNG is drawn on first use)."""
    return bytes(desk.chart(report).png)


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
        metrics = ServerMetricsSource({})
        try:
            desk = attach_reports(core, store, ReportSettings())
            names = tuple(h.name for h in hosts)
            clients, clock = core.context.clients, SystemClock()
            _status(core, len(urls))  # warm: connections open, the agents' first reads done
            core.handle("report kimi-01", ACTOR)  # and matplotlib's first chart drawn
            first = desk.gather(names[:1])[0]
            if desk.chart(first) is None:
                raise SystemExit("kimi-01 answered but has no chart")
            return {
                "status_s": _timed(lambda: _status(core, len(urls)), repeat),
                "report_s": _timed(lambda: _report(core, len(urls)), repeat),
                "report_gather_s": _timed(lambda: desk.gather(names), repeat),
                # Of the gathering: the agents asked alone, without storing their samples.
                "report_ask_s": _timed(
                    lambda: collect_reports(names, clients, metrics, clock), repeat
                ),
                # What each host adds to a report in the bot's process, drawn one after another.
                "chart_one_host_s": _timed(lambda: _drawn(desk, first), repeat),
            }
        finally:
            metrics.close()
            core.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,10,50", help="host counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 and 10 hosts, 2 repeats")
    parser.add_argument("--stand-in-delay-s", type=float, default=STAND_IN_DELAY_S)
    parser.add_argument("--serve-agents", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-stand-ins", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_agents is not None:
        serve_agents(args.root, args.serve_agents)
        return
    if args.serve_stand_ins is not None:
        serve_stand_ins(args.root, args.serve_stand_ins, args.stand_in_delay_s)
        return
    counts = [1, 10] if args.quick else sorted({int(c) for c in args.hosts.split(",")})
    repeat = 2 if args.quick else args.repeat
    if counts[0] < 1 or repeat < 1 or args.stand_in_delay_s < 0:
        parser.error("host counts and --repeat must be at least 1, --stand-in-delay-s >= 0")
    line = BenchLine("fanout")
    with tempfile.TemporaryDirectory(prefix="kimi-ops-fanout-bench-") as tmp:
        root = Path(tmp)
        with agents(root / "agents", counts[-1]) as urls:
            sim_ms = sim_answer_ms((root / "agents" / "sim_url").read_text())
            real = {n: over_hosts(root, urls[:n], repeat) for n in counts}
            capture_bodies(urls[0], root / "stand-ins")
        with agents(root / "stand-ins", counts[-1], args.stand_in_delay_s) as urls:
            stand_in = {n: over_hosts(root / "stand-ins", urls[:n], repeat) for n in counts}
    line.figures.update(
        agents="the agent's ASGI app on real uvicorn, all in one child process",
        repeat=repeat,
        seconds=_rounded(real),
        stand_in_delay_s=args.stand_in_delay_s,
        seconds_stand_in=_rounded(stand_in),
        sim_server_info_ms=round(sim_ms, 2),
    )
    for by_count, whose in ((real, ""), (stand_in, " (stand-in agents)")):
        one, most = by_count[counts[0]], by_count[counts[-1]]
        for what in ("status_s", "report_s", "report_gather_s"):
            line.check(f"{what[:-2]}: {counts[-1]} hosts / {counts[0]}{whose}",
                       most[what] / one[what], at_most=TARGET_RATIO, unit="x")  # fmt: skip
    line.emit()


def _rounded(by_count: dict[int, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {str(n): {k: round(v, 3) for k, v in figures.items()} for n, figures in by_count.items()}


if __name__ == "__main__":
    main()
