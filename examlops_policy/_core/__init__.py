"""The decision core: pure, no I/O (OPA, the state store and the clock are adapters at its edges).

One workload's request (``request``), the policy's answers as typed values (``verdicts``) and their
wire and stored forms (``codec``), verdict reuse per policy revision (``engine``), selection among
what the policy admitted (``selection``), where a grant packs onto devices (``packing``), the
decision's record (``records``) and what a placement writes, through the store's narrow
transaction API (``commit``). Nothing here imports the store, the OPA client or the façade.
"""
