"""Host profiles: shipped figures, interpolation, and clear errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.errors import SimError
from bot.sim import load_profile


def test_kimi_profile_has_the_field_notes_host() -> None:
    """The default profile is the 449 GB, 8 x RTX PRO 6000 host of the field notes."""
    profile = load_profile("kimi-k25-8gpu")
    assert profile.ram_total_bytes == 449 * 10**9
    assert profile.ram_available_bytes == 445 * 10**9
    assert profile.gpu_count == 8
    assert profile.gpu_name == "NVIDIA RTX PRO 6000 Blackwell"
    assert profile.kv_bytes_per_token == 576 * 2 * 61
    assert profile.model_shards == 64


@pytest.mark.parametrize(("fraction", "tokens"), [(0.85, 116171), (0.88, 159274), (0.93, 231120)])
def test_device_tokens_at_table_points(fraction: float, tokens: int) -> None:
    """The field notes' device pools come back exactly at their mem_fraction_static."""
    assert load_profile("kimi-k25-8gpu").device_tokens_at(fraction) == tokens


def test_device_tokens_interpolate_linearly() -> None:
    """Between two table points the device pool is the straight line between them."""
    expected = round(159274 + (231120 - 159274) * (0.90 - 0.88) / (0.93 - 0.88))
    assert load_profile("kimi-k25-8gpu").device_tokens_at(0.90) == expected


def test_profile_by_path(tmp_path: Path) -> None:
    """A profile file given by path loads like a shipped one."""
    raw = json.loads(Path("bot/sim/profiles/small-2gpu.json").read_text())
    raw["name"] = "custom"
    path = tmp_path / "custom.json"
    path.write_text(json.dumps(raw))
    assert load_profile(str(path)).name == "custom"


def test_unknown_profile_names_the_choices() -> None:
    """An unknown name is refused with the shipped names listed."""
    with pytest.raises(SimError, match="kimi-k25-8gpu"):
        load_profile("no-such-host")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpu_count": 0}, "gpu_count must be positive"),
        ({"ram_available_gb": 500.0}, "exceeds ram_total_gb"),
        ({"device_tokens": {}}, "device_tokens"),
        ({"phase_seconds": {"init": 1}}, "phase_seconds lacks"),
        ({"kv_bytes_per_token": "many"}, "kv_bytes_per_token has the wrong type"),
        ({"draft_kv_bytes_per_token": -1}, "draft_kv_bytes_per_token"),
        ({"hybrid_pools": [{"tokens_fraction": 0}]}, "hybrid_pools"),
        ({"host_extra_pools": {"DSA indexer": "big"}}, "host_extra_pools"),
    ],
)
def test_bad_profile_fields_are_named(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    """Each malformed field is refused with its name in the message."""
    raw = json.loads(Path("bot/sim/profiles/small-2gpu.json").read_text())
    raw.update(change)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(SimError, match=message):
        load_profile(str(path))
