"""The decision core: pure, no I/O (OPA, the state store and the clock are adapters at its edges).

One workload's request (``request``), the policy's answers as typed values (``verdicts``) and their
wire and stored forms (``codec``), verdict reuse per policy revision (``engine``), selection among
what the policy admitted (``selection``), where a grant packs onto devices (``packing``), capacity
as pure values worked out from holdings (``state``), decisions rebuilt from their records
(``records``) and what a placement writes, through the store's narrow transaction API
(``commit``; any implementation of ``store.api.Transaction`` will do, one in memory included).
Nothing here imports the store's SQL, the OPA client or the façade (tests/test_imports.py).
"""
