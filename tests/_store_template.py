"""A SQLite store migrated once per test process and copied for each test that needs one.

Migrating through Alembic costs a test a few hundred milliseconds (most of it fsyncs, more on a
loaded machine); how the file came to be at head changes nothing in the store's behaviour, and
``tests/store/test_migrate.py`` migrates for real, step by step. The copy is made with SQLite's
backup API, so pages still in the template's write-ahead log are copied too.
"""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from pathlib import Path

from bot.store import upgrade_to_head

__all__ = ["migrated_sqlite"]

_lock = threading.Lock()
# Kept for the life of the process: its finalizer removes the directory at exit.
_template_dir: tempfile.TemporaryDirectory[str] | None = None


def _template() -> Path:
    global _template_dir
    with _lock:
        if _template_dir is None:
            directory = tempfile.TemporaryDirectory(prefix="kimi-ops-store-template-")
            upgrade_to_head(f"sqlite:///{Path(directory.name) / 'template.db'}")
            _template_dir = directory
        return Path(_template_dir.name) / "template.db"


def migrated_sqlite(path: Path) -> str:
    """A new SQLite database at ``path`` (which must not exist), at the newest migration; its
    SQLAlchemy URL."""
    if path.exists():
        raise FileExistsError(f"{path} exists; a migrated copy needs a new file")
    source = sqlite3.connect(_template())
    target = sqlite3.connect(path)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()
    return f"sqlite:///{path}"
