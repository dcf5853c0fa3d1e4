"""Bubblewrap around another executor: the worker sees only what its mounts say.

    sandbox = BwrapSandbox(LocalExecutor())
    handle = sandbox.launch(LaunchSpec(
        argv=["/usr/bin/python3", "/opt/agent/package/agent.py"], log_path=log,
        cwd=Path("/workspace"), network=False,
        mounts=[Mount(run / "in", "/workspace/in"), Mount(pkg, "/opt/agent/package", True)]))

Inside: the host's system folders read-only (``/usr``, the ``/bin``-style links, a few
files of ``/etc``), a fresh ``/proc`` and ``/dev``, the spec's mounts (bound in order of
depth, so a read-only file can sit inside a read-write folder), and nothing else. The
sandbox has its own PID, IPC, UTS and (unless ``network``) network namespaces, drops every
capability, and dies with its parent; its root (the folders around the mounts) is
read-only. ``spec.cwd`` is a path inside the sandbox.
:meth:`wrap` is the pure translation; :meth:`launch` hands the wrapped spec to ``inner``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

from runyard.executors.base import Executor, ExitInfo, Handle, LaunchSpec, Mount

SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/localtime",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
    "/etc/ssl", "/etc/ca-certificates", "/etc/mime.types",
)  # fmt: skip
NETWORK_ETC_FILES = ("/etc/resolv.conf", "/etc/gai.conf")
PROBE_TIMEOUT = 10.0


def find_bwrap() -> str | None:
    return shutil.which("bwrap")


def system_args(network: bool) -> list[str]:
    """The read-only system view every sandbox gets."""
    args = ["--ro-bind", "/usr", "/usr"]
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    for path in ETC_FILES + (NETWORK_ETC_FILES if network else ()):
        args += ["--ro-bind-try", path, path]
    return args + ["--proc", "/proc", "--dev", "/dev"]


def mount_args(mounts: list[Mount]) -> list[str]:
    args: list[str] = []
    for mount in sorted(mounts, key=lambda m: len(Path(m.target).parts)):
        flag = "--ro-bind" if mount.read_only else "--bind"
        args += [flag, str(mount.host_path), mount.target]
    return args


def bwrap_argv(bwrap: str, spec: LaunchSpec) -> list[str]:
    namespaces = ["--unshare-all"] + ([] if not spec.network else ["--share-net"])
    argv = [bwrap, "--die-with-parent", "--new-session", *namespaces, "--cap-drop", "ALL"]
    argv += system_args(spec.network) + mount_args(spec.mounts)
    argv += ["--remount-ro", "/", "--chdir", str(spec.cwd or "/")]
    return argv + ["--", *spec.argv]


def wrap_spec(bwrap: str, spec: LaunchSpec) -> LaunchSpec:
    """The spec that starts ``spec`` inside a sandbox (mounts applied, cwd on the host /)."""
    return replace(spec, argv=bwrap_argv(bwrap, spec), cwd=Path("/"), mounts=[])


class BwrapSandbox:
    """An :class:`Executor` that runs ``inner``'s workers inside bubblewrap."""

    name = "bwrap"

    def __init__(self, inner: Executor, bwrap: str | None = None) -> None:
        self.inner = inner
        self.bwrap = bwrap or find_bwrap() or "bwrap"

    def wrap(self, spec: LaunchSpec) -> LaunchSpec:
        return wrap_spec(self.bwrap, spec)

    def launch(self, spec: LaunchSpec) -> Handle:
        return self.inner.launch(self.wrap(spec))

    def poll(self, handle: Handle) -> ExitInfo | None:
        return self.inner.poll(handle)

    def cancel(self, handle: Handle, grace_seconds: float = 5.0) -> None:
        self.inner.cancel(handle, grace_seconds)

    def cleanup(self, handle: Handle) -> None:
        self.inner.cleanup(handle)


def probe_bwrap(bwrap: str | None, prefix: list[str] | None = None) -> str | None:
    """Start a trivial sandbox; None when it works, else why it does not.

    ``prefix`` is put before bwrap (e.g. ``setpriv`` to the run user), so the probe runs
    the way real runs will: user namespaces may be disabled for that user only.
    """
    if bwrap is None:
        return "bwrap (bubblewrap) is not installed"
    true = shutil.which("true", path="/usr/bin:/bin") or "/usr/bin/true"
    spec = LaunchSpec(argv=[true], log_path=Path(os.devnull), network=False)
    try:
        done = subprocess.run(
            [*(prefix or []), *bwrap_argv(bwrap, spec)],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be started: {exc}"
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        return f"bwrap does not work here: {reason}"
    return None
