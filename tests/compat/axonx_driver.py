"""Runs inside the AxonX 0.2.2 venv: the AxonX CLI and client, one request a line.

Each stdin line is a JSON request; each answer is one JSON line on stdout:
``{"cli": [...argv]}`` runs ``axonx.cli.main.main(argv)`` (what the ``axonx`` script
runs) and answers its exit code and output; ``{"client": op, ...}`` calls the AxonX
``HttpClient`` (``run_job``, ``stream_job``, ``list_jobs``, ``health``); ``{"peer": op,
...}`` acts as an AxonX peer: ``make_task`` writes a finished task with AxonX's own
storage code, ``sync_push`` runs AxonX's own sync sender (``LocalSyncComponent.flush``)
to a target. One process serves a whole test module, so AxonX is imported once.
"""

import asyncio
import contextlib
import dataclasses
import io
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from axonx.cli.main import main
from axonx.components.client import HttpClient


def run_cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return {"rc": code, "out": out.getvalue(), "err": err.getvalue()}


async def run_client(request):
    op = request["client"]
    async with HttpClient(target=request["target"], token=request.get("token")) as client:
        if op == "run_job":
            response = await client.run_job(request["name"], request.get("arguments"))
            return response.model_dump(mode="json")
        if op == "stream_job":
            events = client.stream_job(request["name"], request.get("arguments"))
            return [
                {"type": type(event).__name__, **event.model_dump(mode="json")}
                async for event in events
            ]
        if op == "list_jobs":
            return [job.model_dump(mode="json") for job in await client.list_jobs()]
        if op == "health":
            return await client.health()
    raise ValueError(f"unknown op {op}")


def make_task(request):
    """A finished AxonX task in ``workspace``: its record written by AxonX's storage, an
    artifact it lists, progress events and a log in ``log_dir``; the task's folder."""
    from axonx.task.schemas.lifecycle import TaskMetadata
    from axonx.task.storage.workspace import task_path, write_task_metadata

    task_id, root = request["task_id"], Path(request["workspace"])
    folder = task_path(root, task_id)
    (folder / "out").mkdir(parents=True)
    artifact = json.dumps({"y": request["x"] + 1}).encode()
    (folder / "out" / "result.json").write_bytes(artifact)
    (folder / "events.jsonl").write_text('{"event": "done"}\n')
    log = Path(request["log_dir"]) / f"{task_id.rsplit('#', 1)[-1]}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(request["log"])
    now = datetime.now(UTC)
    record = TaskMetadata(
        version=1, task_id=task_id, run_id=request["run_id"], task_type=task_id.split("#")[0],
        reg_name=task_id.split("#")[1], state="succeeded", created_at=now, started_at=now,
        finished_at=now, log_path=str(log), input_params={"x": request["x"]},
        output_params={
            "y": request["x"] + 1,
            "artifacts": {
                "result": {"path": "out/result.json", "size": len(artifact), "revision": "1"}
            },
        },
        steps=[{"name": "compute", "state": "done", "percentage": 100}],
    )  # fmt: skip
    write_task_metadata(folder, record)
    return str(folder)


def sync_push(request):
    """AxonX's own sync sender, configured as a peer's ``sync:`` component with the target
    and its token, flushed once: its SyncReport."""
    from axonx.components.registry import ProviderRegistry
    from axonx.components.sync.local import LocalSyncComponent
    from axonx.core.context import ApplicationContext

    target = {"address": request["target"], "token": request["token"]}
    context = ApplicationContext(
        ProviderRegistry(),
        workspace_dir=request["workspace"],
        log_dir=request["log_dir"],
        targets=[target],
    )
    sender = LocalSyncComponent(target=request["target"], app_context=context)
    sender.configured_target = context.app_config.resolve_target(request["target"])
    return dataclasses.asdict(asyncio.run(sender.flush()))


PEER = {"make_task": make_task, "sync_push": sync_push}


def serve():
    real_stdout = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "cli" in request:
                answer = run_cli(request["cli"])
            elif "peer" in request:
                answer = {"ok": PEER[request["peer"]](request)}
            else:
                answer = {"ok": asyncio.run(run_client(request))}
        except Exception as exc:  # the test asserts on it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        real_stdout.write(json.dumps(answer) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    serve()
