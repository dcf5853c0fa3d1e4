"""A test agent that looks for a way out of its sandbox: it opens a TCP connection to the
host port its prompt names (``connect PORT``), lists the network interfaces it sees, and
records its environment. Results go to out/net.json."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

WORKSPACE = Path(os.environ["RUNYARD_WORKSPACE"])
CONTEXT = json.loads(Path(os.environ["RUNYARD_CONTEXT"]).read_text(encoding="utf-8"))


def connect(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as conn:
            conn.sendall(b"out of the sandbox\n")
    except OSError as exc:
        return f"failed: {exc.__class__.__name__}: {exc}"
    return "connected"


def main() -> None:
    port = int(CONTEXT["userPrompt"].split()[-1])
    found = {
        "connect": connect(port),
        "interfaces": sorted(name for _, name in socket.if_nameindex()),
        "env": dict(os.environ),
    }
    (WORKSPACE / "out" / "net.json").write_text(json.dumps(found), encoding="utf-8")
    (WORKSPACE / "out" / "final-answer.md").write_text(found["connect"], encoding="utf-8")


if __name__ == "__main__":
    main()
