"""Fixtures for the startup parser's tests: the hand-written SGLang logs and a one-shot parse."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bot.startup import Event, StartupParser

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "sglang_logs"

# Figures of the deployment in the field notes (Kimi-K2.5, MLA, bf16, TP 8, page size 1):
# 70,272 bytes of KV per token (576 x 2 x 61) and a device pool of 159,274 tokens.
BYTES_PER_TOKEN = 576 * 2 * 61
DEVICE_TOKENS = 159274
TP8 = tuple(f"TP{i}" for i in range(8))


def read_log(name: str) -> str:
    """A fixture log's text with its line breaks exactly as written."""
    with open(LOGS / name, encoding="utf-8", newline="") as log:
        return log.read()


def parse_all(text: str) -> list[Event]:
    """All events of ``text`` given to a fresh parser in one chunk, then closed."""
    parser = StartupParser()
    return parser.feed(text) + parser.close()


@pytest.fixture
def log_text() -> Callable[[str], str]:
    """Reads a fixture log by file name."""
    return read_log
