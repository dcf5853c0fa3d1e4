"""The "did you mean" of every refusal of a name: the closest known name to a typo.

    closest("max_concurent_tasks", fields)     # "max_concurrent_tasks"
    did_you_mean("dmeo", ["command", "demo"])  # " Did you mean 'demo'?"

One rule for config keys (:mod:`runyard.configfile`), task names (:class:`UnknownTask`)
and input fields (:mod:`runyard.tasks.registry`): difflib's ratio of at least
:data:`CUTOFF`, the best one only.
"""

from __future__ import annotations

from collections.abc import Iterable

CUTOFF = 0.6


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The known name most like ``word``, or None when none is close enough."""
    import difflib  # loaded only when a name was refused

    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for the closest of ``choices``, else ``""``."""
    found = closest(word, choices)
    return f" Did you mean {found!r}?" if found is not None else ""
