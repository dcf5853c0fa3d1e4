"""``<log_dir>/server.log``: access lines and errors, rotated, and never a token."""

from __future__ import annotations

import logging
import logging.config
import os
import re
import threading
import time
from collections.abc import Iterator
from logging.handlers import RotatingFileHandler
from pathlib import Path

import httpx
import pytest
import uvicorn.config

from runyard.api import serverlog
from serverproc import start_server

ACCESS = re.compile(
    r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO runyard\.access: (\S+) "(\S+) (\S+)" '
    r"(\d{3}) (\d+\.\d)ms$"
)


def wait_for_line(path: Path, needle: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if needle in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{needle!r} never reached {path}:\n{text}")


def access_lines(text: str) -> list[tuple[str, ...]]:
    return [m.groups() for line in text.splitlines() if (m := ACCESS.match(line))]


def test_requests_are_logged_and_no_token_is(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv")
    token = server.token or ""
    log = server.log_dir / "server.log"
    try:
        with server.client() as client:
            assert client.post("/jobs/status", json={"arguments": {"task_id": "base#demo#no"}})
            # a token in the query string, in a fragment-like path, and a wrong bearer
            client.get(f"/api/v1/sessions?limit=5&token={token}")
            client.get(f"/studio/x%23token={token}")
        wrong = "wrong-bearer-value-5f2a"
        httpx.get(server.url + "/api/v1/sessions", headers={"authorization": f"Bearer {wrong}"})
        httpx.get(server.url + f"/api/v1/sessions?access_token={token}", timeout=10)
        text = wait_for_line(log, "access_token=")
    finally:
        server.stop()
    lines = access_lines(text)
    assert ("127.0.0.1", "POST", "/jobs/status", "200") in [line[:4] for line in lines], text
    assert ("127.0.0.1", "GET", "/api/v1/sessions", "401") in [line[:4] for line in lines]
    targets = [line[2] for line in lines]
    assert "/api/v1/sessions?limit=5&token=[redacted]" in targets, targets
    assert "/api/v1/sessions?access_token=[redacted]" in targets, targets
    assert token not in text and wrong not in text
    # the server's own lines land there too
    assert f"INFO uvicorn.error: Started server process [{server.proc.pid}]" in text


def test_log_level_warning_drops_the_access_lines(tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv", config={"log_level": "warning"})
    try:
        with server.client() as client:
            assert client.get("/health").status_code == 200
    finally:
        server.stop()
    log = server.log_dir / "server.log"
    assert log.exists() and access_lines(log.read_text()) == []


@pytest.fixture
def root_logging() -> Iterator[None]:
    """configure() sets up this process's logging: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(level)


def test_errors_keep_their_traceback_without_the_secrets(
    tmp_path: Path, root_logging: None
) -> None:
    secret = "s3cr3t-server-token-value"
    # what an in-process uvicorn leaves behind ("uvicorn" with its own handler, propagation
    # off): server.log must still get uvicorn's error lines
    logging.config.dictConfig(uvicorn.config.LOGGING_CONFIG)
    path = serverlog.configure(tmp_path, "info", [secret])
    try:
        raise RuntimeError(f"call failed with Authorization: Bearer {secret} and ?token=abc123")
    except RuntimeError:
        logging.getLogger("uvicorn.error").exception("Exception in ASGI application")
    for handler in logging.getLogger().handlers:
        handler.flush()
    text = path.read_text()
    assert "ERROR uvicorn.error: Exception in ASGI application" in text
    assert "Traceback (most recent call last)" in text and "RuntimeError: call failed" in text
    assert secret not in text and "abc123" not in text
    assert "Bearer [redacted]" in text and "?token=[redacted]" in text


def test_the_log_rotates(tmp_path: Path, root_logging: None) -> None:
    path = serverlog.configure(tmp_path, "info")
    handlers = logging.getLogger().handlers
    handler = next(h for h in handlers if isinstance(h, RotatingFileHandler))
    assert (handler.maxBytes, handler.backupCount) == (10 * 1024 * 1024, 5)
    handler.maxBytes = 2048
    for n in range(100):
        logging.getLogger("runyard.test").info("line %d %s", n, "x" * 100)
    handler.flush()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "server.log",
        *[f"server.log.{n}" for n in range(1, 6)],
    ]
    assert path.stat().st_size <= 2048


def test_a_log_path_that_is_no_regular_file_never_rolls_over(
    tmp_path: Path, root_logging: None
) -> None:
    (tmp_path / "server.log").symlink_to("/dev/null")
    serverlog.configure(tmp_path, "info")
    handlers = logging.getLogger().handlers
    handler = next(h for h in handlers if isinstance(h, RotatingFileHandler))
    handler.maxBytes = 50  # every line alone is over the size
    for n in range(10):
        logging.getLogger("runyard.test").info("line %d %s", n, "x" * 100)
    assert [p.name for p in tmp_path.iterdir()] == ["server.log"]
    assert (tmp_path / "server.log").is_symlink()


def test_a_log_path_that_is_a_pipe_gets_every_line(
    tmp_path: Path, root_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(tmp_path / "server.log")
    read: list[bytes] = []

    def drain() -> None:
        with (tmp_path / "server.log").open("rb") as pipe:
            read.append(pipe.read())

    reader = threading.Thread(target=drain)
    reader.start()
    serverlog.configure(tmp_path, "info")
    handlers = logging.getLogger().handlers
    handler = next(h for h in handlers if isinstance(h, RotatingFileHandler))
    handler.maxBytes = 50
    for n in range(5):
        logging.getLogger("runyard.test").info("line %d %s", n, "x" * 100)
    logging.getLogger().removeHandler(handler)
    handler.close()
    reader.join(10)
    assert [line.split(": ", 1)[1] for line in read[0].decode().splitlines()] == [
        f"line {n} {'x' * 100}" for n in range(5)
    ]
    assert "Logging error" not in capsys.readouterr().err


class CountingFormatter(logging.Formatter):
    calls = 0

    def format(self, record: logging.LogRecord) -> str:
        CountingFormatter.calls += 1
        return super().format(record)


def test_each_line_is_formatted_once(tmp_path: Path, root_logging: None) -> None:
    path = serverlog.configure(tmp_path, "info")
    handlers = logging.getLogger().handlers
    handler = next(h for h in handlers if isinstance(h, RotatingFileHandler))
    handler.setFormatter(CountingFormatter("%(name)s %(message)s"))
    handler.maxBytes = 2048
    for n in range(40):
        logging.getLogger("runyard.test").info("line %d %s", n, "x" * 100)
    handler.flush()
    assert CountingFormatter.calls == 40
    assert path.read_text().splitlines()[-1] == f"runyard.test line 39 {'x' * 100}"
    assert (tmp_path / "server.log.1").exists()  # the size check still saw every line


def test_access_targets_drop_credential_values() -> None:
    scope = {"path": "/api/v1/sessions", "query_string": b"limit=5&token=abc&Access_Token=d%20f&x="}
    target = serverlog.safe_target(scope)
    assert target == "/api/v1/sessions?limit=5&token=[redacted]&Access_Token=[redacted]&x="
    # a '#' in a decoded path stays escaped: it cannot pose as a fragment
    assert serverlog.safe_target({"path": "/a#token=xyz"}) == "/a%23token=xyz"


def test_credentials_are_blanked_without_knowing_them() -> None:
    text = (
        'GET /?token=t1 "/#token=t2" Authorization: Bearer t3 {"authorization": "Basic t4"} '
        "url;token=t5 x-api-key=t6"
    )
    clean = serverlog.redact(text)
    assert not re.search(r"t[1-6]\b", clean), clean
    assert serverlog.redact("plain 200 /jobs/status") == "plain 200 /jobs/status"
