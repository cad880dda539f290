"""Reliability figures: concurrent placers on a shared fleet, per state backend.

    .venv/bin/python benchmarks/reliability.py --procs 8 --per-proc 500 [--backend sqlite|postgres|both] [--faults]

Each backend gets fresh state (a temporary SQLite file; a new schema in the PostgreSQL of
EXA_TEST_PG_URL or scripts/pg-up). ``procs`` processes place ``per-proc`` workloads each, at once,
on one real OPA, releasing some placements as they go. Printed per backend: placements/s,
conflicts retried, reconnects, errors, and the invariant violations found in the stored state (see
tests/reliability/harness.py) - which must be 0. ``--faults`` adds two runs per backend: OPA killed
midway, and (PostgreSQL) the server restarted midway. Exits 1 on any violation or unexpected error.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from examlops_policy.opa import stop_server  # noqa: E402
from reliability import backends  # noqa: E402
from reliability.harness import LoadRun, kill_opa, run_load, violations, wait_for_decisions  # noqa: E402

COLUMNS = ("backend", "run", "placers", "placements", "placed", "refused", "released", "errors",
           "seconds", "placements/s", "conflicts retried", "reconnects", "violations")  # fmt: skip


Fault = Callable[[backends.Backend, Path, int], None]


def midway(total: int) -> int:
    """How many decisions are stored before a fault strikes: 30, or a third of a smaller run (a
    fixed 30 would never come in a run of fewer placements, and the fault would wait forever)."""
    return max(1, min(30, total // 3))


def _opa_killed(backend: backends.Backend, opa_home: Path, total: int) -> None:
    wait_for_decisions(backend, midway(total))
    kill_opa(opa_home)


def _pg_restarted(backend: backends.Backend, opa_home: Path, total: int) -> None:
    wait_for_decisions(backend, midway(total))
    backends.restart_postgres()


def _row(name: str, label: str, procs: int, per_proc: int, run: LoadRun, found: list[str]) -> list[str]:
    errors = ", ".join(f"{n} {k}" for k, n in sorted(run.errors.items())) or "0"
    return [
        name, label, f"{procs} x {per_proc}", str(run.calls),
        str(sum(len(r.placed) for r in run.reports)), str(sum(len(r.refused) for r in run.reports)),
        str(sum(len(r.released) for r in run.reports)), errors, f"{run.seconds:.1f}",
        f"{run.calls / run.seconds:.1f}", str(run.conflicts_retried), str(run.reconnects), str(len(found)),
    ]  # fmt: skip


def _print(rows: list[list[str]]) -> None:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    for line in (list(COLUMNS), *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip(), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--per-proc", type=int, default=500)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--release-ratio", type=float, default=0.5)
    parser.add_argument("--faults", action="store_true", help="also kill OPA, and restart PostgreSQL, midway")
    args = parser.parse_args(argv)
    opa = ROOT / ".tools" / "bin" / "opa"
    if "EXA_OPA_BIN" not in os.environ and opa.is_file():
        os.environ["EXA_OPA_BIN"] = str(opa)

    names = backends.NAMES if args.backend == "both" else (args.backend,)
    rows: list[list[str]] = []
    bad = 0
    with tempfile.TemporaryDirectory(prefix="exa-reliability-") as tmp:
        for name in names:
            if name == "postgres" and backends.pg_server()[0] is None:
                print(f"postgres: skipped, {backends.pg_server()[1]}", file=sys.stderr)
                bad += args.backend == "postgres"
                continue
            runs: list[tuple[str, Fault | None]] = [("load", None)]
            if args.faults:
                runs.append(("opa killed", _opa_killed))
                if name == "postgres" and backends.managed_postgres():
                    runs.append(("pg restarted", _pg_restarted))
            for label, fault in runs:
                print(f"{name} {label}: {args.procs} x {args.per_proc} placements ...", file=sys.stderr, flush=True)
                work = Path(tempfile.mkdtemp(dir=tmp))
                opa_home = work / "opa-home"
                with backends.fresh_backend(name, work) as backend:
                    try:
                        run = run_load(backend, opa_home, work, procs=args.procs, per_proc=args.per_proc,
                                       release_ratio=args.release_ratio,
                                       during=fault and (lambda: fault(backend, opa_home, args.procs * args.per_proc)))  # fmt: skip
                        found = violations(backend, run.reports)
                    finally:
                        stop_server(opa_home)
                rows.append(_row(name, label, args.procs, args.per_proc, run, found))
                expected = {"PolicyUnavailable"} if label == "opa killed" else set()
                bad += bool(found) or not set(run.errors) <= expected
                for problem in found[:10]:
                    print(f"  {name} {label}: {problem}", file=sys.stderr)
    _print(rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
