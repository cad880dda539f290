"""PostgreSQL with least privilege: docs/postgres-least-privilege.sql, applied as shipped.

Each setup is a fresh database and two fresh roles with random names and passwords, made by the
cluster's superuser running the reviewed SQL file through psql (its psql variables set on the
command line), and dropped afterwards. The owner role migrates (through the product); the app role
then runs the real CLI with DML only, and is refused everything else with SQLSTATE 42501.

Needs the PostgreSQL that scripts/pg-up started (its superuser is reached over the cluster's Unix
socket, as the cluster's OS user): skipped otherwise, failed under EXA_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from examlops_policy import audit
from examlops_policy.errors import StateError
from examlops_policy.store import _sql
from examlops_policy.store.postgres import PostgresStore
from reliability.backends import PG_DIR, managed_postgres, pg_base_url
from tests.conftest import ROOT, run_exa

pytestmark = pytest.mark.postgres

SQL_FILE = ROOT / "docs" / "postgres-least-privilege.sql"
SCHEMA = "exa"  # the file's default, left unset on purpose
OWNER_HINT = "run any exa command once with EXA_DB_URL set to the URL of the role that owns the schema"
STATE_TABLES = ("allocations", "api_tokens", "decisions", "holdings", "node_usage", "pools", "queue", "state")
RECORD_TABLES = ("audit_log", "burst_events", "capacity_log", "fleets", "node_grants", "verdict_sets")
# The reviewed grants: a table a later migration adds fails this until it is classified in the SQL.
# No table-wide UPDATE anywhere, no DELETE but of node_usage (replaced whole with each scheduler
# report): UPDATE of the columns exa changes after a row is written.
EXPECTED_GRANTS = {
    **{table: "INSERT, SELECT" for table in (*STATE_TABLES, *RECORD_TABLES)},
    "node_usage": "DELETE, INSERT, SELECT",
    "schema_migrations": "SELECT",
}
EXPECTED_COLUMN_UPDATES = {
    "state": ["version", "fleet_version", "layout"],
    "pools": ["spec", "count", "created_at", "updated_at", "held_outside", "version", "free", "capacity", "removed_at", "removing_since"],
    "decisions": ["released_at", "released_ts", "lease_expires_at", "lease_expires_ts", "job_id", "scheduler", "job_uid", "job_state", "submitted_at",
                  "job_started_at", "job_ended_at", "node_down_at", "preempting_for"],  # what reconcile and preemption record
    "queue": ["state", "admitted_by", "ended_at", "message", "attempts", "version"],  # a queued row changes state; none is deleted
    "allocations": ["released_at"],
    "holdings": ["node", "device"],  # the upgrade to nodes maps old grants to their nodes (audited)
    "api_tokens": ["revoked_at"],  # exa tokens revoke (audited); a token is never deleted
}
REFUSED = [
    "UPDATE audit_log SET kind = 'x'",
    "DELETE FROM audit_log",
    "TRUNCATE audit_log",
    "DROP TABLE decisions",
    "CREATE TABLE x (id integer)",
    "ALTER TABLE audit_log DISABLE TRIGGER ALL",
    "ALTER TABLE decisions ADD COLUMN x integer",
    "TRUNCATE pools CASCADE",
    "UPDATE fleets SET document = '{}'",
    "DELETE FROM burst_events",
    "INSERT INTO schema_migrations VALUES (9999, 'later')",
    "CREATE TEMP TABLE x (id integer)",
    "CREATE SCHEMA x",
    "SET session_replication_role = replica",
    # The records a placement wrote stay as written: its devices, region, pool, what its holdings are.
    "UPDATE decisions SET devices = 1",
    "UPDATE decisions SET region = 'eu-west-3'",
    "UPDATE decisions SET document = '{}'",
    "UPDATE holdings SET profile = '7g.80gb'",
    "UPDATE holdings SET share = 1",
    "UPDATE node_grants SET cpu_milli = 0",
    "UPDATE allocations SET devices = 1",
    "UPDATE pools SET name = 'renamed'",
    "DELETE FROM decisions",
    "DELETE FROM holdings",
    "DELETE FROM allocations",
    "DELETE FROM pools",
    "DELETE FROM state",
]
# Strong table locks need table-wide UPDATE, DELETE or TRUNCATE: a session of the app role cannot
# stop every writer with one.
REFUSED_LOCKS = [
    "LOCK TABLE decisions IN ACCESS EXCLUSIVE MODE",
    "LOCK TABLE pools IN EXCLUSIVE MODE",
    "LOCK TABLE state IN SHARE ROW EXCLUSIVE MODE",
    "LOCK TABLE audit_log IN SHARE MODE",
]


def _unavailable(why: str) -> None:
    if os.environ.get("EXA_REQUIRE_SERVICES"):
        pytest.fail(f"{why} (EXA_REQUIRE_SERVICES is set)")
    pytest.skip(why)


@dataclass(frozen=True)
class Superuser:
    """psql as the cluster's superuser (peer authentication on its Unix socket)."""

    command: tuple[str, ...]
    host: str  # where the roles connect over TCP (the test server's URL)
    port: str

    def psql(self, database: str, *args: str, stdin: str = "") -> str:
        result = subprocess.run(
            [*self.command, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", database, *args],
            input=stdin, capture_output=True, text=True, timeout=120, cwd="/",
        )  # fmt: skip
        if result.returncode != 0:
            raise AssertionError(f"psql exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result.stdout


def superuser() -> Superuser:
    base = pg_base_url()  # skips (or fails) when no server answers
    if not managed_postgres():
        _unavailable("the role tests need the PostgreSQL that scripts/pg-up started (its superuser)")
    env = dict(line.split("=", 1) for line in (PG_DIR / "env").read_text(encoding="utf-8").split())
    conf = (Path(env["PG_DATA"]) / "exa.conf").read_text(encoding="utf-8")
    found = re.search(r"^unix_socket_directories = '([^']+)'", conf, re.MULTILINE)
    assert found, "exa.conf names no unix_socket_directories"
    command: tuple[str, ...] = (f"{env['PG_BIN']}/psql", "-h", found.group(1).split(",")[0], "-p", env["PG_PORT"])
    if env["PG_OWNER"] != pwd.getpwuid(os.geteuid()).pw_name:
        if os.geteuid() != 0:
            _unavailable(f"the cluster's superuser is the OS user {env['PG_OWNER']}; becoming it needs root")
        command = ("runuser", "-u", env["PG_OWNER"], "--", *command)
    info = conninfo_to_dict(base)
    return Superuser(command, str(info.get("host") or "127.0.0.1"), str(info.get("port") or "5432"))


@dataclass(frozen=True)
class Setup:
    """One database and its two roles, made by docs/postgres-least-privilege.sql."""

    su: Superuser
    dbname: str
    owner: str
    app: str
    owner_password: str
    app_password: str

    def url(self, role: str) -> str:
        password = self.owner_password if role == self.owner else self.app_password
        return f"postgresql://{role}:{password}@{self.su.host}:{self.su.port}/{self.dbname}"

    @property
    def owner_url(self) -> str:
        return self.url(self.owner)

    @property
    def app_url(self) -> str:
        return self.url(self.app)

    def apply_sql(self) -> str:
        """Run the SQL file exactly as shipped, its variables set with ``psql -v``."""
        return self.su.psql(
            "postgres",
            "-v", f"owner={self.owner}", "-v", f"app={self.app}", "-v", f"dbname={self.dbname}",
            "-v", f"owner_password={self.owner_password}", "-v", f"app_password={self.app_password}",
            stdin=SQL_FILE.read_text(encoding="utf-8"),
        )  # fmt: skip

    def migrate_as_owner(self, home: Path) -> None:
        """What the SQL's step 2 says: any exa command, once, with the owner's URL."""
        run_exa(home, "hardware", "pools", check=True, env={"EXA_DB_URL": self.owner_url})

    def connect_app(self) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.app_url, autocommit=True)

    def tables(self) -> list[str]:
        with psycopg.connect(self.owner_url, autocommit=True) as conn:
            rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (SCHEMA,)).fetchall()
        return [r[0] for r in rows]


