"""tqdm's progress-bar text, reproduced without tqdm (the bars SGLang writes to stderr).

``Loading safetensors checkpoint shards:  27% Completed | 17/64 [00:11<00:29,  1.58it/s]``
(0.5.23: ``Multi-thread loading shards: ...``) uses SGLang's own bar format;
``Capturing batches (bs=512 avail_mem=1.82 GB):  67%|██████▋   | 35/52 [00:09<00:04,  3.80it/s]``
is tqdm's default layout with a 10-cell bar (no terminal).
"""

from __future__ import annotations

__all__ = ["bar_line", "shards_line"]

_PARTIALS = " ▏▎▍▌▋▊▉"


def _interval(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _timing(n: int, total: int, elapsed: float) -> str:
    if n == 0 or elapsed <= 0:
        return f"[{_interval(elapsed)}<?, ?it/s]"
    rate = n / elapsed
    remaining = (total - n) / rate
    inverse = 1 / rate
    rate_text = f"{inverse:5.2f}s/it" if inverse > 1 else f"{rate:5.2f}it/s"
    return f"[{_interval(elapsed)}<{_interval(remaining)}, {rate_text}]"


def shards_line(n: int, total: int, elapsed: float, new: bool = False) -> str:
    """SGLang's weight-loading bar, one refresh: 0.5.23 loads with several threads by default and
    names its bar after that (docs/sglang.md, Startup log)."""
    percent = 100 * n / total
    desc = "Multi-thread loading shards" if new else "Loading safetensors checkpoint shards"
    return f"{desc}: {percent:3.0f}% Completed | {n}/{total} {_timing(n, total, elapsed)}"


def bar_line(desc: str, n: int, total: int, elapsed: float) -> str:
    """tqdm's default layout with a 10-cell bar, one refresh."""
    frac = n / total
    cells = frac * 10
    full = int(cells)
    bar = "█" * full
    if full < 10:
        bar += _PARTIALS[int((cells - full) * 8)]
        bar = bar.ljust(10)
    return f"{desc}: {100 * frac:3.0f}%|{bar}| {n}/{total} {_timing(n, total, elapsed)}"
