"""``runyard sync push NAME``: the tasks to push may be named as everywhere (a unique name,
``type:name``, the ``:`` form); a name of no task or of several is refused before anything
is sent."""

from __future__ import annotations

from pathlib import Path

from sync_helpers import push_cli, push_json, run_task

from serverproc import start_server


def test_push_takes_names_and_refuses_unknown_or_ambiguous_ones(tmp_path: Path) -> None:
    sender = start_server(tmp_path / "a")
    receiver = start_server(tmp_path / "b")
    try:
        run_task(sender, "demo", x=1, y=2, task_name="twin")
        run_task(sender, "command", command="true", task_name="twin")
        solo = run_task(sender, "demo", x=1, y=2, task_name="solo")["task_id"]
        report = push_json(sender, receiver, "solo", "demo:twin")
        assert sorted(report["sent"]) == ["base#demo#solo", "base#demo#twin"], report
        assert receiver.call("status", task_id=solo)["success"] is True
        unknown = push_cli(sender, receiver, "nope", check=False)
        assert unknown.returncode == 1 and "Task nope does not exist" in unknown.stderr
        twice = push_cli(sender, receiver, "twin", check=False)
        assert twice.returncode == 2 and "base#command#twin" in twice.stderr
        assert receiver.call("status", task_id="base:command:twin")["success"] is False
    finally:
        sender.stop()
        receiver.stop()
