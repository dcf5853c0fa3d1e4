"""``list_machines``: each configured ``targets`` entry asked for its ``machine_status``, all
at once, each within ``machine_check_timeout_seconds``.

A target is healthy when it answers 200 with ``success: true`` and an answer that is a
machine status in AxonX's shape (a runyard or an AxonX service both do); anything else —
refused connection, silence, a slow trickle, a refusal of its token, an answer too big or
of another shape — is unhealthy, and the reason is logged, not answered. A target's answer
is untrusted input: read only up to ``MAX_STATUS_BYTES``, parsed with the depth limit of
request bodies, redirects not followed (its token goes to its own address only).

Asking ``machine_status`` rather than ``list_machines`` keeps two servers that list each
other from asking each other in a loop. ``address`` is the target's URL without any
user-info, query or fragment, which could hold a credential.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from runyard.api.jsonbody import MAX_DEPTH, parse_json_body
from runyard.config import Target
from runyard.machine.models import MachineHealth, MachineInfo
from runyard.tls import client_verify

log = logging.getLogger(__name__)

MAX_STATUS_BYTES = 1 << 20  # a status is about 300 bytes a GPU


class NotHealthy(Exception):
    """Why a target's answer does not count as a machine status."""


async def check_targets(targets: dict[str, Target], timeout: float) -> list[MachineHealth]:
    """One row per target, in configuration order, once every check has ended."""
    checks = (check_target(name, target, timeout) for name, target in targets.items())
    return list(await asyncio.gather(*checks))


async def check_target(name: str, target: Target, timeout: float) -> MachineHealth:
    address = public_address(name, target.url)
    try:
        await asyncio.wait_for(_ask_status(target, timeout), timeout)
    except TimeoutError:
        log.warning("machine %s (%s): no machine status within %gs", name, address, timeout)
        return MachineHealth(address=address, healthy=False)
    except Exception as exc:  # whatever one target does, it is that target's row alone
        log.warning("machine %s (%s) is unhealthy: %r", name, address, exc)
        return MachineHealth(address=address, healthy=False)
    return MachineHealth(address=address, healthy=True)


def public_address(name: str, url: str) -> str:
    """``url`` without user-info, query and fragment; the target's name where the URL does
    not parse (it is shown, and it must never show a password)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return name
    if not parsed.host:
        return name
    return str(parsed.copy_with(userinfo=b"", query=None, fragment=None))


async def _ask_status(target: Target, timeout: float) -> MachineInfo:
    url = target.url.rstrip("/")
    headers = {"authorization": f"Bearer {target.token}"} if target.token else {}
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=timeout, verify=client_verify(url)
    ) as client:
        request = client.build_request("POST", "/jobs/machine_status", json={"arguments": {}})
        reply = await client.send(request, stream=True)
        try:
            body = await _bounded_body(reply)
        finally:
            await reply.aclose()
    if reply.status_code != 200:
        raise NotHealthy(f"machine_status answered HTTP {reply.status_code}")
    return _status_of(parse_json_body(body, max_depth=MAX_DEPTH))


async def _bounded_body(reply: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in reply.aiter_bytes():
        body += chunk
        if len(body) > MAX_STATUS_BYTES:
            raise NotHealthy(f"machine_status answered more than {MAX_STATUS_BYTES} bytes")
    return bytes(body)


def _status_of(envelope: object) -> MachineInfo:
    if not isinstance(envelope, dict) or envelope.get("success") is not True:
        raise NotHealthy("machine_status did not succeed")
    return MachineInfo.model_validate(envelope.get("answer"))
