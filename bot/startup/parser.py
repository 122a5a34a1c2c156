"""An incremental parser that turns SGLang's startup output into typed events.

Feed it text as the log file grows, split anywhere (mid-line, between ``\\r`` and ``\\n``); it
gives the same events however the text is chunked. It reads both eras of SGLang's texts
(0.5.8/0.5.9 and 0.5.23, docs/sglang.md, Startup log)::

    >>> p = StartupParser()
    >>> p.feed("[2026-02-24 11:18:37 TP3] Init torch distributed begin.\\n")
    [RankSeen(rank='TP3', ...), PhaseStarted(phase=<Phase.INIT: 'init'>, ...),
     DialectDetected(dialect=<Dialect.V0_5_9: '0.5.8-0.5.9'>, ...)]

The parser does no I/O. A serving SGLang prints a batch line per step and an access line per
request; those are skipped by one regex pass over each chunk, before any line is cut out of it.
"""

from __future__ import annotations

import itertools
from datetime import datetime

from bot.startup._failure import FailureTracker
from bot.startup._patterns import (
    DEVICE_POOL,
    EOL,
    GRAPHS,
    HEADER,
    HEADROOM,
    HOST_EXTRA,
    HOST_POOL_NEW,
    HOST_POOL_OLD,
    MAX_LINE,
    MAX_TOTAL,
    RUNTIME_STAMP,
    SERVER_ARGS,
    SHARDS,
    SKIP_LINE,
    SWA_POOL,
    SWA_SPLIT,
    WORTH_READING,
)
from bot.startup.events import (
    HYBRID_FULL_HOST_POOL,
    KV_HOST_POOL,
    PHASE_ORDER,
    DevicePool,
    Dialect,
    DialectDetected,
    Event,
    GraphProgress,
    HostPool,
    MaxTotalTokens,
    MemoryHeadroom,
    Phase,
    PhaseStarted,
    RankSeen,
    ShardProgress,
    SlidingWindowPool,
    SlidingWindowSplit,
)

__all__ = ["StartupParser"]

_PHASE_INDEX = {phase: index for index, phase in enumerate(PHASE_ORDER)}


