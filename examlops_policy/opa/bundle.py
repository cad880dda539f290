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
``examlops/tables/data.json`` (``opa build`` reads YAML only when it is named ``data.yaml``; the
merge is OPA's own reading of the YAML files, so the values are those OPA always loaded), with
a ``.manifest`` whose ``roots`` are ``examlops`` and ``system/authz``: OPA then refuses REST writes
under those trees, while ``examlops_fleet`` (this layer's own data) stays writable. A policy reads
the loaded revision at ``data.system.bundles[_].manifest.revision``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final


from examlops_policy.errors import PolicyError, PolicyUnavailable
from examlops_policy._private import FILE_MODE, describe_os_error
from examlops_policy.tables import policy_files

OPA_VERSION: Final = "1.22.3"
BUNDLE_ROOTS: Final = ("examlops", "system/authz")
FLEET_ROOT: Final = "examlops_fleet"
BUNDLE_NAME: Final = "bundle.tar.gz"
_TABLES: Final = "examlops/tables"
_REPO_TOOLS: Final = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "opa"
_GIT_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class Bundle:
    """A built bundle: the ``.tar.gz`` file, the revision written into its manifest and the roots
    it owns (OPA refuses writes under them)."""

    path: Path
    revision: str
    roots: tuple[str, ...] = BUNDLE_ROOTS


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


def _stage(files: list[tuple[str, bytes]], root: Path, scratch: Path, binary: Path) -> Path:
    """Stage the bundle tree under ``scratch/staging``: the Rego files, the merged tables, ``.manifest``.

    The tables are converted by OPA's own YAML reader (``opa eval -d FILE ... data``), so the
    bundle holds exactly the values OPA read from the YAML files when it loaded them directly
    (YAML 1.1 readers disagree, e.g. on ``NO``).
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
    target = staging / _TABLES / "data.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(tables, sort_keys=True), encoding="utf-8")
    (staging / ".manifest").write_text(json.dumps({"roots": list(BUNDLE_ROOTS)}), encoding="utf-8")
    return staging


def _run_opa(args: list[str], cwd: Path, what: str) -> str:
    """Run an OPA command; its standard output, or PolicyError/PolicyUnavailable saying why not."""
    try:
        done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PolicyUnavailable(f"cannot run {args[0]} to {what}: {exc}") from exc
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()[-2000:]
        if "no space left" in output.lower() or "quota exceeded" in output.lower():
            raise PolicyUnavailable(f"{what} failed: the disk is full ({output.splitlines()[-1]})")
        ended = f"was killed by signal {-done.returncode}" if done.returncode < 0 else f"exited with status {done.returncode}"
        if not output:
            raise PolicyUnavailable(
                f"{what} failed: {_which_binary(args[0])} {ended} and printed nothing, which OPA never does; "
                "point EXA_OPA_BIN at an OPA binary, or unset it to use .tools/bin/opa (scripts/setup builds it)"
            )
        raise PolicyError(f"{what} failed: {_which_binary(args[0])} {ended} (does the policy compile?):\n{output}")
    return done.stdout


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


def build_bundle(policy_root: Path, out_dir: Path, *, signing_key: Path | None = None, opa: Path | None = None) -> Bundle:
    """Build ``out_dir/bundle.tar.gz`` (0600) from ``policy_root``; return it with its revision.

    The revision is computed from exactly the bytes staged into the bundle. With ``signing_key``
    the bundle is signed (``.signatures.json``) and the signature is verified before the bundle
    is published. The file is replaced atomically: a reader sees the old bundle or the new one.
    Raises PolicyError when the policy does not build, PolicyUnavailable when OPA cannot run or
    the file cannot be written (a full disk is named as such).
    """
    binary = opa or opa_binary()
    files = _read_policy(policy_root)
    revision = _revision(policy_root, files)
    out_dir = out_dir.resolve()  # OPA runs elsewhere: a relative folder would be read from there
    target = out_dir / BUNDLE_NAME
    try:
        scratch = Path(tempfile.mkdtemp(prefix=".bundle-", dir=out_dir))
    except OSError as exc:
        raise PolicyUnavailable(describe_os_error("build the policy bundle in", out_dir, exc)) from exc
    try:
        built = scratch / BUNDLE_NAME
        try:
            staging = _stage(files, policy_root, scratch, binary)
        except OSError as exc:
            raise PolicyUnavailable(describe_os_error("stage the policy bundle in", scratch, exc)) from exc
        args = [str(binary), "build", "-b", ".", "-r", revision, "-o", str(built)]
        if signing_key is not None:
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
    return Bundle(target, revision)