@contextmanager
def least_privilege_setup() -> Iterator[Setup]:
    su = superuser()
    tag = secrets.token_hex(5)
    setup = Setup(su, f"exa_roles_{tag}", f"exa_owner_{tag}", f"exa_app_{tag}", secrets.token_hex(16), secrets.token_hex(16))
    try:
        setup.apply_sql()
        yield setup
    finally:
        su.psql(
            "postgres",
            "-c", f'DROP DATABASE IF EXISTS "{setup.dbname}" WITH (FORCE)',
            "-c", f'DROP ROLE IF EXISTS "{setup.app}"',
            "-c", f'DROP ROLE IF EXISTS "{setup.owner}"',
        )  # fmt: skip


def column_updates(conn: psycopg.Connection[tuple[Any, ...]]) -> dict[str, list[str]]:
    """Table -> the columns the connected role may UPDATE without a table-wide grant."""
    rows = conn.execute(
        "SELECT c.relname, array_agg(a.attname::text ORDER BY a.attnum) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND has_column_privilege(c.oid, a.attnum, 'UPDATE') GROUP BY c.relname",
        (SCHEMA,),
    ).fetchall()
    return {r[0]: sorted(r[1]) for r in rows}


def app_grants(conn: psycopg.Connection[tuple[Any, ...]]) -> dict[str, str]:
    """Table -> the privileges the connected role holds on it (every kind PostgreSQL has)."""
    rows = conn.execute(
        "SELECT c.relname, string_agg(p, ', ' ORDER BY p) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS p "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND has_table_privilege(c.oid, p) GROUP BY c.relname",
        (SCHEMA,),
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def chain(setup: Setup) -> list[audit.AuditRow]:
    store = PostgresStore(setup.app_url)
    try:
        rows = store.audit_rows()
    finally:
        store.close()
    assert audit.verify_chain(rows).ok
    return rows


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """Roles and database made, migrated by the owner, grants set again; one pool added by the app."""
    home = tmp_path_factory.mktemp("roles") / "exa-home"
    with least_privilege_setup() as setup:
        try:
            setup.migrate_as_owner(home)
            setup.apply_sql()
            run_exa(home, "hardware", "add-pool", "seed", "--target", "hpc", "--accelerator", "intel-gaudi",
                    "--count", "2", "--region", "eu", check=True, env={"EXA_DB_URL": setup.app_url})  # fmt: skip
            yield setup
        finally:
            run_exa(home, "opa", "stop", env={"EXA_DB_URL": setup.owner_url})


def test_the_app_role_owns_nothing_and_holds_exactly_the_reviewed_grants(migrated: Setup) -> None:
    with migrated.connect_app() as conn:
        assert app_grants(conn) == EXPECTED_GRANTS
        assert column_updates(conn) == {table: sorted(columns) for table, columns in EXPECTED_COLUMN_UPDATES.items()}
        owned = conn.execute(
            "SELECT (SELECT count(*) FROM pg_class WHERE relowner = r.oid) + (SELECT count(*) FROM pg_namespace WHERE nspowner = r.oid)"
            " + (SELECT count(*) FROM pg_database WHERE datdba = r.oid) + (SELECT count(*) FROM pg_proc WHERE proowner = r.oid)"
            " FROM pg_roles r WHERE r.rolname = current_user"
        ).fetchone()
        assert owned == (0,)
        assert conn.execute(
            "SELECT has_schema_privilege(%s, 'USAGE'), has_schema_privilege(%s, 'CREATE'), has_schema_privilege('public', 'CREATE'),"
            " has_database_privilege(current_database(), 'CREATE'), has_database_privilege(current_database(), 'TEMP'),"
            " current_schema(), (SELECT rolsuper OR rolcreatedb OR rolcreaterole OR rolbypassrls FROM pg_roles WHERE rolname = current_user)",
            (SCHEMA, SCHEMA),
        ).fetchone() == (True, False, False, False, False, SCHEMA, False)
    # The owner migrated and owns it all; its search_path is the same schema (the same write lock).
    with psycopg.connect(migrated.owner_url, autocommit=True) as conn:
        assert conn.execute("SELECT current_schema()").fetchone() == (SCHEMA,)
        owners = conn.execute("SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = %s", (SCHEMA,)).fetchall()
        assert owners == [(migrated.owner,)]
    # Idempotent: a second and third run change nothing, and a grant made by hand is taken back.
    with psycopg.connect(migrated.owner_url, autocommit=True) as conn:
        conn.execute(f'GRANT UPDATE ON fleets TO "{migrated.app}"')
        conn.execute(f'GRANT UPDATE (devices) ON decisions TO "{migrated.app}"')
        conn.execute(f'GRANT DELETE ON holdings TO "{migrated.app}"')
    report = migrated.apply_sql()
    assert "audit_log         | INSERT, SELECT" in report
    assert "allocations       | INSERT, SELECT, UPDATE (released_at)" in report
    migrated.apply_sql()
    with migrated.connect_app() as conn:
        assert app_grants(conn) == EXPECTED_GRANTS
        assert column_updates(conn) == {table: sorted(columns) for table, columns in EXPECTED_COLUMN_UPDATES.items()}


def test_the_app_role_places_releases_and_verifies_through_the_cli(migrated: Setup, tmp_path: Path) -> None:
    home, env = tmp_path / "exa-home", {"EXA_DB_URL": migrated.app_url}
    try:
        run_exa(home, "hardware", "add-pool", "hpc-mi300", "--target", "hpc", "--accelerator", "amd",
                "--count", "1", "--region", "eu", check=True, env=env)  # fmt: skip
        run_exa(home, "hardware", "add-pool", "cloud-a100", "--target", "cloud", "--accelerator", "nvidia",
                "--count", "8", "--region", "us", check=True, env=env)  # fmt: skip
        first = json.loads(run_exa(home, "hardware", "place", "a", "--accelerator", "amd", "--engine", "vllm", "--json", env=env).stdout)
        assert first["outcome"] == "placed"
        run_exa(home, "hardware", "release", first["id"], check=True, env=env)
        again = json.loads(run_exa(home, "hardware", "place", "b", "--accelerator", "amd", "--engine", "vllm", "--json", check=True, env=env).stdout)
        assert again["pool"] == "hpc-mi300"
        # The queue: queued, cancelled, admitted when b is released (its row claimed).
        waits = json.loads(run_exa(home, "hardware", "place", "d", "--accelerator", "amd", "--engine", "vllm", "--queue", "--json",
                                   check=True, env=env).stdout)  # fmt: skip
        dropped = json.loads(run_exa(home, "hardware", "place", "e", "--accelerator", "amd", "--engine", "vllm", "--queue", "--json",
                                     check=True, env=env).stdout)  # fmt: skip
        assert (waits["outcome"], dropped["outcome"]) == ("queued", "queued")
        run_exa(home, "hardware", "cancel", dropped["id"], check=True, env=env)
        released = json.loads(run_exa(home, "hardware", "release", again["id"], "--json", check=True, env=env).stdout)
        assert [a["queued_id"] for a in released["admitted"]["admitted"]] == [waits["id"]]
        burst = run_exa(home, "hardware", "burst", "c", "--accelerator", "nvidia", "--residency", "open", "--allow-burst", "--json", env=env)
        assert burst.returncode == 0, burst.stdout + burst.stderr
        events = json.loads(run_exa(home, "hardware", "burst-events", "--json", check=True, env=env).stdout)
        assert [e["verdict"] for e in events] == ["allowed"]
        # A lease renewed; a pool drained, its removal waiting on its live grant, removed when that
        # ends, and registered again under its name: the columns these change are the app role's.
        run_exa(home, "hardware", "renew", json.loads(burst.stdout)["id"], "--lease", "2h", check=True, env=env)
        run_exa(home, "hardware", "drain", "cloud-a100", check=True, env=env)
        assert "removal" in run_exa(home, "hardware", "remove-pool", "cloud-a100", check=True, env=env).stdout
        run_exa(home, "hardware", "release", json.loads(burst.stdout)["id"], check=True, env=env)
        run_exa(home, "hardware", "add-pool", "cloud-a100", "--target", "cloud", "--accelerator", "nvidia",
                "--count", "8", "--region", "us", check=True, env=env)  # fmt: skip
        verified = run_exa(home, "audit", "verify", check=True, env=env)
        assert "✓ audit log verifies" in verified.stdout
        assert not (home / "state.db").exists()
    finally:
        run_exa(home, "opa", "stop", env=env)
    kinds = [json.loads(row.canonical)["kind"] for row in chain(migrated)]
    # a, b, c, the queued d and e, and d's admission; a, b and c released.
    assert (kinds.count("decision"), kinds.count("release"), kinds.count("burst"), kinds.count("renew")) == (6, 3, 1, 1)
    assert (kinds.count("queued"), kinds.count("cancel"), kinds.count("admit")) == (2, 1, 1)


@pytest.mark.parametrize("statement", REFUSED)
def test_the_app_role_is_refused_what_dml_does_not_cover(migrated: Setup, statement: str) -> None:
    before = chain(migrated)
    assert before, "the fixture's pool left an audit entry"
    with migrated.connect_app() as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
            conn.execute(statement)
        assert refused.value.sqlstate == "42501"
    assert chain(migrated) == before
    assert migrated.tables() == sorted([*EXPECTED_GRANTS])


@pytest.mark.parametrize("statement", REFUSED_LOCKS)
def test_the_app_role_cannot_lock_a_table_against_every_writer(migrated: Setup, statement: str) -> None:
    with migrated.connect_app() as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as refused:
            with conn.transaction():
                conn.execute(statement)
        assert refused.value.sqlstate == "42501"


def test_before_migrating_the_app_role_is_told_to_run_exa_once_as_the_owner(tmp_path: Path) -> None:
    home = tmp_path / "exa-home"
    with least_privilege_setup() as setup:
        try:
            with pytest.raises(StateError, match="no schema yet") as info:
                PostgresStore(setup.app_url, attempts=2)
            assert OWNER_HINT in str(info.value) and "nothing was written" in str(info.value)
            assert setup.app_password not in str(info.value)
            cli = run_exa(home, "hardware", "pools", env={"EXA_DB_URL": setup.app_url})
            assert cli.returncode != 0 and OWNER_HINT in cli.stderr
            assert setup.tables() == []

            setup.migrate_as_owner(home)
            # Until the grants run again, the default privileges let the app role read and append only.
            with setup.connect_app() as conn:
                assert set(app_grants(conn).values()) == {"INSERT, SELECT"}
            setup.apply_sql()
            run_exa(home, "hardware", "add-pool", "one", "--target", "hpc", "--accelerator", "amd",
                    "--count", "1", "--region", "eu", check=True, env={"EXA_DB_URL": setup.app_url})  # fmt: skip
            assert "one" in run_exa(home, "hardware", "pools", check=True, env={"EXA_DB_URL": setup.app_url}).stdout
        finally:
            run_exa(home, "opa", "stop", env={"EXA_DB_URL": setup.owner_url})


def test_a_pending_migration_needs_the_owner_and_the_app_role_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "exa-home"
    with least_privilege_setup() as setup:
        try:
            setup.migrate_as_owner(home)
            setup.apply_sql()
            PostgresStore(setup.app_url).close()  # all applied: the app role opens the state, DML only
        finally:
            run_exa(home, "opa", "stop", env={"EXA_DB_URL": setup.owner_url})
        shipped = _sql.migrations("postgres")
        later = shipped[-1][0] + 1
        extra = "CREATE TABLE later_records (id INTEGER PRIMARY KEY, note TEXT); INSERT INTO later_records VALUES (1, 'migrated');"
        monkeypatch.setattr(_sql, "migrations", lambda dialect: [*shipped, (later, extra)])

        with pytest.raises(StateError, match=f"schema migration\\(s\\) {later} are pending") as info:
            PostgresStore(setup.app_url, attempts=2)
        assert OWNER_HINT in str(info.value)
        with setup.connect_app() as conn:
            versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]
        assert versions == [v for v, _ in shipped]
        assert "later_records" not in setup.tables()

        PostgresStore(setup.owner_url).close()  # the owner applies it
        PostgresStore(setup.app_url).close()
        with setup.connect_app() as conn:
            # A table a later migration adds: read and append at once (default privileges), no more.
            conn.execute("INSERT INTO later_records VALUES (2, 'app')")
            assert conn.execute("SELECT count(*) FROM later_records").fetchone() == (2,)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("UPDATE later_records SET note = 'changed'")


