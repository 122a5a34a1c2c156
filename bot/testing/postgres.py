"""A throwaway PostgreSQL cluster, for the store's tests and the store bench.

``initdb`` and ``pg_ctl`` in a temp dir, listening only on a Unix socket there (no TCP), fsync
off (what is measured or tested is kimi-ops, not the disk), stopped and removed on exit even when
the body fails. initdb refuses to run as root, so as root the server runs as ``postgres`` (or
``nobody``) through ``runuser``::

    reason = postgres_unavailable()          # "no PostgreSQL server binaries ...", or None
    with throwaway_cluster() as cluster:     # subprocess.CalledProcessError if initdb fails
        url = cluster.new_database()         # postgresql+pg8000://postgres@/kimi_...?unix_sock=
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

__all__ = ["PgCluster", "postgres_unavailable", "throwaway_cluster"]

PG_TOOLS = ("postgres", "initdb", "pg_ctl")


@dataclass(frozen=True)
class PgCluster:
    """A running cluster: its databases are reached through the socket in ``socket_dir``."""

    socket_dir: Path

    def url(self, database: str) -> str:
        return f"postgresql+pg8000://postgres@/{database}?unix_sock={self.socket_dir}/.s.PGSQL.5432"

    def new_database(self) -> str:
        """A fresh, empty database in the cluster; returns its URL."""
        name = f"kimi_{uuid.uuid4().hex[:12]}"
        admin = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)


def _run_as() -> tuple[list[str], int, int] | str:
    """The command prefix, uid and gid the server runs as; a reason when there is none."""
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return ["runuser", "-u", name, "--"], entry.pw_uid, entry.pw_gid
    return "running as root with neither a 'postgres' nor a 'nobody' user to run the server as"


def postgres_unavailable() -> str | None:
    """Why no throwaway cluster can run here, or None when one can."""
    missing = [tool for tool in PG_TOOLS if shutil.which(tool) is None]
    if missing:
        return f"no PostgreSQL server binaries on PATH ({', '.join(missing)} missing)"
    if importlib.util.find_spec("pg8000") is None:
        return "the pg8000 driver is not installed (pip install pg8000, a dev dependency)"
    run_as = _run_as()
    return run_as if isinstance(run_as, str) else None


@contextmanager
def throwaway_cluster() -> Iterator[PgCluster]:
    """Start a cluster (check :func:`postgres_unavailable` first); stop and remove it on exit."""
    run_as = _run_as()
    if isinstance(run_as, str):
        raise RuntimeError(run_as)
    prefix, uid, gid = run_as
    # Not under a test's tmp dir: that one is private to root, and the server runs as another user.
    base = Path(tempfile.mkdtemp(prefix="kimi-ops-pg-"))
    os.chown(base, uid, gid)
    data, log = base / "data", base / "server.log"
    started = False
    try:
        subprocess.run(
            [*prefix, "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
             "--locale=C", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        started = True
        subprocess.run(
            [*prefix, "pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
             f"-k {base} -c listen_addresses='' -c fsync=off", "start"],
            check=True, capture_output=True, timeout=90,
        )  # fmt: skip
        yield PgCluster(socket_dir=base)
    finally:
        if started:
            subprocess.run(
                [*prefix, "pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        shutil.rmtree(base, ignore_errors=True)
