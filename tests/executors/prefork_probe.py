"""A module the prefork tests run in forked children: ``main()`` acts on a JSON stdin."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    request = json.loads(sys.stdin.read() or "{}")
    action = request.get("action", "report")
    if action == "report":
        print(json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "argv": sys.argv,
                          "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
                          "stdin": request.get("data", "")}), flush=True)
        return int(request.get("code", 0))
    if action == "sleep":
        if request.get("ignore_term"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(30)
    if action == "straggler":
        child = subprocess.Popen(["/bin/sleep", "30"])
        print(child.pid, flush=True)
    if action == "alloc":
        bytearray(int(request["bytes"]))
    if action == "exit":
        raise SystemExit(request.get("code", 3))
    return 0


def warm_fails() -> None:
    """A warm-up (``PreforkExecutor(warm=...)``) that raises."""
    raise ValueError("no warm-up today")


def warm_leaves_a_thread() -> None:
    """A warm-up that leaves a thread running in the zygote."""
    import threading

    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()


def warm_leaves_a_bare_thread() -> None:
    """A warm-up that leaves a thread the threading module does not know of."""
    import _thread

    started = _thread.allocate_lock()
    started.acquire()

    def sleep() -> None:
        started.release()
        time.sleep(30)

    _thread.start_new_thread(sleep, ())
    started.acquire()  # it runs, before the warm-up returns


if __name__ == "__main__":
    sys.exit(main())
