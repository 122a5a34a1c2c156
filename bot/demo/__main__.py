"""``make demo``: kimi-ops on one machine with no Slack and no GPU.

A simulated SGLang server on a 449 GB, 8-GPU host serving Kimi-K2.5 at TP 8 (the deployment
docs/sglang.md#host-pool-sizing works through), an agent driving it with the process backend over
real HTTP, and a migrated SQLite store; the script plays the on-call engineer and prints what
Slack would show: bring the server up, refuse `--hicache-size 300`, propose and apply `ratio 4`
with live progress, then the audit, recorded through :mod:`bot.store.from_agent`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bot.demo import _render as render
from bot.demo._stack import DemoStack, demo_stack
from bot.errors import AgentRejected, KimiOpsError
from bot.store import Store, record_agent_operation, record_agent_plan
from bot.store._render import history_table

HOST = "kimi-01"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kimi-ops demo", description=__doc__)
    parser.add_argument(
        "--time-scale", type=float, default=0.03, help="simulated time scale (1.0 = real, ~10 min)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the demo folder afterwards")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="kimi-ops-demo-"))
    print(f"kimi-ops demo in {root} (simulated host: 449 GB RAM, 8 x 96 GiB GPUs, TP 8)")
    try:
        with demo_stack(root, args.time_scale) as stack, stack.client() as client:
            _play(stack, client)
    except (KimiOpsError, httpx.HTTPError) as exc:
        print(f"demo failed: {exc} (logs in {root})", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    return 0


def _play(stack: DemoStack, client: httpx.Client) -> None:
    with Store(stack.db_url) as store:
        print(render.command("/kimi restart   (@ana starts the server: --hicache-size 48)"))
        _run_operation(client, store, {"kind": "restart", "actor": "U0ANA"})

        print(render.command("/kimi status"))
        print(render.status_card(_get(client, "/v1/status")))

        print(render.command("/kimi resize size 300   (@ben, reading --hicache-size as a total)"))
        refused = _post(client, "/v1/plans", {"size_gb": 300})
        print(render.plan_card(refused["plan"], HOST))
        revision = record_agent_plan(store, HOST, refused, proposed_by="U0BEN")
        store.record_refusal("U0BEN", "resize size 300", refused["plan"]["reason"], host=HOST,
                             revision_id=revision.id)  # fmt: skip

        print(render.command("/kimi resize ratio 4   (@ben)"))
        answer = _post(client, "/v1/plans", {"ratio": 4})
        print(render.plan_card(answer["plan"], HOST))
        proposal = record_agent_plan(store, HOST, answer, proposed_by="U0BEN")
        print(render.command("[Apply] clicked by @ana"))
        _run_operation(
            client,
            store,
            {"kind": "resize", "ratio": 4, "actor": "U0ANA", "fingerprint": answer["fingerprint"]},
            revision_id=proposal.id,
        )

        print(render.command("/kimi history"))
        print(history_table(store.history(HOST, 10)))


def _run_operation(
    client: httpx.Client, store: Store, body: dict[str, Any], revision_id: int | None = None
) -> None:
    """Start an operation, show its progress, and record every page of it in the store."""
    response = client.post("/v1/operations", json=body)
    if response.status_code != 202:
        detail = response.json().get("detail")
        raise AgentRejected(
            f"the agent refused the operation: {detail}", response.status_code, response.json()
        )
    operation = response.json()["operation"]
    print(f"  Operation {operation['id']}: {body['kind']} on {HOST} (applied by {body['actor']})")
    started, after = time.monotonic(), 0
    shown: dict[str, Any] = {}
    final: dict[str, Any] = {}
    while True:
        page = _get(client, f"/v1/operations/{operation['id']}", after=after, wait=30)
        for event in page["events"]:
            # Slack gets one edited message, throttled; the terminal gets a line per phase
            # change or per 5% of progress.
            if render.worth_showing(event, shown):
                print(render.progress_line(event, time.monotonic() - started))
                shown = event
            final = event
        recorded = record_agent_operation(
            store, HOST, page, _get(client, "/v1/revisions"), revision_id=revision_id
        )
        after = page["last_seq"]
        if recorded.finished_at is not None:
            print(f"  => {page['state']}: {final.get('message', '')}")
            return


def _get(client: httpx.Client, path: str, **params: Any) -> dict[str, Any]:
    response = client.get(path, params=params)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    if response.status_code not in (200, 422):
        response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


if __name__ == "__main__":
    raise SystemExit(main())
