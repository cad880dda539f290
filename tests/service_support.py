"""The placement service as a real process for tests: ``exa hardware serve --listen`` started,
waited on until ``/healthz`` answers (a generous bound), called over HTTP (TCP, TLS or a Unix
socket) and stopped with SIGTERM."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import EXA, free_port, run_exa, shared_opa_env

START_S = 90.0  # how long a loaded machine may take to start the service


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


@dataclass
class Answer:
    status: int
    headers: Mapping[str, str]
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)


@dataclass
class Service:
    """One running service process: its home, environment, address and log."""

    home: Path
    env: dict[str, str]
    proc: subprocess.Popen[str]
    port: int | None = None
    socket_path: Path | None = None
    tls: ssl.SSLContext | None = None
    log: list[str] = field(default_factory=list)

    def connection(self, timeout: float = 60) -> http.client.HTTPConnection:
        if self.socket_path is not None:
            return _UnixConnection(str(self.socket_path), timeout)
        if self.tls is not None:
            return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=self.tls)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def call(self, method: str, path: str, token: str | None = None, body: object = None, *, raw: bytes | None = None,
             headers: Mapping[str, str] | None = None) -> Answer:  # fmt: skip
        sent = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        conn = self.connection()
        try:
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode("utf-8"))
        finally:
            conn.close()

    def exa(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_exa(self.home, *args, check=check, env=self.env)

    def token(self, project: str = "llm-pretraining", scope: str = "place,read") -> tuple[str, str]:
        made = json.loads(self.exa("tokens", "create", "--project", project, "--scope", scope, "--json").stdout)
        return made["token"], made["id"]

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=120)
        return self.proc.returncode, out


def start(home: Path, *args: str, env: Mapping[str, str] | None = None, unix: bool = False, tls: ssl.SSLContext | None = None,
          listen: str | None = None) -> Service:  # fmt: skip
    """``exa hardware serve --listen`` on a free loopback port (or a Unix socket in ``home``'s
    parent), answering ``/healthz`` when this returns."""
    full = {**os.environ, "EXA_HOME": str(home), "COLUMNS": "200", **shared_opa_env(), **(env or {})}
    home.parent.mkdir(parents=True, exist_ok=True)
    port = None
    path = None
    if listen is None:
        if unix:
            path = home.parent / "exa.sock"
            listen = f"unix:{path}"
        else:
            port = free_port()
            listen = f"127.0.0.1:{port}"
    proc = subprocess.Popen([str(EXA), "hardware", "serve", "--listen", listen, "--interval", "2s", *args], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=home.parent)  # fmt: skip
    service = Service(home, dict(env or {}), proc, port, path, tls)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the service exited {proc.returncode} at start:\n{proc.communicate()[0]}")
        try:
            if service.call("GET", "/healthz").status == 200:
                return service
        except OSError:
            pass
        time.sleep(0.2)
    service.stop(signal.SIGKILL)
    raise AssertionError(f"the service did not answer /healthz within {START_S:g} s")
