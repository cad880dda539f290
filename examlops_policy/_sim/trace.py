"""Cluster traces read into nodes and pod requests: the openb CSV format (Alibaba's GPU cluster trace).

``read_openb_nodes`` reads ``sn,cpu_milli,memory_mib,gpu,model``; ``read_openb_pods`` reads
``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`` (other columns are ignored: the
replay protocol places pods in a seeded order, none leaving). A pod with ``num_gpu`` 1 and
``gpu_milli`` < 1000 asks for a share of one GPU; ``gpu_spec`` names the acceptable models
(``V100M16|V100M32``; empty: any).

Bad input is one clear error (``SpecError``) naming the file, the line and the column: a malformed
value, a missing column, a pod naming a GPU model no node has, a pod larger than every node.
Nothing is half read.
"""

from __future__ import annotations

import csv
import itertools
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TextIO

from examlops_policy._nodes import MILLI, Node, NodeRequest
from examlops_policy.errors import SpecError

PodKind = Literal["cpu", "share", "one", "multi"]
POD_KINDS: Final = ("cpu", "share", "one", "multi")
"""CPU-only, a share of one device, one whole device, several whole devices."""

NODE_COLUMNS: Final = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS: Final = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
MAX_CSV_BYTES: Final = 256 * 1024 * 1024
"""A CSV trace file is read up to this size (about 4 million workload rows), refused beyond it
before a row is used: the path may be a huge file or a device that never ends (a YAML trace is
read up to ``specs.MAX_FILE_BYTES``, 4 MiB)."""


def _within(handle: TextIO, path: Path, limit: int) -> Iterator[str]:
    """The lines of ``handle``, a SpecError once more than ``limit`` characters were read (a line
    that never ends is cut at the limit)."""
    read = 0
    while True:
        line = handle.readline(limit - read + 1)
        if not line:
            return
        read += len(line)
        if read > limit:
            raise SpecError(f"the file is larger than {limit} bytes; at most {limit} are read", source=str(path))
        yield line


def _blocks_of(handle: TextIO, path: Path, limit: int) -> Iterator[list[str]]:
    """The lines of ``handle``, a regular file of at most ``limit`` bytes when it was opened (so no
    line is longer), a block of them at a time; a SpecError once more than ``limit`` characters
    were read (the file grew)."""
    read = 0
    while True:
        try:
            lines = handle.readlines(1 << 16)
        except UnicodeDecodeError as exc:  # somewhere in the block: the line named is the first not UTF-8
            raise SpecError(f"not a readable CSV row ({exc.reason}: not UTF-8 text)", source=f"{path} line {_first_not_utf8(path)}") from None
        if not lines:
            return
        read += sum(map(len, lines))
        if read > limit:
            raise SpecError(f"the file is larger than {limit} bytes; at most {limit} are read", source=str(path))
        yield lines


