"""The command line as a client of the placement service: with ``EXA_SERVER=URL`` (or
``--server URL``) and ``EXA_TOKEN``, the commands in ``COMMANDS`` (``exa hardware place``,
``burst``, ``portable``, ``decisions``, ``explain``, ...) and ``OTHER_COMMANDS`` (``exa finops
cost``, ...) ask the service and print what the command prints locally (the service renders it
with the same code), exiting with the same code.

This module imports the standard library only (no decision code, no YAML unless ``-f`` names a
file): a cold command pays for a parser and a socket, not for the decision path
(tests/test_cli_imports.py holds it so). ``URL``: ``http://HOST:PORT``, ``https://HOST:PORT``
(``EXA_SERVER_CA``: a CA file to trust) or ``unix:PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Final, NoReturn
from urllib.parse import quote, urlencode, urlsplit

BAD_INPUT: Final = 2
UNREACHABLE: Final = 12  # the exit code of an unreachable state server (the service is one)
MAX_ANSWER_BYTES: Final = 256 << 20  # the most an answer is read to (every pool's verdict at 1,000 pools is ~800 KB)
COMMANDS: Final = (
    "place", "burst", "portable", "decisions", "explain", "release", "renew", "accounting", "burst-events", "add-pool", "apply", "drain",
    "undrain", "remove-pool", "pools", "pool", "queue", "cancel", "quotas",
)  # fmt: skip
# exa hardware add-pool's options and their types (list: repeated; bool: a flag), as POST /v1/pools/{name}
# takes them (service.routes.POOL_OPTIONS; tests/test_service.py holds the two and the command's parser equal).
_POOL_OPTIONS: Final[tuple[tuple[str, type], ...]] = (
    ("target", str), ("accelerator", str), ("count", int), ("region", str), ("cost_per_hour", float), ("carbon_factor", float),
    ("supports_fractions", bool), ("capabilities", str), ("model", str), ("power_w", float), ("pue", float), ("partition", str),
    ("gres_type", str), ("fixed_profile", str), ("spot", bool), ("nodes", int), ("node", list), ("cpu_per_node", str),
    ("memory_per_node", str), ("sharing", str), ("shares_per_device", int), ("cluster", str),
)  # fmt: skip
OTHER_COMMANDS: Final = ("finops cost", "finops carbon", "audit verify")  # of the other groups
_POOL_CHANGES: Final = {"drain": "drain", "undrain": "undrain", "remove-pool": "remove"}  # command -> POST /v1/pools/{name}/...
MAX_FILE_BYTES: Final = 4 << 20  # the most of a file -f names that is read (the service takes 64 KiB of body)
# Workload options of exa hardware place, as the workload specification names them, and their types.
_OPTIONS: Final[tuple[tuple[str, type], ...]] = (
    ("accelerator", str), ("engine", str), ("target", str), ("fraction", float), ("count", int), ("nodes", int), ("cpu", str),
    ("memory", str), ("topology", str), ("topology_mode", str), ("isolation", str), ("residency", str), ("data_region", str),
    ("optimize", str), ("work_class", str), ("work", float), ("carbon_weight", float), ("max_cost_per_hour", float),
    ("max_carbon_per_hour", float), ("project", str), ("spot", str), ("max_wait", str), ("deadline", str), ("walltime", str),
    ("priority", str),
)  # fmt: skip
_LISTS: Final = ("capabilities", "models")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        _fail("UsageError", BAD_INPUT, f"{self.prog}: {message}", as_json="--json" in sys.argv)


def _fail(name: str, code: int, message: str, *, as_json: bool) -> NoReturn:
    if as_json:
        sys.stderr.write(json.dumps({"error": name, "code": code, "message": message}, ensure_ascii=False) + "\n")
    else:
        sys.stderr.write(f"{name}: {message}\n")
    sys.exit(code)


def _parser(command: str) -> argparse.ArgumentParser:
    p = _Parser(prog=f"exa {command}" if command in OTHER_COMMANDS else f"exa hardware {command}")
    p.add_argument("--json", action="store_true")
    p.add_argument("--home", help="ignored: the service keeps the state")
    p.add_argument("--debug", action="store_true")
    if command in ("place", "burst"):  # burst: as place, asking for cloud (no --target, no --queue)
        p.add_argument("name", nargs="?")
        p.add_argument("-f", "--file")
        for option, kind in _OPTIONS:
            if command == "place" or option != "target":
                p.add_argument(f"--{option.replace('_', '-')}", type=kind)
        for option in _LISTS:
            p.add_argument(f"--{option}")
        for flag in ("allow-burst", "allow-cpu-fallback", "no-budget-fallback", "explain", "dry-run", "queue"):
            if command == "place" or flag != "queue":
                p.add_argument(f"--{flag}", action="store_true")
        p.set_defaults(target=None, queue=False)
        p.add_argument("--request-id")
        p.add_argument("--lease")
    elif command == "pool":
        p.add_argument("name")
    elif command == "add-pool":
        p.add_argument("name")
        for option, kind in _POOL_OPTIONS:
            flag = f"--{option.replace('_', '-')}"
            if kind is bool:
                p.add_argument(flag, action="store_true")
            elif kind is list:
                p.add_argument(flag, action="append")
            else:
                p.add_argument(flag, type=kind, required=option in ("target", "accelerator", "region"))
    elif command in _POOL_CHANGES:
        p.add_argument("name")
        p.add_argument("--dry-run", action="store_true")
    elif command == "apply":
        p.add_argument("-f", "--file", required=True)
        p.add_argument("--prune", action="store_true")
        p.add_argument("--dry-run", action="store_true")
    elif command == "decisions":
        p.add_argument("--limit", type=int, default=20)
        for option in ("since", "until", "cursor"):
            p.add_argument(f"--{option}")
    elif command == "queue":
        p.add_argument("--all", action="store_true")
    elif command == "portable":
        p.add_argument("--engine", required=True)
        p.add_argument("--accelerator", required=True)
    elif command == "burst-events":
        p.add_argument("--limit", type=int, default=50)
    elif command == "accounting":
        p.add_argument("id")
        p.add_argument("--hours", required=True)
    elif command in ("finops cost", "finops carbon"):
        p.add_argument("--hours")
    elif command == "audit verify":
        p.add_argument("--checkpoint")
        p.add_argument("--key")
    elif command in ("explain", "release", "renew", "cancel"):
        p.add_argument("id")
        if command == "explain":
            p.add_argument("--replay", action="store_true")
        if command == "renew":
            p.add_argument("--lease", required=True)
    return p


def _place_body(args: argparse.Namespace) -> dict[str, object]:
    body: dict[str, object] = {}
    if args.file:
        given = [o for o, _ in _OPTIONS if getattr(args, o) is not None] + [o for o in _LISTS if getattr(args, o) is not None]
        if args.name or given:
            _fail("SpecError", BAD_INPUT, f"command line: -f {args.file} says everything about the workload; give either -f FILE, or NAME with options",
                  as_json=args.json)  # fmt: skip
        body = _read_mapping(args.file, "workload:", as_json=args.json)
        workload_doc = body.get("workload")
        if isinstance(workload_doc, dict) and "deadline" in workload_doc:
            deadline = workload_doc["deadline"]  # YAML reads an unquoted time as a time: given back as the text it was
            body["workload"] = {**workload_doc, "deadline": deadline.isoformat() if hasattr(deadline, "isoformat") else deadline}
    else:
        if not args.name or not args.accelerator:
            _fail("SpecError", BAD_INPUT, "command line: give a NAME and --accelerator, or -f workload.yaml", as_json=args.json)
        workload: dict[str, object] = {"name": args.name}
        for option, _ in _OPTIONS:
            if getattr(args, option) is not None:
                workload[option] = getattr(args, option)
        for option in _LISTS:
            if getattr(args, option) is not None:
                workload[option] = [n.strip() for n in getattr(args, option).split(",") if n.strip()]
        if args.allow_burst:
            workload["allow_burst"] = True
        if args.allow_cpu_fallback:
            workload["allow_cpu_fallback"] = True
        if args.no_budget_fallback:
            workload["allow_budget_fallback"] = False
        body["workload"] = workload
    if args.queue:
        body["queue"] = True
    for key in ("request_id", "lease"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    if args.dry_run:
        body["dry_run"] = True
    if args.explain:
        body["explain"] = True
    return body


def _read_mapping(path: str, expected: str, *, as_json: bool) -> dict[str, object]:
    """The YAML file ``path`` names, a mapping (exit 2 naming the file otherwise)."""
    import yaml  # only a command that names a file pays for reading it

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_FILE_BYTES + 1)
        if len(text) > MAX_FILE_BYTES:
            _fail("SpecError", BAD_INPUT, f"{path}: larger than {MAX_FILE_BYTES} bytes", as_json=as_json)
        doc = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        _fail("SpecError", BAD_INPUT, f"{path}: {exc}", as_json=as_json)
    if not isinstance(doc, dict):
        _fail("SpecError", BAD_INPUT, f"{path}: expected a mapping with {expected}", as_json=as_json)
    return {str(k): v for k, v in doc.items()}


def _request(server: str, method: str, path: str, token: str, body: object | None, *, as_json: bool) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 exchange with the service on a connection of its own (``Connection: close``):
    the status, the headers (lower-case names) and the body. Spoken over a socket here, not through
    ``http.client``: importing that (and the ``email`` package it parses headers with) was a fifth
    of a cold command's time."""
    import socket

    url = urlsplit(server)
    if server.startswith("unix:"):
        host = "localhost"
    elif url.scheme in ("http", "https") and url.hostname:
        host = url.hostname
    else:
        _fail("SpecError", BAD_INPUT, f"EXA_SERVER: expected http://HOST:PORT, https://HOST:PORT or unix:PATH (got {server!r})", as_json=as_json)
    try:
        payload = b"" if body is None else json.dumps(body).encode("utf-8")
    except (TypeError, ValueError) as exc:  # a YAML value JSON has no word for (a date, a set)
        _fail("SpecError", BAD_INPUT, f"the request cannot be sent as JSON: {exc}", as_json=as_json)
    head = [f"{method} {path} HTTP/1.1", f"Host: {_host(host, url.port)}", f"Authorization: Bearer {token}",
            "Connection: close", "Accept-Encoding: identity"]  # fmt: skip
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload
    try:
        if server.startswith("unix:"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(300)
            sock.connect(server[5:])
        else:
            sock = socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=300)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if url.scheme == "https":
            import ssl

            context = ssl.create_default_context(cafile=os.environ.get("EXA_SERVER_CA") or None)
            sock = context.wrap_socket(sock, server_hostname=url.hostname)
        with sock:
            sock.sendall(request)
            chunks, size = [], 0
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    _fail("StateUnreachable", UNREACHABLE, f"the placement service at {server} sent more than {MAX_ANSWER_BYTES >> 20} MiB: "
                          "not an answer of this service", as_json=as_json)  # fmt: skip
    except OSError as exc:
        _fail("StateUnreachable", UNREACHABLE, f"the placement service at {server} could not be reached: {exc}", as_json=as_json)
    answer = parse_response(b"".join(chunks))
    if answer is None:
        _fail("StateUnreachable", UNREACHABLE, f"the placement service at {server} sent no complete HTTP response", as_json=as_json)
    return answer


