"""SGLang 0.5.23's memory shapes in the simulator, each read from a real subprocess's log: a
server in a memory cgroup, auto-sizing, buffer_only, a decode server's retraction backup,
Mooncake's segment and a sliding-window pool.

small-2gpu at ``--mem-fraction-static 0.7``: 150,000 device tokens of 35,136 B, 2 ranks, 60 GB
available, the server's own RAM 1 + 2 x 2 GB (the profile). Expected figures are SGLang's rules
(docs/sglang.md, Simulator shapes) worked out here from the profile's numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.sim import load_profile, read_host_state
from bot.sim._profile import PROFILES_DIR
from tests.sim.conftest import Sim

pytestmark = pytest.mark.slow

READY = "The server is fired up and ready to roll!"
GIB = 1024**3
RESERVE = 10 * GIB
TOKENS = 150_000
PER_TOKEN = 35_136
SERVER_RAM = int(5e9)
AVAILABLE = int(60e9)
BASE = ["--model-path", "/models/m", "--tp", "2", "--port", "0", "--mem-fraction-static", "0.7"]
HICACHE = [*BASE, "--enable-hierarchical-cache"]


@pytest.fixture
def env_23(sim_env: dict[str, str]) -> dict[str, str]:
    return dict(sim_env, KIMI_SIM_VERSION="0.5.23")


def profile_with(tmp_path: Path, base: str = "small-2gpu", **fields: Any) -> str:
    """A copy of a shipped profile with ``fields`` changed, written as a file; its path."""
    raw = json.loads((PROFILES_DIR / f"{base}.json").read_text(encoding="utf-8"))
    raw.update(fields, name=f"{base}-shape")
    path = tmp_path / f"{base}-shape.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return str(path)


def lines_of(sim: Sim, start: str) -> list[tuple[str, str]]:
    return [(prefix, m) for prefix, m in sim.messages() if m.startswith(start)]


def pool_gb(ratio: float) -> float:
    """SGLang's host pool: int(device tokens x ratio) + one page, per rank, in GB (1e9)."""
    return (int(TOKENS * ratio) + 1) * PER_TOKEN / 1e9


def test_a_server_in_a_cgroup_sizes_against_the_cgroups_room_and_logs_both(
    run_sim: Callable[..., Sim], env_23: dict[str, str], tmp_path: Path
) -> None:
    """In a 30 GB cgroup the server's 5 GB leave 25 GB: every rank logs host 55 GB and cgroup
    25 GB (in GiB), ratio 1 fits the cgroup's budget and starts; ratio 2 fits the host's 22.1 GB
    per rank but not the cgroup's 7.13 and is refused with that figure."""
    env = dict(env_23, KIMI_SIM_PROFILE=profile_with(tmp_path, cgroup_limit_gb=30))
    sim = run_sim([*HICACHE, "--hicache-ratio", "1"], env)
    sim.wait_for(READY)
    headroom = f"HiCache memory headroom: host {55e9 / GIB:.1f} GiB, cgroup {25e9 / GIB:.1f} GiB"
    assert headroom == "HiCache memory headroom: host 51.2 GiB, cgroup 23.3 GiB"
    assert sorted(lines_of(sim, "HiCache memory headroom")) == [
        ("TP0", headroom),
        ("TP1", headroom),
    ]
    assert any(f"{pool_gb(1):.2f} GB host memory" in m for _, m in lines_of(sim, "Allocating"))
    assert sim.terminate() == 0

    refused = run_sim(
        [*HICACHE, "--hicache-ratio", "2"], dict(env, KIMI_SIM_STATE_DIR=str(tmp_path / "b"))
    )
    assert refused.wait() == -9
    budget = (25e9 - RESERVE) // 2 / 1e9
    assert f"Requesting {pool_gb(2):.2f} GB but only have {budget:.2f} GB free" in refused.stdout()
    assert budget == pytest.approx(7.13, abs=0.01)


