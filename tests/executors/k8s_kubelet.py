"""A test kubelet for the fake API server: each pod's container really runs, locally.

    kubelet = Kubelet(fake, claims={"runyard-data": tmp_path / "data"}).start()
    ...                      # pods the fake creates start, run, end; the Job follows
    kubelet.stop()           # what still runs is killed

It polls the fake's pods (in process, under its lock) and plays the node's kubelet plus
the parts of the Job controller a run depends on. The container runs in bubblewrap, so
the pod's paths exist as the pod sees them. How the pod maps onto this host:

* **The image** is the host's system folders, read-only (``/usr``, the ``/bin``-style
  links, a few files of ``/etc``: ``runyard.executors.sandbox.system_args``), so the
  image's ``python3`` is the host's ``/usr/bin/python3`` and its ``/bin/sh`` the host's.
  The image's ``PATH`` is :data:`IMAGE_PATH` unless the pod sets one. Folders an image
  would hold and the host keeps elsewhere are bound read-only at the same path when
  listed in ``image_paths`` (nothing is needed for the reference agent: standard library).
  The root around the mounts is read-only (``readOnlyRootFilesystem``).
* **hostPath** volumes are bound at their ``mountPath`` (``readOnly`` honoured).
* **configMap** and **secret** volumes are written by the kubelet to a per-pod folder under
  ``scratch`` (``items``: key → path with its mode; Secret values base64-decoded) and bound
  read-only. **emptyDir** is a fresh per-pod folder. **persistentVolumeClaim** is the host
  folder ``claims[claimName]`` (a missing claim leaves the pod ``ContainerCreating``), and
  ``subPath`` is joined to it.
* **env**: ``value`` (Kubernetes' ``$(NAME)`` expansion and its ``$$(`` escape applied, to
  command and args too) and ``valueFrom.secretKeyRef`` read from the Secret; a missing
  Secret or key is ``CreateContainerConfigError``, as on a node.
* **runAsUser/runAsGroup** are the process's ids in a user namespace (what it writes lands
  on the host as the kubelet's own user). A NetworkPolicy selecting the pod with no egress
  rule gives it its own, empty network namespace.

Status: ``Pending`` (``ContainerCreating``) → ``Running`` (``running.startedAt``) →
``Succeeded``/``Failed`` (``terminated`` with ``exitCode``, ``Completed``/``Error``, 128+N
for a signal). The Job then gets ``Complete`` or ``Failed``/``BackoffLimitExceeded``
(``backoffLimit: 0``). Output (stdout and stderr) becomes the pod log the fake serves.

Deletion: a pod that leaves the API while its process runs gets SIGTERM on its process
group, then SIGKILL after the deletion's ``gracePeriodSeconds`` (else the pod's
``terminationGracePeriodSeconds``). If its Job is still there and not being deleted (a
node loss or an eviction, not a cancel), the Job fails as the Job controller fails it.

Not modelled: scheduling, image pulls, resource limits, probes, restarts, log rotation.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k8s_fake_api import FakeKubernetes, timestamp

from runyard.executors.sandbox import system_args

IMAGE_PATH = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"
_EXPANSION = re.compile(r"\$\$\(|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class NotReady(Exception):
    """The pod cannot start yet (a claim, ConfigMap or Secret is missing)."""


class ConfigError(Exception):
    """CreateContainerConfigError: what the pod references does not hold what it needs."""


@dataclass
class Container:
    uid: str
    namespace: str
    pod: str
    job: str | None
    proc: subprocess.Popen[bytes]
    folder: Path
    grace: int = 30  # the pod's terminationGracePeriodSeconds
    reader: threading.Thread | None = None
    gone: bool = False
    done: bool = False
    started: str = field(default_factory=timestamp)


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(NAME)`` expansion; ``$$(`` is a literal ``$(``; unknown names stay."""

    def one(found: re.Match[str]) -> str:
        if found.group(0) == "$$(":
            return "$("
        return env.get(found.group(1), found.group(0))

    return _EXPANSION.sub(one, text)


