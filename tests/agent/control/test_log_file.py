"""Following the server's log by name and inode: moved, deleted, rotated with ``create``,
truncated, and missing at first, each with a writer that keeps its file open as a server does."""

from __future__ import annotations

from pathlib import Path

from bot.agent.control._log_file import FileLogSource


def _writer(path: Path):  # type: ignore[no-untyped-def]
    """The server's side: one append-mode file held open for the whole run."""
    return path.open("ab", buffering=0)


def test_a_log_moved_mid_start_is_read_on_through_its_inode(tmp_path: Path) -> None:
    """``mv server.log server.log.1`` while the server writes: every later line is still read
    (failed before the fix: the source read "" forever from the missing name), and the move is
    a problem while the name is gone."""
    log = tmp_path / "server.log"
    with _writer(log) as server:
        source = FileLogSource(log, 0)
        server.write(b"Load weight begin.\n")
        assert source.read_new() == "Load weight begin.\n"
        assert source.problem() is None
        log.rename(tmp_path / "server.log.1")
        server.write(b"KV Cache is allocated.\n")
        assert source.read_new() == "KV Cache is allocated.\n"
        problem = source.problem()
        assert problem is not None
        assert "moved or deleted" in problem
        assert str(log) in problem
        source.close()


def test_a_deleted_log_is_read_on_through_its_inode(tmp_path: Path) -> None:
    """``rm server.log`` while the server writes: the lines written after are still read."""
    log = tmp_path / "server.log"
    with _writer(log) as server:
        source = FileLogSource(log, 0)
        server.write(b"one\n")
        assert source.read_new() == "one\n"
        log.unlink()
        server.write(b"two\n")
        assert source.read_new() == "two\n"
        assert source.problem() is not None
        source.close()


def test_a_rotation_with_create_reads_the_old_file_until_the_new_one_grows(
    tmp_path: Path,
) -> None:
    """logrotate's ``create`` (move, then a new empty file under the name): the old file, which
    the server still writes, is read on while the new one is empty; once the new one has lines,
    the old one's last lines come first and then the new file's, from its beginning."""
    log = tmp_path / "server.log"
    with _writer(log) as server:
        source = FileLogSource(log, 0)
        server.write(b"a\n")
        assert source.read_new() == "a\n"
        log.rename(tmp_path / "server.log.1")
        log.write_bytes(b"")
        server.write(b"b\n")
        assert source.read_new() == "b\n"
        assert source.problem() is None
        server.write(b"c\n")
        with _writer(log) as restarted:
            restarted.write(b"new run\n")
            assert source.read_new() == "c\nnew run\n"
            server.write(b"lost to the old file\n")
            restarted.write(b"more\n")
            assert source.read_new() == "more\n"
        source.close()


def test_truncation_in_place_is_read_from_the_beginning(tmp_path: Path) -> None:
    """``: > server.log`` (or copytruncate): the file is read again from its first byte."""
    log = tmp_path / "server.log"
    log.write_bytes(b"x" * 100 + b"\n")
    source = FileLogSource(log, 0)
    assert len(source.read_new()) == 101
    log.write_bytes(b"after\n")
    assert source.read_new() == "after\n"
    source.close()


def test_a_log_missing_at_first_is_a_problem_until_it_appears(tmp_path: Path) -> None:
    """No file under the name: "" and a problem naming the path; once it exists it is read."""
    log = tmp_path / "server.log"
    source = FileLogSource(log, 0)
    assert source.read_new() == ""
    problem = source.problem()
    assert problem is not None
    assert "does not exist" in problem
    log.write_bytes(b"first\n")
    assert source.read_new() == "first\n"
    assert source.problem() is None
    source.close()


def test_the_offset_skips_an_earlier_run(tmp_path: Path) -> None:
    """The byte offset given applies to the first file opened: an earlier run is not read."""
    log = tmp_path / "server.log"
    log.write_bytes(b"old run\nnew run\n")
    source = FileLogSource(log, len(b"old run\n"))
    assert source.read_new() == "new run\n"
    source.close()
