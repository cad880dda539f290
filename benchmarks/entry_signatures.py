"""Audit entries signed by a writer of record (``EXA_SIGNING_KEY``): what signing adds to each
append, and what ``exa audit verify --key`` adds per entry it checks (every entry after the
checkpoint given).

    .venv/bin/python benchmarks/entry_signatures.py [--entries 5000]

Pure functions of ``examlops_policy.audit`` on entries shaped like a placement's: ``next_row``
unsigned and signed, then ``verify_entries`` (entry times, and with the key each signature).
Prints JSON: microseconds per entry.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examlops_policy import audit  # noqa: E402

ENTRY = {
    "kind": "decision", "source": "exa-hardware", "decision_id": "0" * 32, "workload": "train", "project": "inference-eu",
    "outcome": "placed", "pool": "hpc-mi300-001", "region": "eu", "accelerator": "amd", "devices": 2.0,
    "holdings": [[0, None, None], [1, None, None]], "input_digest": "sha256:" + "1" * 64, "record_digest": "sha256:" + "2" * 64,
    "policy_revision": "sha256:" + "3" * 64, "opa_version": "1.22.3", "verdicts": "fresh", "created_at": "2026-12-04T15:33:27.917276Z",
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=5000)
    args = parser.parse_args()
    key = audit.SigningKey.parse(audit.generate_key("bench")[0])
    out: dict[str, float] = {}
    for name, signer in (("unsigned", None), ("signed", key)):
        rows: list[audit.AuditRow] = []
        start = time.perf_counter()
        for i in range(args.entries):
            entry = {**ENTRY, "ts": f"2026-12-04T15:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}000Z"}
            rows.append(audit.next_row(rows[-1] if rows else None, entry, signer))
        out[f"append_{name}_us"] = (time.perf_counter() - start) / args.entries * 1e6
        entries = [(r.seq, json.loads(r.canonical)) for r in rows]
        report = audit.verify_chain(rows)
        start = time.perf_counter()
        checked = audit.verify_entries(report, rows, entries, key=key.verifier_key() if signer else None)
        out[f"verify_entries_{name}_us"] = (time.perf_counter() - start) / args.entries * 1e6
        assert checked.ok, checked.problems[:3]
    print(json.dumps({"entries": args.entries, **{k: round(v, 1) for k, v in out.items()}}, indent=2))


if __name__ == "__main__":
    main()
