"""The client's reading of an HTTP/1.1 response (``service.client.parse_response``): what the service
sends (a Content-Length body), chunks, a body to the connection's end, and what is not a whole
response (cut short, no head, a bad chunk), which the client calls unreachable rather than half-read."""

from __future__ import annotations

import socket
import threading

import pytest

from examlops_policy.service import client
from examlops_policy.service.client import parse_response


def test_a_body_of_its_content_length() -> None:
    raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 2\r\nX-Exa-Exit-Code: 3\r\n\r\n{}"
    assert parse_response(raw) == (200, {"content-type": "application/json", "content-length": "2", "x-exa-exit-code": "3"}, b"{}")


def test_chunks_and_a_body_to_the_end() -> None:
    chunked = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nabcd\r\nA\r\n0123456789\r\n0\r\n\r\n"
    assert parse_response(chunked) == (404, {"transfer-encoding": "chunked"}, b"abcd0123456789")
    assert parse_response(b"HTTP/1.0 200 OK\r\n\r\nto the end") == (200, {}, b"to the end")


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # cut short
        b"HTTP/1.1 200 OK\r\nContent-Length: 2",  # no end of the head
        b"SSH-2.0-OpenSSH\r\n\r\n",  # not HTTP
        b"HTTP/1.1 OK\r\n\r\n",  # no status
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nab",  # a chunk cut short
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # not a size
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n",  # no last chunk
    ],
)
def test_what_is_not_a_whole_response_is_none(raw: bytes) -> None:
    assert parse_response(raw) is None


def _serving(answer: bytes) -> tuple[str, threading.Thread]:
    """A server on a loopback port that reads one request and sends ``answer``, then closes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", thread


def test_an_answer_cut_short_or_too_large_is_exit_12(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    server, thread = _serving(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
    with pytest.raises(SystemExit) as cut:
        client._request(server, "GET", "/v1/pools", "t", None, as_json=False)
    thread.join(5)
    assert cut.value.code == client.UNREACHABLE and "sent no complete HTTP response" in capsys.readouterr().err
    monkeypatch.setattr(client, "MAX_ANSWER_BYTES", 1000)
    server, thread = _serving(b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 70_000)
    with pytest.raises(SystemExit) as large:
        client._request(server, "GET", "/v1/pools", "t", None, as_json=False)
    thread.join(5)
    assert large.value.code == client.UNREACHABLE and "not an answer of this service" in capsys.readouterr().err
    server, thread = _serving(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Exa-Exit-Code: 0\r\n\r\n{}")
    assert client._request(server, "POST", "/v1/decisions", "t", {"a": 1}, as_json=False) == (200, {"content-length": "2", "x-exa-exit-code": "0"}, b"{}")
    thread.join(5)