class Kubelet:
    """Runs the fake's pods as local processes in bubblewrap (see the module docstring)."""

    def __init__(
        self, fake: FakeKubernetes, *, claims: dict[str, Path] | None = None,
        image_paths: tuple[str, ...] = (), poll_seconds: float = 0.05,
    ) -> None:  # fmt: skip
        self.fake = fake
        self.claims = dict(claims or {})
        self.image_paths = image_paths
        self.poll_seconds = poll_seconds
        self.bwrap = shutil.which("bwrap") or "bwrap"
        self.scratch = Path(tempfile.mkdtemp(prefix="kubelet-"))
        self.containers: dict[str, Container] = {}
        self.problems: dict[str, str] = {}  # pod uid -> why it waits (for test messages)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="test-kubelet", daemon=True)

    def start(self) -> Kubelet:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for container in self.containers.values():
            if container.proc.poll() is None:
                _signal(container.proc, signal.SIGKILL)
                container.proc.wait(10)
        shutil.rmtree(self.scratch, ignore_errors=True)

    # --- the sync loop -------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            self._sync()

    def _sync(self) -> None:
        with self.fake.cond:
            pods = {obj["metadata"]["uid"]: copy.deepcopy(obj)
                    for (kind, _, _), obj in self.fake.objects.items() if kind == "Pod"}  # fmt: skip
        for uid, pod in pods.items():
            if uid not in self.containers and _bound(pod):
                self._try_start(pod)
        for uid, container in list(self.containers.items()):
            if container.done or container.gone:
                continue
            if uid not in pods:
                container.gone = True
                threading.Thread(target=self._kill, args=(container,), daemon=True).start()
            elif container.proc.poll() is not None:
                self._finish(container)

    def _try_start(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        try:
            argv, env, cwd = self._plan(pod)
        except NotReady as exc:
            self.problems[uid] = str(exc)
            return
        except ConfigError as exc:
            self._waiting(pod, "CreateContainerConfigError", str(exc))
            return
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        owner = next(iter(pod["metadata"].get("ownerReferences") or []), {})
        meta = pod["metadata"]
        container = Container(uid, meta["namespace"], meta["name"], owner.get("name"), proc,
                              self.scratch / uid,
                              pod["spec"].get("terminationGracePeriodSeconds", 30))  # fmt: skip
        container.reader = threading.Thread(target=self._copy_log, args=(container,),
                                            daemon=True)  # fmt: skip
        container.reader.start()
        self.containers[uid] = container
        self._update_pod(container, "Running", {"running": {"startedAt": container.started}})

    # --- what the container sees ---------------------------------------------------------
    def _plan(self, pod: dict[str, Any]) -> tuple[list[str], dict[str, str], str]:
        meta, spec = pod["metadata"], pod["spec"]
        worker = spec["containers"][0]
        folder = self.scratch / meta["uid"]
        sources = {v["name"]: self._volume(v, meta["namespace"], folder) for v in spec["volumes"]}
        env = self._env(worker.get("env") or [], meta["namespace"])
        binds: list[str] = []
        for mount in sorted(worker.get("volumeMounts") or [],
                            key=lambda m: len(Path(m["mountPath"]).parts)):  # fmt: skip
            source = sources[mount["name"]]
            if mount.get("subPath"):
                source = source / mount["subPath"]
            flag = "--ro-bind" if mount.get("readOnly") else "--bind"
            binds += [flag, str(source), mount["mountPath"]]
        security = {**(spec.get("securityContext") or {}),
                    **(worker.get("securityContext") or {})}  # fmt: skip
        command = [expand(a, env) for a in [*(worker.get("command") or []),
                                            *(worker.get("args") or [])]]  # fmt: skip
        argv = [self.bwrap, "--unshare-user", "--uid", str(security.get("runAsUser", 0)),
                "--gid", str(security.get("runAsGroup", 0)), "--unshare-pid", "--unshare-ipc",
                "--unshare-uts", "--die-with-parent", *system_args(network=True)]  # fmt: skip
        if self._isolated(pod):
            argv.append("--unshare-net")
        for path in self.image_paths:
            argv += ["--ro-bind", path, path]
        argv += binds
        # an image path under a volume (this host's interpreter in a checkout under /tmp,
        # where the pod has an emptyDir) would be hidden by it: an image keeps it elsewhere
        mounted = [m["mountPath"] for m in worker.get("volumeMounts") or []]
        for path in self.image_paths:
            if any(Path(path).is_relative_to(target) and path != target for target in mounted):
                argv += ["--ro-bind", path, path]
        if security.get("readOnlyRootFilesystem"):
            argv += ["--remount-ro", "/"]
        argv += ["--chdir", worker.get("workingDir") or "/", "--clearenv"]
        for name, value in env.items():
            argv += ["--setenv", name, value]
        return [*argv, "--", *command], {"PATH": os.environ.get("PATH", IMAGE_PATH)}, "/"

    def _volume(self, volume: dict[str, Any], namespace: str, folder: Path) -> Path:
        if "hostPath" in volume:
            return Path(volume["hostPath"]["path"])
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            if claim not in self.claims:
                raise NotReady(f"persistentvolumeclaim {claim!r} is not bound")
            return self.claims[claim]
        target = folder / volume["name"]
        target.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            source = self._object("ConfigMap", namespace, volume["configMap"]["name"])
            files = {k: v.encode() for k, v in (source.get("data") or {}).items()}
            files |= {k: base64.b64decode(v) for k, v in (source.get("binaryData") or {}).items()}
            self._write_items(target, files, volume["configMap"])
        elif "secret" in volume:
            source = self._object("Secret", namespace, volume["secret"]["secretName"])
            files = {k: base64.b64decode(v) for k, v in (source.get("data") or {}).items()}
            self._write_items(target, files, volume["secret"])
        return target  # emptyDir: the fresh folder

    @staticmethod
    def _write_items(target: Path, files: dict[str, bytes], source: dict[str, Any]) -> None:
        items = source.get("items") or [{"key": key, "path": key} for key in files]
        for item in items:
            path = target / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[item["key"]])
            path.chmod(item.get("mode", source.get("defaultMode", 0o644)))

    def _object(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        with self.fake.cond:
            found = self.fake.objects.get((kind, namespace, name))
            if found is None:
                raise NotReady(f"{kind} {name!r} not found")
            return copy.deepcopy(found)

    def _env(self, entries: list[dict[str, Any]], namespace: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for entry in entries:
            if "value" in entry:
                env[entry["name"]] = expand(entry["value"], env)
                continue
            ref = entry["valueFrom"]["secretKeyRef"]
            try:
                secret = self._object("Secret", namespace, ref["name"])
            except NotReady as exc:
                raise ConfigError(f'secret "{ref["name"]}" not found') from exc
            data = secret.get("data") or {}
            if ref["key"] not in data:
                raise ConfigError(f'couldn\'t find key {ref["key"]} in Secret {ref["name"]}')
            env[entry["name"]] = base64.b64decode(data[ref["key"]]).decode()
        env.setdefault("PATH", IMAGE_PATH)
        return env

    def _isolated(self, pod: dict[str, Any]) -> bool:
        """A NetworkPolicy selects the pod and allows it no egress at all."""
        labels = pod["metadata"].get("labels") or {}
        with self.fake.cond:
            policies = [obj for (kind, ns, _), obj in self.fake.objects.items()
                        if kind == "NetworkPolicy" and ns == pod["metadata"]["namespace"]]  # fmt: skip
        for policy in policies:
            spec = policy.get("spec") or {}
            wanted = (spec.get("podSelector") or {}).get("matchLabels") or {}
            egress_denied = "Egress" in (spec.get("policyTypes") or []) and not spec.get("egress")
            if egress_denied and all(labels.get(k) == v for k, v in wanted.items()):
                return True
        return False

    # --- status --------------------------------------------------------------------------
    def _copy_log(self, container: Container) -> None:
        stream = container.proc.stdout
        assert stream is not None
        with stream:
            for chunk in iter(lambda: stream.read1(65536), b""):
                with self.fake.cond:
                    self.fake.logs.setdefault(container.pod, bytearray()).extend(chunk)
                    self.fake.cond.notify_all()

    def _waiting(self, pod: dict[str, Any], reason: str, message: str) -> None:
        with self.fake.cond:
            stored = self.fake.objects.get(("Pod", pod["metadata"]["namespace"],
                                            pod["metadata"]["name"]))  # fmt: skip
            if stored is not None:
                stored["status"]["containerStatuses"][0]["state"] = {
                    "waiting": {"reason": reason, "message": message}}
                self.fake.touch(stored)

    def _update_pod(self, container: Container, phase: str, state: dict[str, Any]) -> None:
        with self.fake.cond:
            pod = self.fake.objects.get(("Pod", container.namespace, container.pod))
            if pod is None:
                return
            pod["status"]["phase"] = phase
            pod["status"].setdefault("startTime", container.started)
            status = pod["status"]["containerStatuses"][0]
            status["state"] = state
            status["ready"] = phase == "Running"
            self.fake.touch(pod)

    def _finish(self, container: Container) -> None:
        code = container.proc.wait()
        if container.reader is not None:
            container.reader.join(10)  # the log is complete before the status says so
        exit_code = code if code >= 0 else 128 - code
        container.done = True
        terminated = {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                      "startedAt": container.started, "finishedAt": timestamp()}  # fmt: skip
        self._update_pod(container, "Succeeded" if exit_code == 0 else "Failed",
                         {"terminated": terminated})  # fmt: skip
        self._end_job(container, succeeded=exit_code == 0)

    def _end_job(self, container: Container, succeeded: bool) -> None:
        """The Job controller's part (``backoffLimit: 0``): one pod's end ends the Job."""
        with self.fake.cond:
            job = self.fake.objects.get(("Job", container.namespace, container.job or ""))
            if job is None or job["metadata"].get("deletionTimestamp") or job.get("status", {}).get(
                "conditions"
            ):
                return
            if succeeded:
                job["status"] = {"succeeded": 1, "conditions": [
                    {"type": "Complete", "status": "True", "lastTransitionTime": timestamp()}]}
            else:
                job["status"] = {"failed": 1, "conditions": [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                     "message": "Job has reached the specified backoff limit",
                     "lastTransitionTime": timestamp()}]}  # fmt: skip
            self.fake.touch(job)

    def _kill(self, container: Container) -> None:
        """The pod left the API: TERM, the grace period, KILL; a live Job then fails."""
        grace = self.fake.pod_grace.get(container.pod)
        if grace is None:
            grace = container.grace
        _terminate(container.proc)
        deadline = time.monotonic() + grace
        while container.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if container.proc.poll() is None:
            _signal(container.proc, signal.SIGKILL)
        container.proc.wait()
        if container.reader is not None:
            container.reader.join(10)
        container.done = True
        self._end_job(container, succeeded=False)


def _bound(pod: dict[str, Any]) -> bool:
    """A pending pod the scheduler placed (one it could not place never reaches a node)."""
    status = pod.get("status") or {}
    unscheduled = any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                      for c in status.get("conditions") or [])  # fmt: skip
    return status.get("phase") == "Pending" and bool(status.get("containerStatuses")) and not (
        unscheduled
    )


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the container's own processes, as a runtime signals the container's
    init: not to bubblewrap, whose death would SIGKILL them at once (--die-with-parent)
    and leave them none of the grace period."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == proc.pid and comm != "bwrap":  # fields[2]: the process group
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry), signal.SIGTERM)


def _signal(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)
