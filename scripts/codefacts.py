#!/usr/bin/env python3
"""Print the figures that describe the shape of ``src/runyard``: not a test, a measuring tape.

- modules and lines per package (the base modules directly under ``runyard/`` count as "base");
- the ten longest functions (name, file, lines);
- the places that format SSE (string literals that start an ``event:``/``data:``/``id:`` line,
  outside ``.startswith`` parsing), that map errors to HTTP (status-code tables, exception
  classes carrying an HTTP status, functions answering an error JSONResponse with a status;
  the client and CLI, which read statuses, are left out),
  and that implement watching processes (poll with ``select.poll``, register pidfds with a
  selector, or define the exit-monitor thread); modules that only use those are not counted.

Each place is a module (``file``) with what was found in it, so "1" means one module owns it.
Usage: ``python scripts/codefacts.py [SRC]`` (default: the ``src/runyard`` beside this script).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READERS = {"startswith", "removeprefix", "partition", "split"}
SSE_PREFIXES = ("event:", "data:", "id:", "retry:")
NOT_SERVING = ("runyard/client/", "runyard/cli/")  # they read statuses, they do not answer them


def modules(src: Path) -> list[Path]:
    return sorted(p for p in src.rglob("*.py") if "__pycache__" not in p.parts)


def package_of(path: Path, src: Path) -> str:
    rel = path.relative_to(src)
    return "base" if len(rel.parts) == 1 else rel.parts[0]


def sizes(src: Path) -> dict[str, tuple[int, int]]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for path in modules(src):
        entry = counts[package_of(path, src)]
        entry[0] += 1
        entry[1] += len(path.read_text(encoding="utf-8").splitlines())
    return {name: (c[0], c[1]) for name, c in sorted(counts.items())}


def longest_functions(trees: dict[Path, ast.Module], count: int = 10) -> list[tuple]:
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                found.append((length, node.name, path))
    return sorted(found, key=lambda f: -f[0])[:count]


def _literal_head(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        value = node.value
        return value.decode("latin-1") if isinstance(value, bytes) else value
    if isinstance(node, ast.JoinedStr) and node.values:
        return _literal_head(node.values[0])
    return None


def _parsing_args(tree: ast.Module) -> set[int]:
    """ids of string nodes passed to str methods that read a line (startswith and friends)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr in READERS:
            skip.update(id(arg) for arg in ast.walk(node))
        if isinstance(node, ast.Compare):
            skip.update(id(arg) for arg in ast.walk(node))
    return skip


def formats_sse(tree: ast.Module) -> bool:
    skip = _parsing_args(tree)
    for node in ast.walk(tree):
        head = _literal_head(node)
        if head and id(node) not in skip and head.startswith(SSE_PREFIXES):
            return True
    return False


def _is_status(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and 400 <= node.value < 600


def _status_table(node: ast.AST) -> bool:
    if not isinstance(node, ast.Dict):
        return False
    return any(_is_status(k) for k in node.keys if k) or any(_is_status(v) for v in node.values)


def _status_class(node: ast.AST) -> bool:
    if not isinstance(node, ast.ClassDef):
        return False
    for stmt in node.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and _is_status(stmt.value or ast.Pass()):
            return True
    return False


def _error_response(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "JSONResponse"):
        return False
    if not any(k.arg == "status_code" for k in node.keywords):
        return False
    text = ast.unparse(node.args[0]) if node.args else ""
    return "error" in text


ANSWER_CALLS = {"JSONResponse", "Response", "PlainTextResponse", "HTTPException"}


def _literal_status_answer(node: ast.AST) -> bool:
    """A response or HTTPException made with a literal 4xx/5xx status, whatever its body."""
    if not (isinstance(node, ast.Call) and _call_name(node).split(".")[-1] in ANSWER_CALLS):
        return False
    statuses = [k.value for k in node.keywords if k.arg in ("status_code", "status")]
    if _call_name(node).endswith("HTTPException") and node.args:
        statuses.append(node.args[0])
    return any(_is_status(status) for status in statuses)


def maps_errors(tree: ast.Module) -> list[str]:
    kinds = set()
    for node in ast.walk(tree):
        if _status_table(node):
            kinds.add("status table")
        if _status_class(node):
            kinds.add("exception carries status")
        if _error_response(node):
            kinds.add("error JSONResponse")
        elif _literal_status_answer(node):
            kinds.add("literal error status")
    return sorted(kinds)


def _call_name(node: ast.AST) -> str:
    if not isinstance(node, ast.Call):
        return ""
    func = node.func
    if isinstance(func, ast.Attribute):
        return f"{getattr(func.value, 'id', '')}.{func.attr}"
    return getattr(func, "id", "")


def watches_processes(tree: ast.Module) -> list[str]:
    """How a module implements waiting for process exits: a ``select.poll``, a selector in a
    module that opens pidfds, or the definition of the ``ExitMonitor`` thread. Modules that
    call the one watching module (make an ExitMonitor, wait through it) do not count."""
    calls = {_call_name(node) for node in ast.walk(tree)} - {""}
    found = {name for name in calls if name == "select.poll"}
    classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    found |= {f"class {name}" for name in classes & {"ExitMonitor"}}
    opens_pidfds = bool(calls & {"open_pidfd", "os.pidfd_open"})
    if opens_pidfds:
        found |= {name for name in calls if name.startswith("selectors.")}
    return sorted(found)


def report(src: Path) -> None:
    trees = {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in modules(src)}
    rel = {p: str(p.relative_to(src.parent)) for p in trees}
    print("modules and lines per package:")
    total = [0, 0]
    for name, (count, lines) in sizes(src).items():
        total[0] += count
        total[1] += lines
        print(f"  {name:12} {count:4} modules {lines:7} lines")
    print(f"  {'total':12} {total[0]:4} modules {total[1]:7} lines")
    print("longest functions:")
    for length, name, path in longest_functions(trees):
        print(f"  {length:4} lines  {name}  ({rel[path]})")
    sections = [
        ("format SSE", lambda t: ["sse lines"] if formats_sse(t) else []),
        ("map errors to HTTP", maps_errors),
        ("watch processes", watches_processes),
    ]
    for title, probe in sections:
        places = {rel[p]: probe(t) for p, t in trees.items()}
        places = {k: v for k, v in places.items() if v}
        if title == "map errors to HTTP":
            places = {k: v for k, v in places.items() if not k.startswith(NOT_SERVING)}
        print(f"places that {title}: {len(places)}")
        for path, what in sorted(places.items()):
            print(f"  {path}: {', '.join(what)}")


if __name__ == "__main__":
    report(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "src" / "runyard")
