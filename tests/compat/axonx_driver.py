"""Runs inside the AxonX 0.2.2 venv: the AxonX CLI and client, one request a line.

Each stdin line is a JSON request; each answer is one JSON line on stdout:
``{"cli": [...argv]}`` runs ``axonx.cli.main.main(argv)`` (what the ``axonx`` script
runs) and answers its exit code and output; ``{"client": op, ...}`` calls the AxonX
``HttpClient`` (``run_job``, ``stream_job``, ``list_jobs``, ``health``). One process
serves a whole test module, so AxonX is imported once.
"""

import asyncio
import contextlib
import io
import json
import sys

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


def serve():
    real_stdout = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "cli" in request:
                answer = run_cli(request["cli"])
            else:
                answer = {"ok": asyncio.run(run_client(request))}
        except Exception as exc:  # the test asserts on it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        real_stdout.write(json.dumps(answer) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    serve()
