"""Where the real SGLang lives for these tests, and how it is launched on CPU.

``setup_side_venv.sh`` (run by ``make test-real``) builds it under
``${XDG_CACHE_HOME:-~/.cache}/kimi-realsgl``: a side virtualenv with SGLang 0.5.23 and a tiny
random-weight Llama. Nothing here imports SGLang: the server runs in that virtualenv, as a
subprocess, with the stand-ins of ``standins/`` first on its ``PYTHONPATH``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests._ports import free_port as free_port

__all__ = [
    "DEVICE_TOKENS",
    "SERVER_ENV",
    "SideVenv",
    "free_port",
    "kv_bytes_per_token",
    "locate_side_venv",
    "server_argv",
]

HERE = Path(__file__).resolve().parent
SETUP = HERE / "setup_side_venv.sh"
STANDINS = HERE / "standins"

#: ``--max-total-tokens``: the device KV pool SGLang sizes, whatever memory it believes it has.
DEVICE_TOKENS = 16384

#: What SGLang needs to run on CPU here: its CPU engine, and no model hub (the model is local).
SERVER_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONPATH": str(STANDINS),
}


@dataclass(frozen=True)
class SideVenv:
    """The side virtualenv's python and the tiny model's directory."""

    python: Path
    model: Path


def locate_side_venv(environ: Mapping[str, str]) -> SideVenv:
    """The side virtualenv ``setup_side_venv.sh`` built; AssertionError saying how to build it
    when it is not there (these tests never pass by skipping)."""
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")) / ".cache")
    root = Path(cache).expanduser() / "kimi-realsgl"
    side = SideVenv(python=root / "venv" / "bin" / "python", model=root / "models" / "tiny-llama")
    if not (root / "kimi-ops.stamp").is_file() or not side.python.is_file():
        raise AssertionError(
            f"the side virtualenv for make test-real is not built in {root}: run `make test-real` "
            f"(or {SETUP.relative_to(HERE.parents[1])}) first"
        )
    return side


def server_argv(python: Path, model: Path, port: int, *hicache: str) -> list[str]:
    """``python -m sglang.launch_server`` on CPU with the tiny model, then ``hicache`` flags.

    ``--device cpu`` and ``torch_native`` attention are SGLang's CPU path; the overlap scheduler
    needs CUDA streams; ``layer_first`` with the ``direct`` io backend is the host-pool layout
    the stand-ins cover; ``--max-total-tokens`` fixes the device pool at 16,384 tokens.
    """
    return [
        str(python), "-m", "sglang.launch_server",
        "--model-path", str(model), "--device", "cpu",
        "--host", "127.0.0.1", "--port", str(port),
        "--disable-overlap-schedule", "--attention-backend", "torch_native",
        "--max-total-tokens", str(DEVICE_TOKENS), "--max-running-requests", "16",
        "--hicache-io-backend", "direct", "--hicache-mem-layout", "layer_first",
        *hicache,
    ]  # fmt: skip


def kv_bytes_per_token(model: Path) -> int:
    """KV bytes per token of an MHA model, from its ``config.json`` by SGLang's rule:
    ``head_dim x kv_heads x layers x dtype bytes x 2`` (K and V), bf16/fp16 being 2 bytes."""
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    dtype = config.get("torch_dtype") or config.get("dtype")
    dtype_bytes = {"bfloat16": 2, "float16": 2, "float32": 4}[dtype]
    return int(
        head_dim * config["num_key_value_heads"] * config["num_hidden_layers"] * dtype_bytes * 2
    )
