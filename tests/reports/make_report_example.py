"""Make ``docs/report-example.png`` with ``kimi-ops report``, from a simulator run with a resize.

    .venv/bin/python -m tests.reports.make_report_example docs/report-example.png

The field notes' host (449 GB RAM, TP 8, SGLang 0.5.9) serving ratio 2 under synthetic load
(``KIMI_SIM_LOAD``) with ``--enable-metrics``, its agent, and a bot config whose
``[reports] metrics_urls`` names the simulator's ``/metrics``. ``kimi-ops report`` runs every
few seconds (each run stores a sample), ``kimi-ops chat`` resizes to ratio 4 half-way, and the
last ``kimi-ops report --host kimi-01 --png FILE`` draws the chart.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bot.vocab import OperationState
from tests.chat.conftest import TOKEN, TOKEN_ENV, RunningAgent, SimHost, write_agent_config

SAMPLES_BEFORE, SAMPLES_AFTER, EVERY_S = 12, 12, 8.0
HOST = SimHost(
    hicache=("--enable-hierarchical-cache", "--hicache-size", "48", "--enable-metrics"),
    time_scale=0.01,
)


def _kimi_ops(config: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bot", *args[:1], "--config", str(config), *args[1:]],
        env={"PATH": "/usr/bin:/bin", TOKEN_ENV: TOKEN},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode not in (0,):
        raise SystemExit(f"kimi-ops {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        agent_root = root / "kimi-01"
        agent_config = write_agent_config(agent_root, HOST)
        with agent_config.open("a", encoding="utf-8") as handle:
            handle.write('KIMI_SIM_LOAD = "4"\n')
        found = re.search(r'"--port", "(\d+)"', agent_config.read_text())
        assert found is not None
        port = found.group(1)
        agent = RunningAgent(root=agent_root, config=agent_config)
        try:
            agent.start()
            for body in ({"kind": "restart"}, {"kind": "resize", "ratio": 2}):
                page = agent.run_to_end({**body, "actor": "setup"})
                assert page["state"] == OperationState.READY, page["events"][-3:]
            config = root / "kimi-ops.toml"
            config.write_text(
                "\n".join([
                    "[store]", f'url = "sqlite:///{root / "kimi-ops.db"}"', "",
                    "[policy]", 'appliers = ["ana"]', "",
                    "[reports]",
                    f'metrics_urls = {{ kimi-01 = "http://127.0.0.1:{port}/metrics" }}', "",
                    "[hosts.kimi-01]", f'url = "{agent.url}"', f'token_env = "{TOKEN_ENV}"', "",
                ]),
                encoding="utf-8",
            )  # fmt: skip
            for _ in range(SAMPLES_BEFORE):
                _kimi_ops(config, "report", "--host", "kimi-01")
                time.sleep(EVERY_S)
            proposal = _kimi_ops(config, "chat", "--as", "ana", "resize", "ratio", "4")
            number = re.search(r"#(\d+)", proposal)
            assert number is not None, proposal
            _kimi_ops(config, "chat", "--as", "ana", "apply", number.group(1))
            for _ in range(SAMPLES_AFTER):
                time.sleep(EVERY_S)
                _kimi_ops(config, "report", "--host", "kimi-01")
            print(_kimi_ops(config, "report", "--host", "kimi-01", "--png", str(out.resolve())))
        finally:
            agent.close()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/report-example.png"))
