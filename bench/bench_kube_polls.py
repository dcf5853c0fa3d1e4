"""API requests that polling Kubernetes runs costs, with and without the executor's watch.

    .venv/bin/python bench/bench_kube_polls.py [--runs 50] [--seconds 10] [--interval 1]

Against the fake API server of the tests (tests/executors/k8s_fake_api.py) on 127.0.0.1,
``--runs`` runs are launched and their containers started, so each holds its one log
stream; then every run is polled every ``--interval`` seconds (as the supervisor polls
agent runs) for ``--seconds``, first with ``watching=False``, then with the watch. Prints
the requests made in that steady period by verb and kind, and per run per minute. The log
streams opened before the period are not counted; nothing is asserted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "executors"))
from k8s_fake_api import FakeKubernetes  # noqa: E402
from kubernetes.client import ApiClient, Configuration  # noqa: E402

from runyard.executors.base import Handle, LaunchSpec, Mount  # noqa: E402
from runyard.executors.kubernetes import KubernetesExecutor, KubernetesSettings  # noqa: E402
from runyard.executors.kubernetes.names import RUN_ID_LABEL, resource_name  # noqa: E402


def launch_runs(
    fake: FakeKubernetes, executor: KubernetesExecutor, folder: Path, runs: int
) -> list[Handle]:
    handles = []
    for n in range(runs):
        workspace = folder / f"run-{n}"
        workspace.mkdir()
        spec = LaunchSpec(argv=["python", "-m", "agent"], log_path=folder / f"run-{n}.log",
                          mounts=[Mount(workspace, "/workspace")],
                          labels={RUN_ID_LABEL: f"run-{n}"})  # fmt: skip
        handles.append(executor.launch(spec))
        fake.start_container(resource_name(f"run-{n}"))
    deadline = time.monotonic() + 60
    while fake.request_counts()[("get", "Pod/log")] < runs and time.monotonic() < deadline:
        time.sleep(0.05)
    for handle in handles:
        executor.poll(handle)
    time.sleep(1.0)  # the last log streams open
    return handles


def steady_requests(watching: bool, runs: int, seconds: float, interval: float) -> Counter:
    fake = FakeKubernetes().start()
    settings = KubernetesSettings(image="registry.example/agent:1", node_name="node-a",
                                  instance="ry-bench", log_retry_seconds=0.05)  # fmt: skip
    executor = KubernetesExecutor(settings, ApiClient(Configuration(host=fake.url)),
                                  sweeping=False, watching=watching)  # fmt: skip
    try:
        with tempfile.TemporaryDirectory() as folder:
            handles = launch_runs(fake, executor, Path(folder), runs)
            before = fake.request_counts()
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                started = time.monotonic()
                for handle in handles:
                    executor.poll(handle)
                time.sleep(max(0.0, interval - (time.monotonic() - started)))
            return fake.request_counts() - before
    finally:
        executor.close()
        fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    print(f"{args.runs} running runs, each polled every {args.interval:g} s "
          f"for {args.seconds:g} s")  # fmt: skip
    for watching in (False, True):
        made = steady_requests(watching, args.runs, args.seconds, args.interval)
        total = sum(made.values())
        per_run_minute = total / args.runs / (args.seconds / 60)
        detail = ", ".join(f"{verb} {kind}: {n}" for (verb, kind), n in sorted(made.items()))
        label = "watch" if watching else "no watch"
        print(f"{label:>8}: {total} requests, {per_run_minute:.2f} per run per minute"
              f" ({detail or 'none'})")  # fmt: skip


if __name__ == "__main__":
    main()
