"""The shape of each log line the startup parser reads, to hold the simulator to the real server.

A line's shape is its prefix and its text with every number replaced by ``#``: the fields, their
order and their units stay, the figures go. For example the real 0.5.23 line
``[2026-11-30 07:47:31] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 16384, K size:
0.00 GB, V size: 0.00 GB`` has the shape ``[date] KV Cache is allocated. dtype: torch.bfloat#,
##tokens: #, K size: # GB, V size: # GB``, which a simulated ``..., KV size: 0.00 GB`` does not.

The kinds below are the lines of a start the parser acts on (SGLANG_FACTS.md section 3), each
recognised by a text written out here from SGLang's own log, independently of the parser's
patterns; :func:`unclassified_parsed_lines` checks the table against the parser itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from bot.startup import RankSeen, StartupParser

__all__ = ["KINDS", "ShapedLine", "compare", "shaped_lines", "unclassified_parsed_lines"]

# (kind, pattern on the message after SGLang's "[date time RANK] " prefix), in start order.
KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        # server_args=ServerArgs(model_path=...) / server_args={'model_path': ...}
        ("server_args", r"^server_args="),
        # Init parallel begin.  (0.5.8/0.5.9: Init torch distributed begin.)
        ("init", r"^Init (?:parallel|torch distributed) begin\."),
        # Load weight begin. avail mem=20.34 GB
        ("load_begin", r"^Load weight begin\."),
        # <what is loaded> shards: 100% Completed | 1/1 [00:00<00:00, 99.26it/s]
        ("weight_progress", r"shards: *\d+% Completed \|"),
        # Load weight end. elapsed=0.26 s, type=LlamaForCausalLM, avail mem=..., mem usage=...
        ("load_end", r"^Load weight end\."),
        # KV Cache is allocated. dtype: torch.bfloat16, #tokens: 16384, K size: ..., V size: ...
        ("device_pool", r"KV Cache is allocated\."),
        # Capture target decode CUDA graph begin. ...  (0.5.9: Capture cuda graph begin. ...)
        ("graph_begin", r"(?i)cuda graph begin\."),
        # Capturing batches (bs=1 avail_mem=20.33 GB): 100%|##########| 1/1 [...]
        ("graph_progress", r"^Capturing batches"),
        # max_total_num_tokens=16384, chunked_prefill_size=4096, ...
        ("max_total", r"^max_total_num_tokens="),
        # HiCache memory headroom: host 21.2 GiB, cgroup 8589934589.4 GiB  (0.5.23, any memory
        # cgroup with a limit file: v1's "no limit" is a number too)
        ("headroom", r"^HiCache memory headroom: "),
        # Allocating kv hierarchical KV host pool: 3906251 tokens, 1.00 GB host memory.
        ("host_pool", r"^Allocating .*host (?:pool|memory)"),
        # INFO:     Application startup complete.
        ("http_startup", r"Application startup complete\."),
        # INFO:     Uvicorn running on http://127.0.0.1:30187 (Press CTRL+C to quit)
        ("http_running", r"Uvicorn running on "),
        # INFO:     127.0.0.1:49846 - "GET /model_info HTTP/1.1" 200 OK
        ("warmup", r'"GET /model_info HTTP/1\.1" 200'),
        # The server is fired up and ready to roll!
        ("ready", r"The server is fired up and ready to roll!"),
    )
)

# "[2026-11-30 07:47:31] " or "[2026-11-30 07:47:31 DP0 TP3] ", anywhere in a physical line:
# ranks write unsynchronised and 0.5.23's tqdm ends a bar without a line break.
_HEADER = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d((?: [A-Z][A-Z_]*\d+)*)\] ?")
_RATE = re.compile(r"(?:\d+(?:\.\d+)?|\?)(?:it/s|s/it)")  # tqdm's speed, whichever unit
_BAR = re.compile(r"\|[^|]*\|")  # tqdm's bar cells between its two pipes
_NUMBER = re.compile(r"-?\d+")  # a figure, its sign included ("mem usage=-0.00 GB")
_SPACES = re.compile(r"\s+")
_ARGS_DUMP = re.compile(r"server_args=\w*\W")
# Lines are shown up to this length in a difference (the argument dump runs to 20 kB).
_SHOWN = 240


@dataclass(frozen=True)
class ShapedLine:
    """One line the parser reads: its kind, the line as logged, and its shape."""

    kind: str
    text: str
    shape: str


def _pieces(log: str) -> Iterator[tuple[str, str]]:
    """(prefix shape, message) of every piece of the log: split at line breaks, tqdm's ``\\r``
    and SGLang prefixes starting in the middle of a line."""
    for physical in re.split(r"[\r\n]", log):
        starts = [m.start() for m in _HEADER.finditer(physical)]
        if not starts or starts[0] != 0:
            starts.insert(0, 0)
        for begin, end in zip(starts, [*starts[1:], len(physical)], strict=True):
            piece = physical[begin:end]
            header = _HEADER.match(piece)
            if header is None:
                if piece.strip():
                    yield "", piece
                continue
            ranks = _NUMBER.sub("#", header.group(1))
            yield f"[date{ranks}]", piece[header.end() :]


def shape_of(prefix: str, message: str) -> str:
    """``prefix`` and ``message`` with numbers, tqdm speeds and bar cells made uniform."""
    dump = _ARGS_DUMP.match(message)
    if dump is not None:
        # The arguments themselves differ by design (the simulator echoes only its own flags):
        # the parser reads the marker, so the shape is how the dump opens ("ServerArgs(", "{").
        message = dump.group(0) + "..."
    text = _BAR.sub("|bar|", _RATE.sub("#rate", message))
    text = _SPACES.sub(" ", _NUMBER.sub("#", text)).strip()
    return f"{prefix} {text}".strip()


def shaped_lines(log: str) -> list[ShapedLine]:
    """The lines of ``log`` that are of one of the :data:`KINDS`, in log order."""
    out: list[ShapedLine] = []
    for prefix, message in _pieces(log):
        kind = next((name for name, pattern in KINDS if pattern.search(message)), None)
        if kind is not None:
            out.append(ShapedLine(kind, f"{prefix} {message}".strip(), shape_of(prefix, message)))
    return out


def unclassified_parsed_lines(log: str) -> list[str]:
    """Lines on which the startup parser reports something (a rank aside) but which are of no
    kind in :data:`KINDS`: the table would be missing a line the parser reads."""
    missing: list[str] = []
    for prefix, message in _pieces(log):
        if any(pattern.search(message) for _, pattern in KINDS):
            continue
        events = StartupParser().feed(message + "\n")
        if any(not isinstance(event, RankSeen) for event in events):
            missing.append(f"{prefix} {message}".strip())
    return missing


def compare(real: list[ShapedLine], simulated: list[ShapedLine]) -> list[str]:
    """Every difference between the two logs' shapes, each with both lines side by side; the
    order in which the kinds first appear is compared too. Empty when they conform."""
    differences: list[str] = []
    order = list(dict.fromkeys(name for name, _ in KINDS))
    for kind in order:
        real_of = _distinct(line for line in real if line.kind == kind)
        sim_of = _distinct(line for line in simulated if line.kind == kind)
        real_shapes = {line.shape for line in real_of}
        sim_shapes = {line.shape for line in sim_of}
        if real_shapes == sim_shapes:
            continue
        # The first line of each side whose shape the other side never prints.
        r = next((line.text for line in real_of if line.shape not in sim_shapes), None)
        s = next((line.text for line in sim_of if line.shape not in real_shapes), None)
        differences.append(
            f"[{kind}]\n"
            f"  real:      {_clip(r) if r else '(no such line)'}\n"
            f"  simulated: {_clip(s) if s else '(no such line)'}"
        )
    real_order = list(dict.fromkeys(line.kind for line in real))
    sim_order = list(dict.fromkeys(line.kind for line in simulated))
    if real_order != sim_order:
        differences.append(
            "[order in which the kinds first appear]\n"
            f"  real:      {' > '.join(real_order)}\n"
            f"  simulated: {' > '.join(sim_order)}"
        )
    return differences


def _distinct(lines: Iterator[ShapedLine] | list[ShapedLine]) -> list[ShapedLine]:
    """The first line of each distinct shape, in log order."""
    seen: dict[str, ShapedLine] = {}
    for line in lines:
        seen.setdefault(line.shape, line)
    return list(seen.values())


def _clip(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN] + f"... ({len(text)} characters)"
