"""A throwaway PostgreSQL cluster for the store bench: ``initdb`` and ``pg_ctl`` in a temp dir,
listening only on a Unix socket there, fsync off (the bench measures kimi-ops, not the disk),
removed on exit. initdb refuses to run as root, so as root the server runs as ``postgres`` (or
``nobody``) through ``runuser``.

    with throwaway_cluster() as cluster:       # PostgresUnavailable(reason) if it cannot run
        url = cluster.new_database()
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

__all__ = ["PostgresUnavailable", "throwaway_cluster"]

TOOLS = ("postgres", "initdb", "pg_ctl")


class PostgresUnavailable(Exception):
    """No PostgreSQL server can run here; the message says why."""


@dataclass(frozen=True)
class Cluster:
    socket_dir: Path

    def url(self, database: str) -> str:
        return f"postgresql+pg8000://postgres@/{database}?unix_sock={self.socket_dir}/.s.PGSQL.5432"

    def new_database(self) -> str:
        """A fresh, empty database in the cluster; its URL."""
        name = f"kimi_bench_{uuid.uuid4().hex[:12]}"
        admin = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)


def _run_as() -> tuple[list[str], int, int]:
    if os.geteuid() != 0:
        return [], os.getuid(), os.getgid()
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return ["runuser", "-u", name, "--"], entry.pw_uid, entry.pw_gid
    raise PostgresUnavailable("running as root with neither a 'postgres' nor a 'nobody' user")


def _run(argv: list[str], what: str, timeout_s: float) -> None:
    try:
        subprocess.run(argv, check=True, capture_output=True, timeout=timeout_s)
    except subprocess.CalledProcessError as exc:
        detail = exc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise PostgresUnavailable(f"{what} failed: {detail[0]}") from exc
    except subprocess.TimeoutExpired as exc:
        raise PostgresUnavailable(f"{what} took over {timeout_s:g} s") from exc


@contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise PostgresUnavailable(f"no PostgreSQL server binaries ({', '.join(missing)} missing)")
    if importlib.util.find_spec("pg8000") is None:
        raise PostgresUnavailable("the pg8000 driver is not installed (a dev dependency)")
    prefix, uid, gid = _run_as()
    base = Path(tempfile.mkdtemp(prefix="kimi-ops-bench-pg-"))
    os.chown(base, uid, gid)
    data = base / "data"
    initialised = False
    try:
        _run([*prefix, "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
              "--locale=C", "--no-sync"], "initdb", 120)  # fmt: skip
        initialised = True
        _run([*prefix, "pg_ctl", "-D", str(data), "-l", str(base / "server.log"), "-w", "-t", "60",
              "-o", f"-k {base} -c listen_addresses='' -c fsync=off", "start"], "pg_ctl start",
             90)  # fmt: skip
        yield Cluster(socket_dir=base)
    finally:
        if initialised:
            subprocess.run(
                [*prefix, "pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        shutil.rmtree(base, ignore_errors=True)
