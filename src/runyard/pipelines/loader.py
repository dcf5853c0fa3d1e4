"""Find a :class:`~runyard.pipelines.build.Pipeline` in a Python file, as the CLI names it.

    pipe = load_pipeline("flows/research.py:pipe")   # FILE.py[:NAME]

The file runs as a script (its folder first on ``sys.path``, so it imports its neighbours);
``NAME`` is the variable that holds the pipeline or the pipeline's own name; without it the
file must hold exactly one.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from runyard.errors import InvalidInput
from runyard.pipelines.build import Pipeline


def split_target(target: str) -> tuple[Path, str | None]:
    """``FILE.py[:NAME]`` as (path, name)."""
    path, sep, name = target.rpartition(":")
    if not sep or not path.endswith(".py"):
        return Path(target), None
    return Path(path), name or None


def load_pipeline(target: str) -> Pipeline:
    """The pipeline ``target`` names; InvalidInput says what is missing or ambiguous."""
    path, name = split_target(target)
    if not path.is_file():
        raise InvalidInput(f"No pipeline file {str(path)!r}: give FILE.py[:NAME]")
    found = _pipelines(_run(path))
    if name is not None:
        chosen = [p for var, p in found.items() if name in (var, p.name)]
        if not chosen:
            raise InvalidInput(f"{path} defines no pipeline {name!r}; it has: {_names(found)}")
        return chosen[0]
    distinct = list({id(p): p for p in found.values()}.values())
    if len(distinct) != 1:
        what = "no pipeline" if not distinct else f"{len(distinct)} pipelines ({_names(found)})"
        raise InvalidInput(f"{path} defines {what}: name one as {path}:NAME")
    return distinct[0]


def _run(path: Path) -> dict[str, object]:
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        return runpy.run_path(str(path), run_name="__runyard_pipeline__")
    except InvalidInput:
        raise  # a Pipeline refusing what the file asks says so itself
    except Exception as exc:  # the file's own error: where and what, not a traceback of ours
        raise InvalidInput(f"{path} failed to load: {type(exc).__name__}: {exc}") from exc
    finally:
        if folder in sys.path:
            sys.path.remove(folder)


def _pipelines(namespace: dict[str, object]) -> dict[str, Pipeline]:
    return {var: value for var, value in namespace.items() if isinstance(value, Pipeline)}


def _names(found: dict[str, Pipeline]) -> str:
    return ", ".join(sorted(found)) or "none"
