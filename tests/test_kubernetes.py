"""``exa hardware manifest``: a batch/v1 Job per vendor, validated against the official schemas.

Every manifest is checked with ``kubernetes-validate`` (the Kubernetes OpenAPI schemas, strict:
unknown fields fail) and by the rules the schemas do not carry: extended resources are whole
numbers, label values are valid label values.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, cast

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from examlops_policy.errors import SpecError
from examlops_policy.executors.kubernetes import REGION_LABEL, job_manifest, job_name
from examlops_policy.hardware import Hardware
from examlops_policy.model import Placement, Pool, Workload
from examlops_policy.views import DecisionRecord

from tests.conftest import run_exa
from tests.placement_support import placed_in

K8S_VERSION = kubernetes_validate.latest_version()
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
EXTENDED = ("nvidia.com/", "amd.com/", "habana.ai/", "google.com/")


def burst(name: str, accelerator: str, **kwargs: Any) -> Workload:
    return Workload(name, accelerator, target="cloud", allow_burst=True, **kwargs)


def manifest_for(record: DecisionRecord, pool: Pool, **options: Any) -> dict[str, Any]:
    return cast(dict[str, Any], job_manifest(record, pool, **options))


def validate(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    pod = manifest["spec"]["template"]
    for meta in (manifest["metadata"], pod["metadata"]):
        for key, value in meta["labels"].items():
            assert len(value) <= 63 and LABEL_VALUE.match(value), (key, value)
    for container in pod["spec"]["containers"]:
        for resource, quantity in container["resources"]["limits"].items():
            if resource.startswith(EXTENDED):
                assert re.fullmatch(r"[1-9]\d*", quantity), (resource, quantity)  # never 0.5 of a device


def product_values(manifest: dict[str, Any]) -> dict[str, list[str]]:
    """The node labels the pod is pinned to: nodeSelector values and required affinity In values."""
    spec = manifest["spec"]["template"]["spec"]
    pinned = {k: [v] for k, v in spec.get("nodeSelector", {}).items()}
    affinity = spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    for term in affinity.get("nodeSelectorTerms", []):
        for expression in term["matchExpressions"]:
            assert expression["operator"] == "In"
            pinned[expression["key"]] = expression["values"]
    return pinned


# id: (pool, workload, limits, pinned labels (label -> a value that must be allowed))
CASES = {
    "nvidia-h100": (
        Pool("cloud-h100", "cloud", "nvidia", 8, "us-east-1", model="h100"),
        burst("train", "nvidia", count=2),
        {"nvidia.com/gpu": "2"},
        {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    ),
    "nvidia-mig": (
        Pool("cloud-a100", "cloud", "nvidia", 8, "eu-central-1", model="a100", supports_fractions=True),
        burst("infer", "nvidia", fraction=0.25),
        {"nvidia.com/mig-2g.20gb": "1"},
        {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    ),
    "amd-mi300x": (
        Pool("cloud-mi300x", "cloud", "amd", 8, "us-east-1", model="mi300x"),
        burst("train", "amd", engine="vllm", count=8),
        {"amd.com/gpu": "8"},
        {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"},
    ),
    "amd-partition": (
        Pool("cloud-mi300x", "cloud", "amd", 8, "us-east-1", model="mi300x", supports_fractions=True),
        burst("infer", "amd", engine="vllm", fraction=0.125),
        {"amd.com/cpx_nps1": "1"},
        {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"},
    ),
    "intel-gaudi": (
        Pool("cloud-gaudi3", "cloud", "intel-gaudi", 8, "us-east-1", model="gaudi3"),
        burst("train", "intel-gaudi", engine="ipex", count=4),
        {"habana.ai/gaudi": "4"},
        {},
    ),
    "gaudi-fraction-not-honored": (
        Pool("cloud-gaudi3", "cloud", "intel-gaudi", 8, "us-east-1", model="gaudi3"),
        burst("small", "intel-gaudi", engine="ipex", fraction=0.5),
        {"habana.ai/gaudi": "1"},
        {},
    ),
    "tpu-v5p": (
        Pool("cloud-tpu", "cloud", "tpu", 4, "us-central1", model="tpu-v5p"),
        burst("train", "tpu", count=4),
        {"google.com/tpu": "4"},
        {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice"},
    ),
    "cpu": (
        Pool("cloud-cpu", "cloud", "cpu", 64, "europe-west4"),
        burst("prep", "cpu", engine="cpu", count=8),
        {"cpu": "8"},
        {},
    ),
    "nvidia-no-model": (
        Pool("cloud-gpu", "cloud", "nvidia", 8, "us-east-1"),
        burst("train", "nvidia"),
        {"nvidia.com/gpu": "1"},
        {},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_job_for_each_vendor_is_valid_and_asks_the_device_plugin(hardware: Hardware, case: str) -> None:
    pool, workload, limits, pinned = CASES[case]
    record = placed_in(hardware, pool, workload)
    manifest = manifest_for(record, pool, image="registry.example/train:1.0", command=["python", "train.py"])
    validate(manifest)
    assert manifest["apiVersion"] == "batch/v1" and manifest["kind"] == "Job"
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == limits
    assert container["command"] == ["python", "train.py"]
    got = product_values(manifest)
    pinned = {**pinned, REGION_LABEL: pool.region}  # always pinned to the pool's region (residency)
    assert set(got) == set(pinned)
    assert got[REGION_LABEL] == [pool.region]
    for label, value in pinned.items():
        assert value in got[label]
    decision = cast(Placement, record.decision)
    for meta in (manifest["metadata"], manifest["spec"]["template"]["metadata"]):
        assert meta["labels"]["examlops.io/decision-id"] == record.id
        digest = decision.provenance.policy_revision.removeprefix("sha256:")
        assert meta["labels"]["examlops.io/policy-revision"] == digest[:63]  # a label value holds 63 characters
        assert meta["annotations"]["examlops.io/policy-revision"] == decision.provenance.policy_revision
    assert manifest["metadata"]["name"] == job_name(workload.name, record.id)


def test_fraction_honored_as_whole_device_says_so(hardware: Hardware) -> None:
    pool, workload, _, _ = CASES["gaudi-fraction-not-honored"]
    manifest = manifest_for(placed_in(hardware, pool, workload), pool, image="img")
    assert manifest["metadata"]["annotations"]["examlops.io/fraction"] == "0.5 -> whole device"
    assert manifest["metadata"]["annotations"]["examlops.io/node-selection"] == "intel-gaudi nodes carry no product label; not pinned to model gaudi3"


def test_amd_memory_partition_and_tpu_topology_options(hardware: Hardware) -> None:
    pool, workload, _, _ = CASES["amd-partition"]
    manifest = manifest_for(placed_in(hardware, pool, workload), pool, image="img", amd_memory_partition="nps4")
    validate(manifest)
    assert manifest["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/cpx_nps4": "1"}


def test_tpu_topology_selector(hardware: Hardware) -> None:
    pool, workload, _, _ = CASES["tpu-v5p"]
    record = placed_in(hardware, pool, workload)
    manifest = manifest_for(record, pool, image="img", tpu_topology="2x2x1", namespace="ml")
    validate(manifest)
    assert manifest["metadata"]["namespace"] == "ml"
    assert manifest["spec"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice", "cloud.google.com/gke-tpu-topology": "2x2x1",
        REGION_LABEL: "us-central1"}  # fmt: skip
    with pytest.raises(SpecError, match="--tpu-topology"):
        manifest_for(record, pool, image="img", tpu_topology="2x2;x")


def test_a_mig_profile_without_memory_size_is_refused_not_invented(hardware: Hardware) -> None:
    pool = Pool("cloud-gpu", "cloud", "nvidia", 8, "us-east-1", supports_fractions=True)  # no model: generic "1g"
    record = placed_in(hardware, pool, burst("infer", "nvidia", fraction=0.1))
    with pytest.raises(SpecError, match="names no Kubernetes partition resource"):
        manifest_for(record, pool, image="img")


def test_what_gets_no_manifest(hardware: Hardware) -> None:
    pool, workload, _, _ = CASES["nvidia-h100"]
    record = placed_in(hardware, pool, workload)
    for kwargs, message in (
        ({"image": "bad image"}, "not a container image"),
        ({"image": "img", "namespace": "Bad_NS"}, "namespace"),
    ):
        with pytest.raises(SpecError, match=message):
            manifest_for(record, pool, **kwargs)
    rejected = hardware.place(burst("nope", "amd", engine="sglang"))
    with pytest.raises(SpecError, match="placed nothing"):
        manifest_for(rejected, pool, image="img")
    with pytest.raises(SpecError, match="was released"):
        manifest_for(hardware.release(record.id).record, pool, image="img")


def test_the_validator_is_not_a_rubber_stamp(hardware: Hardware) -> None:
    pool, workload, _, _ = CASES["nvidia-h100"]
    manifest = manifest_for(placed_in(hardware, pool, workload), pool, image="img")
    manifest["spec"]["template"]["spec"]["containers"][0]["resourcez"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def test_job_name_is_a_dns_label() -> None:
    assert job_name("Train_LLM.v2", "ABCDEF0123456789") == "train-llm-v2-abcdef01"
    assert len(job_name("x" * 63, "0" * 32)) <= 63


def test_cli_manifest_emits_yaml_and_json(exa_home: Path) -> None:
    run_exa(exa_home, "hardware", "add-pool", "cloud-a100", "--target", "cloud", "--accelerator", "nvidia", "--count", "8",
            "--region", "eu-central-1", "--model", "a100", "--supports-fractions", check=True)  # fmt: skip
    placed_json = run_exa(exa_home, "hardware", "burst", "infer", "--accelerator", "nvidia", "--fraction", "0.1",
                          "--allow-burst", "--json", check=True)  # fmt: skip
    ident = json.loads(placed_json.stdout)["id"]
    out = run_exa(exa_home, "hardware", "manifest", ident[:10], "--image", "vllm/vllm-openai:v0.6.0",
                  "--command", "vllm", "serve", "m", "--port", "8000", check=True)  # fmt: skip
    manifest = yaml.safe_load(out.stdout)
    validate(manifest)
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert container["command"] == ["vllm", "serve", "m", "--port", "8000"]
    as_json = json.loads(run_exa(exa_home, "hardware", "manifest", ident, "--image", "img", "--json", check=True).stdout)
    validate(as_json)
    assert as_json["metadata"]["labels"]["examlops.io/decision-id"] == ident

    missing = run_exa(exa_home, "hardware", "manifest", ident, "--image", "bad image")
    assert missing.returncode == 2 and "SpecError" in missing.stderr


def test_the_walltime_is_the_job_s_active_deadline(hardware: Hardware) -> None:
    """--walltime 30m went to Slurm as --time but not into the Job: it is activeDeadlineSeconds
    (Kubernetes ends the Job past it); without a walltime the Job has no deadline."""
    pool = Pool("cloud-h100", "cloud", "nvidia", 8, "us-east-1", model="h100")
    timed = manifest_for(placed_in(hardware, pool, burst("timed", "nvidia", walltime=1800)), pool, image="img")
    validate(timed)
    assert timed["spec"]["activeDeadlineSeconds"] == 1800
    untimed = manifest_for(placed_in(hardware, pool, burst("untimed", "nvidia")), pool, image="img")
    assert "activeDeadlineSeconds" not in untimed["spec"]


def test_cli_manifest_yaml_writes_every_part_out_without_anchors(exa_home: Path) -> None:
    """A gang's manifest repeats its node affinity terms: the YAML said them once as an anchor
    (&id001) and then as aliases (*id001). Written out in full, it reads back the same as --json."""
    examples = Path(__file__).resolve().parent.parent / "examples" / "nodes"
    run_exa(exa_home, "hardware", "apply", "-f", str(examples / "pools.yaml"), check=True)
    ident = json.loads(run_exa(exa_home, "hardware", "place", "-f", str(examples / "gang.yaml"), "--json", check=True).stdout)["id"]
    out = run_exa(exa_home, "hardware", "manifest", ident, "--image", "img", check=True).stdout
    assert not re.search(r"[&*]id\d+", out), out
    as_json = json.loads(run_exa(exa_home, "hardware", "manifest", ident, "--image", "img", "--json", check=True).stdout)
    assert yaml.safe_load(out) == as_json