def test_a_session_holding_the_write_lock_stalls_a_writer_only_for_bounded_waits_and_is_named(migrated: Setup) -> None:
    """Any role may take advisory locks: a session of the app role that holds exa's write lock
    makes a writer wait lock_timeout per attempt, a bounded number of attempts, then StateBusy
    (exit 6) naming that session; nothing is written, and once it lets go, writes go through."""
    import time

    from examlops_policy.errors import StateBusy
    from examlops_policy.model import Pool
    from examlops_policy.tables import load_tables
    from examlops_policy._core import commit
    from examlops_policy._core.state import Capacities

    capacities = Capacities(load_tables())

    with psycopg.connect(migrated.app_url, autocommit=True, application_name="intruder") as intruder:
        intruder.execute("SELECT pg_advisory_lock(%s, hashtext(current_schema()))", (0x45584131,))
        store = PostgresStore(migrated.app_url, lock_timeout_s=0.3, attempts=3)
        try:
            before = chain(migrated)
            began = time.monotonic()
            with pytest.raises(StateBusy) as info:
                commit.apply_pools(store, capacities, [Pool("stalled", "hpc", "amd", 1, "eu")], replace=False, source="exa-test")
            took = time.monotonic() - began
            message = str(info.value)
            assert 0.9 <= took < 6, took  # three waits of 0.3 s, and the backoff between them
            assert "stayed locked" in message and "gave up after 3 attempts, nothing was written" in message
            assert "each wait for its lock ended after lock_timeout 0.3 s" in message
            assert f"held by pid {intruder.info.backend_pid} (user {migrated.app}, application 'intruder'" in message
            assert chain(migrated) == before
        finally:
            store.close()
    store = PostgresStore(migrated.app_url, lock_timeout_s=0.3, attempts=3)
    try:
        assert commit.apply_pools(store, capacities, [Pool("stalled", "hpc", "amd", 1, "eu")], replace=False, source="exa-test")[0].action == "added"
    finally:
        store.close()


