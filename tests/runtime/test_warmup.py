"""The launcher's warm-up: the demo task run in the real zygote before it forks, leaving
nothing behind and the zygote safe to fork."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from runtime_helpers import RenameRecorder

from runyard.executors.base import LaunchSpec
from runyard.executors.prefork import PreforkExecutor
from runyard.runtime.executor import WARM_UP
from runyard.runtime.worker import EXIT_REFUSED

PY = sys.executable


def open_files(pid: int) -> list[str]:
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return found


def test_the_zygote_warms_up_in_a_scratch_folder_and_is_left_as_it_was(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    log = tmp_path / "prefork.log"
    env = {"PATH": os.environ.get("PATH", ""), "TMPDIR": str(scratch)}
    recorder = RenameRecorder(scratch, RenameRecorder.IN_CREATE)
    executor = PreforkExecutor(PY, ["runyard.runtime.worker"], env, log_path=log, warm=WARM_UP)
    try:
        zygote = executor._ensure_zygote()
        assert zygote is not None and zygote.preload_errors == {}
        pid = zygote._proc.pid
        created = recorder.read()
        threads = os.listdir(f"/proc/{pid}/task")
        files = open_files(pid)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        worker = executor.launch(  # forked by the warmed zygote: it refuses an empty payload
            LaunchSpec(argv=[PY, "-m", "runyard.runtime.worker"], log_path=tmp_path / "w.log",
                       env={}, stdin=b"")
        )  # fmt: skip
        exit_info = executor.wait_exit(worker, 10)
    finally:
        executor.close()
        recorder.close()

    assert [name for name in created if name.startswith("runyard-warm-")]  # it ran, there
    assert list(scratch.iterdir()) == []  # and its workspace is gone
    assert len(threads) == 1  # its progress timers were joined: forking is safe
    assert not [f for f in files if f.startswith(str(scratch))]  # the worker locks closed
    assert b"runyard.executors.zygote" in cmdline  # the demo's title was undone
    assert "Demo result" not in log.read_text()  # what the runs print is not the log's
    assert "process" not in worker.data and exit_info is not None
    assert exit_info.exit_code == EXIT_REFUSED and "bad payload" in (tmp_path / "w.log").read_text()


def test_a_warm_up_thread_that_does_not_end_is_an_error(tmp_path):
    script = textwrap.dedent(
        """
        import json, threading, time
        from runyard.runtime import warmup
        warmup.THREAD_TIMEOUT = 0.2
        real = warmup.create_task
        def create_task(*args, **kwargs):  # a run that leaves a thread running
            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
            return real(*args, **kwargs)
        warmup.create_task = create_task
        try:
            warmup.warm_worker(runs=1)
        except RuntimeError as exc:
            print(json.dumps({"error": str(exc)}))
        else:
            print(json.dumps({"error": None}))
        """
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run(
        [PY, "-c", script], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    error = json.loads(out.splitlines()[-1])["error"]
    assert error is not None and "did not end" in error
    assert list(tmp_path.iterdir()) == []
