"""KV bytes per token for the host-pool rule, exact when it can be, never rounded to the unsafe
side (docs/sglang.md, Host pool sizing and Seen in real deployments).

In order:

1. given by the operator (``--bytes-per-token``): taken as exact;
2. the model's ``config.json`` (``KvShape``): exact. When the logged pool is known too, it tells
   whether SGLang packed the model's draft (MTP) layers into the pool;
3. the logged pool, ``#tokens: T, KV size: X GB`` (GiB, two decimals). SGLang's device buffer
   holds ``T + page_size`` rows, and X is rounded, so the bytes per token lie in::

       [(X - 0.005) GiB / (T + page), (X + 0.005) GiB / (T + page)]

   When one layer's bytes are known (the model is known), the one multiple of them inside that
   interval is exact (``log``); otherwise the top of the interval is taken (``log_upper_bound``),
   so an uncertain figure errs toward more RAM. 10.42 GiB for 159,274 tokens gives 70,214 to
   70,281 B: 61 x 1,152 = 70,272 is the only multiple of an MLA bf16 layer inside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from bot.planner._kv_shape import KvShape
from bot.planner._units import GiB

__all__ = ["BytesPerToken", "BytesSource", "logged_interval", "resolve_bytes_per_token"]

# "KV size: 10.42 GB": two decimals, so the true size is within half a hundredth of a GiB.
_HALF_HUNDREDTH = 0.005


class BytesSource(StrEnum):
    """Where the planner's KV bytes per token came from."""

    GIVEN = "given"  # the operator gave the figure
    CONFIG = "config"  # the model's config.json
    LOG = "log"  # the logged pool, snapped to the one multiple of a layer's bytes
    LOG_UPPER_BOUND = "log_upper_bound"  # the logged pool's rounding interval, its top


@dataclass(frozen=True)
class BytesPerToken:
    """KV bytes per token of one rank: ``value`` is what the planner uses, ``low`` and ``high``
    bound the true figure (equal when it is exact)."""

    value: int
    source: BytesSource
    low: int
    high: int
    note: str

    @property
    def uncertainty(self) -> float:
        """How far the true figure can be below ``value``, as a fraction of it (0 when exact)."""
        return (self.value - self.low) / self.value


def logged_interval(kv_gib: float, tokens: int, page_size: int) -> tuple[float, float] | None:
    """Bytes per token consistent with a logged pool, or ``None`` when it tells nothing (a
    ``0.00 GB`` pool, no tokens)."""
    if kv_gib <= 0 or tokens <= 0:
        return None
    rows = tokens + page_size  # one padding page beside the tokens
    return (
        max(0.0, kv_gib - _HALF_HUNDREDTH) * GiB / rows,
        (kv_gib + _HALF_HUNDREDTH) * GiB / rows,
    )


def resolve_bytes_per_token(
    *,
    tokens: int | None,
    logged_kv_gib: float | None,
    page_size: int,
    given: float | None = None,
    shape: KvShape | None = None,
    layer_bytes: int | None = None,
    speculative: bool = False,
) -> tuple[BytesPerToken | None, tuple[str, ...]]:
    """The bytes per token to plan with, and warnings; ``None`` when nothing gives them."""
    interval = None
    if logged_kv_gib is not None and tokens is not None:
        interval = logged_interval(logged_kv_gib, tokens, page_size)
    if given:
        value = math.ceil(given)
        return BytesPerToken(value, BytesSource.GIVEN, value, value, "as given"), ()
    if shape is not None:
        return _from_config(shape, interval, logged_kv_gib, tokens, speculative)
    if interval is None:
        return None, ()
    low, high = interval
    unit = layer_bytes
    if unit:
        multiples = range(math.ceil(low / unit), math.floor(high / unit) + 1)
        if len(multiples) == 1:
            value = multiples[0] * unit
            note = (
                f"the logged pool ({logged_kv_gib:.2f} GiB for {tokens:,} tokens + one page) "
                f"is {multiples[0]} layers of {unit:,} B"
            )
            return BytesPerToken(value, BytesSource.LOG, value, value, note), ()
    value = math.ceil(high)
    note = (
        f"the logged pool ({logged_kv_gib:.2f} GiB for {tokens:,} tokens + one page) gives "
        f"{math.floor(low):,} to {value:,} B; the top is used (+/-{(high - low) / 2 / high:.2%})"
    )
    return BytesPerToken(value, BytesSource.LOG_UPPER_BOUND, math.floor(low), value, note), ()


def _from_config(
    shape: KvShape,
    interval: tuple[float, float] | None,
    logged_kv_gib: float | None,
    tokens: int | None,
    speculative: bool,
) -> tuple[BytesPerToken | None, tuple[str, ...]]:
    counts = shape.layer_counts()
    unit = shape.per_layer_bytes
    if interval is not None:
        low, high = interval
        inside = [layers for layers in counts if low <= layers * unit <= high]
        if inside:
            layers = inside[-1]
            return _config_value(shape, layers, "the logged pool agrees"), ()
        # The config and the log disagree: plan on the larger, and say so.
        config_value = shape.bytes_per_token
        warning = (
            f"config.json gives {config_value:,} B/token but the logged pool "
            f"({logged_kv_gib:.2f} GiB for {tokens:,} tokens) gives {math.floor(low):,} to "
            f"{math.ceil(high):,} B; the larger is used"
        )
        if math.ceil(high) > config_value:
            value = math.ceil(high)
            note = "the logged pool's rounding interval, its top (config.json disagrees)"
            source = BytesSource.LOG_UPPER_BOUND
            return BytesPerToken(value, source, math.floor(low), value, note), (warning,)
        return _config_value(shape, shape.layers, "the logged pool disagrees"), (warning,)
    # No log to tell: with speculative decoding, count the draft layers SGLang may pack in.
    layers = counts[-1] if speculative else counts[0]
    return _config_value(shape, layers, "no logged pool to check it against"), ()


def _config_value(shape: KvShape, layers: int, check: str) -> BytesPerToken:
    value = shape.per_layer_bytes * layers
    packed = layers - shape.layers
    draft = f", {packed} of them draft (MTP) layers packed into the pool" if packed else ""
    note = (
        f"config.json: {shape.attention}, {shape.per_layer_bytes:,} B per layer x {layers} "
        f"layers{draft} ({check})"
    )
    return BytesPerToken(value, BytesSource.CONFIG, value, value, note)
