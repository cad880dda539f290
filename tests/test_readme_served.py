"""The README's quick start in both modes: its blocks run again in a fresh state folder with a
placement service (``exa hardware serve --listen``) over it, and every command the CLI offers as
the service's client (``exa hardware place``, ``burst``, ``pools``, ``pool``, ``decisions``, ...)
runs through the service (``EXA_SERVER``, a token of the README's project). Each command must
print what the README shows, as ``tests/test_readme.py`` checks it for the local run.

Two differences are the service's own and are said here, not hidden: an explanation made by the
service says its policy verdicts were ``reused`` (the service keeps them while the fleet and the
policy stay as they are) where a cold process says ``fresh``; and ``exa audit verify`` counts one
more entry, the making of the service's token (``exa tokens create`` is audited)."""

from __future__ import annotations

import json
import re

import pytest

from examlops_policy.opa import stop_server
from examlops_policy.service import client
from tests.service_support import start
from tests.test_readme import ALL, session_for, step, transcript

pytestmark = pytest.mark.opa

QUICK_START = [b for b in ALL if b.page == "readme" and b.section == "quick-start" and b.language == "console"]
SERVED_AS = {f"hardware {c}" for c in client.COMMANDS} | set(client.OTHER_COMMANDS)  # what the client asks the service
VERIFIED = re.compile(r"(audit log verifies: )(\d+)( entries)")


def _as_local(output: str) -> str:
    return output.replace("verdicts reused", "verdicts fresh")


def _served(command: str) -> bool:
    return command.startswith("exa ") and " ".join(command.split()[1:3]) in SERVED_AS


def test_the_quick_start_has_commands_for_both_modes() -> None:
    commands = [c for b in QUICK_START for c, _, _ in transcript(b.body)]
    served = [c for c in commands if _served(c)]
    assert len(QUICK_START) >= 2 and len(served) >= 16, served
    assert {" ".join(c.split()[1:3]) for c in served} >= {"hardware place", "hardware burst", "hardware portable", "hardware pools", "hardware pool",
                                                        "hardware decisions", "hardware accounting", "hardware burst-events", "finops cost", "audit verify"}  # fmt: skip


def test_the_quick_start_prints_the_same_through_the_service(tmp_path_factory: pytest.TempPathFactory) -> None:
    session = session_for({}, "served", tmp_path_factory)
    home = session.home
    service = start(home, unix=True)
    try:
        made = service.exa("tokens", "create", "--project", "default", "--scope", "place,read,admin", "--json")
        token = json.loads(made.stdout)["token"]
        remote = {**session.env(), "EXA_SERVER": f"unix:{service.socket_path}", "EXA_TOKEN": token}
        through_service = 0
        for block in QUICK_START:
            for command, expected, status in transcript(block.body):
                typed = session.typed(command)
                served = _served(typed)
                if typed.startswith("exa audit verify"):  # one more entry: the token's
                    expected = [VERIFIED.sub(lambda m: f"{m[1]}{int(m[2]) + 1}{m[3]}", line) for line in expected]
                where = f"{block.where} ({'through the service' if served else 'locally'})"
                step(where, session, typed, expected, status, remote if served else session.env(), seen=_as_local)
                through_service += served
        assert through_service >= 16
    finally:
        code, out = service.stop()
        stop_server(home)  # the OPA the local commands started for the state folder, as a user's
        assert code == 0, out
