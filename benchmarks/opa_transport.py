"""Round trips to the local OPA over its Unix socket, and cold ``exa opa`` commands.

    .venv/bin/python benchmarks/opa_transport.py [--requests 2000] [--cold 10]

A script, not a test: it starts the local OPA of a temporary state folder (the product's own
``connect``), times requests through ``OpaTransport`` (one keep-alive connection, and a new
connection per request for comparison), times fresh ``exa opa status`` processes, and stops the
server. Figures are microseconds (round trips) and milliseconds (processes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from examlops_policy.opa import connect, served_revision, stop_server  # noqa: E402
from examlops_policy.opa.transport import OpaTransport  # noqa: E402


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 1),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
        "min": round(ordered[0], 1),
    }


def loop(call: Callable[[], object], n: int) -> dict[str, float]:
    """Time ``n`` calls after 50 untimed ones; microseconds each."""
    for _ in range(50):
        call()
    times = []
    for _ in range(n):
        start = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - start) / 1000)
    return percentiles(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--cold", type=int, default=10)
    args = parser.parse_args()
    for var in ("EXA_OPA_URL", "EXA_OPA_TOKEN"):
        os.environ.pop(var, None)
    home = Path(tempfile.mkdtemp(prefix="exa-opa-bench-"))
    report: dict[str, object] = {}
    try:
        start = time.perf_counter()
        connection = connect(home)
        report["first_connect_ms (bundle build + start)"] = round((time.perf_counter() - start) * 1000, 1)
        transport = connection.transport
        query = json.dumps({"input": {}}).encode()
        report["keep-alive GET /v1/data/system/bundles (us)"] = loop(lambda: transport.request("GET", "/v1/data/system/bundles"), args.requests)
        report["keep-alive POST /v1/data/examlops/tables/regions/eu (us)"] = loop(
            lambda: transport.request("POST", "/v1/data/examlops/tables/regions/eu", query), args.requests
        )
        report["keep-alive GET /health (us)"] = loop(lambda: transport.request("GET", "/health"), args.requests)

        def fresh() -> object:
            one = OpaTransport(transport.endpoint, token=(home / "opa" / "token").read_text().strip())
            try:
                return one.request("GET", "/health")
            finally:
                one.close()

        report["new connection per GET /health (us)"] = loop(fresh, args.requests // 4)
        report["served_revision() (us)"] = loop(lambda: served_revision(transport), args.requests // 4)
        report["connect() with the server running (us)"] = loop(lambda: connect(home).transport.close(), args.requests // 10)
        transport.close()

        exa = str(REPO / ".venv" / "bin" / "exa")
        env = {**os.environ, "EXA_HOME": str(home)}
        subprocess.run([exa, "opa", "status"], env=env, capture_output=True, check=True)  # page and bytecode caches warm
        cold = []
        for _ in range(args.cold):
            start = time.perf_counter()
            subprocess.run([exa, "opa", "status"], env=env, capture_output=True, check=True)
            cold.append((time.perf_counter() - start) * 1000)
        report["cold `exa opa status`, OPA running (ms)"] = percentiles(cold)
    finally:
        stop_server(home)
        subprocess.run(["rm", "-rf", str(home)], check=False)
    width = max(len(k) for k in report)
    for key, value in report.items():
        print(f"{key:<{width}}  {value}")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
