"""Tracebacks a failing SGLang scheduler logs after ``Scheduler hit an exception: ``.

Frames follow SGLang 0.5.9's call chain for each failure (scheduler -> tp worker -> model runner
-> the failing component); the last line is the exception the agent's classifier keys on.
"""

from __future__ import annotations

__all__ = ["main_traceback", "scheduler_traceback"]

_PACKAGES = "/usr/local/lib/python3.12/dist-packages"
_SITE = f"{_PACKAGES}/sglang/srt"

_HEAD = [
    ("managers/scheduler.py", 3130, "run_scheduler_process", "scheduler = Scheduler("),
    ("managers/scheduler.py", 368, "__init__", "self.init_model_worker()"),
    ("managers/scheduler.py", 522, "init_tp_model_worker", "self.tp_worker = TpModelWorker("),
    ("managers/tp_worker.py", 330, "_init_model_runner", "self._model_runner = ModelRunner("),
]

# The scheduler frames every host-pool failure passes through (SGLang 0.5.9).
_HOST_POOL_INIT: list[tuple[str, int, str, str]] = [
    ("managers/scheduler.py", 401, "__init__", "self.init_cache_with_memory_pool()"),
    (
        "managers/scheduler.py",
        742,
        "init_cache_with_memory_pool",
        "self.tree_cache = HiRadixCache(",
    ),
    (
        "mem_cache/hiradix_cache.py",
        98,
        "__init__",
        "self.token_to_kv_pool_host = MLATokenToKVPoolHost(",
    ),
    ("mem_cache/memory_pool_host.py", 733, "__init__", "super().__init__("),
]

_CHAINS: dict[str, list[tuple[str, int, str, str]]] = {
    "init": [
        (
            "model_executor/model_runner.py",
            398,
            "__init__",
            "min_per_gpu_memory = self.init_torch_distributed()",
        ),
        ("model_executor/model_runner.py", 771, "init_torch_distributed", "raise ValueError("),
    ],
    "load": [
        ("model_executor/model_runner.py", 566, "initialize", "self.load_model()"),
        ("model_executor/model_runner.py", 905, "load_model", "self.model = get_model("),
        (
            "model_loader/loader.py",
            612,
            "load_weights_and_postprocess",
            "model.load_weights(weights)",
        ),
        (
            "model_loader/weight_utils.py",
            492,
            "safetensors_weights_iterator",
            'with safe_open(st_file, framework="pt") as f:',
        ),
    ],
    "graph": [
        ("model_executor/model_runner.py", 609, "initialize", "self.init_device_graphs()"),
        (
            "model_executor/model_runner.py",
            2156,
            "init_device_graphs",
            "self.graph_runner = graph_runners[self.device](self)",
        ),
        ("model_executor/cuda_graph_runner.py", 372, "__init__", "raise Exception("),
    ],
    "host_pool": [
        *_HOST_POOL_INIT,
        ("mem_cache/memory_pool_host.py", 121, "__init__", "raise ValueError("),
    ],
    "host_assert": [
        *_HOST_POOL_INIT,
        ("mem_cache/memory_pool_host.py", 104, "__init__", "assert ("),
    ],
}


def _frames(frames: list[tuple[str, int, str, str]], root: str = _SITE) -> str:
    return "".join(
        f'  File "{root}/{path}", line {line}, in {func}\n    {code}\n'
        for path, line, func, code in frames
    )


def scheduler_traceback(where: str, exception_line: str, cause: str = "") -> str:
    """``Traceback (most recent call last): ...`` ending with ``exception_line`` and a newline.

    ``cause`` (already formatted) is printed first, chained with "During handling ...".
    """
    body = "Traceback (most recent call last):\n" + _frames(_HEAD + _CHAINS[where])
    text = f"{body}{exception_line}\n"
    if cause:
        text = (
            f"{cause}\nDuring handling of the above exception, another exception occurred:\n\n"
            f"{text}"
        )
    return text


def main_traceback(frames: list[tuple[str, int, str, str]], exception_line: str) -> str:
    """An uncaught exception in the launching process, as Python prints it on stderr."""
    head = (
        'Traceback (most recent call last):\n  File "<frozen runpy>", line 198, in '
        '_run_module_as_main\n  File "<frozen runpy>", line 88, in _run_code\n'
    )
    return head + _frames(frames, _PACKAGES) + exception_line + "\n"
