"""Byte units, spelled out because SGLang mixes them (docs/sglang.md, Host pool sizing).

The device line ``KV Cache is allocated. #tokens: 159274, KV size: 10.42 GB`` counts in GiB
(1024**3 bytes); the host line ``Allocating 44.77 GB host memory ...`` and ``--hicache-size`` count
in GB (1e9 bytes). 10.42 GiB x 4 is 44.75 GB, not 41.68.
"""

from __future__ import annotations

GB = 1_000_000_000
GiB = 1024**3

# SGLang keeps this much host RAM free in its own check (`available - 10 GiB`), every era.
SGLANG_HOST_RESERVE_BYTES = 10 * GiB
