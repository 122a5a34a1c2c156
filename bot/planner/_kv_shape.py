"""KV bytes per token of one rank, from the model's ``config.json`` (docs/sglang.md, Host pool
sizing), as SGLang sizes its KV pools::

    MLA:      (kv_lora_rank + qk_rope_head_dim) x layers x element size     (every TP rank)
    MHA/GQA:  2 x kv_heads_per_rank x head_dim x layers x element size
              kv_heads_per_rank = max(1, num_key_value_heads // tp_size)

DeepSeek-V3's shape (Kimi-K2.5): (512 + 64) x 61 x 2 bytes (bf16) = 70,272 B; Llama-3-70B: 2 x 8
x 128 x 80 x 2 = 327,680 B at TP 1, 40,960 B at TP 8. An fp8 KV cache stores 1 byte per element.
A multimodal model keeps these figures under ``text_config``. Pure: the caller reads the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.errors import PlanInputError

__all__ = ["KvShape", "element_bytes", "kv_shape_from_config"]

# Element sizes of the dtypes a model's config or --kv-cache-dtype names.
_ELEMENT_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "bfloat16": 2,
    "bf16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


@dataclass(frozen=True)
class KvShape:
    """One rank's KV bytes per token by layer: ``per_layer_bytes`` x ``layers``.

    ``draft_layers`` are the model's next-token-prediction (MTP) layers, which some SGLang
    versions pack into the target's pool when speculative decoding runs.
    """

    attention: str  # "MLA" or "MHA"
    per_layer_bytes: int
    layers: int
    draft_layers: int = 0

    @property
    def bytes_per_token(self) -> int:
        """Bytes per token of the target model's layers alone."""
        return self.per_layer_bytes * self.layers

    def layer_counts(self) -> tuple[int, ...]:
        """The layer counts SGLang may size the pool with: the target's, and with draft layers
        packed in when the model has some."""
        if self.draft_layers:
            return (self.layers, self.layers + self.draft_layers)
        return (self.layers,)


def element_bytes(dtype: str) -> int:
    """Bytes of one KV element: ``"bfloat16"`` / ``"torch.bfloat16"`` -> 2, ``"fp8_e4m3"`` -> 1."""
    name = dtype.strip().lower().removeprefix("torch.")
    if name not in _ELEMENT_BYTES:
        raise PlanInputError(
            f"KV cache dtype {dtype!r} is not one kimi-ops knows; "
            f"use one of {', '.join(sorted(_ELEMENT_BYTES))}"
        )
    return _ELEMENT_BYTES[name]


def kv_shape_from_config(
    config: Mapping[str, Any], tp_size: int = 1, kv_cache_dtype: str = "auto"
) -> KvShape:
    """The KV shape of one rank from a parsed ``config.json``.

    ``kv_cache_dtype`` is SGLang's ``--kv-cache-dtype``: ``"auto"`` takes the model's own
    ``torch_dtype``. Raises ``PlanInputError`` naming the missing or bad field.
    """
    if tp_size < 1:
        raise PlanInputError(f"TP size must be at least 1, not {tp_size}")
    text = config.get("text_config")
    model: Mapping[str, Any] = text if isinstance(text, Mapping) else config
    layers = _positive_int(model, "num_hidden_layers")
    if kv_cache_dtype in ("", "auto"):
        dtype = model.get("torch_dtype") or model.get("dtype") or config.get("torch_dtype")
        if not isinstance(dtype, str):
            raise PlanInputError(
                "config.json names no torch_dtype; pass the KV cache dtype (bfloat16, fp8_e4m3)"
            )
        size = element_bytes(dtype)
    else:
        size = element_bytes(kv_cache_dtype)
    draft = model.get("num_nextn_predict_layers") or 0
    draft_layers = draft if isinstance(draft, int) and draft > 0 else 0
    if model.get("kv_lora_rank"):
        # MLA keeps one latent vector per token and layer, the same on every TP rank.
        elements = _positive_int(model, "kv_lora_rank") + _positive_int(model, "qk_rope_head_dim")
        return KvShape("MLA", elements * size, layers, draft_layers)
    heads = _positive_int(model, "num_attention_heads")
    kv_heads = model.get("num_key_value_heads") or heads
    if not isinstance(kv_heads, int) or kv_heads < 1:
        raise PlanInputError(f"config.json num_key_value_heads {kv_heads!r} is not a count")
    head_dim = model.get("head_dim") or _positive_int(model, "hidden_size") // heads
    if not isinstance(head_dim, int) or head_dim < 1:
        raise PlanInputError(f"config.json head_dim {head_dim!r} is not a count")
    # SGLang splits the KV heads over TP and replicates them when there are fewer than ranks.
    per_rank = max(1, kv_heads // tp_size)
    return KvShape("MHA", 2 * per_rank * head_dim * size, layers, draft_layers)


def _positive_int(model: Mapping[str, Any], key: str) -> int:
    value = model.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanInputError(
            f"config.json has no usable {key} ({value!r}); give the model's own config.json"
        )
    return value