class StartupParser:
    """Turns chunks of an SGLang log into events; one instance follows one log."""

    def __init__(self) -> None:
        self._tail = ""  # the last, unfinished line
        self._discarding = False  # inside a line longer than MAX_LINE, past its kept part
        self._stamp = ""
        self._stamp_is_time = True  # whether ``_stamp`` is a real date and time
        self._at: datetime | None = None
        self._stamped = True  # whether the line being read carries its own time
        self._new_start()

    def _new_start(self) -> None:
        self._phase = -1
        self._dialect: Dialect | None = None
        self._ranks: set[str] = set()
        self._shards: tuple[int, int] | None = None
        self._graphs: tuple[int, int] | None = None
        self._pools_logged: dict[str | None, int] = {}  # device pools per rank, this start
        self._failure = FailureTracker()

    def feed(self, chunk: str) -> list[Event]:
        """Read the next piece of the log; return the events of the lines it completed."""
        out: list[Event] = []
        if not chunk:
            return out
        if self._discarding:
            eol = EOL.search(chunk)
            if eol is None:
                return out
            chunk = chunk[eol.start() :]
            self._discarding = False
        text = self._tail + chunk if self._tail else chunk
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        self._keep_tail(text[cut:])
        if cut:
            self._scan(text, cut, out)
        return out

    def close(self) -> list[Event]:
        """The log ended: read its last line even though no line break closed it."""
        out: list[Event] = []
        tail, self._tail, self._discarding = self._tail, "", False
        if tail:
            self._pieces(tail, out)
        return out

    def _keep_tail(self, tail: str) -> None:
        if len(tail) > MAX_LINE:
            tail = tail[:MAX_LINE]
            self._discarding = True
        self._tail = tail

    def _scan(self, text: str, end: int, out: list[Event]) -> None:
        """Read the complete lines in ``text[:end]``, skipping batch and access lines unread."""
        if SKIP_LINE.match(text, 0, end) is None:
            self._read_line_at(text, 0, end, out)
        for match in WORTH_READING.finditer(text, 0, end):
            start = match.end()
            if start < end:
                self._read_line_at(text, start, end, out)

    def _read_line_at(self, text: str, start: int, end: int, out: list[Event]) -> None:
        stop = text.find("\n", start, end)
        self._pieces(text[start : end if stop < 0 else stop], out)

    def _pieces(self, line: str, out: list[Event]) -> None:
        """Read each "\r"-separated piece of a line (tqdm refreshes, a "\r\n" line end)."""
        for piece in line.split("\r") if "\r" in line else (line,):
            if piece and SKIP_LINE.match(piece) is None:
                self._line(piece[:MAX_LINE], out)

    def _line(self, line: str, out: list[Event]) -> None:
        stamp = RUNTIME_STAMP.match(line)
        if stamp is not None:
            line = line[stamp.end() :]
        # Ranks write to one file unsynchronised, and 0.5.23's tqdm ends its bar without a line
        # break, so a "[date TPn] ..." line can start in the middle of another.
        if HEADER.search(line, 1) is None:
            self._segment(line, out)
            return
        starts = [m.start() for m in HEADER.finditer(line)]
        if starts[0] != 0:
            starts.insert(0, 0)
        starts.append(len(line))
        for begin, stop in itertools.pairwise(starts):
            self._segment(line[begin:stop], out)

    def _segment(self, segment: str, out: list[Event]) -> None:
        header = HEADER.match(segment)
        rank: str | None = None
        message = segment
        self._stamped = header is not None
        if header is not None:
            stamp = header.group(1)
            if stamp != self._stamp:
                self._stamp = stamp
                parsed = self._parse_stamp(stamp)
                self._stamp_is_time = parsed is not None
                self._at = parsed or self._at
            self._stamped = self._stamp_is_time
            rank = header.group(2)[1:] or None
            message = segment[header.end() :]
        if not message.strip():
            return
        if any(marker in message for marker in SERVER_ARGS) and (
            self._phase >= 0 or self._failure.kind is not None
        ):
            # The log goes on with the next start of the server (a restart, a rollback): SGLang's
            # main process prints its arguments before any rank starts, so a start that got as
            # far as a rank line (or failed before) is over, however early it failed.
            self._new_start()
        at = self._at
        if rank is not None and rank not in self._ranks:
            self._ranks.add(rank)
            out.append(RankSeen(rank=rank, at=at))
        if not self._startup_line(message, segment, rank, at, out):
            seen = self._failure.observe(message, segment, at, self._phase == len(PHASE_ORDER) - 1)
            if seen is not None:
                out.append(seen)

    def _parse_stamp(self, stamp: str) -> datetime | None:
        """The time ``stamp`` gives, or None when its digits are no date: a log cut and spliced
        mid-line can read ``[2026-20-02 10:45:43 TP0]``, which then counts as an untimed line."""
        if len(stamp) == len("01-28 04:18:10"):
            # No year logged: take the last one seen (2000, a leap year, before any).
            year = self._at.year if self._at is not None else 2000
            stamp = f"{year}-{stamp}"
        try:
            return datetime.fromisoformat(stamp)
        except ValueError:
            return None

    def _startup_line(
        self, message: str, line: str, rank: str | None, at: datetime | None, out: list[Event]
    ) -> bool:
        """Handle a line of a healthy start; ``False`` when the message is none of them."""
        if " shards:" in message:
            match = SHARDS.search(message)
            if match is None:
                return False
            self._enter(Phase.LOAD_WEIGHTS, at, rank, line, out)
            shards = (int(match.group(1)), int(match.group(2)))
            if shards != self._shards:  # tqdm repaints the same count
                self._shards = shards
                out.append(ShardProgress(done=shards[0], total=shards[1], at=at))
            return True
        if "Capturing batches" in message:
            match = GRAPHS.search(message)
            if match is not None:
                self._enter(Phase.CUDA_GRAPH, at, rank, line, out)
                graphs = (int(match.group(1)), int(match.group(2)))
                if graphs != self._graphs:
                    self._graphs = graphs
                    out.append(GraphProgress(done=graphs[0], total=graphs[1], at=at))
            return True
        if "KV Cache is allocated." in message:
            self._device_pool(message, line, rank, at, out)
            return True
        if "Allocating " in message and "host" in message:
            return self._host_pool(message, line, rank, at, out)
        if "sliding window memory pool" in message:
            if (split := SWA_SPLIT.search(message)) is None:
                return False
            self._enter(Phase.KV_POOL, at, rank, line, out)
            full_layer = 0 if split.group(1) is None else int(split.group(1))
            out.append(SlidingWindowSplit(rank, full_layer, int(split.group(2)), at, line))
            return True
        if "SWAKVPool " in message:
            if (usage := SWA_POOL.search(message)) is None:
                return False
            self._enter(Phase.KV_POOL, at, rank, line, out)
            bound, gib, swa_size, full_size = usage.groups()
            out.append(
                SlidingWindowPool(
                    rank,
                    float(gib),
                    int(swa_size),
                    int(full_size),
                    bound == "VA upper bound",
                    at,
                    line,
                )
            )
            return True
        if "HiCache memory headroom:" in message:
            headroom = HEADROOM.search(message)
            if headroom is None:
                return False
            host, cgroup = float(headroom.group(1)), float(headroom.group(2))
            out.append(
                MemoryHeadroom(rank=rank, host_gib=host, cgroup_gib=cgroup, at=at, line=line)
            )
            return True
        if "max_total_num_tokens=" in message:
            match = MAX_TOTAL.search(message)
            if match is not None:
                out.append(MaxTotalTokens(tokens=int(match.group(1)), at=at, line=line))
            return True
        for text, phase, dialect in _MILESTONES:
            if text in message:
                self._enter(phase, at, rank, line, out)
                if dialect is not None:
                    self._detect(dialect, at, line, out)
                return True
        return False

    def _device_pool(
        self, message: str, line: str, rank: str | None, at: datetime | None, out: list[Event]
    ) -> None:
        match = DEVICE_POOL.search(message)
        if match is None:
            return
        self._enter(Phase.KV_POOL, at, rank, line, out)
        label, dtype, tokens, kv, k, v = match.groups()
        if dtype is not None:
            self._detect(Dialect.V0_5_23, at, line, out)
        k_gib = float(k) if k is not None else None
        v_gib = float(v) if v is not None else None
        kv_gib = float(kv) if kv is not None else (k_gib or 0.0) + (v_gib or 0.0)
        index = self._pools_logged.get(rank, 0)
        self._pools_logged[rank] = index + 1
        out.append(
            DevicePool(
                rank=rank,
                tokens=None if tokens is None else int(tokens),
                kv_gib=round(kv_gib, 2),
                k_gib=k_gib,
                v_gib=v_gib,
                dtype=dtype,
                at=at,
                line=line,
                index=index,
                after_graphs=self._phase >= _PHASE_INDEX[Phase.CUDA_GRAPH],
                label=label,
            )
        )

    def _host_pool(
        self, message: str, line: str, rank: str | None, at: datetime | None, out: list[Event]
    ) -> bool:
        new = HOST_POOL_NEW.search(message)
        dialect: Dialect | None
        if new is not None:
            pool, tokens, gb = new.group(1), int(new.group(2)), float(new.group(3))
            if pool == HYBRID_FULL_HOST_POOL:
                # A hybrid model's full-attention pool anchors its KV host pool: the one the
                # ratio and size name, as "kv" is for any other model.
                pool = KV_HOST_POOL
            dialect = Dialect.V0_5_23
        elif (old := HOST_POOL_OLD.search(message)) is not None:
            pool, tokens, gb = KV_HOST_POOL, None, float(old.group(1))
            dialect = Dialect.V0_5_9
        elif (extra := HOST_EXTRA.search(message)) is not None:
            # Another host allocation (a DSA indexer's): RAM too, logged after the KV host pool.
            pool, tokens, gb = extra.group(2).strip(), None, float(extra.group(1))
            dialect = None
        else:
            return False
        self._enter(Phase.HOST_POOL, at, rank, line, out)
        if dialect is not None:
            self._detect(dialect, at, line, out)
        self._failure.note_host_line(rank, line)
        out.append(HostPool(rank=rank, gb=gb, tokens=tokens, pool=pool, at=at, line=line))
        return True

    def _enter(
        self, phase: Phase, at: datetime | None, rank: str | None, line: str, out: list[Event]
    ) -> None:
        index = _PHASE_INDEX[phase]
        if index > self._phase:  # ranks interleave: only the first to get there moves the phase
            self._phase = index
            out.append(
                PhaseStarted(phase=phase, at=at, rank=rank, line=line, stamped=self._stamped)
            )

    def _detect(self, dialect: Dialect, at: datetime | None, line: str, out: list[Event]) -> None:
        if self._dialect is None:
            self._dialect = dialect
            out.append(DialectDetected(dialect=dialect, at=at, line=line))


