"""Disk quotas of agent runs: what a run and its tasks hold on disk, checked while they run.

    quotas = DiskQuotas(limit_bytes, accounts, over_quota)
    quotas.start()        # one thread: every account walked about once a second
    quotas.stop()

An *account* is one agent run: its ``out/`` and ``tmp/``, its session's ``state/`` (while
the run runs) and the folders of the tasks it submitted (while any of them runs). Its usage
is what those folders hold on disk: the allocated blocks (``st_blocks * 512``) of every
file, folder and symlink, each inode counted once however many names it has, so a sparse
file counts what it allocates and a hard link nothing more. No privileges are needed and
nothing is asked of the filesystem: the folders are walked. Over ``limit_bytes``,
``over_quota(account, message)`` stops the run and its tasks.

Granularity: accounts are walked one after the other, then the thread waits a second, or
four times as long as the walk took, whichever is longer (a walk of a million files costs
its CPU at most a fifth of a core). A run therefore writes at most what it can write in
that interval plus a walk past its limit before it is stopped: at the disk's speed, a few
hundred megabytes on a fast disk, a second's worth of writes when the walk is short.

The walk opens each folder relative to its parent with ``O_NOFOLLOW``, so a run that swaps
a folder for a symlink mid-walk cannot point it elsewhere. A folder the walk cannot read (a
run may take its own permissions away) or that is nested deeper than :data:`MAX_DEPTH` is
a usage the server cannot vouch for: the account is over quota with that reason.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from runyard.agents.runs import DISK_QUOTA

__all__ = ["Account", "DiskQuotas", "Usage", "allocated_bytes"]

log = logging.getLogger(__name__)
CHECK_SECONDS = 1.0
WALK_SHARE = 4  # wait at least this many times as long as the last walk took
MAX_DEPTH = 256
MIB = 1 << 20
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)  # removed or swapped meanwhile: skipped


@dataclass
class Account:
    """One agent run's quota: ``folders`` it may write (missing ones count nothing)."""

    run_id: str
    folders: list[Path] = field(default_factory=list)


@dataclass
class Usage:
    """What a walk found: ``bytes`` allocated (at least that many once past ``stop_above``),
    or why the usage cannot be measured (``unmeasured``)."""

    bytes: int = 0
    unmeasured: str = ""
    _seen: set[tuple[int, int]] = field(default_factory=set, repr=False)

    def add(self, info: os.stat_result) -> None:
        key = (info.st_dev, info.st_ino)
        if key not in self._seen:
            self._seen.add(key)
            self.bytes += info.st_blocks * 512


class _Stop(Exception):
    """The walk can stop: past the limit, or unmeasurable."""


def allocated_bytes(folders: Iterable[Path], stop_above: int | None = None) -> Usage:
    """The allocated size of ``folders`` and all they hold, each inode once; the walk stops
    as soon as it is past ``stop_above``."""
    usage = Usage()
    try:
        for folder in folders:
            try:
                fd = os.open(folder, DIR_FLAGS)
            except OSError as exc:
                if exc.errno in GONE:
                    continue
                raise
            try:
                _walk(fd, str(folder), usage, stop_above, 0)
            finally:
                os.close(fd)
    except _Stop:
        pass
    return usage


def _walk(fd: int, shown: str, usage: Usage, stop_above: int | None, depth: int) -> None:
    usage.add(os.fstat(fd))
    if depth > MAX_DEPTH:
        usage.unmeasured = f"{shown} is nested deeper than {MAX_DEPTH} folders"
        raise _Stop
    try:
        with os.scandir(fd) as entries:
            found = [(entry.name, _lstat(entry)) for entry in entries]
    except PermissionError:
        _unreadable(usage, shown)
    for name, info in found:
        if info is None:
            continue
        if not stat.S_ISDIR(info.st_mode):
            usage.add(info)
        elif (child := _open_child(fd, name, usage, f"{shown}/{name}")) is not None:
            try:
                _walk(child, f"{shown}/{name}", usage, stop_above, depth + 1)
            finally:
                os.close(child)
        if stop_above is not None and usage.bytes > stop_above:
            raise _Stop


def _lstat(entry: os.DirEntry[str]) -> os.stat_result | None:
    try:
        return entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None


def _open_child(parent: int, name: str, usage: Usage, shown: str) -> int | None:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        _unreadable(usage, shown)
    except OSError as exc:
        if exc.errno in GONE:
            return None
        raise


def _unreadable(usage: Usage, shown: str) -> NoReturn:
    usage.unmeasured = f"{shown} cannot be read (its permissions were taken away)"
    raise _Stop


def over_message(usage: Usage, limit: int) -> str:
    """The error a run over its quota fails with."""
    if usage.unmeasured:
        return f"{DISK_QUOTA}: its usage cannot be measured, {usage.unmeasured}"
    written = usage.bytes / MIB
    return f"{DISK_QUOTA}: {written:.1f} MB written, limit {limit // MIB} MB (agent_limits.disk_mb)"


class DiskQuotas:
    """Walks every account in turn on a thread of its own and reports those over the limit.

    ``accounts()`` is asked before each round; ``over_quota(run_id, message)`` is called
    once per account that is over, and it is not walked again until it reappears later.
    """

    def __init__(
        self,
        limit_bytes: int,
        accounts: Callable[[], list[Account]],
        over_quota: Callable[[str, str], None],
    ) -> None:
        self.limit_bytes = limit_bytes
        self._accounts = accounts
        self._over_quota = over_quota
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported: set[str] = set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="runyard-disk-quota")
            self._thread.daemon = True
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def check(self) -> list[str]:
        """One round: the run ids found over quota (and reported)."""
        over = []
        accounts = self._accounts()
        self._reported &= {account.run_id for account in accounts}
        for account in accounts:
            if account.run_id in self._reported:
                continue  # stopped already, its end not yet seen
            usage = allocated_bytes(account.folders, self.limit_bytes)
            if usage.unmeasured or usage.bytes > self.limit_bytes:
                message = over_message(usage, self.limit_bytes)
                log.warning("run %s: %s", account.run_id, message)
                self._reported.add(account.run_id)
                self._over_quota(account.run_id, message)
                over.append(account.run_id)
        return over

    def _loop(self) -> None:
        wait = CHECK_SECONDS
        while not self._stopped.wait(wait):
            began = time.monotonic()
            try:
                self.check()
            except Exception:  # one bad round must not end the checks of every later one
                log.exception("Checking the disk quotas of agent runs failed")
            wait = max(CHECK_SECONDS, WALK_SHARE * (time.monotonic() - began))
