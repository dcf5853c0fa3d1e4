"""The ``verify`` of runyard's HTTP clients: nothing to build for a server on plain http.

httpx builds a verifying TLS context, its CA bundle loaded, for every client it makes:
about 16 ms of CPU, far more than a call to a local server costs (and every CLI command
makes a client). A client of an ``http://`` server never opens a TLS connection (it follows
no redirect, and every request goes to its own server), so it gets one context, made once
a process, that trusts no certificate at all: should a TLS connection ever be tried, it
fails. A client of an ``https://`` server verifies as httpx does by default.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # ssl loads with the client's transport, not with this module
    import ssl


def client_verify(url: str) -> ssl.SSLContext | bool:
    """What to pass as ``verify`` to the httpx client of a server at ``url``."""
    if url.lower().startswith("https://"):
        return True
    return _trusting_nothing()


@functools.cache
def _trusting_nothing() -> ssl.SSLContext:
    import ssl

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # hostnames checked, certificates required
