"""What the model directory of ``--model-path`` says: its KV shape and the size of its weights.

``config.json`` gives the KV shape (``bot.planner.kv_shape_from_config``); the weights' size is
``model.safetensors.index.json``'s ``metadata.total_size`` (``{"metadata": {"total_size":
621309969039}, "weight_map": {...}}``: 578.64 GiB, 72.33 GiB per rank at TP 8), else the sum
of the ``*.safetensors`` files' sizes. Whatever cannot be read is named in ``missing``, so a plan
that needs it can say what was missing ("--model-path 'moonshotai/Kimi-K2.5' is not a directory
here (a hub name?)").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.errors import PlanInputError
from bot.planner import KvShape, kv_shape_from_config

__all__ = ["ModelFiles", "read_model_files"]

_INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class ModelFiles:
    """The model's KV shape for one rank and its weights' total bytes; None where unreadable,
    with the reason in ``missing``."""

    kv_shape: KvShape | None = None
    weights_bytes: int | None = None
    missing: tuple[str, ...] = ()


def read_model_files(model_path: str | None, tp_size: int, kv_cache_dtype: str) -> ModelFiles:
    """Read ``config.json`` and the weights' size under ``model_path``; never raises."""
    if not model_path:
        return ModelFiles(missing=("the command line names no --model-path",))
    folder = Path(model_path)
    try:
        is_dir = folder.is_dir()
    except OSError as exc:
        return ModelFiles(missing=(f"--model-path {model_path!r} cannot be read ({exc})",))
    if not is_dir:
        return ModelFiles(
            missing=(f"--model-path {model_path!r} is not a directory here (a hub name?)",)
        )
    shape, shape_missing = _kv_shape(folder, tp_size, kv_cache_dtype)
    weights, weights_missing = _weights_bytes(folder)
    return ModelFiles(
        kv_shape=shape,
        weights_bytes=weights,
        missing=tuple(m for m in (shape_missing, weights_missing) if m is not None),
    )


def _kv_shape(folder: Path, tp_size: int, kv_cache_dtype: str) -> tuple[KvShape | None, str | None]:
    path = folder / "config.json"
    try:
        config = _json(path)
        if not isinstance(config, dict):
            return None, f"{path} holds no JSON object"
        return kv_shape_from_config(config, tp_size=tp_size, kv_cache_dtype=kv_cache_dtype), None
    except (OSError, ValueError) as exc:
        return None, f"{path} cannot be read ({exc})"
    except PlanInputError as exc:
        # A foreign config: the logged pool, when there is one, still sizes the plan.
        return None, f"{path}: {exc}"


def _weights_bytes(folder: Path) -> tuple[int | None, str | None]:
    index = folder / _INDEX
    try:
        if index.is_file():
            data = _json(index)
            metadata = data.get("metadata") if isinstance(data, dict) else None
            total = metadata.get("total_size") if isinstance(metadata, dict) else None
            if isinstance(total, int) and not isinstance(total, bool) and total > 0:
                return total, None
            return None, f"{index} has no metadata.total_size"
        # No index: a single-file checkpoint, or shards without one; their sizes are the weights'
        # (plus a header of a few kB each, which only lowers the estimate).
        sizes = [path.stat().st_size for path in folder.glob("*.safetensors")]
    except (OSError, ValueError) as exc:
        return None, f"the weights' size under {folder} cannot be read ({exc})"
    if not sizes:
        return None, f"{folder} has no {_INDEX} and no *.safetensors files"
    return sum(sizes), None


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
