"""The reviewed policy as an OPA bundle, and its revision.

Revision format::

    sha256:<64 hex>                     the content digest alone
    sha256:<64 hex>@git:<40 hex>        ... and the last commit that touched the policy folder,
                                        when the folder is in a git checkout and clean there

The content digest is ``tables.revision``'s algorithm: SHA-256 over every policy file (Rego
without tests, tables) as ``relative path NUL bytes NUL``, in path order. Two revisions are the
same policy when their content digests are equal (``content_digest``); the git part says which
reviewed commit that content is, and is absent for an uncommitted or edited tree.

A bundle holds the non-test ``.rego`` files and the tables merged into one
``examlops/tables/data.json`` (``opa build`` reads YAML only when it is named ``data.yaml``). The
values are OPA's own reading of the YAML files, checked against ``content.read_tables`` (a table
the two read differently is a PolicyError naming where), and written as ``content.canonical_json``
so that the digest the policy computes of its tables is reproducible here (``content``). The
``.manifest``'s ``roots`` are ``examlops`` and ``system/authz`` (and ``examlops_runtime`` for the
local OPA's per-start data): OPA then refuses REST writes under those trees, while
``examlops_fleet`` (this layer's own data) stays writable. A policy reads the loaded revision at
``data.system.bundles[_].manifest.revision``.

Signing: ``exa policy build --signing-key FILE`` signs with the operator's key (``.signatures.json``,
verified before the bundle is published); the local OPA's bundle is signed with a ``Signer`` made
for that one start, whose private key reaches ``opa build`` through a pipe and never a file.

Every OPA command here runs in its own session and is stopped (with anything it started) when it
does not finish within ``OPA_TOOL_TIMEOUT_S``: a hung ``EXA_OPA_BIN`` cannot hold the start lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final


from examlops_policy.errors import PolicyError, PolicyUnavailable
from examlops_policy.model import JSONObject
from examlops_policy.opa import content
from examlops_policy._private import FILE_MODE, describe_os_error
from examlops_policy.tables import policy_files

OPA_VERSION: Final = "1.22.3"
BUNDLE_ROOTS: Final = ("examlops", "system/authz")
RUNTIME_ROOT: Final = "examlops_runtime"
FLEET_ROOT: Final = "examlops_fleet"
BUNDLE_NAME: Final = "bundle.tar.gz"
SCRATCH_PREFIX: Final = ".bundle-"
# An OPA command (reading the tables, building the bundle) takes well under a second; one that
# runs this long is hung, and is stopped.
OPA_TOOL_TIMEOUT_S: Final = 8.0
_TABLES: Final = content.TABLES
_REPO_TOOLS: Final = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "opa"
_GIT_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class Bundle:
    """A built bundle: the ``.tar.gz`` file, the revision written into its manifest and the roots
    it owns (OPA refuses writes under them)."""

    path: Path
    revision: str
    roots: tuple[str, ...] = BUNDLE_ROOTS


@dataclass(frozen=True)
class Signer:
    """A key to sign a bundle with: its private key (PEM), OPA's name for the algorithm, and the
    public key (PEM) an OPA verifies the signature with."""

    private_pem: bytes = field(repr=False)
    algorithm: str
    public_pem: str

    @classmethod
    def ephemeral(cls) -> Signer:
        """A fresh EC P-256 key (ES256), held in memory only: for one start of the local OPA."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(private, "ES256", public.decode("ascii"))

    def verify_args(self) -> list[str]:
        """``opa run`` arguments that make OPA load only bundles this key signed (``--bundle`` mode;
        the public key is given inline, so no file can be swapped for it)."""
        return ["--bundle", f"--verification-key={self.public_pem}", f"--signing-alg={self.algorithm}"]


