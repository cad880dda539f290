"""The fleet's shapes in OPA (``data.examlops_fleet``) are writable with the owner's token; a shape
rewritten in place is never judged: the policy reads a stored shape only when it hashes to its key
(``examlops.fleet``), so the layer uploads the true shape again before anything is decided."""

from __future__ import annotations

import json
from pathlib import Path

from examlops_policy.opa import ensure_server
from examlops_policy.opa.transport import Endpoint, OpaTransport
from tests.conftest import run_exa

EU_ONLY_BURST = ("hardware", "burst", "data", "--accelerator", "nvidia", "--residency", "eu-only", "--allow-burst")


def owner(home: Path) -> OpaTransport:
    server = ensure_server(home)
    return OpaTransport(Endpoint("unix", path=str(server.socket)), token=(home / "opa" / "token").read_text().strip())


def test_a_shape_moved_into_the_eu_in_opa_data_does_not_move_the_pool(exa_home: Path) -> None:
    run_exa(exa_home, "hardware", "add-pool", "cloud-us", "--target", "cloud", "--accelerator", "nvidia", "--count", "8",
            "--region", "us-east-1", "--cost-per-hour", "1", check=True)  # fmt: skip
    first = run_exa(exa_home, *EU_ONLY_BURST, shared_opa=False)
    assert first.returncode == 4, (first.stdout, first.stderr)  # us-east-1 is not in the EU: blocked

    opa = owner(exa_home)
    shapes = opa.json("GET", "/v1/data/examlops_fleet/shapes")["result"]  # type: ignore[index]
    (key,) = [k for k, s in shapes.items() if s["region"] == "us-east-1"]
    patch = [{"op": "replace", "path": f"/{key}/region", "value": "eu-west-3"}]
    assert opa.request("PATCH", "/v1/data/examlops_fleet/shapes", json.dumps(patch).encode())[0] == 204  # the token may write it
    assert opa.json("GET", f"/v1/data/examlops_fleet/shapes/{key}/region")["result"] == "eu-west-3"  # type: ignore[index]

    again = run_exa(exa_home, *EU_ONLY_BURST, shared_opa=False)
    assert again.returncode == 4, (again.stdout, again.stderr)  # still blocked: the moved shape was not judged
    assert opa.json("GET", f"/v1/data/examlops_fleet/shapes/{key}/region")["result"] == "us-east-1"  # type: ignore[index]
    events = json.loads(run_exa(exa_home, "hardware", "burst-events", "--json").stdout)
    assert [e["verdict"] for e in events] == ["blocked", "blocked"]
    assert run_exa(exa_home, "audit", "verify").returncode == 0
    opa.close()
