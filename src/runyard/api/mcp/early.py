"""``runyard mcp`` without a server answers ``initialize`` before it loads the MCP SDK.

Loading the SDK and the workspace's services takes about a second; desktop clients time
the handshake. So the command reads the client's first line itself (standard library
only, byte by byte so nothing past that line is taken from the SDK's reader), and when it
is a plain ``initialize`` request, writes the answer the SDK would give at once. The SDK
then gets the same line replayed first (so its connection is initialized exactly as if it
had answered) and its own answer to that id is dropped (:mod:`runyard.api.mcp.stdio`)::

    first = read_first_line(0)
    answered = answer_initialize(first, version, 1)   # the id answered, or None
    asyncio.run(serve_files(settings, version, Opening(first, answered)))

Anything else as a first line (a ping, a request of the 2026 protocol, a malformed
initialize) is left to the SDK alone, as before.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from typing import Any

INSTRUCTIONS = (
    "runyard runs typed research tasks in worker processes with durable records. Call "
    "list_installed_task_definitions (or read runyard://definitions/{task}) to see what can "
    "run, submit to start a task, wait_task to wait for it, then read its status, log and "
    "artifacts as tools or as resources (runyard://tasks/{task_id}/...)."
)
# what the SDK derives from the handlers build_mcp_server registers (a test compares them)
CAPABILITIES = {"resources": {"listChanged": False, "subscribe": False},
                "tools": {"listChanged": False}}  # fmt: skip
MAX_FIRST_LINE = 64 * 1024  # an initialize is a few hundred bytes
CLIENT_INFO_FIELDS = {"name", "version", "title", "description", "websiteUrl"}


@dataclass(frozen=True)
class Opening:
    """The client's first line as read before the SDK, and the id answered from it."""

    line: bytes = b""
    answered_id: int | str | None = None


def read_first_line(fd: int) -> bytes:
    """The bytes of ``fd`` up to and including the first newline (or EOF, or
    :data:`MAX_FIRST_LINE` bytes), read one at a time: whatever follows stays unread."""
    got = bytearray()
    while len(got) < MAX_FIRST_LINE:
        byte = os.read(fd, 1)
        got += byte
        if byte in (b"", b"\n"):
            break
    return bytes(got)


def answer_initialize(line: bytes, version: str, fd: int) -> int | str | None:
    """Write to ``fd`` the SDK's answer to ``line`` when it is an ``initialize`` request
    this module can answer as the SDK would; the request's id, else None (nothing written)."""
    request = plain_initialize(line)
    versions = handshake_versions()
    if request is None or not versions:
        return None
    asked = request["params"]["protocolVersion"]
    answer = {"jsonrpc": "2.0", "id": request["id"], "result": {
        "capabilities": CAPABILITIES, "instructions": INSTRUCTIONS,
        "protocolVersion": asked if asked in versions else versions[-1],
        "serverInfo": {"name": "runyard", "version": version},
    }}  # fmt: skip
    write_all(fd, (json.dumps(answer, ensure_ascii=False, separators=(",", ":")) + "\n").encode())
    return request["id"]


def plain_initialize(line: bytes) -> dict[str, Any] | None:
    """``line`` as a JSON-RPC ``initialize`` request whose parameters the SDK is sure to
    accept (the fields and types of its model, nothing else); None otherwise."""
    if not line.endswith(b"\n"):
        return None
    try:
        request = json.loads(line)
    except ValueError:
        return None
    if not isinstance(request, dict) or set(request) != {"jsonrpc", "id", "method", "params"}:
        return None
    ident, params = request["id"], request["params"]
    if request["jsonrpc"] != "2.0" or request["method"] != "initialize":
        return None
    if isinstance(ident, bool) or not isinstance(ident, (int, str)):
        return None
    return request if plain_params(params) else None


def plain_params(params: Any) -> bool:
    if not isinstance(params, dict) or set(params) != {"protocolVersion", "capabilities",
                                                       "clientInfo"}:  # fmt: skip
        return False
    info, capabilities = params["clientInfo"], params["capabilities"]
    return (
        isinstance(params["protocolVersion"], str)
        and isinstance(capabilities, dict)
        and plain_capabilities(capabilities)
        and isinstance(info, dict)
        and {"name", "version"} <= set(info) <= CLIENT_INFO_FIELDS
        and all(isinstance(value, str) for value in info.values())
    )


def plain_capabilities(tree: Any) -> bool:
    """Nested objects only, with ``listChanged`` flags as their only values: every
    capability of the SDK's model takes that shape, so it cannot refuse one."""
    return isinstance(tree, dict) and all(
        isinstance(value, bool) if key == "listChanged" else plain_capabilities(value)
        for key, value in tree.items()
    )


def handshake_versions() -> tuple[str, ...]:
    """The protocol versions the installed SDK negotiates by ``initialize``, read from its
    ``mcp_types/version.py`` alone (the package itself takes a tenth of a second to
    import); empty when that cannot be read, and then the SDK answers."""
    try:
        package = importlib.util.find_spec("mcp_types")
        folders = list(package.submodule_search_locations or []) if package else []
        path = os.path.join(folders[0], "version.py")
        spec = importlib.util.spec_from_file_location("_runyard_mcp_versions", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return tuple(module.HANDSHAKE_PROTOCOL_VERSIONS)
    except Exception:  # noqa: BLE001 - any SDK layout we do not know: no early answer
        return ()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
