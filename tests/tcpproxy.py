"""A loopback TCP proxy in front of a real server, for tests of what a client does when a
connection breaks: it counts the connections, closes them all on demand (as a server
closes idle ones, or a restart does), and can cut the first one after a number of bytes
of the server's answer (the rest of that answer is lost)."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    def __init__(self, upstream_port: int, *, cut_first_after: int | None = None) -> None:
        self.upstream_port = upstream_port
        self.cut_first_after = cut_first_after
        self.connections = 0
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self.lock:
                self.connections += 1
                limit = self.cut_first_after if self.connections == 1 else None
                self.open += [downstream, upstream]
            for pipe in ((downstream, upstream, None), (upstream, downstream, limit)):
                threading.Thread(target=self._pipe, args=pipe, daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket, limit: int | None) -> None:
        sent = 0
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if limit is not None and sent + len(data) > limit:
                    sink.sendall(data[: limit - sent])
                    break
                sink.sendall(data)
                sent += len(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close_all(self) -> None:
        """Close every connection made so far."""
        with self.lock:
            sockets, self.open = self.open, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def stop(self) -> None:
        self.listener.close()
        self.close_all()
