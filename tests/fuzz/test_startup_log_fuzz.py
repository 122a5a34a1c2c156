"""The startup-log parser on hostile input: random bytes, real logs cut and spliced at random
points, and 5 MB of either. It never raises, whatever it is fed and however the input is
chunked, and its memory stays bounded.

The agent reads the server's log as UTF-8 with errors replaced (``bot.startup._file`` and the
log follower), so bytes are decoded that way here; the parser is fed in chunks as a follower
feeds it, and its events folded by the same ``ReportBuilder`` the agent uses.
"""

from __future__ import annotations

import itertools
import random
import tracemalloc
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.startup import (
    Event,
    Phase,
    PhaseStarted,
    ReportBuilder,
    StartupParser,
    StartupReport,
    read_startup_report,
)
from tests._examples import examples

LOGS = sorted((Path(__file__).parents[1] / "fixtures" / "sglang_logs").glob("*.log"))
REAL = {path.name: path.read_bytes() for path in LOGS}
FIVE_MB = 5 * 1024 * 1024
# The parser keeps one unfinished line (at most 64 KiB of text) and a few figures per start;
# the builder, a few figures per rank. 5 MB fed in 64 KiB chunks peaked at 0.72 MB (random
# bytes) and 0.44 MB (real lines) on CPython 3.11, chunk strings included: 4 MiB leaves room
# and still fails if the input, or its lines, were kept.
PEAK_LIMIT = 4 * 1024 * 1024


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _parse(chunks: Iterable[str]) -> tuple[list[Event], StartupReport]:
    parser = StartupParser()
    builder = ReportBuilder()
    events: list[Event] = []
    for chunk in chunks:
        events += parser.feed(chunk)
    events += parser.close()
    for event in events:
        builder.add(event)
    return events, builder.build()


def _chunked(text: str, cuts: list[int]) -> list[str]:
    points = sorted({0, len(text), *(min(cut, len(text)) for cut in cuts)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=4096), cuts=st.lists(st.integers(0, 4096), max_size=12))
def test_random_bytes_never_raise(data: bytes, cuts: list[int]) -> None:
    """Random bytes, decoded as the agent decodes them and fed in random chunks, give events
    and a report, never an exception."""
    _, report = _parse(_chunked(_decode(data), cuts))
    assert isinstance(report, StartupReport)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(REAL)),
    other=st.sampled_from(sorted(REAL)),
    start=st.floats(0, 1),
    stop=st.floats(0, 1),
    splice=st.floats(0, 1),
    noise=st.binary(max_size=64),
    cuts=st.lists(st.integers(0, 60_000), max_size=12),
)
def test_real_logs_cut_and_spliced_at_random_points_never_raise(
    name: str,
    other: str,
    start: float,
    stop: float,
    splice: float,
    noise: bytes,
    cuts: list[int],
) -> None:
    """A real log cut at two random byte offsets (mid-line, mid-character), with random bytes
    and the tail of another real log spliced in, parses without raising, however chunked."""
    data = REAL[name]
    a, b = sorted((int(start * len(data)), int(stop * len(data))))
    tail = REAL[other][int(splice * len(REAL[other])) :]
    text = _decode(data[a:b] + noise + tail)
    _, report = _parse(_chunked(text, cuts))
    assert isinstance(report, StartupReport)


@pytest.mark.slow
def test_every_real_log_cut_at_every_line_reads_without_raising() -> None:
    """Each fixture log cut after each of its lines (a server killed there) parses, and its
    whole text parses to a report that saw at least one phase."""
    for name, data in REAL.items():
        text = _decode(data)
        ends = [i + 1 for i, char in enumerate(text) if char == "\n"]
        for end in ends:
            _parse([text[:end]])
        events, report = _parse([text])
        assert events, name
        assert report.phases, name


def _five_mb_of(piece: bytes, seed: int) -> str:
    """5 MB made of ``piece`` cut at random points and joined, decoded as the agent does."""
    rng = random.Random(seed)
    parts: list[bytes] = []
    made = 0
    while made < FIVE_MB:
        a = rng.randrange(len(piece))
        parts.append(piece[a : a + rng.randrange(1, 8192)])
        made += len(parts[-1])
    return _decode(b"".join(parts))


def _peak_while_parsing(text: str) -> tuple[int, int]:
    """(tracemalloc peak in bytes, events seen) while parsing ``text`` in 64 KiB chunks, as a
    follower reads a growing log. Tracing starts after ``text`` exists, so the peak is what the
    parser and builder hold; events are counted, not kept, as the follower keeps only what it
    publishes."""
    parser = StartupParser()
    builder = ReportBuilder()
    count = 0
    tracemalloc.start()
    try:
        for offset in range(0, len(text), 65536):
            for event in parser.feed(text[offset : offset + 65536]):
                builder.add(event)
                count += 1
        for event in parser.close():
            builder.add(event)
        builder.build()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, count


@pytest.mark.slow
def test_five_mb_of_input_is_parsed_in_bounded_memory() -> None:
    """5 MB of real log lines cut and shuffled among random bytes parses with a tracemalloc
    peak under 4 MiB: the parser keeps no more than a line and the builder a few figures."""
    piece = b"".join(REAL.values()) + random.Random(1).randbytes(256 * 1024)
    peak, count = _peak_while_parsing(_five_mb_of(piece, seed=2))
    assert peak < PEAK_LIMIT, f"peak {peak / 1e6:.2f} MB for 5 MB of log ({count} events)"
    assert count > 1000  # the real lines were read, not skipped


@pytest.mark.slow
def test_a_five_mb_file_without_line_breaks_reads_in_bounded_memory(tmp_path: Path) -> None:
    """A 5 MB log of one endless line is read from disk in fixed chunks with a peak under the
    same figure, and gives a report rather than an error."""
    path = tmp_path / "endless.log"
    with path.open("wb") as log:
        for _ in range(FIVE_MB // 65536):
            log.write(b"x\xff\x00" * 21845 + b"y")
    tracemalloc.start()
    try:
        report = read_startup_report(path, chunk_chars=65536)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(report, StartupReport)
    assert peak < PEAK_LIMIT, f"peak {peak / 1e6:.1f} MB"


def test_a_stamp_whose_digits_are_no_date_counts_as_untimed() -> None:
    """``[2026-20-02 ...]`` (month 20, as a spliced log gives) is read as an untimed line: its
    phase starts, with the last real time and ``stamped`` false, instead of raising."""
    text = (
        "[2026-01-28 04:10:00 TP0] Init parallel begin.\n"
        "[2026-20-02 10:45:43 TP0] Load weight begin. avail mem=94.51 GB\n"
    )
    events, _ = _parse([text])
    starts = [event for event in events if isinstance(event, PhaseStarted)]
    expected = [(Phase.INIT, True), (Phase.LOAD_WEIGHTS, False)]
    assert [(start.phase, start.stamped) for start in starts] == expected
    assert starts[1].at == datetime(2026, 1, 28, 4, 10)
