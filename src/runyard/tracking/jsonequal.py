"""Equality of params as JSON has it, for comparing runs and filtering task lists.

``1`` and ``1.0`` are one JSON number, so they are equal; ``true`` and ``1`` are not
(Python's ``True == 1`` is no guide)::

    json_equal({"C": 1}, {"C": 1.0})   # True
    json_equal(True, 1)                # False
"""

from __future__ import annotations

import json


def json_equal(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` are the same JSON value."""
    return canonical(a) == canonical(b)


def canonical(value: object) -> str:
    """One text per JSON value (a number's integral float is written as its int)."""
    return json.dumps(_normal(value), sort_keys=True)


def _normal(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value
