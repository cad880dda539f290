"""Device pools of this machine, from the vendors' tools or, failing them, their device files.

One pool per vendor and model: ``nvidia-smi``; ``amd-smi`` else ``rocm-smi``; ``hl-smi``; TPU
device files (``/dev/accel<N>``; ``/dev/vfio/<N>`` on a TPU VM that sets ``TPU_ACCELERATOR_TYPE``).
A tool that is missing, fails or hangs degrades to counting device files, with a warning. No
device at all: one ``cpu`` pool whose devices are the CPUs. Nothing here needs a GPU or a vendor
SDK; tests feed recorded tool outputs through ``Host``.

Capability tags come from facts the tools report: ``fp8`` from NVIDIA compute capability >= 8.9
(Ada, Hopper, Blackwell) and AMD gfx94x/gfx95x (MI300 class and later), ``fp4`` from compute
capability >= 10.0 (Blackwell); ``mig`` when the model can be MIG-partitioned (partitioning.yaml).
``supports_fractions`` only where ``nvidia-smi`` reports MIG mode enabled on every device.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, cast

from examlops_policy.discovery import DiscoveredPool, Discovery
from examlops_policy.errors import ExecutorError
from examlops_policy.executors.command import Runner, run_command
from examlops_policy.model import JSONObject, JSONValue, Pool
from examlops_policy.tables import Tables

TIMEOUT_S: Final = 20.0
NVIDIA_QUERY: Final = ("index", "name", "memory.total", "compute_cap", "mig.mode.current")

# Product names -> models.yaml keys, most specific first. Sources: NVML product names as
# nvidia-smi prints them, AMD Instinct market names, Intel Gaudi board names (HL-225 = Gaudi 2,
# HL-325L/HL-338 = Gaudi 3), GCE TPU accelerator types (v5litepod = v5e).
NVIDIA_MODELS: Final = (
    (re.compile(r"\bGH200\b", re.I), "gh200"),
    (re.compile(r"\bH200\b", re.I), "h200"),
    (re.compile(r"\bH100\b", re.I), "h100"),
    (re.compile(r"\bB200\b", re.I), "b200"),
    (re.compile(r"\bA100\b.*\b40\s*GB\b", re.I), "a100-40gb"),
    (re.compile(r"\bA100\b", re.I), "a100"),
    (re.compile(r"\bL4\b", re.I), "l4"),
    (re.compile(r"\bT4\b", re.I), "t4"),
    (re.compile(r"\bV100\b", re.I), "v100"),
)
AMD_MODELS: Final = (
    (re.compile(r"\bMI325X?\b", re.I), "mi325x"),
    (re.compile(r"\bMI300X\b", re.I), "mi300x"),
    (re.compile(r"\bMI250X\b", re.I), "mi250x"),
)
GAUDI_MODELS: Final = ((re.compile(r"\bHL-3\d\d", re.I), "gaudi3"), (re.compile(r"\bHL-22\d", re.I), "gaudi2"))
TPU_MODELS: Final = ((re.compile(r"^v5p", re.I), "tpu-v5p"), (re.compile(r"^v5(lite|e)", re.I), "tpu-v5e"), (re.compile(r"^v6e", re.I), "tpu-v6e"))
FP8_GFX: Final = re.compile(r"^gfx9(4\d|5\d)")


@dataclass(frozen=True)
class Host:
    """What discovery may look at: commands, the file system root, the environment, CPUs."""

    runner: Runner = run_command
    which: Callable[[str], str | None] = shutil.which
    root: Path = Path("/")
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 1)

    def files(self, directory: str, pattern: str) -> list[Path]:
        base = self.root / directory.lstrip("/")
        regex = re.compile(pattern)
        try:
            return sorted(p for p in base.iterdir() if regex.fullmatch(p.name))
        except OSError:
            return []


@dataclass(frozen=True)
class Device:
    """One device as a tool (or a device file) reported it."""

    accelerator: str
    model: str | None
    description: str
    capabilities: tuple[str, ...] = ()
    mig_enabled: bool = False


def _model(name: str, table: tuple[tuple[re.Pattern[str], str], ...]) -> str | None:
    return next((model for pattern, model in table if pattern.search(name)), None)


def _run(host: Host, argv: list[str], warnings: list[str]) -> str | None:
    try:
        result = host.runner(argv, timeout=TIMEOUT_S)
    except ExecutorError as exc:
        warnings.append(f"{argv[0]}: {exc}")
        return None
    if not result.ok:
        warnings.append(f"{argv[0]} failed: {result.reason()}")
        return None
    return result.stdout


# -- NVIDIA -----------------------------------------------------------------------------------


def parse_nvidia_smi(text: str, fields: tuple[str, ...] = NVIDIA_QUERY) -> list[Device]:
    """``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`` -> devices."""
    devices = []
    for row in csv.reader(io.StringIO(text)):
        if len(row) < len(fields):
            continue
        values = dict(zip(fields, (v.strip() for v in row)))
        name = values.get("name", "")
        tags = []
        try:
            major, minor = (int(p) for p in values.get("compute_cap", "").split(".", 1))
            if (major, minor) >= (8, 9):
                tags.append("fp8")
            if major >= 10:
                tags.append("fp4")
        except ValueError:
            pass
        memory = values.get("memory.total", "")
        model = _model(name, NVIDIA_MODELS)
        if model == "a100" and memory.isdigit() and int(memory) < 50_000:
            model = "a100-40gb"
        cc = values.get("compute_cap")
        mig = values.get("mig.mode.current", "")
        description = f"GPU {values.get('index', '?')}: {name}, {memory} MiB" + (f", compute capability {cc}" if cc else "") + (f", MIG {mig}" if mig else "")
        devices.append(Device("nvidia", model, description, tuple(tags), mig.lower() == "enabled"))
    return devices


def _nvidia(host: Host, warnings: list[str]) -> list[Device]:
    tool = host.which("nvidia-smi")
    if tool:
        fields: tuple[str, ...] = NVIDIA_QUERY
        text = _run(host, [tool, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"], warnings)
        if text is None:  # drivers before compute_cap was a query field
            fields = tuple(f for f in NVIDIA_QUERY if f != "compute_cap")
            text = _run(host, [tool, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"], warnings)
        if text is not None:
            return parse_nvidia_smi(text, fields)
    files = host.files("/dev", r"nvidia\d+")
    if files:
        warnings.append(f"{len(files)} NVIDIA device file(s) but no working nvidia-smi: model unknown")
    return [Device("nvidia", None, f"device file {p.name}") for p in files]


# -- AMD --------------------------------------------------------------------------------------


def _amd_device(name: str, gfx: str, index: object) -> Device:
    tags = ("fp8",) if FP8_GFX.match(gfx.lower()) else ()
    return Device("amd", _model(name, AMD_MODELS), f"GPU {index}: {name}" + (f", {gfx}" if gfx else ""), tags)


def parse_amd_smi(text: str) -> list[Device]:
    """``amd-smi static --asic --json``: a list of GPUs, or ``{"gpu_data": [...]}`` (newer)."""
    data = json.loads(text)
    gpus = data.get("gpu_data", []) if isinstance(data, dict) else data
    devices = []
    for gpu in cast(list[JSONObject], gpus if isinstance(gpus, list) else []):
        asic = cast(JSONObject, gpu.get("asic") or {})
        name = str(asic.get("market_name") or "")
        devices.append(_amd_device(name, str(asic.get("target_graphics_version") or ""), gpu.get("gpu", "?")))
    return devices


def parse_rocm_smi(text: str) -> list[Device]:
    """``rocm-smi --showproductname --json``: ``{"card0": {"Card Series": ...}, "system": ...}``.

    Key case varies between releases ("Card Series" / "Card series"); rocm-smi may exit 0 on
    failure, so an answer without cards is no devices."""
    data = json.loads(text)
    devices = []
    for key, card in sorted(cast(dict[str, JSONValue], data if isinstance(data, dict) else {}).items()):
        if not key.startswith("card") or not isinstance(card, dict):
            continue
        fields = {k.lower(): str(v) for k, v in card.items()}
        name = fields.get("card series") or fields.get("card model") or ""
        devices.append(_amd_device(name, fields.get("gfx version", ""), key.removeprefix("card")))
    return devices


def _amd(host: Host, warnings: list[str]) -> list[Device]:
    for tool, args, parse in (
        ("amd-smi", ["static", "--asic", "--json"], parse_amd_smi),
        ("rocm-smi", ["--showproductname", "--json"], parse_rocm_smi),
    ):
        path = host.which(tool)
        if not path:
            continue
        text = _run(host, [path, *args], warnings)
        if text is None:
            continue
        try:
            return parse(text)
        except (json.JSONDecodeError, AttributeError) as exc:
            warnings.append(f"{tool}: unreadable output ({exc})")
    if (host.root / "dev/kfd").exists():
        nodes = host.files("/sys/class/kfd/kfd/topology/nodes", r"\d+")
        gpus = [n for n in nodes if _read(n / "gpu_id") not in {"", "0"}]
        if gpus:
            warnings.append(f"{len(gpus)} AMD GPU(s) in the KFD topology but no working amd-smi/rocm-smi: model unknown")
        return [Device("amd", None, f"KFD node {n.name}") for n in gpus]
    return []


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


# -- Intel Gaudi ------------------------------------------------------------------------------


def parse_hl_smi(text: str) -> list[Device]:
    """``hl-smi -Q index,name -f csv,noheader`` -> devices (HL-225 = Gaudi 2, HL-3xx = Gaudi 3)."""
    devices = []
    for row in csv.reader(io.StringIO(text)):
        if len(row) < 2:
            continue
        index, name = row[0].strip(), row[1].strip()
        model = _model(name, GAUDI_MODELS)
        devices.append(Device("intel-gaudi", model, f"HPU {index}: {name}", ("fp8",) if model else ()))
    return devices


def _gaudi(host: Host, warnings: list[str]) -> list[Device]:
    tool = host.which("hl-smi")
    if tool:
        text = _run(host, [tool, "-Q", "index,name", "-f", "csv,noheader"], warnings)
        if text is not None:
            return parse_hl_smi(text)
    files = host.files("/dev/accel", r"accel\d+") or host.files("/dev", r"hl\d+")
    if files:
        warnings.append(f"{len(files)} Gaudi device file(s) but no working hl-smi: model unknown")
    return [Device("intel-gaudi", None, f"device file {p.name}") for p in files]


# -- TPU --------------------------------------------------------------------------------------


def _tpu(host: Host, warnings: list[str]) -> list[Device]:
    kind = host.env.get("TPU_ACCELERATOR_TYPE", "")
    files = host.files("/dev", r"accel\d+")
    if not files and kind:
        files = host.files("/dev/vfio", r"\d+")
    model = _model(kind, TPU_MODELS) if kind else None
    if files and model is None:
        warnings.append(f"{len(files)} TPU device file(s); accelerator type {kind or 'not set (TPU_ACCELERATOR_TYPE)'} names no known model")
    return [Device("tpu", model, f"TPU chip {p.name}" + (f" ({kind})" if kind else "")) for p in files]


# -- pools ------------------------------------------------------------------------------------


def devices(host: Host, warnings: list[str]) -> list[Device]:
    """Every accelerator this host shows, vendor by vendor."""
    found: list[Device] = []
    for probe in (_nvidia, _amd, _gaudi, _tpu):
        found += probe(host, warnings)
    return found


def _mig_capable(model: str | None, tables: Tables) -> bool:
    by_model = cast(JSONObject, tables.partitioning.get("by_model") or {})
    schemes = cast(JSONObject, tables.partitioning.get("schemes") or {})
    scheme = by_model.get(model or "")
    return isinstance(scheme, str) and cast(JSONObject, schemes.get(scheme) or {}).get("kind") == "mig"


def discover_local(tables: Tables, *, region: str = "", target: str = "hpc", prefix: str = "local-", host: Host | None = None) -> Discovery:
    """Pools of this machine: one per (vendor, model); a cpu pool when there is no accelerator."""
    host = host or Host()
    warnings: list[str] = []
    found = devices(host, warnings)
    groups: dict[tuple[str, str | None], list[Device]] = {}
    for device in found:
        groups.setdefault((device.accelerator, device.model), []).append(device)
    pools: list[DiscoveredPool] = []
    for (accelerator, model), group in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        tags = set(group[0].capabilities)
        for device in group[1:]:
            tags &= set(device.capabilities)
        if accelerator == "nvidia" and _mig_capable(model, tables):
            tags.add("mig")
        fractions = accelerator == "nvidia" and all(d.mig_enabled for d in group)
        name = f"{prefix}{model or accelerator}"
        pool = Pool(name=name, target=target, accelerator=accelerator, count=len(group), region=region,
                    supports_fractions=fractions, capabilities=tuple(sorted(tags)), model=model)  # fmt: skip
        pools.append(DiscoveredPool(pool, float(len(group)), (), tuple(d.description for d in group)))
    if not pools:
        pool = Pool(name=f"{prefix}cpu", target=target, accelerator="cpu", count=host.cpu_count, region=region)
        pools.append(DiscoveredPool(pool, float(host.cpu_count), (), (f"{host.cpu_count} CPUs; no accelerator found",)))
    return Discovery("local", tuple(pools), tuple(dict.fromkeys(warnings)))
