"""``kimi-ops demo`` end to end: simulator, agent over real HTTP, store and the bot's core."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from bot.store import RevisionOutcome

# The field notes' Kimi-K2.5 host: 159,274 device tokens per rank, 8 ranks, and the model's MLA
# shape (kv_lora_rank 512 + qk_rope_head_dim 64, 61 layers, bf16): 70,272 KV bytes per token.
# SGLang sizes a ratio-4 host pool as int(4 x device tokens) plus one page, in GB of 1e9 bytes
# (docs/sglang.md#host-pool-sizing).
DEVICE_TOKENS, RANKS = 159_274, 8
KV_BYTES_PER_TOKEN = (512 + 64) * 61 * 2
RATIO_4_GB = (int(DEVICE_TOKENS * 4) + 1) * KV_BYTES_PER_TOKEN / 1e9
OUTCOMES = {outcome.value for outcome in RevisionOutcome}
DEMO = [sys.executable, "-m", "bot", "demo", "--time-scale", "0.005"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_script_refuses_300_and_brings_ratio_4_to_ready() -> None:
    """``--script`` exits 0 after refusing 8 x 300 GB with the arithmetic, applying ratio 4 as a
    second person to ready, and showing all three revisions in the history."""
    result = subprocess.run(
        [*DEMO, "--script"], capture_output=True, text=True, timeout=280, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"size 300 GB/rank needs {RANKS} ranks x 300.00 GB = {RANKS * 300:.1f} GB" in out
    assert f"ratio 4 needs {RANKS} ranks x {RATIO_4_GB:.2f} GB = {RANKS * RATIO_4_GB:.1f}" in out
    assert "ana@kimi> apply 2" in out
    assert "@ben @ana: Resize kimi-01: hicache ratio 4 is ready" in out
    history = out[out.index("ben@kimi> history") :]
    rows = [line.split() for line in history.splitlines() if re.match(r"^\s+\d+\s+kimi-01\s", line)]
    outcomes = [next(word for word in row if word in OUTCOMES) for row in rows]
    assert outcomes == ["ready", "refused", "ready"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigint_at_the_interactive_prompt_leaves_no_process_behind() -> None:
    """Ctrl-C (SIGINT) at ``--interactive``'s prompt, with stdin a pipe that stays open, stops the
    demo, and neither its agent nor the simulator the agent started outlives it."""
    demo = subprocess.Popen(
        [*DEMO, "--interactive"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert demo.stdout is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in demo.stdout or ()])
    reader.start()
    try:
        seen = _read_until(lines, "Your turn", timeout_s=240)
        time.sleep(0.5)  # the prompt is up: input() is waiting on the open pipe
        family = psutil.Process(demo.pid).children(recursive=True)
        commands = [" ".join(p.cmdline()) for p in family]
        assert any("bot agent" in c for c in commands), (commands, seen)
        assert any("bot.sim" in c for c in commands), (commands, seen)
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 130
        _, alive = psutil.wait_procs(family, timeout=10)
        assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        assert demo.stdin is not None
        demo.stdin.close()
        reader.join(timeout=10)
        demo.stdout.close()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_prompt_acts_as_two_people_reports_and_its_hint_works_from_another_shell() -> None:
    """At the interactive prompt 'as ben resize ratio 3' proposes as ben and 'apply N' applies
    it as ana (the second person), 'report' answers (it was "not set up in this process"), the
    printed KIMI_OPS_CONFIG line lets kimi-ops chat in another shell read the same host, and
    Ctrl-C says what it stops before exiting 130 (each failed before)."""
    demo = subprocess.Popen(
        [*DEMO, "--interactive"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert demo.stdout is not None
    assert demo.stdin is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in demo.stdout or ()])
    reader.start()

    def send(text: str) -> None:
        assert demo.stdin is not None
        demo.stdin.write(text + "\n")
        demo.stdin.flush()

    try:
        seen = "".join(_read_until(lines, "kimi-ops chat --as ana status", timeout_s=240))
        export = re.search(r"export (KIMI_OPS_CONFIG=\S+) (KIMI_DEMO_AGENT_TOKEN=\S+)", seen)
        assert export is not None, seen
        other_env = dict(item.split("=", 1) for item in export.groups())
        other = subprocess.run(
            [sys.executable, "-m", "bot", "chat", "--as", "ana", "status"],
            env={**os.environ, **other_env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert other.returncode == 0, other.stdout + other.stderr
        assert "kimi-01" in other.stdout
        assert "server running" in other.stdout

        send("as ben resize ratio 3")
        proposed = "".join(_read_until(lines, "apply with:", timeout_s=60))
        number = re.search(r"Proposal #(\d+) for kimi-01", proposed)
        assert number is not None, proposed
        send(f"apply {number.group(1)}")
        applied = "".join(_read_until(lines, "is ready", timeout_s=240))
        assert "@ben @ana" in applied or "@ana @ben" in applied, applied
        send("report")
        report = "".join(_read_until(lines, "kimi-01", timeout_s=60))
        assert "not set up" not in report, report
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 130
        tail = "".join(_read_until(lines, "interrupted", timeout_s=10))
        assert "stopping the demo's agent" in tail
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        demo.stdin.close()
        reader.join(timeout=10)
        demo.stdout.close()


def _read_until(lines: queue.Queue[str], marker: str, timeout_s: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        if marker in line:
            return seen
    raise AssertionError(f"no {marker!r} in the demo's output:\n{''.join(seen)}")
