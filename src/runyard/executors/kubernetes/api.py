"""A thin JSON layer over the official ``kubernetes`` client (imported lazily).

Responses are read raw (``_preload_content=False``) and parsed as plain dicts, so the
executor sees exactly what the API server sent and never depends on the client's model
classes accepting every field a newer server may return. Failures become ExecutorError;
429, 5xx and lost connections are first retried (see :mod:`.retry`), except by a watch,
whose caller resumes it from its last ``resourceVersion`` (see :mod:`.watch`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from runyard.errors import ExecutorError
from runyard.executors.kubernetes.names import CONTAINER_NAME
from runyard.executors.kubernetes.retry import (
    RETRY_STATUSES,
    RetryPolicy,
    Transient,
    parse_retry_after,
)
from runyard.kubernetes_settings import KubernetesSettings

MISSING_CLIENT = (
    "The Kubernetes executor needs the official 'kubernetes' client, which is not "
    "installed: pip install 'runyard[kubernetes]'"
)
_KINDS = {
    "Job": ("batch", "namespaced_job"),
    "ConfigMap": ("core", "namespaced_config_map"),
    "Secret": ("core", "namespaced_secret"),
    "Pod": ("core", "namespaced_pod"),
    "NetworkPolicy": ("networking", "namespaced_network_policy"),
    "Event": ("core", "namespaced_event"),
}


class KubeApiError(ExecutorError):
    """The API server refused a request (``status`` is its HTTP status)."""

    def __init__(self, action: str, status: int, message: str) -> None:
        self.action = action
        self.status = status
        super().__init__(f"Kubernetes refused to {action}: HTTP {status}: {message}")


def import_client() -> ModuleType:
    try:
        import kubernetes
    except ImportError as exc:
        raise ExecutorError(MISSING_CLIENT) from exc
    return kubernetes


def api_client_from_settings(settings: KubernetesSettings) -> Any:
    """An ``ApiClient`` from in-cluster credentials or a kubeconfig, as the settings say."""
    k8s = import_client()
    configuration = k8s.client.Configuration()
    in_cluster = settings.in_cluster
    if in_cluster is None:
        explicit = settings.kubeconfig is not None or settings.context is not None
        in_cluster = not explicit and "KUBERNETES_SERVICE_HOST" in os.environ
    try:
        if in_cluster:
            k8s.config.load_incluster_config(client_configuration=configuration)
        else:
            k8s.config.load_kube_config(
                config_file=None if settings.kubeconfig is None else str(settings.kubeconfig),
                context=settings.context,
                client_configuration=configuration,
            )
    except (k8s.config.ConfigException, OSError, TypeError, ValueError) as exc:
        source = "in-cluster credentials" if in_cluster else "kubeconfig"
        raise ExecutorError(f"Cannot load the Kubernetes {source}: {exc}") from exc
    return k8s.client.ApiClient(configuration)


def _message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def _transient(
    error: ExecutorError, cause: BaseException, retry_after: float | None = None
) -> Transient:
    error.__cause__ = cause
    return Transient(error, retry_after)


class WatchStream:
    """The events of one watch request as dicts (``{"type": …, "object": …}``), read line by
    line from the chunked answer; a broken connection raises ExecutorError. ``close()``
    from another thread ends the iteration."""

    def __init__(
        self, response: Any, where: str, transport_errors: tuple[type[Exception], ...]
    ) -> None:
        self._response = response
        self._where = where
        self._errors = transport_errors

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from kubernetes.watch.watch import iter_resp_lines

        try:
            for line in iter_resp_lines(self._response):
                if line.strip():
                    yield json.loads(line)
        except self._errors as exc:
            raise ExecutorError(f"The watch broke: {self._where}: {exc}") from exc
        except ValueError as exc:
            raise ExecutorError(f"A watch event is not JSON: {self._where}: {exc}") from exc
        finally:
            self._response.release_conn()

    def close(self) -> None:
        shutdown = getattr(self._response, "shutdown", None)  # urllib3 >= 2.3
        try:
            if shutdown is not None:
                shutdown()  # unblocks a read in progress in the reading thread
            self._response.close()
        except self._errors:
            pass


class KubeApi:
    """Create, read, patch, list and delete the few kinds a run uses, as dicts."""

    def __init__(self, api_client: Any, timeout: float, retry: RetryPolicy | None = None) -> None:
        self._k8s = import_client()
        self.retry = retry or RetryPolicy()
        import urllib3

        self.transport_errors = (OSError, urllib3.exceptions.HTTPError)
        client = self._k8s.client
        self.api_client = api_client
        self.timeout = timeout
        self.host = str(api_client.configuration.host)
        self._apis = {
            "batch": client.BatchV1Api(api_client),
            "core": client.CoreV1Api(api_client),
            "networking": client.NetworkingV1Api(api_client),
        }

    def _method(self, verb: str, kind: str) -> Any:
        group, suffix = _KINDS[kind]
        return getattr(self._apis[group], f"{verb}_{suffix}")

    def _raw(self, action: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", self.timeout)
        return self.retry.call(lambda: self._once(action, method, args, kwargs))

    def _once(self, action: str, method: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """One request; a failure worth retrying is raised as :class:`Transient`."""
        try:
            return method(*args, _preload_content=False, **kwargs)
        except self._k8s.client.ApiException as exc:
            if not exc.status:
                raise _transient(ExecutorError(f"Cannot {action}: {exc.reason}"), exc) from exc
            error = KubeApiError(action, exc.status, _message(exc))
            if exc.status in RETRY_STATUSES:
                headers = exc.headers or {}
                raise _transient(error, exc, parse_retry_after(headers.get("Retry-After"))) from exc
            raise error from exc
        except self.transport_errors as exc:
            failure = ExecutorError(f"Cannot {action}: API server {self.host}: {exc}")
            raise _transient(failure, exc) from exc
        except (self._k8s.client.exceptions.OpenApiException, ValueError) as exc:
            raise ExecutorError(f"The Kubernetes client refused to {action}: {exc}") from exc

    def _json(self, action: str, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        response = self._raw(action, method, *args, **kwargs)
        try:
            data = response.data
        finally:
            response.release_conn()
        return json.loads(data) if data else {}

    def create(self, kind: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        action = f"create {kind} {body['metadata']['name']}"
        return self._json(action, self._method("create", kind), namespace, body)

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._json(f"read Job {name}", self._method("read", "Job"), name, namespace)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._json(f"patch Job {name}", self._method("patch", "Job"), name, namespace, patch)

    def delete(
        self, kind: str, namespace: str, name: str, *,
        propagation: str | None = None, grace_seconds: int | None = None,
    ) -> bool:
        """Delete one object; False when it was already gone."""
        options: dict[str, Any] = {}
        if propagation is not None:
            options["propagation_policy"] = propagation
        if grace_seconds is not None:
            options["grace_period_seconds"] = grace_seconds
        try:
            self._json(f"delete {kind} {name}", self._method("delete", kind), name, namespace,
                       **options)
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def list_with_version(
        self, kind: str, namespace: str, label_selector: str
    ) -> tuple[list[dict[str, Any]], str]:
        """The items and the list's ``metadata.resourceVersion`` (where a watch starts)."""
        found = self._json(f"list {kind}s", self._method("list", kind), namespace,
                           label_selector=label_selector)
        version = str((found.get("metadata") or {}).get("resourceVersion") or "")
        return list(found.get("items") or []), version

    def list(
        self, kind: str, namespace: str, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        options = {"label_selector": label_selector}
        if field_selector:
            options["field_selector"] = field_selector
        found = self._json(f"list {kind}s", self._method("list", kind), namespace, **options)
        return list(found.get("items") or [])

    def watch(
        self, kind: str, namespace: str, label_selector: str, resource_version: str,
        timeout_seconds: int,
    ) -> WatchStream:
        """The events after ``resource_version`` (one request, not retried: the caller
        resumes from its last version). An HTTP 410 raises KubeApiError with status 410."""
        options = {
            "label_selector": label_selector, "watch": True, "resource_version": resource_version,
            "allow_watch_bookmarks": True, "timeout_seconds": timeout_seconds,
            "_request_timeout": (self.timeout, timeout_seconds + self.timeout),
        }
        action = f"watch {kind}s"
        try:
            response = self._once(action, self._method("list", kind), (namespace,), options)
        except Transient as failure:
            raise failure.cause from failure.cause.__cause__
        return WatchStream(response, f"{action}: API server {self.host}", self.transport_errors)

    def open_log(self, namespace: str, pod: str, idle_timeout: float) -> Any:
        """The streaming response of the worker container's log (``follow=True``)."""
        return self._raw(
            f"read the log of pod {pod}", self._apis["core"].read_namespaced_pod_log,
            pod, namespace, container=CONTAINER_NAME, follow=True,
            _request_timeout=(self.timeout, idle_timeout),
        )

    def close(self) -> None:
        self.api_client.close()
