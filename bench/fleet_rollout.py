"""A fleet rollout against its baseline, on one rig: sglang-router 0.3.2 in front of three
simulated replicas, each with its agent, and a load generator through the router.

Prints ONE JSON line (the rollout first, on the fresh rig; then the baseline):

- ``single_restarts_s``: each of three restarts one after another, each through its host's agent
  with the replica left in the router (as done by hand), and ``single_sum_s`` their sum;
  ``single_failed``: the requests that failed through the router meanwhile.
- ``rollout_s``: ``restart fleet`` over the same three replicas (out of the router, drained,
  restarted, back in and healthy, one by one); ``rollout_failed``: the requests that failed.
- ``*_ok``: the requests answered whole in each phase.

The rig is the tests' (``tests/fleet/_rig.py``), so this runs from the repository's root:
``python bench/fleet_rollout.py [--quick]`` (``--quick``: the rollout only).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' rig

from _report import BenchLine

from bot.clock import SystemClock
from bot.fleet import (
    FleetChange,
    FleetDesk,
    FleetRefusal,
    RouterApi,
)
from bot.store import Store, upgrade_to_head
from bot.vocab import (
    OperationKind,
    OperationState,
    RolloutState,
)
from tests.fleet._rig import LoadGenerator, fleet_of, wait_for_traffic
from tests.fleet._routers import VERSIONS


class _Quiet:
    def rollout(self, view: object) -> None:
        pass

    def replica_ended(self, view: object, host: str) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the rollout only, no baseline")
    args = parser.parse_args()
    line = BenchLine("fleet_rollout")
    with tempfile.TemporaryDirectory(prefix="kimi-bench-fleet-") as tmp:
        root = Path(tmp)
        url = f"sqlite:///{root / 'kimi-ops.db'}"
        upgrade_to_head(url)
        with fleet_of(root, VERSIONS[RouterApi.BY_ID]) as fleet:
            figures = line.figures
            with LoadGenerator(fleet.router.url) as load:
                wait_for_traffic(load)
                ok_before, failed_before = load.ok, len(load.failed)
                agents = fleet.agents()
                try:
                    with Store(url) as store:
                        desk = FleetDesk({"prod": fleet.settings()}, store, agents, _Quiet(),
                                         SystemClock(), event_wait_s=0.5)  # fmt: skip
                        change = FleetChange(OperationKind.RESTART)
                        planned = desk.plan("prod", change)
                        assert not isinstance(planned, FleetRefusal)
                        started = time.monotonic()
                        record = desk.begin("prod", change, planned.replicas, "bench", "bench")
                        done = desk.wait(record.id, timeout_s=600)
                        figures["rollout_s"] = round(time.monotonic() - started, 2)
                        desk.close()
                finally:
                    for agent in agents.values():
                        agent.close()
                assert done is not None, "the rollout did not end within 600 s"
                assert done.state is RolloutState.DONE, done
                figures["rollout_ok"] = load.ok - ok_before
                figures["rollout_failed"] = len(load.failed) - failed_before
                figures["rollout_failures"] = load.failed[failed_before:][:3]
                line.check("requests failed during the rollout", len(load.failed) - failed_before,
                           at_most=0)  # fmt: skip
                if args.quick:
                    line.emit()
                    return

                ok_before, failed_before = load.ok, len(load.failed)
                took = []
                for replica in fleet.replicas:
                    started = time.monotonic()
                    page = replica.agent.run_to_end({"kind": "restart", "actor": "bench"})
                    assert page["state"] == OperationState.READY, page["events"][-3:]
                    took.append(round(time.monotonic() - started, 2))
                figures["single_restarts_s"] = took
                figures["single_sum_s"] = round(sum(took), 2)
                figures["single_ok"] = load.ok - ok_before
                figures["single_failed"] = len(load.failed) - failed_before
                figures["single_failures"] = load.failed[failed_before:][:3]
            line.emit()


if __name__ == "__main__":
    main()
