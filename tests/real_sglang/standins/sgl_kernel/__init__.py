"""Stand-in for ``sgl_kernel``, SGLang's compiled kernels, for a real SGLang server on CPU.

What it replaces and why: SGLang's CPU engine imports ``sgl_kernel`` and calls its CPU build
(``sgl-kernel/csrc/cpu``), which is not published: the ``sglang-kernel`` wheel on PyPI is CUDA
only, and the CPU build must be compiled from source. The CPU path of a small Llama without Intel
AMX calls one of its functions, written here in plain PyTorch. Any other name imports (SGLang
imports many at module level) but raises NotImplementedError when called, so a code path the
tests do not expect fails loudly instead of computing something wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__version__ = "0.0.0+kimi-ops-standin"


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write each request's new KV slots into its row of the request-to-token table, as the
    CPU kernel does: request i gets ``out_cache_loc`` slots ``[start_offset[i], end_offset[i])``
    taken in order."""
    taken = 0
    for i in range(req_pool_indices.shape[0]):
        start, end = int(start_offset[i]), int(end_offset[i])
        row = int(req_pool_indices[i])
        slots = out_cache_loc[taken : taken + end - start]
        req_to_token[row, start:end] = slots.to(req_to_token.dtype)
        taken += end - start


def _not_here(name: str) -> Callable[..., Any]:
    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"sgl_kernel.{name} has no stand-in (kimi-ops tests on CPU)")

    missing.__name__ = name
    return missing


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__"):
        raise AttributeError(name)
    return _not_here(name)