def test_what_the_app_role_may_still_change_behind_exa_is_named_by_audit_verify(tmp_path: Path) -> None:
    """The columns the app role may UPDATE are those exa changes; changed behind exa's back (a live
    placement marked released, a pool moved to another region), and by the owner beyond them (a
    decision's devices), `exa audit verify` names each difference and exits 7."""
    home = tmp_path / "exa-home"
    with least_privilege_setup() as migrated:
        migrated.migrate_as_owner(home)
        migrated.apply_sql()
        _tamper_and_verify(migrated, home)


def _tamper_and_verify(migrated: Setup, home: Path) -> None:
    env = {"EXA_DB_URL": migrated.app_url}
    try:
        run_exa(home, "hardware", "add-pool", "mi300-tampered", "--target", "hpc", "--accelerator", "amd",
                "--count", "4", "--region", "eu", check=True, env=env)  # fmt: skip
        placed = json.loads(run_exa(home, "hardware", "place", "t", "--accelerator", "amd", "--engine", "vllm", "--count", "2",
                                    "--json", check=True, env=env).stdout)["decision_id"]  # fmt: skip
        assert run_exa(home, "audit", "verify", env=env).returncode == 0
        with migrated.connect_app() as conn:
            conn.execute("UPDATE decisions SET released_at = '2026-12-01T00:00:00.000000Z', released_ts = 1 WHERE id = %s", (placed,))
            conn.execute("UPDATE allocations SET released_at = '2026-12-01T00:00:00.000000Z' WHERE decision_id = %s", (placed,))
            conn.execute("UPDATE pools SET spec = replace(spec, '\"region\":\"eu\"', '\"region\":\"us-east-1\"') WHERE name = 'mi300-tampered'")
        with psycopg.connect(migrated.owner_url, autocommit=True) as conn:
            conn.execute("UPDATE decisions SET devices = 1 WHERE id = %s", (placed,))
        result = run_exa(home, "audit", "verify", "--json", env=env)
        assert result.returncode == 7, result.stdout + result.stderr
        messages = [p["message"] for p in json.loads(result.stdout)["problems"]]
        for expected in (f"decisions.released_at of {placed[:12]}", f"allocations.released_at of {placed[:12]}",
                         "pools.spec of 'mi300-tampered'", f"decisions.devices of {placed[:12]} is 1.0"):  # fmt: skip
            assert any(expected in m for m in messages), (expected, messages)
    finally:
        run_exa(home, "opa", "stop", env=env)
