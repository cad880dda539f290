"""Talking to a Kubernetes API server: create, read and delete the Jobs of placed decisions, and
read nodes and pods for discovery.

The client is ``lightkube`` (the optional extra ``kubernetes``), imported only when a cluster is
connected: the library imports and places work without it. Every call goes to the real API server;
nothing is retried and nothing is assumed when it does not answer (fail closed).

Errors: bad input (no kubeconfig, an unknown context, a manifest that is no ``batch/v1`` Job or
has fields the client would drop) is ``SpecError``; everything the cluster says no to, or does not
answer, is ``KubernetesError`` (an ``ExecutorError``) whose ``reason`` is the API server's
``Status.reason`` (``Unauthorized``, ``Forbidden``, ``Invalid``, ``BadRequest``, ``AlreadyExists``,
``NotFound``, ...) or one of ``Unreachable``, ``TLS``, ``Timeout`` when no answer came, and whose
message carries the server's own words. Source for the Status fields and codes: Kubernetes API
conventions, "Response Status Kind" (sig-architecture/api-conventions.md).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, cast

from examlops_policy.errors import ExecutorError, SpecError
from examlops_policy.model import JSONValue

if TYPE_CHECKING:
    from lightkube import ApiError, Client
    from lightkube.resources.batch_v1 import Job
    from lightkube.resources.core_v1 import Pod

JobState = Literal["pending", "running", "complete", "failed", "missing"]

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "examlops"
DECISION_LABEL: Final = "examlops.io/decision-id"
DEFAULT_TIMEOUT_S: Final = 15.0
DEFAULT_KUBECONFIG: Final = Path("~/.kube/config")
# Pod phases in which a pod bound to a node still holds what it requested (Kubernetes "Pod
# Lifecycle": Succeeded and Failed pods have terminated and release their resources).
HOLDING_PHASES: Final = frozenset({"Pending", "Running", "Unknown"})


class KubernetesError(ExecutorError):
    """The API server refused a request, or did not answer.

    ``code`` is the HTTP status (None when no answer came); ``reason`` is the server's
    ``Status.reason`` or ``Unreachable`` / ``TLS`` / ``Timeout``.
    """

    def __init__(self, message: str, *, code: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class JobRef:
    """A Job the API server accepted (or, with ``dry_run``, would accept)."""

    namespace: str
    name: str
    uid: str
    dry_run: bool = False


@dataclass(frozen=True)
class JobStatus:
    """Where a Job stands, read from the Job and its pods.

    ``state``: ``pending`` (no pod running yet: not created, not scheduled, or waiting to start),
    ``running`` (also while the controller terminates the pods of a Job that has met its success
    or failure criteria: they still hold their devices), ``complete`` / ``failed`` (the Job's
    Complete / Failed condition: its pods are done), or ``missing`` (no such Job: deleted outside
    this layer, or never created). ``reason`` says why in a few words (a condition reason; for a pod the
    scheduler could not place, ``Unschedulable:`` and the scheduler's summary, e.g.
    ``0/3 nodes are available: 3 Insufficient nvidia.com/gpu``); ``message`` is the server's full
    text. ``deleting`` is True while a foreground deletion waits for the Job's pods.
    """

    namespace: str
    name: str
    state: JobState
    reason: str | None = None
    message: str | None = None
    uid: str | None = None
    decision_id: str | None = None
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    nodes: tuple[str, ...] = ()
    deleting: bool = False


@dataclass(frozen=True)
class JobEnd:
    """A Job as reconcile reads it: ``state`` ``pending`` (no pod active yet), ``active``,
    ``complete`` or ``failed``; when it started and ended (UTC, ISO 8601)."""

    namespace: str
    name: str
    uid: str
    state: str
    started_at: str | None
    ended_at: str | None

    @property
    def ended(self) -> bool:
        return self.state in ("complete", "failed")


def _k8s_time(value: object) -> str | None:
    """A Kubernetes time (a datetime from the client) as UTC ISO 8601 with microseconds."""
    from datetime import datetime, timezone

    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return moment.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
    try:
        return _k8s_time(datetime.fromisoformat(str(value).replace("Z", "+00:00")))
    except ValueError:
        return None


@dataclass(frozen=True)
class NodeInfo:
    """A node as discovery needs it: labels, allocatable quantities, whether new pods may start."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, Decimal]
    ready: bool
    unschedulable: bool

    @property
    def usable(self) -> bool:
        """True when the scheduler may bind new pods here (Ready and not cordoned)."""
        return self.ready and not self.unschedulable


