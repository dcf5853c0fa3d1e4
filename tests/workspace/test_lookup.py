"""Task references (runyard.workspace.lookup): a full id in either form, a name, or a name
with its task type or task; ambiguity names the matches, only those the caller may see."""

from __future__ import annotations

import pytest

from runyard.errors import AmbiguousTaskId, InvalidTaskId, TaskNotFound
from runyard.workspace.identity import TASK_NAME_RE
from runyard.workspace.lookup import canonical_ref, full_id_of, resolve_task_ref

IDS = [
    "base#demo#api-demo",
    "etl#load#api-demo",
    "base#demo#solo",
    "train#fit#x",
    "base#demo#api-demo-2",  # a longer name that ends like another: never a match of it
    "base#demo#pre-api-demo",
]


def test_full_ids_in_either_form_are_taken_as_they_are() -> None:
    assert resolve_task_ref("base#demo#api-demo", IDS) == "base#demo#api-demo"
    assert resolve_task_ref("base:demo:api-demo", IDS) == "base#demo#api-demo"
    # a full id is not looked up: the route's own 404 answers one of no task
    assert resolve_task_ref("base:demo:gone", []) == "base#demo#gone"
    assert full_id_of("etl:load:x") == "etl#load#x" and full_id_of("x") is None
    assert canonical_ref("a:b") == "a#b"


def test_a_unique_name_or_qualified_name_resolves() -> None:
    assert resolve_task_ref("solo", IDS) == "base#demo#solo"
    assert resolve_task_ref("x", IDS) == "train#fit#x"
    assert resolve_task_ref("etl:api-demo", IDS) == "etl#load#api-demo"
    assert resolve_task_ref("load#api-demo", IDS) == "etl#load#api-demo"
    assert resolve_task_ref("demo:api-demo", IDS) == "base#demo#api-demo"
    assert resolve_task_ref("base:api-demo", IDS) == "base#demo#api-demo"


def test_an_ambiguous_name_lists_every_match_and_nothing_else() -> None:
    with pytest.raises(AmbiguousTaskId) as caught:
        resolve_task_ref("api-demo", IDS)
    assert caught.value.matches == ["base#demo#api-demo", "etl#load#api-demo"]
    message = str(caught.value)
    assert "base#demo#api-demo" in message and "etl#load#api-demo" in message
    assert "api-demo-2" not in message and "pre-api-demo" not in message


def test_unknown_names_are_not_found_and_bad_forms_are_refused() -> None:
    with pytest.raises(TaskNotFound):
        resolve_task_ref("api", IDS)  # no prefix matching: a name is whole
    with pytest.raises(TaskNotFound):
        resolve_task_ref("fit:solo", IDS)
    for bad in ("", "a/b", "..", "a#b#c#d", "a:b:c:d", "x y", "#solo", "solo#", "a_b"):
        with pytest.raises(InvalidTaskId):
            resolve_task_ref(bad, IDS)
    with pytest.raises(InvalidTaskId):
        resolve_task_ref(["solo"], IDS)


def test_matches_the_caller_may_not_see_are_never_named() -> None:
    """An attacker's name that also names another session's task: resolved among its own
    tasks only, and an ambiguity lists only its own ids."""
    mine = {"base#demo#api-demo", "base#demo#pre-api-demo"}
    assert resolve_task_ref("api-demo", IDS, mine.__contains__) == "base#demo#api-demo"
    with pytest.raises(TaskNotFound) as caught:
        resolve_task_ref("etl:api-demo", IDS, mine.__contains__)
    assert "etl#load" not in str(caught.value)
    both = [*IDS, "predict#demo#api-demo"]
    theirs = {"predict#demo#api-demo", "etl#load#api-demo"}
    with pytest.raises(AmbiguousTaskId) as ambiguous:
        resolve_task_ref("api-demo", both, theirs.__contains__)
    assert ambiguous.value.matches == ["etl#load#api-demo", "predict#demo#api-demo"]
    assert "base#demo" not in str(ambiguous.value)


def test_ids_are_listed_only_for_a_short_reference() -> None:
    asked: list[int] = []

    def known() -> list[str]:
        asked.append(1)
        return IDS

    assert resolve_task_ref("base:demo:solo", known) == "base#demo#solo"
    assert asked == []
    assert resolve_task_ref("solo", known) == "base#demo#solo" and asked == [1]


def test_no_name_holds_the_url_separator() -> None:
    """``:`` can stand for ``#`` only because no part of an id may hold one."""
    assert TASK_NAME_RE.fullmatch("a:b") is None
    with pytest.raises(InvalidTaskId):
        resolve_task_ref("base#demo#a:b", ["base#demo#a"])


def test_the_documented_ambiguity_is_what_the_cli_says() -> None:
    from pathlib import Path

    from runyard.cli.errors import plain

    docs = Path(__file__).parents[2] / "docs" / "task-ids.md"
    said = next(line.strip() for line in docs.read_text().splitlines() if "names 2 tasks" in line)
    error = AmbiguousTaskId("api-demo", ["base#command#api-demo", "base#demo#api-demo"])
    assert said == f"error: {plain(error)[0]}" and plain(error)[1] == 2


def test_a_long_ambiguity_lists_twenty_and_counts_the_rest() -> None:
    ids = [f"{task_type}#t{n}#same" for task_type in ("base", "etl", "train") for n in range(10)]
    with pytest.raises(AmbiguousTaskId) as caught:
        resolve_task_ref("same", ids)
    assert len(caught.value.matches) == 30
    message = str(caught.value)
    assert message.count("#same") == 20 and "and 10 more" in message
