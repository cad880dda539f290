"""The placement service's bearer tokens (``service.tokens``, ``exa tokens``): made for a project
and scopes, shown once, stored only as a digest, checked in constant time; unknown, wrong, revoked
and expired tokens are refused alike; making and revoking are audited; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from examlops_policy.errors import NotFoundError, SpecError
from examlops_policy.service import tokens
from reliability.backends import Backend, backend  # noqa: F401 - the fixture
from tests.conftest import run_exa


def test_a_token_is_stored_as_its_digest_and_checks_only_whole(backend: Backend) -> None:
    store = backend.open()
    try:
        made = tokens.create(store, "ml", "read,place")
        assert made.token.startswith("exa_") and made.row.scopes == ("place", "read")
        assert made.row.digest == tokens.digest(made.token) and made.token not in made.row.digest
        with backend.raw() as db:
            stored = [tuple(r) for r in db.execute("SELECT * FROM api_tokens").fetchall()]
        assert len(stored) == 1 and all(made.token not in str(v) for v in stored[0])
        assert tokens.authenticate(store, f"Bearer {made.token}") == made.row
        assert tokens.authenticate(store, f"bearer  {made.token}").project == "ml"
        wrong = made.token[:-1] + ("A" if made.token[-1] != "A" else "B")
        for header in (None, "", "Bearer", f"Basic {made.token}", f"Bearer {wrong}", f"Bearer {made.token}x",
                       f"Bearer exa_{'0' * 12}_{made.token.rsplit('_', 1)[1]}", "Bearer exa_zz"):  # fmt: skip
            with pytest.raises(tokens.TokenRefused):
                tokens.authenticate(store, header)
    finally:
        store.close()


def test_revoked_and_expired_tokens_are_refused_and_audited(backend: Backend) -> None:
    store = backend.open()
    try:
        made = tokens.create(store, "ml", ["place"])
        row, changed = tokens.revoke(store, made.row.id)
        assert changed and row.revoked_at is not None and tokens.state(row) == "revoked"
        assert tokens.revoke(store, made.row.id)[1] is False  # a second revoke writes nothing
        with pytest.raises(tokens.TokenRefused, match="revoked"):
            tokens.authenticate(store, f"Bearer {made.token}")
        with pytest.raises(NotFoundError):
            tokens.revoke(store, "000000000000")
        short = tokens.create(store, "ml", "read", expires=timedelta(seconds=-1))  # already past
        with pytest.raises(tokens.TokenRefused, match="expired"):
            tokens.authenticate(store, f"Bearer {short.token}")
        entries = [json.loads(r.canonical) for r in store.audit_rows()]
        assert [(e["kind"], e["action"], e["token_id"]) for e in entries] == [
            ("token", "created", made.row.id), ("token", "revoked", made.row.id), ("token", "created", short.row.id)]  # fmt: skip
        assert all(made.token not in json.dumps(e) for e in entries)
    finally:
        store.close()


@pytest.mark.parametrize("scopes", ["", "place,write", "place,,read", "ADMIN"])
def test_unknown_scopes_are_refused(scopes: str) -> None:
    with pytest.raises(SpecError, match="scopes"):
        tokens.scopes_of(scopes)


@pytest.mark.parametrize("project", ["", "a b", "x" * 65, "../p", "-p"])
def test_bad_project_names_are_refused(project: str) -> None:
    with pytest.raises(SpecError, match="project"):
        tokens.check_project(project)


def test_exa_tokens_create_list_revoke(tmp_path: Path) -> None:
    home = tmp_path / "home"
    made = json.loads(run_exa(home, "tokens", "create", "--project", "ml", "--scope", "place,read", "--expires", "90d", "--json",
                              check=True, shared_opa=False).stdout)  # fmt: skip
    assert set(made) == {"token", "id", "project", "scopes", "expires_at"} and made["scopes"] == ["place", "read"]
    shown = run_exa(home, "tokens", "create", "--project", "ml", "--scope", "read", check=True, shared_opa=False).stdout
    assert shown.splitlines()[-1].startswith("exa_")
    listed = json.loads(run_exa(home, "tokens", "list", "--json", check=True, shared_opa=False).stdout)
    assert [t["id"] for t in listed][:1] == [made["id"]] and all("token" not in t and "digest" not in t for t in listed)
    assert made["token"] not in run_exa(home, "tokens", "list", check=True, shared_opa=False).stdout
    assert "revoked" in run_exa(home, "tokens", "revoke", made["id"], check=True, shared_opa=False).stdout
    assert "already revoked" in run_exa(home, "tokens", "revoke", made["id"], check=True, shared_opa=False).stdout
    assert run_exa(home, "tokens", "revoke", "nope", shared_opa=False).returncode == 8
    bad = run_exa(home, "tokens", "create", "--project", "ml", "--scope", "root", shared_opa=False)
    assert bad.returncode == 2 and "scopes" in bad.stderr
    assert run_exa(home, "tokens", "create", "--project", "ml", "--scope", "read", "--expires", "90", shared_opa=False).returncode == 2
    assert run_exa(home, "audit", "verify", shared_opa=False).returncode == 0
