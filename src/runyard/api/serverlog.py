"""The server log: ``<log_dir>/server.log``, rotated, with access lines and errors.

One line per request (``runyard.access``)::

    2026-11-29T14:50:01.123Z INFO runyard.access: 127.0.0.1 "GET /jobs/status" 200 3.1ms

and everything the server logs at or above ``log_level`` (``debug``, ``info``, ``warning``,
``error``), errors with their tracebacks. The file rotates at 10 MiB and keeps 5 old ones
(``server.log.1`` … ``server.log.5``). Warnings and errors also go to standard error, as
before.

Secrets never reach the log: uvicorn's own access line (which carries the whole query
string) is off; an access line keeps a query parameter's name but drops the value of any
that can carry a credential (``token``, ``access_token``, …); and a filter on every
handler blanks bearer credentials, ``token=`` values (query or ``#token=`` fragment),
authorization values and the server's own token wherever they appear, tracebacks
included.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
from collections.abc import Iterable
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from runyard.workspace.space import is_space_error

LOG_FILE = "server.log"
MAX_BYTES = 10 * 1024 * 1024
BACKUPS = 5
LEVELS = ("debug", "info", "warning", "error")
REDACTED = "[redacted]"
# query parameters whose values are credentials (compared lower-case)
SECRET_PARAMS = frozenset({"token", "access_token", "api_key", "apikey", "key", "password"})
# libraries that log every request or file change at INFO: only their warnings are kept
QUIET = ("watchfiles", "httpx", "httpcore", "multipart", "python_multipart", "asyncio")
_PATTERNS = (
    re.compile(r"(?i)\b(bearer\s+)[^\s\"',;]+"),
    re.compile(r"(?i)((?:[?&#;]|%23)\s*(?:access_)?token=)[^&\s\"'#]*"),
    re.compile(
        r"(?i)(\bauthorization[\"']?\s*[:=,]\s*[\"']?(?:(?:bearer|basic|token|digest)\s+)?)"
        r"[^\s\"',}]+"
    ),
    re.compile(r"(?i)(\b(?:x-)?api[-_]?key[\"']?\s*[:=,]\s*[\"']?)[^\s\"',}]+"),
)
access_log = logging.getLogger("runyard.access")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without credentials: known ``secrets`` and anything shaped like one."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (and its traceback) with :func:`redact`."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage(), self.secrets)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        return True


class _UtcFormatter(logging.Formatter):
    """Times in UTC, ISO 8601 with milliseconds and a ``Z``, as everywhere in runyard."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


class _RotatingLog(RotatingFileHandler):
    """RotatingFileHandler that formats each line once (the standard one formats it for its
    size check and again to write it) and looks at what the log path is (two stats of
    the path, a line's largest cost) only when the size says it is time to roll over."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
        self._last: tuple[logging.LogRecord, str] | None = None
        self._dropped = 0  # lines a full disk refused since the last one written

    def format(self, record: logging.LogRecord) -> str:
        if self._last is not None and self._last[0] is record:
            return self._last[1]
        text = super().format(record)
        self._last = (record, text)
        return text

    def emit(self, record: logging.LogRecord) -> None:
        try:
            super().emit(record)
            if self._dropped and self.stream is not None:
                note = f"{self._dropped} log lines before this one were lost: the disk was full"
                self._dropped = 0
                super().emit(logging.makeLogRecord({"name": "runyard.api", "msg": note,
                                                    "levelno": logging.WARNING,
                                                    "levelname": "WARNING"}))  # fmt: skip
        finally:
            self._last = None

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802
        """A full disk drops the line (counted, told once on standard error, noted in the
        log when it writes again) instead of a traceback for every line."""
        if not is_space_error(sys.exc_info()[1]):
            super().handleError(record)
            return
        stream, self.stream = self.stream, None  # reopened for the next line
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()  # its buffered part is lost with the line
        self._dropped += 1
        if self._dropped == 1:
            sys.stderr.write(f"warning: {self.baseFilename}: the disk is full; log lines are "
                             "lost until space is freed\n")  # fmt: skip

    def shouldRollover(self, record: logging.LogRecord) -> bool:  # noqa: N802
        if self.stream is None:
            self.stream = self._open()
        if self.maxBytes <= 0:
            return False
        try:
            self.stream.seek(0, 2)
            size = self.stream.tell()
        except OSError:  # a pipe: nothing to roll over
            return False
        if size + len(f"{self.format(record)}\n") < self.maxBytes:
            return False
        # never roll over anything but a regular file (/dev/null, a pipe): as the standard one
        return not os.path.exists(self.baseFilename) or os.path.isfile(self.baseFilename)


# uvicorn's loggers: a logging config applied earlier in this process (uvicorn's default one
# gives "uvicorn" a handler of its own and stops propagation) must not bypass server.log
UVICORN = ("uvicorn", "uvicorn.error", "uvicorn.access")


def configure(log_dir: Path, level: str, secrets: Iterable[str] = ()) -> Path:
    """Send the process's logging to ``<log_dir>/server.log`` (rotated) at ``level``, and
    warnings and errors to standard error; returns the log file's path."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / LOG_FILE
    scrub = RedactingFilter(secrets)
    to_file = _RotatingLog(path)
    to_file.setFormatter(_UtcFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    to_stderr = logging.StreamHandler(sys.stderr)
    to_stderr.setLevel(logging.WARNING)
    to_stderr.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for handler in (to_file, to_stderr):
        handler.addFilter(scrub)
        root.addHandler(handler)
    root.setLevel(level.upper())
    for name in UVICORN:  # their lines go through the root's handlers (and its redaction) only
        own = logging.getLogger(name)
        for stale in own.handlers[:]:
            own.removeHandler(stale)
        own.propagate = True
        own.setLevel(logging.NOTSET)
    for name in QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    return path


def safe_target(scope: dict[str, Any]) -> str:
    """The request's path and query, with the values of credential parameters dropped."""
    path = quote(scope.get("path", ""), safe="/:@!$&'()*+,;=-._~%")
    raw = scope.get("query_string", b"").decode("latin-1")
    if not raw:
        return path
    pairs = parse_qsl(raw, keep_blank_values=True)
    shown = [
        f"{quote(name)}={REDACTED if name.lower() in SECRET_PARAMS else quote(value)}"
        for name, value in pairs
    ]
    return f"{path}?{'&'.join(shown)}"


class AccessLog:
    """ASGI middleware: one ``runyard.access`` line per HTTP request when it ends —
    client, method, path (see :func:`safe_target`), status and duration."""

    def __init__(self, app: Any, channel: str = "") -> None:
        self.app = app
        self.channel = channel

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not access_log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]  # what the client gets when the app raises before it answers

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self._line(scope, status[0], time.perf_counter() - started)

    def _line(self, scope: dict[str, Any], status: int, seconds: float) -> None:
        client = scope.get("client")
        who = client[0] if client else (self.channel or "-")
        method = scope.get("method", "-")
        access_log.info('%s "%s %s" %d %.1fms', who, method, safe_target(scope), status,
                        seconds * 1000)  # fmt: skip
