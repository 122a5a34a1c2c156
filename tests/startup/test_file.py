"""Reading a log file from disk in chunks."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import LogInputError
from bot.startup import build_report, read_startup_report
from tests.startup.conftest import LOGS, parse_all, read_log


@pytest.mark.parametrize("chunk_chars", [1, 7, 4096, 1 << 20])
def test_file_report_equals_the_one_chunk_report(chunk_chars: int) -> None:
    """Any chunk size gives the report of parsing the whole text at once."""
    name = "ready_size48_v0.5.23.log"
    expected = build_report(parse_all(read_log(name)))
    assert read_startup_report(LOGS / name, chunk_chars=chunk_chars) == expected


def test_crlf_and_bad_bytes_are_read(tmp_path: Path) -> None:
    """ "\\r\\n" line ends and bytes that are not UTF-8 do not stop the report."""
    text = read_log("ready_ratio4_v0.5.9.log").replace("\n", "\r\n")
    path = tmp_path / "sglang.log"
    path.write_bytes(b"\xff\xfe garbage\r\n" + text.encode())
    report = read_startup_report(path)
    assert report.ready is True
    assert report.host_gb_total == 358.16


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    """A missing log raises LogInputError naming the path."""
    path = tmp_path / "nope.log"
    with pytest.raises(LogInputError, match=r"nope\.log' does not exist"):
        read_startup_report(path)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    """A directory given as the log raises LogInputError naming it."""
    with pytest.raises(LogInputError, match="is a directory"):
        read_startup_report(tmp_path)


def test_zero_chunk_size_is_refused() -> None:
    """A chunk size below 1 is refused before the file is opened."""
    with pytest.raises(LogInputError, match="chunk size 0"):
        read_startup_report(LOGS / "gpu_busy_v0.5.9.log", chunk_chars=0)
