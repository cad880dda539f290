"""MultiKueue's external dispatcher: which worker cluster a Workload is copied to.

Pure functions over the API server's JSON: no cluster, no policy.

MultiKueue (a ClusterQueue of the manager cluster listing an AdmissionCheck whose controller is
``kueue.x-k8s.io/multikueue``) copies a Workload to the worker clusters its dispatcher nominates.
With ``multiKueue.dispatcherName: examlops.io/placement`` in Kueue's configuration
(scripts/kueue-up), that is this layer: the placement check (``controller``) places the Workload
over the fleet as for one cluster, and the pool it is granted says the cluster
(``Pool.cluster``, a MultiKueueCluster's name). The controller writes that one name to
``Workload.status.nominatedClusterNames``; Kueue copies the Workload there only, and sets
``status.clusterName`` once the worker reserves quota. A Workload the policy does not place now
(``Retry``) or never (``Rejected``) is nominated nowhere: it is copied to no cluster.

**How the nomination is written.** Kueue writes a Workload's admission status, ``nominatedClusterNames``
among it, by server-side apply as the field manager ``kueue-admission``, and clears the nomination
when it sets ``clusterName`` (the two are mutually exclusive, by the CRD's validation). A field
another manager also owned would outlive Kueue's clearing and fail that validation, so the
nomination is applied as ``kueue-admission`` too (as Kueue's own dispatchers do, through its
``workload.PatchAdmissionStatus``), with everything that manager owns now, at its present values
(``owned``: the object projected on that manager's ``managedFields``) and the Workload's
``resourceVersion``: nothing of Kueue's is dropped, and a Workload changed in between is refused
(409) and nominated at the next step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from examlops_policy.kueue.workloads import CheckUpdate, KueueWorkload, _message
from examlops_policy.model import JSONObject, JSONValue, Pool

CONTROLLER_NAME: Final = "kueue.x-k8s.io/multikueue"  # MultiKueue's AdmissionCheck controller
ADMISSION_MANAGER: Final = "kueue-admission"  # the field manager of Kueue's admission status
CONFIG_KIND: Final = "MultiKueueConfig"


def config_name(check: Mapping[str, Any]) -> str | None:
    """The MultiKueueConfig a MultiKueue AdmissionCheck names (``spec.parameters``), or None."""
    params = (check.get("spec") or {}).get("parameters") or {}
    if params.get("kind") != CONFIG_KIND or params.get("apiGroup") not in (None, "kueue.x-k8s.io"):
        return None
    name = params.get("name")
    return name if isinstance(name, str) and name else None


def clusters_of(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The worker clusters a MultiKueueConfig lists (``spec.clusters``), in its order."""
    found = ((config or {}).get("spec") or {}).get("clusters") or []
    return tuple(c for c in found if isinstance(c, str))


def owned(value: Any, fields: Mapping[str, Any]) -> Any:
    """``value`` (JSON) projected on a ``managedFields`` entry's ``fieldsV1`` set: only what the
    set names (``f:`` a field, ``k:`` a list item by its keys, ``v:`` a set's value; an empty set
    below a field: the whole value)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, below in fields.items():
            if key.startswith("f:") and key[2:] in value:
                name = key[2:]
                out[name] = value[name] if not below else owned(value[name], below)
        return out
    if isinstance(value, list):
        items: list[Any] = []
        for key, below in fields.items():
            if key.startswith("k:"):
                keys = json.loads(key[2:])
                for item in value:
                    if isinstance(item, Mapping) and all(item.get(k) == v for k, v in keys.items()):
                        items.append({**(owned(item, below) if below else item), **keys})
            elif key.startswith("v:"):
                items.append(json.loads(key[2:]))
        return items
    return value


def admission_fields(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """The status fields Kueue's ``kueue-admission`` manager applied (``{}``: none yet)."""
    for entry in (doc.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == ADMISSION_MANAGER and entry.get("operation") == "Apply" and entry.get("subresource") == "status":
            return ((entry.get("fieldsV1") or {}).get("f:status")) or {}
    return {}


def nomination(doc: Mapping[str, Any], clusters: Sequence[str]) -> JSONObject:
    """The server-side apply body (as ``kueue-admission``, on the status) that nominates
    ``clusters`` for the Workload ``doc``, keeping all else that manager owns as it is."""
    meta = doc.get("metadata") or {}
    status: dict[str, JSONValue] = owned(doc.get("status") or {}, admission_fields(doc))
    status["nominatedClusterNames"] = list(clusters)
    return {
        "apiVersion": doc.get("apiVersion", "kueue.x-k8s.io/v1beta2"), "kind": "Workload",
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "resourceVersion": meta.get("resourceVersion")},
        "status": status,
    }  # fmt: skip


def dispatch(update: CheckUpdate, pool: Pool | None, clusters: Sequence[str]) -> tuple[CheckUpdate, str | None]:
    """The placement check's state for a MultiKueue Workload and the cluster to nominate (None:
    none). ``update``: the state for its decision (``workloads.update_for``); ``pool``: the pool a
    placement was granted; ``clusters``: the worker clusters of the Workload's MultiKueueConfig.
    A placement on a pool that names none of them is ``Rejected`` (the caller releases its grant):
    the layer cannot send the Workload where it placed it."""
    if update.state != "Ready":
        return replace(update, message=_message(f"{update.message}; no cluster nominated")), None
    assert pool is not None
    if pool.cluster is None or pool.cluster not in clusters:
        listed = ", ".join(clusters) or "none"
        why = (f"pool {pool.name} names no cluster (set it to the MultiKueueCluster running its nodes)" if pool.cluster is None
               else f"pool {pool.name} is on cluster {pool.cluster}, not one of this Workload's MultiKueueConfig's clusters ({listed})")
        return CheckUpdate(
            "Rejected", _message(f"{update.message}, but {why}: nominated nowhere, decision {update.decision_id} released"), decision_id=update.decision_id
        ), None  # fmt: skip
    return replace(update, message=_message(f"{update.message}; nominated cluster {pool.cluster} (MultiKueue)")), pool.cluster


def moved(kw: KueueWorkload, granted: str | None) -> str | None:
    """Why a MultiKueue Workload's grant is no longer its own: it runs on, or is nominated for,
    another cluster than ``granted``, the granted pool's (None: it is not, or the pool names none)."""
    if granted is None:
        return None
    if kw.cluster_name is not None and kw.cluster_name != granted:
        return f"its Workload runs on cluster {kw.cluster_name}, not on {granted}, the granted pool's"
    if kw.cluster_name is None and kw.nominated and granted not in kw.nominated:
        return f"its Workload is nominated for {', '.join(kw.nominated)}, not for {granted}, the granted pool's"
    return None
