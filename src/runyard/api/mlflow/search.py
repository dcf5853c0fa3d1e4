"""``search_runs``: MLflow's filter grammar (a subset), ``order_by`` and paging.

A filter is clauses joined by ``AND`` (case-insensitive)::

    metrics.rmse < 0.5 AND params.model = 'ridge' AND attributes.status = 'FINISHED'
    tags.`team name` != 'x' AND run_name LIKE 'ridge-%' AND attributes.run_id IN ('a', 'b')

* ``metrics.<key>`` (the last value) with ``= != < <= > >=`` and a number;
* ``params.<key>`` and ``tags.<key>`` with ``= !=`` ``LIKE`` ``ILIKE`` and a quoted string;
* ``attributes.<name>`` (or the bare name): ``status``, ``run_name``, ``run_id``,
  ``user_id``, ``artifact_uri`` as text (``IN``/``NOT IN`` a list for ``run_id``),
  ``start_time``, ``end_time`` as numbers (epoch ms).

A key with spaces or dots is quoted with backticks or double quotes. ``OR``, parentheses,
``IS NULL``, ``datasets.*`` and anything else answer INVALID_PARAMETER_VALUE naming what
was not understood. ``order_by`` takes ``metrics.<key>``, ``params.<key>``,
``tags.<key>`` or an attribute, then ``ASC`` or ``DESC``; runs without the value come
last. Without it runs are newest first (start time, then run id).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runyard.api.mlflow.errors import INVALID, MlflowRefusal

MAX_FILTER_CHARS = 4000
MAX_RESULTS = 50_000
DEFAULT_RESULTS = 1000
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
      | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:\.(?:`[^`]+`|"[^"]+"|[A-Za-z0-9_\-./:]+))?)
      | (?P<op><=|>=|!=|=|<|>)
      | (?P<punct>[(),])
    )""",
    re.VERBOSE,
)
KEYWORDS = {"AND", "LIKE", "ILIKE", "IN", "NOT", "OR", "IS", "NULL"}
ENTITIES = {"metrics": "metric", "metric": "metric", "params": "param", "param": "param",
            "parameters": "param", "tags": "tag", "tag": "tag", "attributes": "attribute",
            "attribute": "attribute", "attr": "attribute", "run": "attribute"}  # fmt: skip
TEXT_ATTRIBUTES = frozenset({"status", "run_name", "run_id", "user_id", "artifact_uri"})
NUMBER_ATTRIBUTES = frozenset({"start_time", "end_time"})
NUMBER_OPS = {"=", "!=", "<", "<=", ">", ">="}
TEXT_OPS = {"=", "!=", "LIKE", "ILIKE"}


@dataclass(frozen=True)
class Clause:
    entity: str  # metric, param, tag, attribute
    key: str
    op: str
    value: Any


@dataclass(frozen=True)
class Row:
    """What a filter and an order read of one run."""

    info: dict[str, Any]
    metrics: dict[str, Any]  # key -> last value (a number, or "NaN"/"Infinity"...)
    params: dict[str, str]
    tags: dict[str, str]


def _refuse(message: str) -> MlflowRefusal:
    return MlflowRefusal(INVALID, f"Invalid search filter: {message}")


def tokens(text: str) -> list[tuple[str, str]]:
    found, at = [], 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise _refuse(f"cannot read {text[at : at + 40].strip()!r}")
        kind = match.lastgroup or ""
        value = match.group(kind).strip()
        if kind == "ident" and value.upper() in KEYWORDS:
            kind = "keyword"
            value = value.upper()
        found.append((kind, value))
        at = match.end()
    return found


def parse_filter(
    text: object,
    text_attributes: frozenset[str] = TEXT_ATTRIBUTES,
    number_attributes: frozenset[str] = NUMBER_ATTRIBUTES,
) -> list[Clause]:
    """The clauses of ``text`` (all must hold); [] for an empty filter. The attributes a
    filter may name are those of runs unless others are given (an experiment's)."""
    if text is None or text == "":
        return []
    if not isinstance(text, str) or len(text) > MAX_FILTER_CHARS:
        raise _refuse(f"a filter is text of at most {MAX_FILTER_CHARS} characters")
    items = tokens(text)
    clauses, at = [], 0
    while at < len(items):
        clause, at = _clause(items, at)
        _check(clause, text_attributes, number_attributes)
        clauses.append(clause)
        if at < len(items):
            if items[at] != ("keyword", "AND"):
                raise _refuse(f"expected AND, found {items[at][1]!r} (only AND joins clauses)")
            at += 1
            if at == len(items):
                raise _refuse("a clause is missing after AND")
    return clauses