def opa_binary() -> Path:
    """The OPA binary: ``EXA_OPA_BIN``, else the project's ``.tools/bin/opa``, else ``opa`` on PATH."""
    env = os.environ.get("EXA_OPA_BIN")
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise PolicyUnavailable(f"EXA_OPA_BIN={env} is not an executable file")
        return path.resolve()
    if _REPO_TOOLS.is_file():
        return _REPO_TOOLS.resolve()
    found = shutil.which("opa")
    if found:
        return Path(found).resolve()
    raise PolicyUnavailable("no OPA binary found: run scripts/setup, or set EXA_OPA_BIN or EXA_OPA_URL")


def content_digest(revision: str) -> str:
    """The content part of a revision (``sha256:<hex>``), without any ``@git:`` part."""
    return revision.split("@", 1)[0]


def _read_policy(root: Path) -> list[tuple[str, bytes]]:
    """Every policy file as (path relative to ``root``, bytes), read once, in digest order."""
    try:
        return [(p.relative_to(root).as_posix(), p.read_bytes()) for p in policy_files(root)]
    except OSError as exc:
        raise PolicyError(f"cannot read the policy files in {root}: {exc}") from exc


def _content(files: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for rel, data in files:
        digest.update(rel.encode())
        digest.update(b"\0")
        digest.update(data)
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


def _git_commit(root: Path) -> str | None:
    """The last commit that touched ``root``, when ``root`` is in a git checkout and clean there."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                # --no-optional-locks: never take the index lock of someone's checkout to refresh it.
                ["git", "--no-optional-locks", "-C", str(root), *args],
                capture_output=True, text=True, timeout=_GIT_TIMEOUT_S, check=False,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=all", "--", ".")
    if status is None or status.strip():
        return None
    commit = (git("log", "-1", "--format=%H", "--", ".") or "").strip()
    return commit or None


def reviewed_revision(policy_root: Path) -> str:
    """The revision of the policy in ``policy_root`` (see the module docstring for the format)."""
    return _revision(policy_root, _read_policy(policy_root))


def _revision(root: Path, files: list[tuple[str, bytes]]) -> str:
    commit = _git_commit(root)
    return _content(files) + (f"@git:{commit}" if commit else "")


def _stage(
    files: list[tuple[str, bytes]], root: Path, scratch: Path, binary: Path, runtime: Mapping[str, object] | None = None
) -> Path:
    """Stage the bundle tree under ``scratch/staging``: the Rego files, the merged tables, ``.manifest``
    (and ``runtime`` as ``data.examlops_runtime``, under its own root, when given).

    The tables are read by OPA's own YAML reader (``opa eval -d FILE ... data``) and must equal
    ``content.read_tables`` of the same bytes (YAML 1.1 readers disagree, e.g. on ``NO``): the
    bundle holds exactly the values OPA read from the YAML files, in the bytes whose digest the
    policy reports (``content.canonical_json``).
    """
    staging = scratch / "staging"
    raw_tables = scratch / "tables"
    staging.mkdir()
    raw_tables.mkdir()
    table_files: list[Path] = []
    for rel, data in files:
        if rel.endswith(".rego"):
            target = staging / rel
        elif rel.rsplit("/", 1)[0] == _TABLES and rel.endswith((".yaml", ".yml")):
            target = raw_tables / rel.rsplit("/", 1)[1]
            table_files.append(target)
        else:
            # It is part of the revision; leaving it out of the bundle would make the two disagree.
            raise PolicyError(f"{root / rel}: only .rego files and {_TABLES}/*.yaml belong in the policy folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    args = [str(binary), "eval", "--format", "json", *(a for f in table_files for a in ("-d", str(f))), "data"]
    answer = _run_opa(args, scratch, "reading the policy tables")
    try:
        tables = json.loads(answer)["result"][0]["expressions"][0]["value"]
    except (ValueError, LookupError, TypeError) as exc:
        raise PolicyError(f"reading the policy tables in {root / _TABLES} gave no data: {exc}") from exc
    ours = content.read_tables_from(tuple((root / rel, data) for rel, data in files if rel.rsplit("/", 1)[0] == _TABLES and rel.endswith((".yaml", ".yml"))))
    where = content.first_difference(ours, tables)
    if where is not None:
        raise PolicyError(
            f"{root / _TABLES}: OPA reads the tables differently at {where} than exa does (quote the value, or write it "
            "as YAML 1.2 has it: true/false, decimal numbers); the digest of the tables could not be proven"
        )
    target = staging / _TABLES / "data.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content.canonical_json(ours))
    roots = list(BUNDLE_ROOTS)
    if runtime is not None:
        roots.append(RUNTIME_ROOT)
        extra = staging / RUNTIME_ROOT / "data.json"
        extra.parent.mkdir(parents=True)
        extra.write_text(json.dumps(dict(runtime), sort_keys=True), encoding="utf-8")
    (staging / ".manifest").write_text(json.dumps({"roots": roots}), encoding="utf-8")
    return staging


def _run_opa(args: list[str], cwd: Path, what: str, *, pass_fds: Sequence[int] = ()) -> str:
    """Run an OPA command; its standard output, or PolicyError/PolicyUnavailable saying why not.

    The command gets its own session and dies with this process (a placer killed mid-start leaves
    nothing running or writing); when it has not finished within ``OPA_TOOL_TIMEOUT_S``, it and
    everything it started are killed (its process group, while it is still this process's
    unreaped child, so the group is surely its) and PolicyUnavailable says so.
    """
    from examlops_policy.opa.procs import dying_with_this_process

    try:
        proc = subprocess.Popen(
            dying_with_this_process(args), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True, pass_fds=tuple(pass_fds),
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise PolicyUnavailable(f"cannot run {args[0]} to {what}: {exc}") from exc
    try:
        stdout, stderr = proc.communicate(timeout=OPA_TOOL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        raise PolicyUnavailable(
            f"{args[0]} did not finish {what} within {OPA_TOOL_TIMEOUT_S:g} s (is EXA_OPA_BIN a working OPA?); "
            "it was stopped, and no OPA was started"
        ) from None
    if proc.returncode != 0:
        output = (stderr or stdout).strip()[-2000:]
        if "no space left" in output.lower() or "quota exceeded" in output.lower():
            raise PolicyUnavailable(f"{what} failed: the disk is full ({output.splitlines()[-1]})")
        ended = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited with status {proc.returncode}"
        if not output:
            raise PolicyUnavailable(
                f"{what} failed: {_which_binary(args[0])} {ended} and printed nothing, which OPA never does; "
                "point EXA_OPA_BIN at an OPA binary, or unset it to use .tools/bin/opa (scripts/setup builds it)"
            )
        raise PolicyError(f"{what} failed: {_which_binary(args[0])} {ended} (does the policy compile?):\n{output}")
    return stdout


def _which_binary(path: str) -> str:
    """The OPA binary a command ran, and where it was named (``EXA_OPA_BIN``)."""
    env = os.environ.get("EXA_OPA_BIN")
    return f"{path} (EXA_OPA_BIN={env})" if env and Path(env).resolve() == Path(path).resolve() else path


def _verification_key(signing_key: Path, scratch: Path) -> tuple[Path, str]:
    """The key that verifies ``signing_key``'s signatures, and OPA's name for the algorithm.

    A PEM private key (RSA, EC) is verified with its public key; anything else is an HMAC secret
    (HS256) that verifies itself.
    """
    data = signing_key.read_bytes()
    if b"PRIVATE KEY" not in data:
        return signing_key, "HS256"
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    key = serialization.load_pem_private_key(data, password=None)
    if isinstance(key, rsa.RSAPrivateKey):
        alg = "RS256"
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        alg = {256: "ES256", 384: "ES384", 521: "ES512"}.get(key.curve.key_size, "")
    else:
        alg = ""
    if not alg:
        raise PolicyError(f"{signing_key}: unsupported signing key (use RSA, EC P-256/384/521 or an HMAC secret)")
    public = scratch / "verify.pem"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return public, alg


def build_bundle(
    policy_root: Path,
    out_dir: Path,
    *,
    signing_key: Path | None = None,
    opa: Path | None = None,
    signer: Signer | None = None,
    runtime: JSONObject | None = None,
) -> Bundle:
    """Build ``out_dir/bundle.tar.gz`` (0600) from ``policy_root``; return it with its revision.

    The revision is computed from exactly the bytes staged into the bundle. With ``signing_key``
    (a file) the bundle is signed (``.signatures.json``) and the signature is verified before the
    bundle is published; with ``signer`` it is signed with that key, passed to OPA through a pipe.
    ``runtime`` is added as ``data.examlops_runtime`` under a root of its own. The file is replaced
    atomically: a reader sees the old bundle or the new one. Raises PolicyError when the policy
    does not build, PolicyUnavailable when OPA cannot run (or hangs) or the file cannot be written
    (a full disk is named as such).
    """
    binary = opa or opa_binary()
    files = _read_policy(policy_root)
    revision = _revision(policy_root, files)
    out_dir = out_dir.resolve()  # OPA runs elsewhere: a relative folder would be read from there
    target = out_dir / BUNDLE_NAME
    try:
        scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=out_dir))
    except OSError as exc:
        raise PolicyUnavailable(describe_os_error("build the policy bundle in", out_dir, exc)) from exc
    try:
        built = scratch / BUNDLE_NAME
        try:
            staging = _stage(files, policy_root, scratch, binary, runtime)
        except OSError as exc:
            raise PolicyUnavailable(describe_os_error("stage the policy bundle in", scratch, exc)) from exc
        args = [str(binary), "build", "-b", ".", "-r", revision, "-o", str(built)]
        roots = (*BUNDLE_ROOTS, RUNTIME_ROOT) if runtime is not None else BUNDLE_ROOTS
        if signer is not None:
            _build_signed(args, staging, signer)
        elif signing_key is not None:
            verifier, alg = _verification_key(signing_key, scratch)
            _run_opa([*args, "--signing-key", str(signing_key), "--signing-alg", alg], staging, "building the policy bundle")
            check = [str(binary), "build", "-b", str(built), "--verification-key", str(verifier), "--signing-alg", alg, "-o", str(scratch / "verified.tar.gz")]
            _run_opa(check, scratch, "verifying the signed policy bundle")
        else:
            _run_opa(args, staging, "building the policy bundle")
        try:
            built.chmod(FILE_MODE)
            with open(built, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(built, target)
        except OSError as exc:
            raise PolicyUnavailable(describe_os_error("write", target, exc)) from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Bundle(target, revision, roots)


def _build_signed(args: list[str], staging: Path, signer: Signer) -> None:
    """``opa build`` signing with ``signer``: the private key goes through a pipe (``/dev/fd/N``)."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, signer.private_pem)  # a PEM key fits the pipe's buffer many times over
        os.close(write_end)
        write_end = -1
        key_args = [f"--signing-key=/dev/fd/{read_end}", f"--signing-alg={signer.algorithm}"]
        _run_opa([*args, *key_args], staging, "building the signed policy bundle", pass_fds=(read_end,))
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def remove_scratch(folder: Path) -> list[str]:
    """Remove what a build or a private write killed halfway left in ``folder``: ``.bundle-*``
    scratch folders and ``.*.tmp`` files. Only for a folder no other process writes to now (the
    local OPA's, under its start lock). Returns the names removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        try:
            if entry.name.startswith(SCRATCH_PREFIX) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif entry.name.startswith(".") and entry.name.endswith(".tmp") and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
            else:
                continue
        except OSError:
            continue
        removed.append(entry.name)
    return removed