@dataclass(frozen=True)
class PodUsage:
    """What a pod bound to a node holds there (its effective requests)."""

    namespace: str
    name: str
    node: str
    phase: str
    requests: Mapping[str, Decimal]
    managed: bool


@dataclass(frozen=True)
class PendingPod:
    """A pod no node has been chosen for yet: what it asks for, where it may go (its node
    selector), since when it exists, and why the scheduler has not bound it (its ``PodScheduled``
    condition: ``Unschedulable`` with the scheduler's message, or None while it was not tried)."""

    namespace: str
    name: str
    requests: Mapping[str, Decimal]
    node_selector: Mapping[str, str]
    created_at: str | None
    unschedulable: str | None
    managed: bool


# -- kubeconfig --------------------------------------------------------------------------------


def kubeconfig_path(kubeconfig: str | os.PathLike[str] | None = None) -> Path:
    """The kubeconfig to use: the argument, else the first file named in ``KUBECONFIG`` that
    exists, else ``~/.kube/config``. SpecError when that file does not exist.

    kubectl merges every file of ``KUBECONFIG``; this layer reads one, the first that exists.
    """
    if kubeconfig is not None:
        path = Path(kubeconfig).expanduser()
        source = "the kubeconfig given"
    elif os.environ.get("KUBECONFIG"):
        candidates = [Path(p).expanduser() for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
        path = next((p for p in candidates if p.is_file()), candidates[0] if candidates else DEFAULT_KUBECONFIG.expanduser())
        source = "KUBECONFIG"
    else:
        path = DEFAULT_KUBECONFIG.expanduser()
        source = "the default kubeconfig"
    if not path.is_file():
        what = "does not exist" if not path.exists() else "is a folder, not a kubeconfig file" if path.is_dir() else "is not a kubeconfig file (a device or other special file)"
        raise SpecError(f"{source} {path} {what} (set KUBECONFIG, pass a kubeconfig, or start a test cluster with scripts/k8s-up)", field="kubeconfig")
    return path


# -- the cluster -------------------------------------------------------------------------------


class KubernetesCluster:
    """One API server, as one kubeconfig context describes it. Use ``connect``.

    ``server`` is the API server's URL, ``context`` the kubeconfig context, ``namespace`` the
    context's namespace (where a manifest without a namespace goes).
    """

    def __init__(self, client: Client, *, server: str, context: str, namespace: str) -> None:
        self._client = client
        self.server = server
        self.context = context
        self.namespace = namespace

    @classmethod
    def connect(
        cls, kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> KubernetesCluster:
        """A cluster from a kubeconfig (see ``kubeconfig_path``) and a context (default: its
        current context). Reads the file only; the server is first contacted by a request.

        SpecError for a missing or unreadable kubeconfig or an unknown context; ExecutorError
        when the Kubernetes client (the ``kubernetes`` extra) is not installed.
        """
        try:
            import ssl

            import httpx2
            from lightkube import Client, ConfigError, KubeConfig
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ExecutorError(
                f"the Kubernetes client is not installed ({exc.name}): pip install 'examlops-policy[kubernetes]'"
            ) from exc
        path = kubeconfig_path(kubeconfig)
        try:
            config = KubeConfig.from_file(path)
            single = config.get(context_name=context)
        except ConfigError as exc:
            raise SpecError(f"{path}: {exc}", field="kubeconfig") from exc
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # lightkube reads the YAML as it is: a missing cluster or user shows as a KeyError.
            raise SpecError(f"{path}: not a usable kubeconfig ({type(exc).__name__}: {exc})", field="kubeconfig") from exc
        if single is None:  # pragma: no cover - get() raises instead when there is no context
            raise SpecError(f"{path}: no current context; name one", field="kubeconfig")
        try:
            client = Client(config=single, timeout=httpx2.Timeout(timeout_s), lazy=False, field_manager="examlops")
        except ConfigError as exc:
            raise SpecError(f"{path}: context {single.context_name}: {exc}", field="kubeconfig") from exc
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise SpecError(f"{path}: context {single.context_name}: cannot use its TLS settings ({exc})", field="kubeconfig") from exc
        return cls(client, server=single.cluster.server, context=single.context_name, namespace=single.namespace or "default")

    def close(self) -> None:
        """Close the connections (the cluster object is unusable afterwards)."""
        self._client.close()

    def __enter__(self) -> KubernetesCluster:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KubernetesCluster(server={self.server!r}, context={self.context!r})"

    # -- Jobs ----------------------------------------------------------------------------------

    def create_job(self, manifest: Mapping[str, JSONValue], *, dry_run: bool = False) -> JobRef:
        """Create the ``batch/v1`` Job of ``manifest`` (in its namespace, else the context's).

        With ``dry_run`` the server runs everything (defaulting, validation, admission) and stores
        nothing (``dryRun=All``). KubernetesError when it refuses: ``Invalid``/``BadRequest``
        (validation or admission, with the server's message), ``NotFound`` (no such namespace),
        ``AlreadyExists``, ``Unauthorized``, ``Forbidden``; SpecError for a manifest that is no
        Job or has fields the client does not know (they would be dropped silently).
        """
        job = _job_model(manifest)
        namespace = (job.metadata.namespace if job.metadata else None) or self.namespace
        name = job.metadata.name if job.metadata and job.metadata.name else "(generated)"
        with self._calling(f"create Job {namespace}/{name}{' (server dry run)' if dry_run else ''}", namespace=namespace):
            created = self._client.create(job, namespace=namespace, dry_run=dry_run)
        meta = created.metadata
        if meta is None or not meta.name:
            raise KubernetesError(f"the API server at {self.server} accepted Job {namespace}/{name} but returned no name")
        return JobRef(meta.namespace or namespace, meta.name, meta.uid or "", dry_run)

    def job_status(self, namespace: str, name: str) -> JobStatus:
        """The state of Job ``namespace/name``: from its conditions when finished, else from its
        pods (running; or pending, with the scheduler's reason when none could be placed).
        ``missing`` when there is no such Job."""
        from lightkube import ApiError
        from lightkube.resources.batch_v1 import Job
        from lightkube.resources.core_v1 import Pod

        with self._calling(f"read Job {namespace}/{name}", namespace=namespace):
            try:
                job = self._client.get(Job, name, namespace=namespace)
            except ApiError as exc:
                if exc.status.code == 404:
                    return JobStatus(namespace, name, "missing", "NotFound",
                                     f"no Job {namespace}/{name} on {self.server} (deleted outside examlops, or never created)")  # fmt: skip
                raise
        meta, status = job.metadata, job.status
        base = JobStatus(
            namespace,
            name,
            "pending",
            uid=meta.uid if meta else None,
            decision_id=((meta.labels or {}) if meta else {}).get(DECISION_LABEL),
            active=(status.active or 0) if status else 0,
            succeeded=(status.succeeded or 0) if status else 0,
            failed=(status.failed or 0) if status else 0,
            deleting=bool(meta and meta.deletionTimestamp),
        )
        selector = (job.spec.selector.matchLabels if job.spec and job.spec.selector else None) or {}
        pods: list[Pod] = []
        if selector:
            with self._calling(f"list the pods of Job {namespace}/{name}", namespace=namespace):
                pods = list(self._client.list(Pod, namespace=namespace, labels=dict(selector)))
        pods.sort(key=lambda p: (str(p.metadata.creationTimestamp or ""), p.metadata.name or "") if p.metadata else ("", ""))
        base = dataclasses.replace(base, nodes=tuple(sorted({p.spec.nodeName for p in pods if p.spec and p.spec.nodeName})))

        conditions = {c.type: c for c in (status.conditions or []) if c.status == "True"} if status else {}
        for kind, state in (("Failed", "failed"), ("Complete", "complete"), ("Suspended", "pending")):
            if kind in conditions:
                condition = conditions[kind]
                return dataclasses.replace(base, state=cast(JobState, state), reason=condition.reason or kind, message=condition.message)
        # SuccessCriteriaMet / FailureTarget come first, while the controller still terminates the
        # Job's pods; Complete / Failed follow once they are gone (Kubernetes "Jobs", "Termination
        # of Job pods"). Until then the devices are still held: running, with the outcome said.
        for kind in ("FailureTarget", "SuccessCriteriaMet"):
            if kind in conditions:
                condition = conditions[kind]
                return dataclasses.replace(base, state="running", reason=f"{kind}: {condition.reason or ''}".rstrip(": "), message=condition.message)
        state, reason, message = _state_from_pods(pods)
        return dataclasses.replace(base, state=state, reason=reason, message=message)

    def delete_job(self, namespace: str, name: str, *, uid: str | None = None, wait_s: float = 0.0) -> bool:
        """Delete Job ``namespace/name`` with foreground propagation (its pods go first, then the
        Job). True when a Job was deleted, False when there was none. With ``uid``, only the Job
        of that uid: a Job of the same name with another uid (another cluster, or created anew)
        is left alone, KubernetesError (``Conflict``). With ``wait_s`` > 0, waits until the Job is
        gone; KubernetesError (``Timeout``) if it is still there then."""
        from lightkube import ApiError
        from lightkube.resources.batch_v1 import Job
        from lightkube.types import CascadeType

        if uid is not None:
            found = self.job_status(namespace, name)
            if found.state == "missing":
                return False
            if found.uid != uid:
                raise KubernetesError(
                    f"Job {namespace}/{name} on {self.server} has uid {found.uid}, not {uid}, the Job this layer submitted: "
                    "left alone (give the --kubeconfig/--context it was submitted with)",
                    code=409,
                    reason="Conflict",
                )

        with self._calling(f"delete Job {namespace}/{name}", namespace=namespace):
            try:
                self._client.delete(Job, name, namespace=namespace, cascade=CascadeType.FOREGROUND)
            except ApiError as exc:
                details = exc.status.details
                if exc.status.code == 404 and (details is None or details.kind in (None, "jobs")):
                    return False
                raise
        deadline = time.monotonic() + wait_s
        while wait_s > 0 and self.job_status(namespace, name).state != "missing":
            if time.monotonic() > deadline:
                raise KubernetesError(
                    f"Job {namespace}/{name} on {self.server} is still there {wait_s:g} s after its deletion "
                    "(is the garbage-collector controller running?)",
                    reason="Timeout",
                )
            time.sleep(0.2)
        return True

    def jobs(self, *, decision_id: str | None = None, namespace: str | None = None) -> tuple[JobRef, ...]:
        """The Jobs this layer created (label ``app.kubernetes.io/managed-by=examlops``), in one
        namespace or all, optionally only those of one decision; sorted by namespace and name."""
        from lightkube import ALL_NS
        from lightkube.resources.batch_v1 import Job

        labels = {MANAGED_BY_LABEL: MANAGED_BY}
        if decision_id is not None:
            labels[DECISION_LABEL] = decision_id.lower()
        where = namespace or ALL_NS
        with self._calling(f"list Jobs in {namespace or 'all namespaces'}", namespace=namespace):
            found = [
                JobRef(j.metadata.namespace or "", j.metadata.name or "", j.metadata.uid or "")
                for j in self._client.list(Job, namespace=where, labels=dict(labels))
                if j.metadata
            ]
        return tuple(sorted(found, key=lambda r: (r.namespace, r.name)))

    def job_states(self) -> dict[tuple[str, str], JobEnd]:
        """Every Job this layer created, in all namespaces, in one list, by (namespace, name): its
        uid, whether it ended (its Complete or Failed condition True) and when it started and ended
        (``status.startTime``; ``completionTime``, else the condition's last transition)."""
        from lightkube import ALL_NS
        from lightkube.resources.batch_v1 import Job

        found: dict[tuple[str, str], JobEnd] = {}
        with self._calling("list Jobs in all namespaces"):
            for job in self._client.list(Job, namespace=ALL_NS, labels={MANAGED_BY_LABEL: MANAGED_BY}):
                meta, status = job.metadata, job.status
                if meta is None or not meta.name:
                    continue
                conditions = {c.type: c for c in ((status.conditions or []) if status else []) if c.status == "True"}
                state, ended = "active" if status is not None and (status.active or 0) > 0 else "pending", None
                for kind, word in (("Failed", "failed"), ("Complete", "complete")):
                    if kind in conditions:
                        state = word
                        done = status.completionTime if status is not None and word == "complete" else None
                        ended = _k8s_time(done or conditions[kind].lastTransitionTime)
                        break
                started = _k8s_time(status.startTime) if status is not None else None
                found[(meta.namespace or "", meta.name)] = JobEnd(meta.namespace or "", meta.name, meta.uid or "", state, started, ended)
        return found

    # -- discovery reads -----------------------------------------------------------------------

    def nodes(self) -> tuple[NodeInfo, ...]:
        """Every node, sorted by name, with its labels, allocatable quantities and readiness."""
        from lightkube.resources.core_v1 import Node

        found: list[NodeInfo] = []
        with self._calling("list nodes"):
            for node in self._client.list(Node):
                meta, spec, status = node.metadata, node.spec, node.status
                if meta is None or not meta.name:
                    continue
                ready = any(c.type == "Ready" and c.status == "True" for c in (status.conditions or [])) if status else False
                found.append(
                    NodeInfo(
                        name=meta.name,
                        labels=dict(meta.labels or {}),
                        allocatable=_quantities((status.allocatable or {}) if status else {}),
                        ready=ready,
                        unschedulable=bool(spec and spec.unschedulable),
                    )
                )
        return tuple(sorted(found, key=lambda n: n.name))

    def pods_on_nodes(self) -> tuple[PodUsage, ...]:
        """The pods bound to a node that still hold resources there (pending or running), with
        their effective requests, sorted by node, namespace and name."""
        from lightkube import ALL_NS
        from lightkube import operators as op
        from lightkube.resources.core_v1 import Pod

        found: list[PodUsage] = []
        with self._calling("list pods"):
            for pod in self._client.list(Pod, namespace=ALL_NS, fields={"spec.nodeName": op.not_equal("")}):
                meta, spec, status = pod.metadata, pod.spec, pod.status
                phase = (status.phase if status else None) or "Unknown"
                if meta is None or spec is None or not spec.nodeName or phase not in HOLDING_PHASES:
                    continue
                found.append(
                    PodUsage(
                        namespace=meta.namespace or "",
                        name=meta.name or "",
                        node=spec.nodeName,
                        phase=phase,
                        requests=pod_requests(pod),
                        managed=(meta.labels or {}).get(MANAGED_BY_LABEL) == MANAGED_BY,
                    )
                )
        return tuple(sorted(found, key=lambda p: (p.node, p.namespace, p.name)))

    def pending_pods(self) -> tuple[PendingPod, ...]:
        """The pods waiting for a node (phase Pending, not bound), sorted by creation time, then
        namespace and name: the queue in front of new work that asks for the same resources."""
        from lightkube import ALL_NS
        from lightkube.resources.core_v1 import Pod

        found: list[PendingPod] = []
        with self._calling("list pods"):
            for pod in self._client.list(Pod, namespace=ALL_NS, fields={"spec.nodeName": "", "status.phase": "Pending"}):
                meta, spec, status = pod.metadata, pod.spec, pod.status
                if meta is None or spec is None or spec.nodeName:
                    continue
                unschedulable = next(
                    (c.message or c.reason or "Unschedulable" for c in (status.conditions or []) if c.type == "PodScheduled" and c.status == "False"),
                    None,
                ) if status else None  # fmt: skip
                created = meta.creationTimestamp
                found.append(
                    PendingPod(
                        namespace=meta.namespace or "",
                        name=meta.name or "",
                        requests=pod_requests(pod),
                        node_selector=dict(spec.nodeSelector or {}),
                        created_at=None if created is None else created.isoformat(),
                        unschedulable=unschedulable,
                        managed=(meta.labels or {}).get(MANAGED_BY_LABEL) == MANAGED_BY,
                    )
                )
        return tuple(sorted(found, key=lambda p: (p.created_at or "", p.namespace, p.name)))

    # -- errors --------------------------------------------------------------------------------

    @contextmanager
    def _calling(self, action: str, *, namespace: str | None = None) -> Iterator[None]:
        """Turn what the client raises into KubernetesError naming ``action`` and the server."""
        import httpx2
        import msgspec
        from lightkube import ApiError, ConfigError

        try:
            yield
        except Exception as exc:
            if isinstance(exc, ApiError):
                raise self._refusal(exc, action, namespace) from exc
            if isinstance(exc, httpx2.HTTPStatusError):  # an answer that is no Kubernetes Status
                code = exc.response.status_code
                raise KubernetesError(f"{action}: {self.server} answered HTTP {code} (is it a Kubernetes API server?)", code=code) from exc
            if isinstance(exc, httpx2.TimeoutException):
                raise KubernetesError(f"{action}: no answer from the API server at {self.server} in time ({type(exc).__name__})", reason="Timeout") from exc
            if isinstance(exc, httpx2.TransportError):
                if _ssl_failure(exc):
                    raise KubernetesError(
                        f"{action}: TLS with the API server at {self.server} failed: {_ssl_failure(exc)} "
                        f"(does the kubeconfig's certificate-authority belong to this server?)",
                        reason="TLS",
                    ) from exc
                raise KubernetesError(f"{action}: cannot reach the API server at {self.server}: {exc}", reason="Unreachable") from exc
            if isinstance(exc, ConfigError):  # e.g. an exec credential plugin that failed
                raise SpecError(f"kubeconfig context {self.context}: {exc}", field="kubeconfig") from exc
            if isinstance(exc, (msgspec.ValidationError, msgspec.DecodeError)):
                raise KubernetesError(f"{action}: the answer of the API server at {self.server} could not be read: {exc}") from exc
            raise

    def _refusal(self, exc: ApiError, action: str, namespace: str | None) -> KubernetesError:
        """A KubernetesError for an API server's Status answer, in the server's own words."""
        status = exc.status
        code, reason, message = status.code, status.reason, status.message or ""
        details = status.details
        if code == 401:
            text = f"{action}: unauthorised: the API server at {self.server} did not accept the credentials of context {self.context} (401 {message or 'Unauthorized'})"
        elif code == 403:
            text = f"{action}: forbidden: {message} (403)"
        elif code == 404 and details is not None and details.kind == "namespaces":
            text = f"{action}: namespace {details.name or namespace!r} does not exist on {self.server}"
        elif code == 409:
            text = f"{action}: already exists: {message} (409)"
        elif code in (400, 422):
            text = f"{action}: refused by the API server ({reason or code}): {message}"
        else:
            text = f"{action}: the API server at {self.server} answered {code} {reason or ''}: {message}".rstrip(": ")
        return KubernetesError(text, code=code, reason=reason)


# -- helpers -----------------------------------------------------------------------------------


def _ssl_failure(exc: BaseException) -> str | None:
    """The TLS error behind a transport error, if there is one."""
    import ssl

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError):
            return str(current)
        current = current.__cause__ or current.__context__
    text = str(exc)
    return text if "CERTIFICATE_VERIFY_FAILED" in text or "SSL" in text else None


def _job_model(manifest: Mapping[str, JSONValue]) -> Job:
    """The client's Job of ``manifest``; SpecError when it is no Job or would lose fields."""
    import msgspec
    from lightkube.resources.batch_v1 import Job

    if not isinstance(manifest, Mapping):
        raise SpecError("a Job manifest must be a mapping", field="manifest")
    if manifest.get("apiVersion") != "batch/v1" or manifest.get("kind") != "Job":
        raise SpecError(f"expected apiVersion batch/v1 and kind Job (got {manifest.get('apiVersion')!r} {manifest.get('kind')!r})", field="manifest")
    try:
        # msgspec decodes strictly: a wrong type is an error here, not a silent coercion.
        job = msgspec.convert(dict(manifest), Job)
    except (msgspec.ValidationError, TypeError, ValueError) as exc:
        raise SpecError(f"not a valid batch/v1 Job: {exc}", field="manifest") from exc
    dropped = _dropped(dict(manifest), job.to_dict(), "")
    if dropped:
        raise SpecError(f"the Kubernetes client does not know field(s) {', '.join(dropped)} of batch/v1 Job; refusing to send the Job without them", field="manifest")
    return job


def _dropped(original: JSONValue, sent: object, path: str) -> list[str]:
    """Paths present (not null) in ``original`` and absent from ``sent``."""
    missing: list[str] = []
    if isinstance(original, dict):
        sent_map = sent if isinstance(sent, dict) else {}
        for key, value in original.items():
            where = f"{path}.{key}" if path else key
            if value is None:
                continue
            if key not in sent_map:
                missing.append(where)
            else:
                missing += _dropped(value, sent_map[key], where)
    elif isinstance(original, list) and isinstance(sent, list):
        for index, (item, echoed) in enumerate(zip(original, sent)):
            missing += _dropped(item, echoed, f"{path}[{index}]")
    return missing


def _quantities(raw: Mapping[str, str]) -> dict[str, Decimal]:
    from lightkube.utils.quantity import parse_quantity

    parsed: dict[str, Decimal] = {}
    for key, value in raw.items():
        try:
            number = parse_quantity(value)
        except ValueError:
            continue  # not a quantity: nothing to count
        if number is not None:
            parsed[key] = number
    return parsed


def pod_requests(pod: Pod) -> dict[str, Decimal]:
    """What a pod holds on its node: per resource, the larger of the sum over its containers
    (sidecars included) and the largest request of an init container (plus sidecars started
    before it), plus the pod overhead. A container that sets only a limit requests that limit.
    Source: Kubernetes "Resource Management for Pods and Containers" and "Sidecar Containers"
    (effective requests of init containers); extended resources must set requests = limits.
    """
    spec = pod.spec
    if spec is None:
        return {}

    def requested(container: object) -> dict[str, Decimal]:
        resources = getattr(container, "resources", None)
        limits = _quantities(getattr(resources, "limits", None) or {})
        requests = _quantities(getattr(resources, "requests", None) or {})
        return {**limits, **requests}

    total: dict[str, Decimal] = {}
    for container in spec.containers or []:
        for key, value in requested(container).items():
            total[key] = total.get(key, Decimal(0)) + value
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for container in spec.initContainers or []:
        asks = requested(container)
        if getattr(container, "restartPolicy", None) == "Always":  # a sidecar: runs alongside
            for key, value in asks.items():
                sidecars[key] = sidecars.get(key, Decimal(0)) + value
                total[key] = total.get(key, Decimal(0)) + value
            continue
        for key, value in asks.items():
            init_peak[key] = max(init_peak.get(key, Decimal(0)), value + sidecars.get(key, Decimal(0)))
    effective = {key: max(total.get(key, Decimal(0)), init_peak.get(key, Decimal(0))) for key in set(total) | set(init_peak)}
    for key, value in _quantities(spec.overhead or {}).items():
        effective[key] = effective.get(key, Decimal(0)) + value
    return effective


def _state_from_pods(pods: Sequence[Pod]) -> tuple[JobState, str | None, str | None]:
    """Running if any pod runs; else pending, with the most telling reason a pod gives."""
    if not pods:
        return "pending", "NoPod", "the job controller has not created a pod yet"
    for pod in pods:
        if pod.status is not None and pod.status.phase == "Running":
            return "running", None, f"pod {pod.metadata.name if pod.metadata else '?'} runs on {pod.spec.nodeName if pod.spec else '?'}"
    for pod in pods:
        status = pod.status
        if status is None:
            continue
        for condition in status.conditions or []:
            if condition.type == "PodScheduled" and condition.status == "False":
                message = condition.message or ""
                # "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: ..." (the
                # scheduler's FitError): the summary is the part before the preemption note.
                summary = message.split(". preemption:", 1)[0].rstrip(".")
                reason = condition.reason or "Unschedulable"
                return "pending", f"{reason}: {summary}" if summary else reason, message or None
        for container in status.containerStatuses or []:
            waiting = container.state.waiting if container.state else None
            if waiting is not None and waiting.reason:
                return "pending", waiting.reason, waiting.message
    for pod in pods:
        if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
            # Finished pods whose Job has no terminal condition yet: the controller is catching up.
            return "running", f"Pod{pod.status.phase}", "the job controller has not recorded the pod's end yet"
    return "pending", "PodPending", "the pod is not running yet"


__all__ = [
    "DECISION_LABEL",
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "JobEnd",
    "JobRef",
    "JobState",
    "JobStatus",
    "KubernetesCluster",
    "KubernetesError",
    "NodeInfo",
    "PodUsage",
    "kubeconfig_path",
    "pod_requests",
]
