"""Stand-in for what HiCache's host pool needs from CUDA, for a real SGLang server on CPU.

Python imports ``sitecustomize`` at start-up when this folder is on ``PYTHONPATH``; only the real
SGLang server that ``make test-real`` launches gets that path. What it replaces and why, and only
that:

- ``sglang.srt.mem_cache.pool_host.common._cuda_host_register`` pins the host pool with
  ``cudaHostRegister``; there is no CUDA here, so without a GPU it does nothing. The pool is
  still allocated, sized and logged by SGLang's own code (the ``Allocating ... host pool`` line).
- ``sglang.srt.mem_cache.pool_host.mha.transfer_kv_direct`` (``--hicache-io-backend direct``) is
  imported from ``sgl_kernel.kvcacheio`` only on CUDA, HIP and XPU; here it is the same
  token-indexed copy between device and host layers in plain PyTorch.
- ``torch.cpu.Stream`` has no ``synchronize``, which SGLang's host-pool transfer calls when a
  copy fails (``mem_cache/l2_transfer.py``); on CPU every copy is synchronous, so there is
  nothing to wait for, and the copy's own exception is what surfaces.

Each patch is applied when SGLang imports the module, after the module's own code ran.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

HOST_COMMON = "sglang.srt.mem_cache.pool_host.common"
HOST_MHA = "sglang.srt.mem_cache.pool_host.mha"


def transfer_kv_direct(
    src_layers: Sequence[Any],
    dst_layers: Sequence[Any],
    src_indices: Any,
    dst_indices: Any,
    page_size: int = 1,
) -> None:
    """Copy the tokens at ``src_indices`` of each source layer to ``dst_indices`` of its
    destination layer (sgl_kernel's ``transfer_kv_direct``, token by token)."""
    import torch

    src = src_indices.to(device="cpu", dtype=torch.long)
    dst = dst_indices.to(device="cpu", dtype=torch.long)
    for source, target in zip(src_layers, dst_layers, strict=True):
        target[dst] = source[src].to(target.dtype)


def _patch_common(module: ModuleType) -> None:
    import torch

    register = module._cuda_host_register

    def register_when_cuda(buffer: Any, *args: Any, **kwargs: Any) -> None:
        if torch.cuda.is_available():
            register(buffer, *args, **kwargs)

    module._cuda_host_register = register_when_cuda


def _patch_mha(module: ModuleType) -> None:
    import torch

    module.__dict__.setdefault("transfer_kv_direct", transfer_kv_direct)
    if not hasattr(torch.cpu.Stream, "synchronize"):
        torch.cpu.Stream.synchronize = lambda self: None


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    HOST_COMMON: _patch_common,
    HOST_MHA: _patch_mha,
}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds the patched modules the normal way, then patches each once its code has run."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patch = PATCHES.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run_module = loader.exec_module

        def exec_then_patch(module: ModuleType) -> None:
            run_module(module)
            patch(module)

        loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _PatchAfterImport())
