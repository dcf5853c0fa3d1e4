"""A run-submitted task's sandbox gets a private /tmp without hiding binds below /tmp (a
checkout, its venv or a workspace under /tmp must stay visible to the worker)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runyard.executors.base import LaunchSpec, Mount
from runyard.executors.sandbox import find_bwrap, wrap_spec
from runyard.runtime.sandboxed import with_private_tmp

pytestmark = pytest.mark.sandbox


def test_binds_below_tmp_are_laid_over_the_private_tmp(tmp_path: Path) -> None:
    assert str(tmp_path).startswith("/tmp/")
    bwrap = find_bwrap()
    assert bwrap is not None, "bubblewrap is needed"
    (tmp_path / "seen.txt").write_text("visible")
    scratch = Path("/tmp") / f"host-scratch-{tmp_path.name}"
    scratch.write_text("host")
    script = (
        f"cat {tmp_path}/seen.txt; echo; "
        f"test -e /tmp/host-scratch-{tmp_path.name} && echo leaked || echo private; "
        "touch /tmp/new && echo writable"
    )
    spec = LaunchSpec(
        argv=["/bin/sh", "-c", script], log_path=tmp_path / "log", network=False,
        mounts=[Mount(tmp_path, str(tmp_path), read_only=True)],
    )  # fmt: skip
    argv = with_private_tmp(wrap_spec(bwrap, spec).argv)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    finally:
        scratch.unlink()
    assert done.stdout.split() == ["visible", "private", "writable"], done.stderr
