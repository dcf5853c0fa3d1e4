"""Generated task names people can read, say and type: ``<task>-<adjective>-<noun>-<n>``.

>>> import random
>>> readable_name("demo", 0, random.Random(7)).startswith("demo-")
True

A name is at most 32 characters of ``[A-Za-z0-9-]`` (the task-name rule): the task's
registered name (``_`` written ``-``) cut to fit, a word pair and a number. It is a
candidate, not a promise: :func:`runyard.runtime.creation.create_task` takes it only when no
folder has it, under the id's claim, and asks again with the next ``attempt`` otherwise.
Each attempt draws from a larger range of numbers (1-99 at first, then up to 9,999 and
999,999), so a workspace where one task has used up the short names still finds a free
one in a few tries, while a small one keeps short names.
"""

from __future__ import annotations

import random
import re

MAX_LENGTH = 32
ADJECTIVES = (
    "amber", "bold", "brave", "brisk", "calm", "clever", "cool", "crisp", "dapper", "eager",
    "early", "fair", "fancy", "fast", "fine", "fond", "fresh", "gentle", "glad", "golden",
    "grand", "green", "happy", "hardy", "honest", "jolly", "keen", "kind", "lively", "lucky",
    "merry", "mild", "modest", "neat", "nimble", "noble", "plucky", "polite", "proud",
    "quick", "quiet", "rapid", "ready", "rosy", "shiny", "silver", "smart", "snowy", "solid",
    "steady", "sunny", "swift", "tidy", "tender", "vivid", "warm", "wise", "witty", "young",
    "zesty", "azure", "bright", "cosmic", "dusty",
)  # fmt: skip
NOUNS = (
    "otter", "falcon", "badger", "beaver", "bison", "cedar", "comet", "coral", "crane",
    "dolphin", "eagle", "ember", "fern", "finch", "fox", "gecko", "glacier", "harbor", "hawk",
    "heron", "iris", "jaguar", "koala", "lark", "lemur", "lily", "lynx", "maple", "marten",
    "meadow", "moose", "moth", "newt", "oak", "orca", "osprey", "owl", "panda", "pebble",
    "pine", "plover", "puffin", "quail", "raven", "reef", "river", "robin", "salmon", "seal",
    "sparrow", "spruce", "stork", "swan", "tiger", "trout", "tulip", "valley", "walrus",
    "willow", "wren", "yak", "zebra", "aspen", "birch",
)  # fmt: skip
# the highest number drawn at each attempt: 1-99 while the short names last
NUMBER_CEILINGS = ((8, 99), (24, 9_999))
LAST_CEILING = 999_999
_NOT_NAME = re.compile(r"[^A-Za-z0-9-]+")
_SYSTEM = random.SystemRandom()


def number_ceiling(attempt: int) -> int:
    """The largest number attempt ``attempt`` (0-based) may draw."""
    for until, ceiling in NUMBER_CEILINGS:
        if attempt < until:
            return ceiling
    return LAST_CEILING


def readable_name(task: str = "", attempt: int = 0, rng: random.Random | None = None) -> str:
    """A fresh candidate name for a task registered as ``task`` (see the module docstring)."""
    draw = rng or _SYSTEM
    number = draw.randint(1, number_ceiling(attempt))
    words = f"{draw.choice(ADJECTIVES)}-{draw.choice(NOUNS)}-{number}"
    room = MAX_LENGTH - len(words) - 1
    prefix = _NOT_NAME.sub("-", task.replace("_", "-"))[:room].strip("-")
    return f"{prefix}-{words}" if prefix else words
