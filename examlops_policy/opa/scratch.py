"""A private, short-lived OPA for one policy, and the policy of another git revision.

``scratch_opa(policy_root, folder)`` builds the policy's bundle (``build_bundle``: the revision in
its manifest), starts ``opa run --server`` on it on a Unix socket in ``folder`` (0700: only its
owner connects, so it needs no token and no authorization policy), waits until it answers, and
stops it (SIGTERM, then SIGKILL) when the ``with`` block ends, whatever happened inside. Nothing
outside ``folder`` is written, nothing is recorded: it is not the deciding OPA of any state folder.

``policy_source(against, working_root, folder)`` finds the policy to compare with: a directory
holding a policy (``examlops/`` in it, or ``policies/examlops/``), or a git revision of the
repository ``working_root`` lives in, extracted with ``git archive`` into ``folder``.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from examlops_policy.errors import PolicyUnavailable, SpecError
from examlops_policy.opa.bundle import build_bundle, opa_binary
from examlops_policy.opa.transport import Endpoint, OpaTransport, OpaUnreachable
from examlops_policy._policy import OpaPolicy
from examlops_policy._private import DIR_MODE

START_TIMEOUT_S: Final = 30.0
STOP_GRACE_S: Final = 3.0
_GIT_TIMEOUT_S: Final = 60.0


@dataclass(frozen=True)
class ScratchOpa:
    """A running scratch OPA: the policy on it, the bundle revision it serves, its process id."""

    policy: OpaPolicy
    revision: str
    pid: int
    socket: Path


def _wait_ready(proc: subprocess.Popen[bytes], transport: OpaTransport, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            tail = log.read_text(encoding="utf-8", errors="replace")[-1500:] if log.exists() else ""
            raise PolicyUnavailable(f"the OPA for {transport.describe} exited at start ({proc.returncode}): {tail.strip()}")
        try:
            if transport.request("GET", "/health")[0] == 200:
                return
        except OpaUnreachable:
            pass
        if time.monotonic() > deadline:
            raise PolicyUnavailable(f"the OPA for {transport.describe} did not answer within {START_TIMEOUT_S:.0f} s")
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def scratch_opa(policy_root: Path, folder: Path, *, opa: Path | None = None) -> Iterator[ScratchOpa]:
    """An OPA serving the bundle of ``policy_root`` on ``folder/opa.sock``, stopped on exit.

    ``folder`` must be new or empty and short enough for a socket path (107 bytes). Raises what
    ``build_bundle`` raises, and PolicyUnavailable when OPA does not start.
    """
    binary = opa or opa_binary()
    folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    folder.chmod(DIR_MODE)
    socket = folder / "opa.sock"
    if len(str(socket).encode()) > 107:
        raise SpecError(f"{socket} is too long for a Unix socket path (at most 107 bytes)")
    bundle = build_bundle(policy_root, folder, opa=binary)
    log = folder / "opa.log"
    argv = [
        str(binary), "run", "--server", "--skip-version-check", "--disable-telemetry", "--log-level=error",
        f"--addr=unix://{socket}", "--unix-socket-perm=600", "--shutdown-grace-period=1", str(bundle.path),
    ]  # fmt: skip
    with open(log, "wb") as log_fd:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, cwd=folder)
        except OSError as exc:
            raise PolicyUnavailable(f"cannot start {binary}: {exc}") from exc
    transport = OpaTransport(Endpoint("unix", path=str(socket)), describe=f"the scratch OPA of {policy_root}")
    try:
        _wait_ready(proc, transport, log)
        yield ScratchOpa(OpaPolicy(transport), bundle.revision, proc.pid, socket)
    finally:
        transport.close()
        _stop(proc)


# -- the policy to compare with ---------------------------------------------------------------


@dataclass(frozen=True)
class PolicySource:
    """A policy folder to evaluate, and how to name it: the directory, or the git revision."""

    root: Path
    label: str
    commit: str | None = None


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "--no-optional-locks", "-C", str(repo), *args], capture_output=True, timeout=_GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PolicyUnavailable(f"cannot run git in {repo}: {exc}") from exc


def _policy_in(folder: Path) -> Path | None:
    """The policy root in ``folder``: itself when it holds ``examlops/``, else its ``policies/``."""
    for candidate in (folder, folder / "policies"):
        if (candidate / "examlops").is_dir():
            return candidate
    return None


def policy_source(against: str, working_root: Path, folder: Path) -> PolicySource:
    """The policy named by ``against``: an existing directory, else a git revision (branch, tag,
    commit) of the repository holding ``working_root``, whose copy of the same policy folder is
    extracted into ``folder``.

    Raises SpecError when ``against`` is neither, or the revision has no policy there.
    """
    path = Path(against).expanduser()
    if path.is_dir():
        root = _policy_in(path)
        if root is None:
            raise SpecError(f"{path} holds no policy (expected examlops/ or policies/examlops/ in it)", field="--against")
        return PolicySource(root.resolve(), str(path))
    top = _git(working_root, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise SpecError(f"{against!r} is not a directory, and {working_root} is not in a git checkout to find it as a revision", field="--against")
    repo = Path(top.stdout.decode().strip())
    commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{against}^{{commit}}")
    if commit.returncode != 0:
        raise SpecError(f"{against!r} is neither a directory nor a git revision of {repo}", field="--against")
    sha = commit.stdout.decode().strip()
    relative = working_root.resolve().relative_to(repo.resolve()).as_posix()
    archive = _git(repo, "archive", "--format=tar", sha, "--", relative)
    if archive.returncode != 0:
        raise SpecError(f"revision {against} ({sha[:12]}) has no {relative}/: {archive.stderr.decode(errors='replace').strip()}", field="--against")
    target = folder / "tree"
    target.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    root = target / relative
    if not (root / "examlops").is_dir():
        raise SpecError(f"revision {against} ({sha[:12]}) has no policy in {relative}/examlops", field="--against")
    return PolicySource(root, f"{against} ({sha[:12]})", sha)
