"""The service's figures in the Prometheus text format (version 0.0.4): decisions by outcome, the
decision latency histogram, the queue depth, OPA errors and the policy revision as a label."""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from typing import Final

BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Counted by the request handlers (any thread), rendered on ``GET /metrics``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (outcome, dry_run) -> count
        self.buckets = [0] * (len(BUCKETS_S) + 1)
        self.latency_sum = 0.0
        self.latency_count = 0
        self.opa_errors = 0
        self.retries = 0
        self.requests: Counter[tuple[str, int]] = Counter()  # (route, status) -> count

    def decided(self, outcome: str, dry_run: bool, seconds: float, *, retry: bool = False) -> None:
        """One placement request answered; ``retry``: its request id was decided before (nothing new
        was decided: counted apart from the decisions)."""
        with self._lock:
            if retry:
                self.retries += 1
            else:
                self.outcomes[(outcome, "true" if dry_run else "false")] += 1
            self.buckets[bisect.bisect_left(BUCKETS_S, seconds)] += 1
            self.latency_sum += seconds
            self.latency_count += 1

    def opa_error(self) -> None:
        with self._lock:
            self.opa_errors += 1

    def answered(self, route: str, status: int) -> None:
        with self._lock:
            self.requests[(route, status)] += 1

    def render(self, *, queue_depth: int | None, revision: str | None) -> str:
        with self._lock:
            lines = [
                "# HELP exa_decisions_total Decisions made through the service, by outcome (dry_run: recorded or not).",
                "# TYPE exa_decisions_total counter",
            ]
            for (outcome, dry), n in sorted(self.outcomes.items()):
                lines.append(f'exa_decisions_total{{outcome="{_label(outcome)}",dry_run="{dry}"}} {n}')
            lines += ["# HELP exa_decision_retries_total Requests whose request_id was decided before: answered with that decision, nothing more placed.",
                      "# TYPE exa_decision_retries_total counter", f"exa_decision_retries_total {self.retries}"]  # fmt: skip
            lines += ["# HELP exa_decision_seconds Time to decide (and record) one placement request.", "# TYPE exa_decision_seconds histogram"]
            total = 0
            for bound, n in zip(BUCKETS_S, self.buckets):
                total += n
                lines.append(f'exa_decision_seconds_bucket{{le="{bound:g}"}} {total}')
            lines.append(f'exa_decision_seconds_bucket{{le="+Inf"}} {self.latency_count}')
            lines.append(f"exa_decision_seconds_sum {self.latency_sum:.6f}")
            lines.append(f"exa_decision_seconds_count {self.latency_count}")
            lines += ["# HELP exa_opa_errors_total Requests that got no usable answer from OPA.", "# TYPE exa_opa_errors_total counter",
                      f"exa_opa_errors_total {self.opa_errors}"]  # fmt: skip
            lines += ["# HELP exa_http_requests_total Requests answered, by route and status.", "# TYPE exa_http_requests_total counter"]
            for (route, status), n in sorted(self.requests.items()):
                lines.append(f'exa_http_requests_total{{route="{_label(route)}",status="{status}"}} {n}')
        if queue_depth is not None:
            lines += ["# HELP exa_queue_depth Workloads waiting in the queue.", "# TYPE exa_queue_depth gauge", f"exa_queue_depth {queue_depth}"]
        lines += ["# HELP exa_policy_info The reviewed policy revision decisions are made under.", "# TYPE exa_policy_info gauge",
                  f'exa_policy_info{{revision="{_label(revision or "")}"}} 1']  # fmt: skip
        return "\n".join(lines) + "\n"