def test_without_a_cgroup_no_headroom_line_is_logged(
    run_sim: Callable[..., Sim], env_23: dict[str, str]
) -> None:
    """Today's configuration (no limit) logs no headroom line: SGLang logs it only under a
    cgroup limit."""
    sim = run_sim([*HICACHE, "--hicache-ratio", "1"], env_23)
    sim.wait_for(READY)
    assert lines_of(sim, "HiCache memory headroom") == []


def test_auto_sizing_lowers_the_ratio_to_the_cgroups_budget_and_logs_it(
    run_sim: Callable[..., Sim], env_23: dict[str, str], tmp_path: Path
) -> None:
    """Neither ratio nor size in a 30 GB cgroup: budget int((25 GB - 10 GiB) // 2 x 0.8) per
    rank, ratio min(2, budget x 0.95 / device bytes) = 1.028, logged by both ranks, and the pool
    allocated at that ratio; the server_args line shows the fraction still on."""
    env = dict(env_23, KIMI_SIM_PROFILE=profile_with(tmp_path, cgroup_limit_gb=30))
    sim = run_sim(HICACHE, env)
    sim.wait_for(READY)
    device = (TOKENS + 1) * PER_TOKEN
    budget = int((int(25e9) - RESERVE) // 2 * 0.8)
    ratio = min(2.0, budget * 0.95 / device)
    assert f"{ratio:.3f}" == "1.028"
    pools_gib = device * ratio / GIB
    line = (
        f"HiCache auto-sizing: ratio 2.000 -> {ratio:.3f}; {budget / GIB:.1f} GiB host memory "
        f"per rank (fraction 0.80, 2 ranks on this host), host pools {pools_gib:.1f} GiB."
    )
    assert sorted(lines_of(sim, "HiCache auto-sizing")) == [("TP0", line), ("TP1", line)]
    allocating = {m for _, m in lines_of(sim, "Allocating")}
    assert allocating == {
        f"Allocating kv hierarchical KV host pool: {int(TOKENS * ratio) + 1} tokens, "
        f"{pool_gb(ratio):.2f} GB host memory."
    }
    assert "'hicache_host_memory_fraction': 0.8" in sim.stdout()


def test_an_explicit_ratio_turns_auto_sizing_off(
    run_sim: Callable[..., Sim], env_23: dict[str, str]
) -> None:
    """``--hicache-ratio 2`` is honoured as given: no auto-sizing line, the fraction None."""
    sim = run_sim([*HICACHE, "--hicache-ratio", "2"], env_23)
    sim.wait_for(READY)
    assert lines_of(sim, "HiCache auto-sizing") == []
    assert "'hicache_host_memory_fraction': None" in sim.stdout()
    assert any(f"{pool_gb(2):.2f} GB host memory" in m for _, m in lines_of(sim, "Allocating"))


def test_auto_sizing_on_the_host_keeps_2_when_it_fits(
    run_sim: Callable[..., Sim], env_23: dict[str, str]
) -> None:
    """On the plain host (55 GB available) the pools fit at 2.0: the line says 2.000 -> 2.000."""
    sim = run_sim(HICACHE, env_23)
    sim.wait_for(READY)
    budget = int((AVAILABLE - SERVER_RAM - RESERVE) // 2 * 0.8)
    ((_, line), _) = lines_of(sim, "HiCache auto-sizing")
    assert line.startswith(f"HiCache auto-sizing: ratio 2.000 -> 2.000; {budget / GIB:.1f} GiB")


def test_buffer_only_defaults_the_ratio_to_1_2_and_needs_a_storage_backend(
    run_sim: Callable[..., Sim], env_23: dict[str, str], tmp_path: Path
) -> None:
    """buffer_only with a storage backend: requested ratio 1.2, the pool at 1.2; without a
    backend, or an unknown mode, the start fails before anything with SGLang's ValueError."""
    mode = ["--hicache-host-memory-mode", "buffer_only"]
    sim = run_sim([*HICACHE, *mode, "--hicache-storage-backend", "file"], env_23)
    sim.wait_for(READY)
    ((_, line), _) = lines_of(sim, "HiCache auto-sizing")
    assert line.startswith("HiCache auto-sizing: ratio 1.200 -> 1.200;")
    assert any(f"{pool_gb(1.2):.2f} GB host memory" in m for _, m in lines_of(sim, "Allocating"))

    bare = run_sim([*HICACHE, *mode], dict(env_23, KIMI_SIM_STATE_DIR=str(tmp_path / "b")))
    assert bare.wait() == 1
    assert (
        "ValueError: --hicache-host-memory-mode buffer_only requires a storage backend "
        "(--hicache-storage-backend)"
    ) in bare.stderr()
    odd = run_sim(
        [*HICACHE, "--hicache-host-memory-mode", "keep"],
        dict(env_23, KIMI_SIM_STATE_DIR=str(tmp_path / "c")),
    )
    assert odd.wait() == 1
    assert "hicache_host_memory_mode must be 'cache' or 'buffer_only', got 'keep'" in odd.stderr()


def test_a_decode_server_allocates_its_retraction_backup_without_hicache(
    run_sim: Callable[..., Sim], env_23: dict[str, str], tmp_path: Path
) -> None:
    """``--disaggregation-mode decode`` and no HiCache flag, on an MHA model: a host pool at
    max(0.2, one longest request (32,767 tokens) / 150,000) = 0.218 of the device pool, on both
    ranks; on an MLA model (small-2gpu as shipped) the backup stays a CPU tensor: no pool."""
    mha = dict(env_23, KIMI_SIM_PROFILE=profile_with(tmp_path, attention="MHA"))
    sim = run_sim([*BASE, "--disaggregation-mode", "decode"], mha)
    sim.wait_for(READY)
    ratio = max(0.2, (32_768 - 1) / TOKENS)
    allocating = lines_of(sim, "Allocating")
    assert sorted(p for p, _ in allocating) == ["TP0", "TP1"]
    assert {m for _, m in allocating} == {
        f"Allocating kv hierarchical KV host pool: {int(TOKENS * ratio) + 1} tokens, "
        f"{pool_gb(ratio):.2f} GB host memory."
    }
    ((_, line), _) = lines_of(sim, "HiCache auto-sizing")
    assert line.startswith(f"HiCache auto-sizing: ratio {ratio:.3f} -> {ratio:.3f};")
    assert sim.terminate() == 0
    mla = run_sim(
        [*BASE, "--disaggregation-mode", "decode"],
        dict(env_23, KIMI_SIM_STATE_DIR=str(tmp_path / "mla")),
    )
    mla.wait_for(READY)
    assert lines_of(mla, "Allocating") == []


def test_a_prefill_server_without_hicache_allocates_no_host_pool(
    run_sim: Callable[..., Sim], env_23: dict[str, str]
) -> None:
    """The retraction backup is a decode server's: a prefill server without HiCache has none."""
    sim = run_sim([*BASE, "--disaggregation-mode", "prefill"], env_23)
    sim.wait_for(READY)
    assert lines_of(sim, "Allocating") == []


def test_mooncakes_segment_is_host_ram_the_start_takes(
    run_sim: Callable[..., Sim], env_23: dict[str, str]
) -> None:
    """Mooncake with a global segment of 8 GiB: 4 GiB per rank (TP 2) on top of the host pool,
    held by the server once ready; both ranks log the store's setup."""
    config = json.dumps({"global_segment_size": "8gb"})
    args = [*HICACHE, "--hicache-ratio", "1", "--hicache-storage-backend", "mooncake",
            "--hicache-storage-backend-extra-config", config]  # fmt: skip
    sim = run_sim(args, env_23)
    sim.wait_for(READY)
    setup = lines_of(sim, "Mooncake store setup successfully.")
    assert sorted(p for p, _ in setup) == ["TP0", "TP1"]
    assert len(lines_of(sim, "Mooncake Configuration loaded from extra_config")) == 2
    snapshot = read_host_state(load_profile("small-2gpu"), Path(env_23["KIMI_SIM_STATE_DIR"]))
    (server,) = snapshot.servers
    pool = (int(TOKENS * 1.0) + 1) * PER_TOKEN
    assert server.host_bytes == SERVER_RAM + 2 * (pool + 4 * GIB)


def test_a_sliding_window_pool_logs_its_split_and_usage(
    run_sim: Callable[..., Sim], env_23: dict[str, str], tmp_path: Path
) -> None:
    """A hybrid SWA model (small-2gpu-hybrid as a sliding-window pool of 0.8 x the tokens):
    SGLang's split line and the SWAKVPool's usage in GiB of both pools with their padding."""
    path = profile_with(tmp_path, "small-2gpu-hybrid", swa_pool=True)
    sim = run_sim(BASE, dict(env_23, KIMI_SIM_PROFILE=path))
    sim.wait_for(READY)
    profile = load_profile(path)
    full, swa = TOKENS, round(TOKENS * 0.8)
    split = f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}"
    assert sorted(lines_of(sim, "Use sliding window")) == [("TP0", split), ("TP1", split)]
    usage_gib = ((full + 1) * profile.kv_bytes_per_token + (swa + 1) * 24_576) / GIB
    usage = f"SWAKVPool mem usage: {usage_gib:.2f} GB, swa size: {swa}, full size: {full}"
    assert {m for _, m in lines_of(sim, "SWAKVPool")} == {usage}


def test_the_hybrid_profile_without_swa_keeps_todays_lines(
    run_sim: Callable[..., Sim], env_23: dict[str, str]
) -> None:
    """The shipped hybrid profile (not a sliding-window pool) logs no SWA line."""
    sim = run_sim(BASE, dict(env_23, KIMI_SIM_PROFILE="small-2gpu-hybrid"))
    sim.wait_for(READY)
    assert lines_of(sim, "Use sliding window") == []
    assert lines_of(sim, "SWAKVPool") == []


def test_a_profile_with_a_bad_cgroup_limit_or_swa_flag_is_refused(tmp_path: Path) -> None:
    """A cgroup limit that is not a positive number, or swa_pool without exactly one hybrid
    pool, is refused naming the field."""
    from bot.errors import SimError

    with pytest.raises(SimError, match="cgroup_limit_gb"):
        load_profile(profile_with(tmp_path, cgroup_limit_gb=0))
    with pytest.raises(SimError, match="swa_pool"):
        load_profile(profile_with(tmp_path, swa_pool=True))


def test_shared_pages_make_the_trees_rss_exceed_its_pss(
    run_sim: Callable[..., Sim], env_23: dict[str, str], tmp_path: Path
) -> None:
    """A server whose 4 processes (main, 2 schedulers, detokenizer) share 1 GB: the simulated
    host reports its PSS as the RAM it holds (5 GB) and its RSS 3 GB above, each process
    counting the shared pages; without shared pages the two agree."""
    path = profile_with(tmp_path, shared_gb=1.0)
    sim = run_sim(BASE, dict(env_23, KIMI_SIM_PROFILE=path))
    sim.wait_for(READY)
    (server,) = read_host_state(load_profile(path), Path(env_23["KIMI_SIM_STATE_DIR"])).servers
    assert (server.pss_bytes, server.rss_bytes) == (SERVER_RAM, SERVER_RAM + 3 * int(1e9))
    assert sim.terminate() == 0
    plain = run_sim(BASE, env_23)
    plain.wait_for(READY)
    (alone,) = read_host_state(
        load_profile("small-2gpu"), Path(env_23["KIMI_SIM_STATE_DIR"])
    ).servers
    assert alone.rss_bytes == alone.pss_bytes == SERVER_RAM