# Lines that move a start to its next phase: (text, phase, the era only it belongs to).
_MILESTONES: tuple[tuple[str, Phase, Dialect | None], ...] = (
    # [2026-02-24 11:18:30] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', ...)
    # [2026-11-30 07:45:54] server_args={'model_path': '/models/tiny-llama', ...}   (0.5.23)
    *((marker, Phase.INIT, None) for marker in SERVER_ARGS),
    # [2026-02-24 11:18:37 TP3] Init torch distributed begin.
    ("Init torch distributed begin.", Phase.INIT, Dialect.V0_5_9),
    # [2026-03-02 09:02:11 TP3] Init parallel begin.
    ("Init parallel begin.", Phase.INIT, Dialect.V0_5_23),
    # [2026-02-24 11:18:41 TP0] Load weight begin. avail mem=94.51 GB
    ("Load weight begin.", Phase.LOAD_WEIGHTS, None),
    # [2026-02-24 11:23:41 TP0] Load weight end. elapsed=300.12 s, type=DeepseekV3ForCausalLM, ...
    ("Load weight end.", Phase.KV_POOL, None),
    # [...] Capture cuda graph begin. This can take up to several minutes. avail mem=2.05 GB
    ("Capture cuda graph begin.", Phase.CUDA_GRAPH, Dialect.V0_5_9),
    # [...] Capture target decode CUDA graph begin. backend=..., num_tokens_per_req=1, avail mem=...
    ("CUDA graph begin.", Phase.CUDA_GRAPH, Dialect.V0_5_23),
    # INFO:     Application startup complete.
    ("Application startup complete.", Phase.HTTP, None),
    # INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
    ("Uvicorn running on ", Phase.HTTP, None),
    # INFO:     127.0.0.1:40312 - "GET /model_info HTTP/1.1" 200 OK
    ('"GET /model_info HTTP/1.1" 200', Phase.WARMUP, None),
    # [2026-02-24 11:31:02] The server is fired up and ready to roll!
    ("The server is fired up and ready to roll!", Phase.READY, None),
)
