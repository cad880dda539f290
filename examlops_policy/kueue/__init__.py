"""Kueue's seam: an AdmissionCheck controller (``controllerName: examlops.io/placement``) that
decides each Kueue Workload through this layer's decision cycle (``exa kueue admission-check``).

* ``workloads``: a Kueue Workload read into this layer's ``Workload`` (pure: no cluster, no
  policy), its idempotency key, and a recorded decision worded as the check's state;
* ``multikueue``: MultiKueue's external dispatcher (pure): the worker cluster a placement
  nominates (its pool's ``cluster``) and the apply body that writes the nomination;
* ``controller``: the reconcile loop against the API server (lightkube, as the Kubernetes
  executor), deciding through ``Hardware.place`` and releasing through ``Hardware.release``.

docs/kueue-admission-check.md describes the setup (scripts/kueue-up, scripts/multikueue-up), the
mapping and the MultiKueue dispatcher.
"""
