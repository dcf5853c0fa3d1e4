"""The server's own installation: where it came from, updates by pip, and update records.

    installed()                      # {"name": "runyard", "version": "…", "source": "editable", …}
    record = updates.install("pip", ["runyard"], timeout=600)   # pip --upgrade, its output kept
    updates.status(None)             # the latest record and its log's tail

``installed`` reads PEP 610's ``direct_url.json`` of the runyard distribution: no such
file is an install from an index; else its ``dir_info`` (``editable``: an editable
checkout, else a local folder), ``vcs_info`` (a VCS checkout, with its commit) or
``archive_info`` (a wheel or sdist file or URL).

Each update has a record in ``<workspace>/.runyard/updates/<update_id>/record.json``
(AxonX's fields: ``update_id``, ``mode``, ``phase``, ``error``, ``created_at``,
``updated_at``, ``before``, ``after``, ``commit``) and the command's output in
``update.log`` beside it. pip runs as ``sys.executable -m pip``, so it installs into the
server's own environment, in its own session, killed with its group at ``timeout``. One
update runs at a time. An installed update takes effect at the next start
(``restart_service``): the record says ``restart_required``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from runyard.errors import NoSuchFile, UpdateBusy

DISTRIBUTION = "runyard"
LOG_TAIL_BYTES = 65536
UPDATE_ID = re.compile(r"^[0-9a-f]{32}$")


def installed() -> dict[str, Any]:
    """The installed runyard: version, source and the interpreter it runs under."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return {"name": DISTRIBUTION, "version": None, "source": "unknown", "url": None,
                "commit": None, "python": sys.executable}  # fmt: skip
    direct = _direct_url(dist)
    return {
        "name": DISTRIBUTION,
        "version": dist.version,
        "source": _source(direct),
        "url": direct.get("url"),
        "commit": direct.get("vcs_info", {}).get("commit_id"),
        "python": sys.executable,
    }


def _direct_url(dist: metadata.Distribution) -> dict[str, Any]:
    text = dist.read_text("direct_url.json")
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _source(direct: dict[str, Any]) -> str:
    if not direct:
        return "index"
    if "vcs_info" in direct:
        return "vcs"
    if "archive_info" in direct:
        return "archive"
    if direct.get("dir_info", {}).get("editable"):
        return "editable"
    return "directory" if "dir_info" in direct else "unknown"


def versions() -> dict[str, str | None]:
    try:
        return {DISTRIBUTION: metadata.version(DISTRIBUTION)}
    except metadata.PackageNotFoundError:
        return {DISTRIBUTION: None}


def pip_argv(requirement: str) -> list[str]:
    """pip, of this interpreter, upgrading ``requirement``; never a prompt."""
    return [sys.executable, "-m", "pip", "install", "--upgrade", "--no-input", requirement]


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Updates:
    """The update records of one workspace, and the one update that may run at a time."""

    def __init__(self, workspace_dir: Path) -> None:
        self.folder = Path(workspace_dir) / ".runyard" / "updates"
        self._running = threading.Lock()

    @property
    def busy(self) -> bool:
        """Whether an update's pip is running now."""
        return self._running.locked()

    def new_record(self, mode: str) -> tuple[dict[str, Any], Path]:
        update_id = uuid.uuid4().hex
        folder = self.folder / update_id
        folder.mkdir(parents=True, mode=0o700)
        record = {
            "update_id": update_id, "mode": mode, "phase": "accepted", "error": None,
            "created_at": _now(), "before": versions(), "after": None, "commit": None,
        }  # fmt: skip
        path = folder / "record.json"
        save(path, record)
        return record, path

    def install(self, mode: str, requirement: str, timeout: float) -> dict[str, Any]:
        """Run pip for ``requirement``; the settled record (``phase`` succeeded or failed)."""
        if not self._running.acquire(blocking=False):
            raise UpdateBusy("An update is already running; ask get_update_status for it")
        try:
            record, path = self.new_record(mode)
            record["phase"] = "installing"
            save(path, record)
            error = _run_logged(pip_argv(requirement), path.with_name("update.log"), timeout)
            record.update(
                phase="failed" if error else "succeeded", error=error, after=versions(),
                restart_required=error is None,
            )  # fmt: skip
            save(path, record)
            return record
        finally:
            self._running.release()

    def status(self, update_id: str | None) -> dict[str, Any]:
        """AxonX's answer: one update's record (the latest without ``update_id``) and the
        tail of its log; ``{"record": None, "log": ""}`` when there is none."""
        if update_id is None:
            paths = sorted(self.folder.glob("*/record.json"), key=lambda p: p.stat().st_mtime_ns)
            if not paths:
                return {"record": None, "log": ""}
            path = paths[-1]
        else:
            if not UPDATE_ID.match(update_id):  # the job's schema checks it too: never a path
                raise ValueError("update_id must be 32 lowercase hex digits")
            path = self.folder / update_id / "record.json"
            if not path.is_file():
                raise NoSuchFile(f"updates/{update_id}/record.json", "no such update")
        record = json.loads(path.read_text(encoding="utf-8"))
        return {"record": record, "log": _tail(path.with_name("update.log"))}


def save(path: Path, record: dict[str, Any]) -> None:
    """Replace the record atomically."""
    record["updated_at"] = _now()
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(record, indent=2), encoding="utf-8")
    os.replace(temporary, path)


def _run_logged(argv: list[str], log_path: Path, timeout: float) -> str | None:
    """Run ``argv`` with its output in ``log_path``; None, or why it failed."""
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        env = {**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=env,
        )  # fmt: skip
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _kill_group(proc.pid)  # whatever pip left behind, or pip itself at its timeout
            proc.wait()
    if code is None:
        return f"pip did not finish in {timeout:g} s and was killed; see the log"
    return None if code == 0 else f"pip exited with code {code}; see the log"


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as stream:
            stream.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
            return stream.read(LOG_TAIL_BYTES).decode(errors="replace")
    except FileNotFoundError:
        return ""
