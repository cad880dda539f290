"""The two state backends as tests use them: fresh, isolated state on real SQLite and PostgreSQL.

PostgreSQL comes from ``EXA_TEST_PG_URL``, else the URL scripts/pg-up wrote to
``.exa-services/pg/url``. Each test gets its own schema (the URL's ``search_path``), dropped
afterwards. When no server answers, PostgreSQL cases are skipped, unless
``EXA_REQUIRE_SERVICES=1``: then they fail.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
import pytest

from examlops_policy.store._sql import SQLStore

ROOT = Path(__file__).resolve().parents[2]
PG_DIR = ROOT / ".exa-services" / "pg"
NAMES = ("sqlite", "postgres")
PARAMS = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]


@cache
def pg_server() -> tuple[str | None, str]:
    """(a reachable server URL or None, why not)."""
    url = os.environ.get("EXA_TEST_PG_URL")
    if not url and (PG_DIR / "url").is_file():
        url = (PG_DIR / "url").read_text(encoding="utf-8").strip()
    if not url:
        return None, "no PostgreSQL: set EXA_TEST_PG_URL or run scripts/pg-up"
    try:
        with psycopg.connect(url, connect_timeout=5):
            return url, ""
    except psycopg.Error as exc:
        return None, f"PostgreSQL not reachable: {str(exc).strip().splitlines()[0]}"


def pg_base_url() -> str:
    """The server URL; skips the test (fails it under EXA_REQUIRE_SERVICES=1) when unreachable."""
    url, why = pg_server()
    if url is None:
        if os.environ.get("EXA_REQUIRE_SERVICES"):
            pytest.fail(f"{why} (EXA_REQUIRE_SERVICES is set)")
        pytest.skip(why)
    return url


@dataclass(frozen=True)
class Backend:
    """Where one test's state lives: a SQLite file or a PostgreSQL URL naming a fresh schema."""

    name: str
    target: str

    def open(self, **options: Any) -> SQLStore:
        """A new store (its own connection) on this state."""
        if self.name == "sqlite":
            from examlops_policy.store.sqlite import SQLiteStore

            return SQLiteStore(Path(self.target), **options)
        from examlops_policy.store.postgres import PostgresStore

        return PostgresStore(self.target, **options)

    @contextmanager
    def raw(self) -> Iterator[Any]:
        """A plain driver connection in autocommit mode, to look under (or tamper with) the store."""
        if self.name == "sqlite":
            with closing(sqlite3.connect(self.target, isolation_level=None, timeout=30)) as db:
                yield db
        else:
            with psycopg.connect(self.target, autocommit=True) as conn:
                yield conn

    def count(self, table: str) -> int:
        with self.raw() as db:
            return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def env(self) -> dict[str, str]:
        """Environment that points the ``exa`` CLI at this state (with EXA_HOME for SQLite)."""
        if self.name == "sqlite":
            return {"EXA_HOME": str(Path(self.target).parent)}
        return {"EXA_DB_URL": self.target}


@contextmanager
def fresh_backend(name: str, tmp_path: Path) -> Iterator[Backend]:
    """Empty state on ``name``: a new SQLite file in tmp_path, or a new PostgreSQL schema."""
    if name == "sqlite":
        yield Backend("sqlite", str(tmp_path / "state" / "state.db"))
        return
    base = pg_base_url()
    schema = f"exa_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        joiner = "&" if "?" in base else "?"
        yield Backend("postgres", f"{base}{joiner}options=-csearch_path%3D{schema}")
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=PARAMS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Fresh state on each backend in turn."""
    with fresh_backend(request.param, tmp_path) as made:
        yield made


def restart_postgres() -> None:
    """Restart the cluster scripts/pg-up started (``pg_ctl restart -m fast``: sessions are cut)."""
    env = dict(line.split("=", 1) for line in (PG_DIR / "env").read_text(encoding="utf-8").split())
    pg_ctl = [f"{env['PG_BIN']}/pg_ctl", "-D", env["PG_DATA"], "-l", env["PG_LOG"], "-m", "fast", "-w", "restart"]
    if os.geteuid() == 0 and env["PG_OWNER"] != "root":
        pg_ctl = ["runuser", "-u", env["PG_OWNER"], "--", *pg_ctl]
    subprocess.run(pg_ctl, check=True, capture_output=True, timeout=60, cwd="/")


def managed_postgres() -> bool:
    """True when the server under test is the one scripts/pg-up started (so a test may restart it)."""
    url, _ = pg_server()
    return (
        url is not None
        and (PG_DIR / "env").is_file()
        and (PG_DIR / "url").is_file()
        and (PG_DIR / "url").read_text(encoding="utf-8").strip() == url
    )
