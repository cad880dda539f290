"""The generic replay's cost per workload in instructions, not seconds: a figure a shared machine's
drifting speed does not move, so that a change of a few percent can be read from one run.

    .venv/bin/python benchmarks/replay_instructions.py [--sizes 2000,6000] [--nodes 64] [--root DIR] [--package DIR]

Runs ``replay.py``'s size (its synthetic site, ``Hardware.simulate``) under valgrind's callgrind
at two sizes, in a process each, with ``PYTHONHASHSEED=0``, and counts the instructions each
process executed (callgrind's ``Collected``; the OPA server is another process and is not
counted). The trace is written alone at the same two sizes too (``replay.py --trace-only``), so
that the figure is the replay's: (replay(b) - replay(a) - (trace(b) - trace(a))) / (b - a)
instructions per workload, start-up and the OPA's first answers cancelling out. ``--root``: the
tree whose ``examlops_policy`` is measured (a worktree of another revision, to compare); its
``benchmarks/replay.py`` runs the replay, so it must take ``--home`` and ``--trace-only`` (copy
this one's into an older tree). ``--package``: the package imported from that folder instead
(``scripts/build-compiled``'s build: its compiled modules measured, ``replay.py --package``).
Needs ``valgrind`` (``apt-get install valgrind``);
about 2 minutes at the default sizes. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(root: Path, workloads: int, nodes: int, home: Path, *, trace_only: bool, package: Path | None = None) -> int:
    """The instructions one ``replay.py --one`` process executed under callgrind, deciding with
    the OPA of ``home`` (started and stopped here, outside valgrind: valgrind does not implement
    the pidfd the OPA supervisor stops its server through)."""
    command = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
        sys.executable, str(root / "benchmarks" / "replay.py"), "--one", str(workloads), "--nodes", str(nodes), "--home", str(home),
    ]  # fmt: skip
    if trace_only:
        command.append("--trace-only")
    if package is not None:
        command += ["--package", str(package)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="2000,6000", help="two numbers of workloads, the smaller first")
    parser.add_argument("--nodes", type=int, default=64, help="nodes of 8 devices in the site")
    parser.add_argument("--root", type=Path, default=ROOT, help="the tree measured (default: this one)")
    parser.add_argument("--package", type=Path, help="import the package from this folder (scripts/build-compiled's), not the tree's")
    args = parser.parse_args(argv)
    sizes = args.sizes.split(",")
    if len(sizes) != 2 or not all(s.strip().isdigit() for s in sizes) or not 0 < int(sizes[0]) < int(sizes[1]):
        parser.error(f"--sizes: two numbers of workloads, the smaller first (got {args.sizes!r})")
    a, b = int(sizes[0]), int(sizes[1])
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    root = args.root.resolve()
    package = None if args.package is None else args.package.resolve()
    if package is not None and not (package / "examlops_policy" / "__init__.py").is_file():
        parser.error(f"--package {args.package}: no examlops_policy package there (scripts/build-compiled {args.package} builds one)")
    # Stopped with SIGTERM: exit through the ``finally`` below, so the valgrind child is killed
    # (``subprocess.run`` kills it on the way out) and the OPA this started is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.path.insert(0, str(root))
    from examlops_policy.hardware import Hardware
    from examlops_policy.opa import stop_server

    with tempfile.TemporaryDirectory(prefix="exa-replay-ir-") as base:
        home = Path(base) / "home"
        hw = Hardware(home)
        try:
            hw.policy.confirm()  # the OPA started here, the children under valgrind only ask it
        finally:
            hw.close()
        try:
            replayed = {n: instructions(root, n, args.nodes, home, trace_only=False, package=package) for n in (a, b)}
            traced = {n: instructions(root, n, args.nodes, home, trace_only=True) for n in (a, b)}
        finally:
            stop_server(home)
    per = (replayed[b] - replayed[a] - (traced[b] - traced[a])) / (b - a)
    print(json.dumps({
        "root": str(root), "package": None if package is None else str(package), "nodes": args.nodes, "sizes": [a, b], "replay_instructions": replayed, "trace_instructions": traced,
        "instructions_per_workload": round(per),
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
