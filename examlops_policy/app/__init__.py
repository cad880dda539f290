"""The application layer: the decision cycle and the workflows over it.

``cycle``       ``DecisionCycle``: policy snapshot, state snapshot, decide, commit (one retry loop)
``ports``       the typed protocols workflows depend on (state, policy, clock, estimator, jobs, ...)
``wiring``      which store and which policy a home opens; ``estimators``: who is asked for starts
``placing``     place (with the queue), what-if, portable, release
``queue``       the queue: order, admission (through the cycle), reservations, preemption, quotas
``pools``       the fleet: pools registered, drained, removed, shown; nodes' states; busy devices
``records``     recorded decisions read back, their jobs, leases, replays; ``reports``: cost, carbon
``reconcile``, ``discovering``, ``submitting``, ``estimating``    the schedulers' side
``schedulers``  the registry: each ``Scheduler`` (Slurm, Kubernetes) registered once by name
``policy_review``, ``impact``, ``audit_verify``, ``simulate``     the policy as code, the audit, traces

Nothing here imports the façade (``hardware``) or the command line; the decision core (``_core``)
and the adapters (``store``, ``opa``, ``executors``, ``discovery``) import nothing here.
"""
