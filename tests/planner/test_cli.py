"""``kimi-ops plan``: text, JSON and exit codes, as an operator runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import main


def run_plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["plan", *argv])
    except SystemExit as exc:  # argparse errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_fits_exits_0_with_the_arithmetic(capsys: pytest.CaptureFixture[str]) -> None:
    """size 48 on 445 GB available fits: exit 0 and the sentence shows the budget."""
    code, out, _ = run_plan(capsys, "--size", "48", "--ranks", "8", "--available-gb", "445")
    assert code == 0
    assert "FITS: size 48 GB/rank needs 8 ranks x 48.00 GB = 384.0 GB" in out


def test_refused_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    """size 300 on 445 GB available is refused: exit 3 and the shortfall."""
    code, out, _ = run_plan(capsys, "--size", "300", "--ranks", "8", "--available-gb", "445")
    assert code == 3
    assert "REFUSED" in out
    assert "2005.7 GB short" in out


def test_json_has_the_promised_keys(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints one object with verdict, reason and the per-rank and total figures."""
    code, out, _ = run_plan(
        capsys,
        "--ratio", "4", "--ranks", "8", "--available-gb", "396", "--held-gb", "200",
        "--device-tokens", "159274", "--kv-gib", "10.42", "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["verdict"] == "fits"
    assert data["per_rank_gb"] == pytest.approx(44.75, rel=1e-3)
    assert data["total_gb"] == pytest.approx(358.0, rel=1e-3)
    assert data["free_after_stop_gb"] == pytest.approx(596.0)
    for key in ("reason", "per_rank_tokens", "headroom_left_gb"):
        assert key in data


def test_non_integer_size_is_refused_with_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    """--size 44.5 is what SGLang's parser rejects: refused (exit 3) with 'try 44 or 45'."""
    code, out, _ = run_plan(capsys, "--size", "44.5", "--ranks", "8", "--available-gb", "445")
    assert code == 3
    assert "try 44 or 45" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ratio", "abc", "--ranks", "8", "--available-gb", "445"], "'abc' is not a number"),
        (["--size", "48", "--ranks", "0", "--available-gb", "445"], "'0' must be at least 1"),
        (["--size", "48", "--ranks", "8", "--available-gb", "-1"], "must be a number of GB"),
        (["--size", "48", "--ranks", "8"], "--available-gb"),
        (["--ranks", "8", "--available-gb", "445"], "one of the arguments --ratio --size"),
        (["--ratio", "2", "--size", "48", "--ranks", "8", "--available-gb", "1"], "not allowed"),
        (
            ["--size", "48", "--ranks", "8", "--available-gb", "445", "--sglang-version", "x"],
            "not a release number",
        ),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Malformed arguments exit 2 and say which argument is wrong."""
    code, out, err = run_plan(capsys, *argv)
    assert code == 2
    assert message in err
    assert out == ""


def test_console_script_runs_as_a_real_process() -> None:
    """`python -m bot plan` works as an operator's shell would run it."""
    result = subprocess.run(
        [sys.executable, "-m", "bot", "plan", "--size", "300", "--ranks", "8",
         "--available-gb", "445", "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 3
    assert json.loads(result.stdout)["verdict"] == "refused"


def test_model_config_makes_ratio_4_sglangs_figure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--model-config with DeepSeek-V3's shape gives 70,272 B/token: ratio 4 is SGLang's
    44,770,080,384 bytes per rank, shown as 44.77 GB, source config."""
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_hidden_layers": 61,
             "torch_dtype": "bfloat16"}
        )
    )  # fmt: skip
    code, out, _ = run_plan(
        capsys,
        "--ratio", "4", "--ranks", "8", "--available-gb", "396", "--held-gb", "200",
        "--device-tokens", "159274", "--kv-gib", "10.42", "--model-config", str(config), "--json",
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["per_rank_bytes"] == (159274 * 4 + 1) * 576 * 2 * 61
    assert data["bytes_per_token_source"] == "config"
    assert "8 ranks x 44.77 GB" in data["reason"]


def test_host_extra_is_counted_in_the_text_and_the_total(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--host-extra 'DSA indexer=29.02@126.61' adds the indexer, scaled, to every rank."""
    code, out, _ = run_plan(
        capsys,
        "--size", "100", "--ranks", "4", "--available-gb", "1000", "--bytes-per-token", "44929",
        "--host-extra", "DSA indexer=29.02@126.61",
    )  # fmt: skip
    assert code == 0
    assert "+ DSA indexer" in out
    assert "GB DSA indexer)" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--host-extra", "DSA indexer=29.02"], "is not NAME=GB@KV_GB"),
        (["--host-extra", "DSA indexer=29.02@0"], "KV_GB > 0"),
        (["--model-config", "/nonexistent/config.json"], "is not readable JSON"),
    ],
)
def test_bad_model_and_extra_pool_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    """A malformed extra pool or an unreadable model config exits 2 and names it."""
    code, out, err = run_plan(
        capsys, "--ratio", "4", "--ranks", "8", "--available-gb", "445",
        "--device-tokens", "159274", "--kv-gib", "10.42", *extra,
    )  # fmt: skip
    assert code == 2
    assert message in err
    assert out == ""


def test_auto_is_planned_on_the_ratio_sglang_0_5_23_picks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--auto on 0.5.23, 2 ranks of 150,000 tokens x 35,136 B, 24 GiB in the cgroup: the ratio is
    int(((24 GiB - 10 GiB) // 2) x 0.8) x 0.95 / (150,001 x 35,136 B) = 1.084, as the line shows."""
    code, out, _ = run_plan(
        capsys, "--auto", "--ranks", "2", "--available-gb", "60",
        "--cgroup-limit-gb", str(24 * 1024**3 / 1e9), "--device-tokens", "150000",
        "--bytes-per-token", "35136", "--sglang-version", "0.5.23", "--headroom-gb", "0",
    )  # fmt: skip
    ratio = int((14 * 1024**3 // 2) * 0.8) * 0.95 / (150_001 * 35_136)
    assert code == 0, out
    assert f"HiCache auto: ratio {ratio:.2f} (SGLang sizes it at start) on 2 ranks" in out
    assert f"ratio 2.000 -> {ratio:.3f}" in out
