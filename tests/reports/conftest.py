"""Fixtures of the reports' tests: a SQLite store migrated by Alembic."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.store import Store
from tests.chat._core_fixtures import migrated_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with migrated_store(tmp_path) as opened:
        yield opened
