"""The TLS settings of runyard's HTTP clients: a client of an ``http://`` server builds no
CA bundle (about 16 ms a client), and the context it has instead trusts no certificate,
so a TLS connection tried through it fails; an ``https://`` server is verified as httpx
verifies by default."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runyard.client import AsyncClient, Client
from runyard.tls import client_verify


def test_an_http_server_gets_one_context_that_trusts_nothing() -> None:
    context = client_verify("http://127.0.0.1:8765")
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname is True
    assert context.cert_store_stats()["x509_ca"] == 0  # not one trusted certificate
    assert client_verify("http://example.org") is context  # made once a process
    assert client_verify("https://example.org") is True
    assert client_verify("HTTPS://EXAMPLE.ORG") is True


def test_clients_of_an_http_server_load_no_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []
    real = ssl.create_default_context

    def create_default_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        loads.append("trusted certificates")  # httpx's verify=True, in every branch
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", create_default_context)
    Client("http://127.0.0.1:1", "token").close()
    AsyncClient("http://127.0.0.1:1", "token")
    assert loads == []
    Client("https://127.0.0.1:1", "token").close()
    assert loads == ["trusted certificates"]


@pytest.fixture()
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on 127.0.0.1 with a self-signed certificate: its URL and the cert."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)  # so the loop sees ``stop``
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(10)
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(65536)
                    tls.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            except (OSError, ssl.SSLError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{listener.getsockname()[1]}", cert
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.mark.openssl
def test_a_tls_connection_tried_through_it_fails(tls_server: tuple[str, Path]) -> None:
    url, cert = tls_server
    untrusting = httpx.Client(verify=client_verify("http://127.0.0.1"), timeout=10)
    with untrusting, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        untrusting.get(url)
    trusting = ssl.create_default_context(cafile=str(cert))  # the same server, trusted
    with httpx.Client(verify=trusting, timeout=10) as http:
        assert http.get(url).text == "ok"
