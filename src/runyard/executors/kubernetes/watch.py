"""This instance's Jobs and pods as the API server last told them: one watch per kind.

    watch = RunWatch(api, "runyard", "ry-1f…", on_change=lambda kind, obj: ...)
    watch.start()
    if watch.synced():
        job, pods = watch.job("runyard-run-1"), watch.pods_of("run-1")
    watch.close()

Polling each run's Job and pods costs two requests per run per poll; a watch costs one
long request per kind, however many runs there are. Each :class:`Informer` LISTs its kind
(label selector ``managed_selector(instance=…)``), keeps the list's ``resourceVersion``,
then WATCHes from it, applying ADDED, MODIFIED and DELETED events to a dict by name. A
BOOKMARK only moves the version on. Every watch request asks the server to end it after
``timeoutSeconds`` (drawn from :data:`WATCH_SECONDS`, so many servers do not renew in
step) and is renewed from the last version. A 410 Gone (the answer's HTTP status, or an
ERROR event carrying a Status with code 410) means the server no longer has the events
after that version: the informer lists again, at once (a second 410 before a watch
opens again waits as a failure does). A lost connection or any other failure is
retried after a jittered, growing wait (:class:`.retry.RetryPolicy`), resuming from the
last version; meanwhile :meth:`Informer.synced` is False, so callers ask the API instead.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from runyard.errors import ExecutorError
from runyard.executors.kubernetes.api import KubeApi, KubeApiError, WatchStream
from runyard.executors.kubernetes.names import RUN_ID_LABEL, managed_selector
from runyard.executors.kubernetes.retry import RetryPolicy

logger = logging.getLogger(__name__)
WATCH_SECONDS = (60, 120)  # each watch request's timeoutSeconds, drawn from this range
GONE = 410
Change = Callable[[str, dict[str, Any]], None]


class Gone(ExecutorError):
    """The server no longer has the events after our version: list again."""


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


class Informer:
    """One kind's objects matching a label selector, kept current by a watch thread.

    ``on_change(kind, obj)`` is called on that thread after each change (``obj`` as it
    was last seen when it is deleted); an exception from it is logged, never raised.
    """

    def __init__(
        self, api: KubeApi, kind: str, namespace: str, selector: str, *,
        on_change: Change | None = None, retry: RetryPolicy | None = None,
        watch_seconds: tuple[int, int] = WATCH_SECONDS,
    ) -> None:
        self.kind = kind
        self._api = api
        self._namespace = namespace
        self._selector = selector
        self._on_change = on_change
        self._retry = retry or api.retry
        self._watch_seconds = watch_seconds
        self._objects: dict[str, dict[str, Any]] = {}
        self._by_run: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._version = ""
        self._current = False
        self._failures = 0
        self._gone = 0  # 410s since a watch last opened
        self._stream: WatchStream | None = None
        self._stopped = threading.Event()
        self.lists = 0  # LIST requests answered: the first one, then one per relist
        self._thread = threading.Thread(
            target=self._run, name=f"runyard-k8s-watch-{kind.lower()}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def synced(self) -> bool:
        """Whether the cache is current: listed, and no watch failure since."""
        with self._lock:
            return self._current

    @property
    def version(self) -> str:
        with self._lock:
            return self._version

    def get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get(name)

    def of_run(self, run_id: str) -> list[dict[str, Any]]:
        """The objects labelled with run id ``run_id``."""
        with self._lock:
            return [self._objects[name] for name in self._by_run.get(run_id, ())]

    # --- the watch thread ----------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                if not self.version:
                    self._relist()
                self._watch()
            except Gone:
                logger.info("the %s watch is too old (410 Gone): listing again", self.kind)
                self._forget_version()
                if self._gone:  # gone again right after a list: not at once
                    self._pause()
                self._gone += 1
            except Exception as exc:  # the thread must outlive any failure
                if self._stopped.is_set():
                    return
                self._set_current(False)
                logger.warning("watching %ss failed: %s", self.kind, exc,
                               exc_info=not isinstance(exc, ExecutorError))
                self._pause()

    def _pause(self) -> None:
        """A jittered wait growing with the failures in a row (reset once a watch opens)."""
        wait = min(self._retry.delay(min(self._failures, 16), None), self._retry.max_seconds)
        self._failures += 1
        self._stopped.wait(wait)

    def _relist(self) -> None:
        items, version = self._api.list_with_version(self.kind, self._namespace, self._selector)
        fresh = {item["metadata"]["name"]: item for item in items}
        with self._lock:
            old = self._objects
            self._objects = {}
            self._by_run = {}
            for name, obj in fresh.items():
                self._store(name, obj)
            self._version = version
            self._current = True
            self.lists += 1
        changed = [obj for name, obj in fresh.items() if _version(old.get(name)) != _version(obj)]
        changed += [obj for name, obj in old.items() if name not in fresh]
        for obj in changed:
            self._notify(obj)

    def _watch(self) -> None:
        seconds = random.randint(*self._watch_seconds)
        try:
            stream = self._api.watch(self.kind, self._namespace, self._selector, self.version,
                                     seconds)
        except KubeApiError as exc:
            if exc.status == GONE:
                raise Gone(str(exc)) from exc
            raise
        with self._lock:
            self._stream = stream
            self._current = True  # the server sends every change after our version
            self._failures = self._gone = 0
        try:
            if self._stopped.is_set():  # close() came before the stream was there to close
                stream.close()
                return
            for event in stream:
                self._apply(event)
        finally:
            with self._lock:
                self._stream = None

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == GONE:
                raise Gone(str(obj.get("message") or "410 Gone"))
            raise ExecutorError(f"The {self.kind} watch reported an error: {obj.get('message')}")
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            if version:
                self._version = version
            if kind == "BOOKMARK":
                return
            name = obj["metadata"]["name"]
            self._drop(name)
            if kind != "DELETED":
                self._store(name, obj)
        self._notify(obj)

    def _store(self, name: str, obj: dict[str, Any]) -> None:
        self._objects[name] = obj
        run_id = _labels(obj).get(RUN_ID_LABEL)
        if run_id is not None:
            self._by_run.setdefault(run_id, set()).add(name)

    def _drop(self, name: str) -> None:
        obj = self._objects.pop(name, None)
        run_id = None if obj is None else _labels(obj).get(RUN_ID_LABEL)
        names = self._by_run.get(run_id or "")
        if names is not None:
            names.discard(name)
            if not names:
                del self._by_run[run_id or ""]

    def _notify(self, obj: dict[str, Any]) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(self.kind, obj)
        except Exception:  # a caller's bug must not stop the watch
            logger.exception("a %s change callback failed", self.kind)

    def _forget_version(self) -> None:
        with self._lock:
            self._version = ""
            self._current = False

    def _set_current(self, current: bool) -> None:
        with self._lock:
            self._current = current


def _version(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("metadata") or {}).get("resourceVersion")


class RunWatch:
    """The Jobs and pods of one runyard instance in one namespace (see the module doc)."""

    def __init__(
        self, api: KubeApi, namespace: str, instance: str, *,
        on_change: Change | None = None, retry: RetryPolicy | None = None,
        watch_seconds: tuple[int, int] = WATCH_SECONDS,
    ) -> None:
        selector = managed_selector(instance=instance)
        self.jobs, self.pods = (
            Informer(api, kind, namespace, selector, on_change=on_change, retry=retry,
                     watch_seconds=watch_seconds)
            for kind in ("Job", "Pod")
        )

    def start(self) -> None:
        self.jobs.start()
        self.pods.start()

    def close(self) -> None:
        self.jobs.close()
        self.pods.close()

    def synced(self) -> bool:
        return self.jobs.synced() and self.pods.synced()

    def job(self, name: str) -> dict[str, Any] | None:
        return self.jobs.get(name)

    def pods_of(self, run_id: str) -> list[dict[str, Any]]:
        return self.pods.of_run(run_id)
