"""A stand-in for the Kubernetes Service in front of runyard: a port on 127.0.0.1 that
relays each connection to the server behind it.

    service = ServicePort()               # its address is known before the server starts
    server = agent_server(..., kubernetes={..., "job_api_url": service.url})
    service.route_to(server.url)          # from now on connections reach the server
    service.connections                   # how many came through it
    service.close()
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit


class ServicePort:
    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.connections = 0
        self._backend: tuple[str, int] | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="service-port", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def route_to(self, url: str) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self._backend = (parts.hostname, parts.port)

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            backend = self._backend
            if backend is None:  # no endpoint yet: as a Service without ready pods
                client.close()
                continue
            try:
                upstream = socket.create_connection(backend, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self.connections += 1
                self._open += [client, upstream]
            threading.Thread(target=_relay, args=(client, upstream), daemon=True).start()


def _relay(client: socket.socket, upstream: socket.socket) -> None:
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
