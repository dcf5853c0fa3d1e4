"""Generated task names: ``<task>-<adjective>-<noun>-<n>``, within the task-name rule."""

from __future__ import annotations

import random
import re

from runyard.workspace.identity import TASK_NAME_RE, build_task_id, generate_task_name
from runyard.workspace.names import ADJECTIVES, NOUNS, number_ceiling, readable_name

SHAPE = re.compile(r"^(?:(?P<task>[A-Za-z0-9-]+)-)?(?P<adj>[a-z]+)-(?P<noun>[a-z]+)-(?P<n>\d+)$")


def test_names_read_as_task_adjective_noun_number() -> None:
    for _ in range(500):
        name = generate_task_name("demo")
        found = SHAPE.fullmatch(name)
        assert found and found["task"] == "demo", name
        assert found["adj"] in ADJECTIVES and found["noun"] in NOUNS
        assert 1 <= int(found["n"]) <= 99


def test_every_name_keeps_the_task_name_rule_whatever_the_task() -> None:
    rng = random.Random(1)
    for task in ("demo", "my_etl_task", "x" * 64, "a-" * 32, "_", "Fit2"):
        for attempt in (0, 10, 63):
            name = readable_name(task, attempt, rng)
            assert TASK_NAME_RE.fullmatch(name), (task, name)
            assert not name.startswith("-") and "--" not in name, name
            build_task_id("base", "demo", name)  # a valid id
    assert readable_name("my_etl", 0, rng).startswith("my-etl-")
    assert SHAPE.fullmatch(readable_name("_", 0, rng))["task"] is None  # type: ignore[index]


def test_later_attempts_draw_from_more_numbers() -> None:
    assert [number_ceiling(a) for a in (0, 7, 8, 23, 24, 63)] == [
        99, 99, 9_999, 9_999, 999_999, 999_999,
    ]  # fmt: skip
    rng = random.Random(3)
    late = [int(readable_name("demo", 40, rng).rsplit("-", 1)[1]) for _ in range(200)]
    assert max(late) > 9_999
