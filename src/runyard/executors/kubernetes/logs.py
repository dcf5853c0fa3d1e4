"""Copy a run's pod log into its log file while it runs, so the log outlives the pod.

A follower thread opens ``read_namespaced_pod_log(follow=True, _preload_content=False)``
and appends what arrives to ``log_path``. When the stream breaks (network, API server
restart, idle timeout) it reconnects and resumes by *byte counting*: the new stream starts
at the beginning of the container's log, and the first ``copied`` bytes — those already in
the file — are skipped. The Python client offers no ``sinceTime``, and ``sinceSeconds``
has one-second resolution, so time-based resumption would duplicate or drop lines;
counting is exact and binary-safe. Its cost is re-reading the copied prefix once per
reconnect, and it relies on the kubelet still serving the whole log (a container log
rotated by the kubelet mid-run is served from the rotation point only).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from runyard.errors import ExecutorError
from runyard.executors.kubernetes.api import KubeApi
from runyard.executors.kubernetes.names import managed_selector
from runyard.executors.kubernetes.status import container_state, newest_pod
from runyard.executors.local import open_log

logger = logging.getLogger(__name__)
CHUNK_BYTES = 64 * 1024


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class LogFollower:
    """One thread per run; ``copied`` counts the pod-log bytes already in ``log_path``."""

    def __init__(
        self, api: KubeApi, namespace: str, run_id: str, log_path: Path, *,
        copied: int = 0, retry_seconds: float = 1.0, idle_timeout: float = 600.0,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._run_id = run_id
        self._log_path = log_path
        self._retry_seconds = retry_seconds
        self._idle_timeout = idle_timeout
        self.copied = copied
        self._stop = threading.Event()
        self._finishing = threading.Event()
        self._response: Any = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"k8s-log-{run_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def finish(self, timeout: float) -> bool:
        """The run has ended: copy what is left, then stop. True once the copy is complete."""
        self._finishing.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop now, interrupting a blocked read."""
        self._stop.set()
        self._finishing.set()
        with self._lock:
            response = self._response
        if response is not None:
            getattr(response, "shutdown", response.close)()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._step():
                    return
            except ExecutorError as exc:
                logger.debug("log of run %s not readable yet: %s", self._run_id, exc)
            except self._api.transport_errors as exc:
                if self._stop.is_set():
                    return
                logger.warning("log stream of run %s broke, resuming: %s", self._run_id, exc)
            self._stop.wait(self._retry_seconds)

    def _step(self) -> bool:
        """One attempt; True when the log is complete (or there is none to copy)."""
        # read before the pod: a run that ended after the pod was read (no container yet)
        # may have started, logged and exited since, and then its log is still to be copied
        finishing = self._finishing.is_set()
        pods = self._api.list("Pod", self._namespace, managed_selector(self._run_id))
        pod = newest_pod(pods)
        state = container_state(pod)
        if pod is None or not ("running" in state or "terminated" in state):
            return finishing
        self._copy(pod["metadata"]["name"])
        if self._stop.is_set():
            return True
        after = container_state(newest_pod(self._api.list(
            "Pod", self._namespace, managed_selector(self._run_id)
        )))
        return "terminated" in after or not after

    def _copy(self, pod_name: str) -> None:
        response = self._api.open_log(self._namespace, pod_name, self._idle_timeout)
        with self._lock:
            self._response = response
        skip = self.copied
        fd = open_log(self._log_path)
        try:
            for chunk in response.stream(CHUNK_BYTES, decode_content=False):
                if skip:
                    dropped = min(skip, len(chunk))
                    chunk, skip = chunk[dropped:], skip - dropped
                if chunk:
                    _write_all(fd, chunk)
                    self.copied += len(chunk)
                if self._stop.is_set():
                    break
        finally:
            os.close(fd)
            with self._lock:
                self._response = None
            response.close()  # a follow stream may be unfinished: never reuse its connection
            response.release_conn()