def _clause(items: list[tuple[str, str]], at: int) -> tuple[Clause, int]:
    kind, text = items[at]
    if kind != "ident":
        raise _refuse(f"expected a name such as metrics.x, found {text!r}")
    entity, key = _identifier(text)
    op, at = _operator(items, at + 1)
    if op in ("IN", "NOT IN"):
        values, at = _value_list(items, at)
        clause = Clause(entity, key, op, values)
    else:
        if at >= len(items):
            raise _refuse(f"{text} {op} needs a value")
        clause = Clause(entity, key, op, _value(items[at]))
        at += 1
    return clause, at


def _identifier(text: str) -> tuple[str, str]:
    prefix, dot, rest = text.partition(".")
    if dot and prefix.lower() in ENTITIES and not prefix.startswith(("`", '"')):
        entity, key = ENTITIES[prefix.lower()], _unquote(rest)
    elif not dot or text.startswith(("`", '"')):
        entity, key = "attribute", _unquote(text)
    else:
        raise _refuse(f"unknown name {text!r}: use metrics., params., tags. or attributes.")
    if not key:
        raise _refuse(f"{text!r} names nothing")
    return entity, key


def _unquote(key: str) -> str:
    if len(key) >= 2 and key[0] == key[-1] and key[0] in '`"':
        return key[1:-1]
    return key


def _operator(items: list[tuple[str, str]], at: int) -> tuple[str, int]:
    if at >= len(items):
        raise _refuse("a comparison is missing its operator")
    kind, text = items[at]
    if kind == "op" or (kind == "keyword" and text in ("LIKE", "ILIKE", "IN")):
        return text, at + 1
    if (kind, text) == ("keyword", "NOT") and at + 1 < len(items) and items[at + 1][1] == "IN":
        return "NOT IN", at + 2
    raise _refuse(f"unsupported operator {text!r}")


def _value(item: tuple[str, str]) -> Any:
    kind, text = item
    if kind == "number":
        return float(text)
    if kind == "string":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    raise _refuse(f"expected a number or a quoted string, found {text!r}")


def _value_list(items: list[tuple[str, str]], at: int) -> tuple[list[Any], int]:
    if at >= len(items) or items[at] != ("punct", "("):
        raise _refuse("IN needs a list in parentheses: ('a', 'b')")
    values, at = [], at + 1
    while at < len(items):
        values.append(_value(items[at]))
        at += 1
        if at < len(items) and items[at] == ("punct", ")"):
            return values, at + 1
        if at >= len(items) or items[at] != ("punct", ","):
            break
        at += 1
    raise _refuse("an IN list must be quoted values separated by commas, in parentheses")


def _check(clause: Clause, texts: frozenset[str], numbers: frozenset[str]) -> None:
    entity, key, op, value = clause.entity, clause.key, clause.op, clause.value
    if entity == "metric" or (entity == "attribute" and key in numbers):
        if op not in NUMBER_OPS or not isinstance(value, float):
            raise _refuse(f"{key}: compare a number with = != < <= > >=")
    elif entity == "attribute" and key not in texts:
        raise _refuse(f"unknown attribute {key!r} (one of {', '.join(sorted(texts | numbers))})")
    elif op in ("IN", "NOT IN"):
        if (entity, key) != ("attribute", "run_id"):
            raise _refuse("IN and NOT IN are for attributes.run_id only")
        if not all(isinstance(v, str) for v in value):
            raise _refuse("an IN list holds quoted strings")
    elif op not in TEXT_OPS or not isinstance(value, str):
        raise _refuse(f"{key}: compare a quoted string with = != LIKE ILIKE")


# --- evaluating ------------------------------------------------------------------------


def matches(row: Row, clauses: list[Clause]) -> bool:
    return all(_holds(row, clause) for clause in clauses)


def _holds(row: Row, clause: Clause) -> bool:
    found = lookup(row, clause.entity, clause.key)
    if found is None:
        return False
    if clause.op in ("IN", "NOT IN"):
        return (found in clause.value) == (clause.op == "IN")
    if isinstance(clause.value, float):
        number = as_number(found)
        return number is not None and _compare(number, clause.op, clause.value)
    return _text_holds(str(found), clause.op, clause.value)


