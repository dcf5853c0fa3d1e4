"""Deleting with a repository: whether a log is shared comes from the index's reference count."""

from __future__ import annotations

from pathlib import Path

from test_delete import finished

from runyard.repository import TaskRepository
from runyard.repository.index import TaskIndex
from runyard.repository.records import parse_status
from runyard.workspace.atomic import dump_json


def test_a_shared_log_survives_deleting_one_task_and_goes_with_the_second(
    make_supervisor, workspace, registry
):
    first = finished(workspace, registry, "first")
    second = finished(workspace, registry, "second")
    with TaskRepository(workspace) as repo:
        answers: list[set[str] | None] = []

        def references(deleted: list[str], paths: set[str]) -> set[str] | None:
            answers.append(repo.referenced_logs(deleted, paths))
            return answers[-1]

        sup = make_supervisor(start=False)
        sup.log_references = references
        # replaced after the index was built: the count must follow the replacement
        workspace.write_status(second.model_copy(update={"log_path": first.log_path}))
        repo.refresh(second.task_id)

        assert sup.delete([first.task_id]) == [first.task_id]
        assert Path(first.log_path).read_text() == "log of first\n"

        assert sup.delete([second.task_id]) == [second.task_id]
        assert not Path(first.log_path).exists()
        assert Path(second.log_path).exists()  # nothing names it, but it was never second's
    assert len(answers) == 2 and None not in answers  # answered by the index, not a scan


def status_record(workspace, registry, name: str, log: str):
    status = finished(workspace, registry, name).model_copy(update={"log_path": log})
    parsed = parse_status(dump_json(status.to_json()), status.task_id)
    assert parsed is not None
    return status.task_id, parsed[0]


def test_log_reference_counts_follow_add_replace_and_remove(workspace, registry, tmp_path):
    a, b = str(tmp_path / "a.log"), str(tmp_path / "b.log")
    one_id, one = status_record(workspace, registry, "one", a)
    two_id, two = status_record(workspace, registry, "two", a)
    _, two_moved = status_record(workspace, registry, "two", b)
    index = TaskIndex()
    index.load([(one_id, (True, one, None))])
    index.apply(two_id, status=two)
    assert index.referenced_logs({a, b}) == {a}

    index.apply(two_id, status=two_moved)  # replaced: a is named once, b once
    assert index.referenced_logs({a, b}) == {a, b}
    index.apply(one_id, status=None)
    assert index.referenced_logs({a, b}) == {b}
    index.apply(two_id, status=None)
    assert index.referenced_logs({a, b}) == set()
