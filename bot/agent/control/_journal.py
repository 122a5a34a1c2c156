"""Reading the unit's journal: followed live (``journalctl -f``) or one run's beginning."""

from __future__ import annotations

import codecs
import os
import subprocess
import threading

from bot.errors import BackendError

__all__ = ["JournalLogSource", "journal_head"]


class JournalLogSource:
    """``journalctl -u <unit> -f -o cat`` in a subprocess, drained by a reader thread."""

    def __init__(self, argv: list[str]) -> None:
        try:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
        except OSError as exc:
            raise BackendError(f"cannot run {argv[0]!r}: {exc}") from exc
        self._chunks: list[bytes] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name="journal-reader", daemon=True)
        self._thread.start()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _drain(self) -> None:
        stream = self._process.stdout
        assert stream is not None
        while chunk := os.read(stream.fileno(), 65536):
            with self._lock:
                self._chunks.append(chunk)

    def problem(self) -> str | None:
        """The journal is read by unit, not by file: rotation never hides it. Only
        ``journalctl`` itself ending stops the output."""
        code = self._process.poll()
        if code is None:
            return None
        return f"journalctl exited (status {code}); following the server's endpoints"

    def read_new(self) -> str:
        with self._lock:
            data, self._chunks = b"".join(self._chunks), []
        return self._decoder.decode(data)

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self._thread.join(timeout=10)
        if self._process.stdout is not None:
            self._process.stdout.close()


def journal_head(argv: list[str], max_bytes: int) -> str:
    """The first ``max_bytes`` that ``argv`` (a ``journalctl`` without ``-f``) prints."""
    try:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except OSError as exc:
        raise BackendError(f"cannot run {argv[0]!r}: {exc}") from exc
    assert process.stdout is not None
    with process.stdout:
        data = process.stdout.read(max_bytes)  # a run of weeks: its beginning is enough
    if process.poll() is None:
        process.terminate()
    process.wait(timeout=10)
    return data.decode("utf-8", errors="replace")