def lookup(row: Row, entity: str, key: str) -> Any:
    if entity == "metric":
        return row.metrics.get(key)
    if entity == "param":
        return row.params.get(key)
    if entity == "tag":
        return row.tags.get(key)
    return row.info.get(key)


def as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if value in ("NaN", "Infinity", "-Infinity"):
        return float(value.replace("Infinity", "inf"))
    return None


COMPARE: dict[str, Callable[[float, float], bool]] = {
    "=": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}  # fmt: skip


def _compare(left: float, op: str, right: float) -> bool:
    if math.isnan(left):
        return op == "!="
    return COMPARE[op](left, right)


def _text_holds(found: str, op: str, value: str) -> bool:
    if op == "=":
        return found == value
    if op == "!=":
        return found != value
    flags = re.IGNORECASE if op == "ILIKE" else 0
    pattern = "".join(
        ".*" if c == "%" else "." if c == "_" else re.escape(c) for c in value
    )  # SQL's LIKE: % any run of characters, _ one character
    return re.fullmatch(pattern, found, flags | re.DOTALL) is not None


# --- ordering and paging -----------------------------------------------------------------


def parse_order(
    order_by: object, attributes: frozenset[str] = TEXT_ATTRIBUTES | NUMBER_ATTRIBUTES
) -> list[tuple[str, str, bool]]:
    """``[(entity, key, ascending)]`` of MLflow's ``order_by`` list."""
    if order_by is None:
        return []
    if not isinstance(order_by, list) or not all(isinstance(o, str) for o in order_by):
        raise MlflowRefusal(INVALID, "order_by must be a list of strings")
    found = []
    for text in order_by:
        words = text.strip().rsplit(None, 1)
        ascending = True
        if len(words) == 2 and words[1].upper() in ("ASC", "DESC"):
            text, ascending = words[0], words[1].upper() == "ASC"
        entity, key = _identifier(text.strip())
        if entity == "attribute" and key not in attributes:
            raise MlflowRefusal(INVALID, f"Invalid order_by: unknown attribute {key!r}")
        found.append((entity, key, ascending))
    return found


def newest_first(rows: list[Row]) -> list[Row]:
    """Runs by start time, newest first, then by run id (MLflow's order without order_by)."""
    return sorted(rows, key=lambda r: (r.info.get("start_time") or 0, r.info.get("run_id", "")),
                  reverse=True)  # fmt: skip


def ordered(rows: list[Row], order: list[tuple[str, str, bool]]) -> list[Row]:
    """``rows`` sorted by each key of ``order`` (the first key wins; a stable sort, so
    rows equal in every key keep their order)."""
    for entity, key, ascending in reversed(order):
        keyed = [(_sortable(lookup(r, entity, key)), r) for r in rows]
        present = [(value, r) for value, r in keyed if value is not None]
        present.sort(key=lambda pair: pair[0], reverse=not ascending)
        rows = [r for _, r in present] + [r for value, r in keyed if value is None]
    return rows


def _sortable(value: Any) -> tuple[int, Any] | None:
    number = as_number(value)
    if number is not None:
        return None if math.isnan(number) else (0, number)
    return None if value is None else (1, str(value))


def page(rows: list[Any], max_results: object, token: object) -> tuple[list[Any], str | None]:
    """One page of ``rows`` and the token of the next (None at the end)."""
    limit = DEFAULT_RESULTS if max_results is None else _int(max_results, "max_results")
    if not 1 <= limit <= MAX_RESULTS:
        raise MlflowRefusal(INVALID, f"max_results must be 1-{MAX_RESULTS}")
    start = _offset(token)
    end = start + limit
    return rows[start:end], (_token(end) if end < len(rows) else None)


def _int(value: object, name: str) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise MlflowRefusal(INVALID, f"{name} must be a positive integer")


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def _offset(token: object) -> int:
    if token is None or token == "":
        return 0
    try:
        data = json.loads(base64.urlsafe_b64decode(str(token).encode()))
        offset = data["offset"]
    except (ValueError, TypeError, KeyError) as exc:
        raise MlflowRefusal(INVALID, "Invalid page_token") from exc
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise MlflowRefusal(INVALID, "Invalid page_token")
    return offset