def _host(host: str, port: int | None) -> str:
    """The Host header's value (an IPv6 address in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None else f"{shown}:{port}"


def parse_response(raw: bytes) -> tuple[int, dict[str, str], bytes] | None:
    """An HTTP/1.1 response read to the connection's end: (status, headers by lower-case name,
    body: by its Content-Length, its chunks, or to the end); None when it is not a whole one."""
    head, sep, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    words = lines[0].split(" ", 2)
    if not sep or len(words) < 2 or not words[0].startswith("HTTP/1.") or not words[1].isdigit():
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            return None
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line, crlf, rest = rest.partition(b"\r\n")
            size_text = size_line.split(b";", 1)[0].strip()
            if not crlf or not size_text or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
                return None
            size = int(size_text, 16)
            if size == 0:
                break
            if len(rest) < size + 2:
                return None
            body += rest[:size]
            rest = rest[size + 2 :]
        return int(words[1]), headers, bytes(body)
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit() or len(rest) < int(length):
            return None
        rest = rest[: int(length)]
    return int(words[1]), headers, rest


def main(argv: Sequence[str], server: str) -> int:
    """Run ``argv`` (``hardware COMMAND ...``, or one of ``OTHER_COMMANDS``) against the service at ``server``."""
    as_json = "--json" in argv
    words = [w for w in argv if not w.startswith("-")]
    shown = " ".join(words[:2])
    command = words[1] if len(words) > 1 and words[0] == "hardware" and words[1] in COMMANDS else shown if shown in OTHER_COMMANDS else None
    if command is None:
        _fail("UsageError", BAD_INPUT, f"exa {shown or '(none)'} is not offered by the placement service (EXA_SERVER is set): it offers exa hardware "
              f"{', '.join(COMMANDS)}; exa {', exa '.join(OTHER_COMMANDS)}; unset EXA_SERVER to run it on this host's state", as_json=as_json)  # fmt: skip
    token = os.environ.get("EXA_TOKEN")
    if not token:
        _fail("SpecError", BAD_INPUT, "EXA_SERVER is set but EXA_TOKEN is not: exa tokens create makes a token", as_json=as_json)
    rest = list(argv)
    for word in words[:2]:
        rest.remove(word)
    args = _parser(command).parse_args(rest)
    query: dict[str, str] = {} if as_json else {"format": "text"}
    columns = os.environ.get("COLUMNS")
    if not as_json and columns and columns.isdigit() and not sys.stdout.isatty():
        query["columns"] = columns
    body: object | None = None
    if command == "place":
        method, path, body = "POST", "/v1/decisions", _place_body(args)
    elif command == "burst":
        if not args.allow_burst:
            _fail("SpecError", BAD_INPUT, "exa hardware burst: --allow-burst: bursting to cloud is opt-in: add --allow-burst", as_json=as_json)
        body = _place_body(args)
        workload = body.get("workload")
        body["workload"] = {**(workload if isinstance(workload, dict) else {}), "target": "cloud", "allow_burst": True}
        method, path = "POST", "/v1/decisions"
    elif command == "apply":
        body = {**_read_mapping(args.file, "pools:", as_json=as_json), "source": args.file}
        body.update({k: True for k in ("prune", "dry_run") if getattr(args, k)})
        method, path = "POST", "/v1/pools"
    elif command == "add-pool":
        method, path = "POST", f"/v1/pools/{quote(args.name, safe='')}"
        body = {o: getattr(args, o) for o, _ in _POOL_OPTIONS if getattr(args, o) not in (None, False)}
    elif command in _POOL_CHANGES:
        method, path = "POST", f"/v1/pools/{quote(args.name, safe='')}/{_POOL_CHANGES[command]}"
        body = {"dry_run": True} if args.dry_run else None
    elif command == "decisions":
        method, path = "GET", "/v1/decisions"
        query.update({k: str(v) for k, v in (("limit", args.limit), ("since", args.since), ("until", args.until), ("cursor", args.cursor)) if v is not None})
    elif command in ("pools", "quotas", "portable", "burst-events"):
        method, path = "GET", f"/v1/{command}"
        query.update({k: str(getattr(args, k)) for k in ("engine", "accelerator", "limit") if getattr(args, k, None) is not None})
    elif command == "accounting":
        method, path = "GET", f"/v1/decisions/{quote(args.id, safe='')}/accounting"
        query["hours"] = args.hours
    elif command in ("finops cost", "finops carbon"):
        method, path = "GET", f"/v1/finops/{command.split()[1]}"
        query.update({"hours": args.hours} if args.hours is not None else {})
    elif command == "audit verify":
        if args.checkpoint or args.key:
            _fail("SpecError", BAD_INPUT, "exa audit verify: --checkpoint and --key check the log against what you hold; run it where the state is "
                  "(unset EXA_SERVER), not through the service that keeps the log", as_json=as_json)  # fmt: skip
        method, path = "GET", "/v1/audit/verify"
    elif command == "pool":
        method, path = "GET", f"/v1/pools/{quote(args.name, safe='')}"
    elif command == "queue":
        method, path = "GET", "/v1/queue"
        if args.all:
            query["all"] = "true"
    elif command == "explain":
        method, path = "GET", f"/v1/decisions/{quote(args.id, safe='')}"
        if args.replay:
            query["replay"] = "true"
    elif command == "cancel":
        method, path = "POST", f"/v1/queue/{quote(args.id, safe='')}/cancel"
    else:
        method, path = "POST", f"/v1/decisions/{quote(args.id, safe='')}/{command}"
        body = {"lease": args.lease} if command == "renew" else None
    status, headers, raw = _request(server, method, path + ("?" + urlencode(query) if query else ""), token, body, as_json=as_json)
    text = raw.decode("utf-8", errors="replace")
    if status >= 400:
        try:
            problem = json.loads(text)
            name, code, detail = str(problem.get("error", "Error")), int(problem.get("exit_code", 1)), str(problem.get("detail", text))
        except ValueError:
            name, code, detail = "Error", 1, f"HTTP {status}: {text[:200]}"
        _fail(name, code, detail, as_json=as_json)
    if as_json and command == "decisions":  # as the command streams it: an array, a summary a line
        items = [json.dumps(item, sort_keys=True, ensure_ascii=False) for item in json.loads(text)["decisions"]]
        sys.stdout.write("[" + ("\n  " + ",\n  ".join(items) + "\n" if items else "") + "]\n")
    elif as_json:
        sys.stdout.write(json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(text)
    sys.stdout.flush()
    return int(headers.get("x-exa-exit-code", "0"))


def server_of(argv: list[str]) -> str | None:
    """The service ``--server URL`` names (taken out of ``argv``), else ``EXA_SERVER``, else None."""
    if "--server" in argv:
        at = argv.index("--server")
        if at + 1 >= len(argv):
            _fail("UsageError", BAD_INPUT, "--server needs a URL", as_json="--json" in argv)
        url = argv[at + 1]
        del argv[at : at + 2]
        return url
    return os.environ.get("EXA_SERVER") or None
