"""Tests for what an estimate reads besides the GPUs: the model directory of ``--model-path``
(the KV shape from config.json, the weights' size from the safetensors index or files, each
written here in ``tmp_path``) and the command line's ``--max-total-tokens``."""

from __future__ import annotations

import json
from pathlib import Path

from bot.agent.facts._model_files import read_model_files
from bot.agent.facts._sources import ModelHints, model_hints
from bot.sim import model_dir

# Kimi-K2.5's checkpoint, as its index says: 8 ranks x 72.33 GiB.
KIMI_TOTAL = 621_309_969_039


def test_the_shipped_kimi_model_gives_its_shape_and_the_index_total() -> None:
    """The simulator's Kimi-K2.5 files: MLA (512 + 64) x 2 B x 61 layers, and the index's
    total_size."""
    files = read_model_files(str(model_dir("kimi-k25-8gpu")), 8, "auto")
    assert files.missing == ()
    assert files.kv_shape is not None
    assert files.kv_shape.bytes_per_token == (512 + 64) * 2 * 61
    assert files.weights_bytes == KIMI_TOTAL


def test_without_an_index_the_safetensors_files_are_summed(tmp_path: Path) -> None:
    """Two shards of 3,000 and 5,000 bytes and no index: 8,000 bytes of weights."""
    (tmp_path / "config.json").write_text(
        (model_dir("small-2gpu") / "config.json").read_text(), encoding="utf-8"
    )
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 3000)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 5000)
    (tmp_path / "tokenizer.json").write_bytes(b"\0" * 7000)  # not weights
    files = read_model_files(str(tmp_path), 2, "auto")
    assert files.weights_bytes == 8000
    assert files.missing == ()


def test_a_hub_name_is_named_as_missing() -> None:
    """A hub id instead of a directory gives nothing, and says it is not a directory here."""
    files = read_model_files("moonshotai/Kimi-K2.5", 8, "auto")
    assert files.kv_shape is None
    assert files.weights_bytes is None
    assert files.missing == (
        "--model-path 'moonshotai/Kimi-K2.5' is not a directory here (a hub name?)",
    )


def test_no_model_path_is_named_as_missing() -> None:
    """A command line with no --model-path says so."""
    assert read_model_files(None, 1, "auto").missing == ("the command line names no --model-path",)


def test_an_index_without_total_size_and_a_broken_config_are_each_named(tmp_path: Path) -> None:
    """A config.json that is not JSON and an index with no metadata.total_size: both reasons."""
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {}}), encoding="utf-8"
    )
    files = read_model_files(str(tmp_path), 1, "auto")
    assert files.kv_shape is None
    assert files.weights_bytes is None
    assert len(files.missing) == 2
    assert f"{tmp_path / 'config.json'} cannot be read" in files.missing[0]
    assert (
        files.missing[1]
        == f"{tmp_path / 'model.safetensors.index.json'} has no metadata.total_size"
    )


def test_an_empty_directory_says_there_are_no_weights(tmp_path: Path) -> None:
    """A directory with a config.json but no weights names both files it looked for."""
    (tmp_path / "config.json").write_text(
        (model_dir("small-2gpu") / "config.json").read_text(), encoding="utf-8"
    )
    files = read_model_files(str(tmp_path), 2, "auto")
    assert files.kv_shape is not None
    assert files.missing == (
        f"{tmp_path} has no model.safetensors.index.json and no *.safetensors files",
    )


def test_the_command_lines_cap_on_the_device_pool_is_read() -> None:
    """--max-total-tokens, spaced or with '=', the last one winning; a non-number is no cap."""
    assert model_hints(["--max-total-tokens", "8192", "--max-total-tokens=16384"]) == ModelHints(
        max_total_tokens=16_384
    )
    assert model_hints(["--max-total-tokens", "lots"]).max_total_tokens is None