def _first_not_utf8(path: Path) -> int:
    """The number of the first line of ``path`` that is not UTF-8 text (0: none is)."""
    with path.open("rb") as raw:
        for number, line in enumerate(raw, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return 0


@dataclass(frozen=True)
class TracePod:
    """One pod of a trace: its name, where it was read, and what it asks of one node."""

    name: str
    request: NodeRequest
    source: str = ""

    @property
    def kind(self) -> PodKind:
        r = self.request
        if r.share_milli:
            return "share"
        if r.devices == 0:
            return "cpu"
        return "one" if r.devices == 1 else "multi"

    @property
    def device_milli(self) -> int:
        """Device milli the pod asks for in all (a share: its milli; whole devices: 1000 each)."""
        return self.request.device_milli * self.request.nodes

    @property
    def per_device_milli(self) -> int:
        """Milli per device asked (0 for CPU-only), as the openb protocol's tuning compares it."""
        return self.request.share_milli or (MILLI if self.request.devices else 0)


def _rows(path: Path, required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """Each row of the CSV file at ``path`` by its line, as a dict by column (``_table``)."""
    table = _table(path, required)
    _, header = next(table)
    for line, cells in table:
        yield line, dict(zip(header, cells))


def _table(path: Path, required: Sequence[str]) -> Iterator[tuple[int, list[str]]]:
    """The CSV file at ``path``: its header first (line 1, its columns stripped: every one of
    ``required`` in it), then each row holding a value by its line, its cells stripped (as many as
    the header's). SpecError names the file, the line and the column of what is wrong."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read the trace ({exc.strerror or exc})", source=str(path)) from None
    with handle:
        size = os.fstat(handle.fileno()).st_size if stat.S_ISREG(os.fstat(handle.fileno()).st_mode) else 0
        if size > MAX_CSV_BYTES:  # refused before a row is read (a stream that never ends is cut at the limit as it is read)
            raise SpecError(f"the file is {size} bytes, larger than {MAX_CSV_BYTES} bytes; at most {MAX_CSV_BYTES} are read", source=str(path))
        # A regular file's size is known, so a block of lines is read at a time; any other path (a
        # stream that may never end, nor its line) line by line, each cut at the limit.
        lines = itertools.chain.from_iterable(_blocks_of(handle, path, MAX_CSV_BYTES)) if size else _within(handle, path, MAX_CSV_BYTES)
        reader = csv.reader(lines)
        try:
            header = next(reader)
        except StopIteration:
            raise SpecError(f"the file is empty; expected a header with {', '.join(required)}", source=f"{path} line 1") from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise SpecError(f"not a readable CSV file ({exc})", source=f"{path} line 1") from None
        header = [h.strip() for h in header]
        width = len(header)
        for column in required:
            if column not in header:
                raise SpecError(f"missing column; the header must name {', '.join(required)}", source=f"{path} line 1", field=column)
        yield 1, header
        try:
            for row in reader:
                line = reader.line_num
                if len(row) != width:
                    if not row or not "".join(row).strip():
                        continue
                    raise SpecError(f"expected {width} values as in the header, got {len(row)}", source=f"{path} line {line}")
                cells = [cell.strip() for cell in row]
                if _blank(cells):
                    continue
                yield line, cells
        except (csv.Error, UnicodeDecodeError) as exc:
            raise SpecError(f"not a readable CSV row ({exc})", source=f"{path} line {reader.line_num}") from None


def _blank(cells: list[str]) -> bool:
    """Whether every cell is empty."""
    for cell in cells:
        if cell:
            return False
    return True


def _count(row: dict[str, str], column: str, where: str, *, most: int | None = None) -> int:
    text = row[column]
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0 or (most is not None and value > most):
        bound = f"0..{most}" if most is not None else ">= 0"
        raise SpecError(f"expected a whole number {bound} (got {text!r})", source=where, field=column)
    return value


def read_openb_nodes(path: str | Path) -> list[Node]:
    """The nodes of an openb node list, in file order (GPU model ``nan``/empty only with 0 GPUs)."""
    path = Path(path)
    nodes: list[Node] = []
    seen: dict[str, int] = {}
    for line, row in _rows(path, NODE_COLUMNS):
        where = f"{path} line {line}"
        name = row["sn"]
        if not name:
            raise SpecError("a node needs a name", source=where, field="sn")
        if name in seen:
            raise SpecError(f"node {name!r} is already listed on line {seen[name]}", source=where, field="sn")
        seen[name] = line
        gpus = _count(row, "gpu", where)
        model = row["model"] if row["model"] not in ("", "nan") else None
        if gpus and model is None:
            raise SpecError(f"a node with {gpus} GPUs needs its GPU model", source=where, field="model")
        nodes.append(Node(name, gpus, model if gpus else None, _count(row, "cpu_milli", where), _count(row, "memory_mib", where)))
    if not nodes:
        raise SpecError("the node list holds no node", source=str(path))
    return nodes


def read_openb_pods(path: str | Path, nodes: Sequence[Node]) -> list[TracePod]:
    """The pods of an openb pod list, in file order, checked against ``nodes``.

    Every model a pod names must be one some node has, and every pod must fit some empty node by
    size (devices, CPU, memory). A pod that fits only nodes of models it does not accept is kept:
    the trace has such pods (gpuspec10 line 1641: 8 G2 GPUs with 120 cores; G2 nodes have 96) and
    the replay counts them as failed, as the published simulator does.
    """
    path = Path(path)
    models = {n.model for n in nodes if n.model is not None}
    shapes = {(n.devices, n.model, n.cpu_milli, n.memory_mib) for n in nodes}
    pods: list[TracePod] = []
    seen: dict[str, int] = {}
    for line, row in _rows(path, POD_COLUMNS):
        where = f"{path} line {line}"
        name = row["name"]
        if not name:
            raise SpecError("a pod needs a name", source=where, field="name")
        if name in seen:
            raise SpecError(f"pod {name!r} is already listed on line {seen[name]}", source=where, field="name")
        seen[name] = line
        cpu = _count(row, "cpu_milli", where)
        memory = _count(row, "memory_mib", where)
        gpus = _count(row, "num_gpu", where)
        milli = _count(row, "gpu_milli", where, most=MILLI)
        if gpus == 0 and milli:
            raise SpecError(f"a pod without GPUs asks for no GPU milli (got {milli})", source=where, field="gpu_milli")
        if gpus and milli == 0:
            raise SpecError("a pod with GPUs asks for 1..1000 milli of each", source=where, field="gpu_milli")
        if gpus > 1 and milli != MILLI:
            raise SpecError(f"a pod with {gpus} GPUs asks for whole GPUs (gpu_milli 1000, got {milli})", source=where, field="gpu_milli")
        spec = row.get("gpu_spec", "")
        wanted = frozenset(m for m in spec.split("|") if m) if spec not in ("", "nan") else frozenset()
        unknown = sorted(wanted - models)
        if unknown:
            raise SpecError(f"unknown GPU model {unknown[0]!r}; the nodes have {', '.join(sorted(models))}", source=where, field="gpu_spec")
        share = milli if gpus == 1 and milli < MILLI else 0
        request = NodeRequest(devices=0 if share else gpus, share_milli=share, cpu_milli=cpu, memory_mib=memory, models=wanted or None)
        if not any(_fits_empty(request, shape) for shape in shapes):
            column = "num_gpu" if not any(s[0] >= gpus for s in shapes) else ("cpu_milli" if not any(s[2] is None or s[2] >= cpu for s in shapes) else "memory_mib")
            raise SpecError(f"the pod is larger than every node (asks {gpus} GPUs, {cpu} CPU milli, {memory} MiB)", source=where, field=column)
        pods.append(TracePod(name, request, where))
    if not pods:
        raise SpecError("the pod list holds no pod", source=str(path))
    return pods


def _fits_empty(request: NodeRequest, shape: tuple[int, str | None, int | None, int | None]) -> bool:
    """Whether an empty node of ``shape`` is large enough for ``request`` (devices, CPU, memory; models aside)."""
    devices, _, cpu, memory = shape
    return (request.kind == "cpu" or devices >= max(request.devices, 1)) and (cpu is None or cpu >= request.cpu_milli) and (memory is None or memory >= request.memory_mib)
