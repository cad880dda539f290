"""Installs Kueue's own manifests on the local control plane (run by scripts/kueue-up with the
repository's .venv; lightkube, the client the layer uses).

  install.py crds KUBECONFIG CRD_DIR                 server-side apply every CRD, wait Established
  install.py webhooks KUBECONFIG MANIFEST URL CA     register Kueue's webhooks at URL (https)
  install.py unregister KUBECONFIG                   delete the webhook configurations it registered

Kueue's webhook manifest (config/components/webhook/manifests.yaml) names an in-cluster Service; no
Service can route to this machine's loopback, so each webhook is rewritten to ``clientConfig.url``
(URL + its path) with the CA that signed the manager's serving certificate (SAN IP:127.0.0.1).
Only the webhooks of what this setup runs are kept: Kueue's own objects (kueue.x-k8s.io) and
batch/v1 Jobs (the one integration enabled); the Job webhooks only see namespaces labelled
``examlops.io/kueue: enabled`` (the other suites' Jobs never pass through Kueue).
"""

from __future__ import annotations

import base64
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration, ValidatingWebhookConfiguration
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

MANAGER = "exa-kueue-up"
NAMES = {"MutatingWebhookConfiguration": "exa-kueue-mutating", "ValidatingWebhookConfiguration": "exa-kueue-validating"}
KEPT_GROUPS = {"kueue.x-k8s.io", "batch"}
NAMESPACE_LABEL = {"examlops.io/kueue": "enabled"}


def client(kubeconfig: str) -> Client:
    return Client(KubeConfig.from_file(kubeconfig), field_manager=MANAGER)


def crds(kube: Client, folder: Path) -> None:
    names = []
    for path in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc:
                kube.apply(codecs.from_dict(doc), force=True)
                names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + 60
    for name in names:
        while True:
            crd = kube.get(CustomResourceDefinition, name)
            conditions = (crd.status.conditions if crd.status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                sys.exit(f"install.py: CRD {name} not Established within 60 s")
            time.sleep(0.2)
    print(f"{len(names)} CRDs established")


def webhooks(kube: Client, manifest: Path, url: str, ca: Path) -> None:
    bundle = base64.b64encode(ca.read_bytes()).decode()
    count = 0
    for doc in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
        if not doc or doc.get("kind") not in NAMES:
            continue
        kept: list[dict[str, Any]] = []
        for hook in doc.get("webhooks", []):
            groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
            if not groups or not groups <= KEPT_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": url.rstrip("/") + path, "caBundle": bundle}
            if "batch" in groups:
                hook["namespaceSelector"] = {"matchLabels": dict(NAMESPACE_LABEL)}
            kept.append(hook)
        doc["metadata"] = {"name": NAMES[doc["kind"]], "labels": {"app.kubernetes.io/managed-by": MANAGER}}
        doc["webhooks"] = kept
        kube.apply(codecs.from_dict(doc), force=True)
        count += len(kept)
    print(f"{count} webhooks registered at {url}")


def unregister(kube: Client) -> None:
    for kind, name in ((MutatingWebhookConfiguration, NAMES["MutatingWebhookConfiguration"]),
                       (ValidatingWebhookConfiguration, NAMES["ValidatingWebhookConfiguration"])):  # fmt: skip
        try:
            kube.delete(kind, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit(__doc__)
    kube = client(argv[1])
    if argv[0] == "crds" and len(argv) == 3:
        crds(kube, Path(argv[2]))
    elif argv[0] == "webhooks" and len(argv) == 5:
        webhooks(kube, Path(argv[2]), argv[3], Path(argv[4]))
    elif argv[0] == "unregister" and len(argv) == 2:
        unregister(kube)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
