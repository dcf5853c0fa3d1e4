"""Task ids, task names, generated names and source_tasks (DESIGN section 2)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runyard.errors import InvalidInput, InvalidTaskId
from runyard.workspace.identity import (
    TASK_TYPES,
    TaskId,
    build_task_id,
    generate_task_name,
    is_task_id,
    normalise_source_tasks,
    parse_source_tasks,
    parse_task_id,
    validate_reg_name,
    validate_task_name,
)
from runyard.workspace.layout import Workspace


def test_build_and_parse_round_trip() -> None:
    task_id = build_task_id("base", "demo", "api-demo")
    assert task_id == "base#demo#api-demo"
    parsed = parse_task_id(task_id)
    assert parsed == TaskId("base", "demo", "api-demo")
    assert (parsed.task_type, parsed.task, parsed.task_name) == ("base", "demo", "api-demo")
    assert str(parsed) == task_id


@pytest.mark.parametrize("task_type", sorted(TASK_TYPES))
def test_every_task_type_is_accepted(task_type: str) -> None:
    assert parse_task_id(f"{task_type}#my_task-2#N-1").task_type == task_type


def test_task_types_are_the_enum_of_the_layout() -> None:
    assert {"base", "etl", "train", "predict", "backtest", "analysis", "inference"} == TASK_TYPES


@pytest.mark.parametrize("value", [None, 42, b"base#demo#a", ["base", "demo", "a"], 1.5])
def test_a_task_id_must_be_a_string(value: object) -> None:
    with pytest.raises(InvalidTaskId, match="a task id is a string"):
        parse_task_id(value)
    assert not is_task_id(value)


@pytest.mark.parametrize("value", ["", "base", "base#demo", "base#demo#a#b", "###", "#demo#a#"])
def test_a_task_id_has_three_parts(value: str) -> None:
    with pytest.raises(InvalidTaskId, match="<task_type>#<task>#<task_name>"):
        parse_task_id(value)


@pytest.mark.parametrize(
    "value",
    [
        "nope#demo#a",
        "agent#demo#a",
        "BASE#demo#a",
        " base#demo#a",
        "base#de mo#a",
        "base#de.mo#a",
        "base##a",
        "base#" + "d" * 65 + "#a",
        "base#demo#",
        "base#demo#a_b",
        "base#demo#a b",
        "base#demo#" + "n" * 33,
        "base#demo#ä",
        "base#demo#a\n",
    ],
)
def test_bad_parts_are_refused_with_the_rule(value: str) -> None:
    with pytest.raises(InvalidTaskId) as caught:
        parse_task_id(value)
    assert caught.value.task_id == value
    assert re.search(r"task type must be one of|task must be|task_name must be", str(caught.value))


@pytest.mark.parametrize(
    "value",
    [
        "base#demo#../x",
        "base#../etc#x",
        "base#demo#a/b",
        "base/..#demo#x",
        "base#demo#a\\b",
        "base#demo#..",
        "base#demo#.",
        "base#de\x00mo#a",
    ],
)
def test_path_separators_and_dot_dot_never_make_an_id(value: str) -> None:
    for _ in range(2):  # parsed ids are remembered: a refused one stays refused
        with pytest.raises(InvalidTaskId):
            parse_task_id(value)
        with pytest.raises(InvalidTaskId):
            Workspace(Path("/ws"), Path("/logs")).task_dir(value)


@pytest.mark.parametrize("value", [None, 7, ["base", "demo", "x"], {"task": "x"}])
def test_a_task_id_that_is_not_a_string_has_no_folder(value: object) -> None:
    with pytest.raises(InvalidTaskId):
        Workspace(Path("/ws"), Path("/logs")).task_dir(value)  # type: ignore[arg-type]


def test_remembered_ids_and_folders_are_the_parsed_ones() -> None:
    first = parse_task_id("base#demo#kept")
    assert parse_task_id("base#demo#kept") == first == TaskId("base", "demo", "kept")
    one, other = Workspace(Path("/ws-a"), Path("/l")), Workspace(Path("/ws-b"), Path("/l"))
    for _ in range(2):  # each workspace its own folder, however often asked
        assert one.task_dir("base#demo#kept") == Path("/ws-a/base/base#demo#kept")
        assert other.task_dir("base#demo#kept") == Path("/ws-b/base/base#demo#kept")


def test_name_lengths_at_the_bounds() -> None:
    assert parse_task_id("base#demo#" + "n" * 32).task_name == "n" * 32
    assert parse_task_id("base#demo#x").task_name == "x"
    assert validate_task_name("A-z-0-9") == "A-z-0-9"
    for bad in ["", "n" * 33, "a_b", "a.b", "a\n", 7, None]:
        with pytest.raises(InvalidInput, match="1-32 English letters, digits or hyphens"):
            validate_task_name(bad)  # type: ignore[arg-type]


def test_registered_names() -> None:
    assert validate_reg_name("my_task-2") == "my_task-2"
    for bad in ["", "a b", "a#b", "a/b", "x" * 65, "demo\n", 3]:
        with pytest.raises(InvalidInput, match="letters, digits, '_' or '-'"):
            validate_reg_name(bad)  # type: ignore[arg-type]


def test_build_refuses_what_parse_refuses() -> None:
    for parts in [("nope", "demo", "a"), ("base", "de mo", "a"), ("base", "demo", "n" * 33)]:
        with pytest.raises(InvalidTaskId):
            build_task_id(*parts)
    for parts in [("base", 5, "a"), ("base", "demo", None), (["base"], "demo", "a")]:
        with pytest.raises(InvalidTaskId, match="is a string"):
            build_task_id(*parts)  # type: ignore[arg-type]


def test_generated_names_follow_the_name_rule() -> None:
    """Candidates may repeat (creation takes one only if no folder has it: test_submit)."""
    names = [generate_task_name("demo", attempt) for attempt in range(64)]
    for name in names:
        assert re.fullmatch(r"[A-Za-z0-9-]{1,32}", name)
        assert parse_task_id(build_task_id("base", "demo", name)).task_name == name


def test_source_tasks_parse_and_normalise() -> None:
    assert parse_source_tasks(None) == []
    assert parse_source_tasks("") == []
    assert parse_source_tasks(" , ,") == []
    text = " base#demo#a ,etl#load#b,\tpredict#p#c , "
    assert parse_source_tasks(text) == ["base#demo#a", "etl#load#b", "predict#p#c"]
    assert normalise_source_tasks(text) == "base#demo#a,etl#load#b,predict#p#c"
    assert normalise_source_tasks(None) == ""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("demo", "not a full task id"),
        ("base#demo", "not a full task id"),
        ("base#demo#a,api-demo", "not a full task id"),
        ("base#demo#a;base#demo#b", "not a full task id"),
        ("base#demo#../x", "not a full task id"),
        ("base#demo#a,base#demo#a", "more than once"),
        ("base#demo#a, base#demo#a ", "more than once"),
        (["base#demo#a"], "comma-separated string"),
        (5, "comma-separated string"),
        ({"a": 1}, "comma-separated string"),
        (b"base#demo#a", "comma-separated string"),
    ],
)
def test_bad_source_tasks_say_what_is_wrong(value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_source_tasks(value)
    with pytest.raises(InvalidInput):
        normalise_source_tasks(value)
