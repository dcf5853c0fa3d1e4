"""File names are bytes: how runyard carries, shows and takes back a name that is not UTF-8.

A task, or sandboxed code in a run's ``out/``, can create any name Linux allows, such as
``b"bad\\xff.txt"``. Python hands names over as ``str`` decoded with ``surrogateescape``
(each byte that is not part of valid UTF-8 becomes one of U+DC80..U+DCFF), and runyard
keeps them so internally: every ``os`` call given that ``str`` reaches the same bytes, so
walking, hashing, archiving and restoring are byte-exact. Such a ``str`` has no UTF-8
form, so it can go into no JSON answer, record, SQLite row or log line as it is.

**The one rule.** Wherever a name leaves runyard as text, it is :func:`shown_name`: each
byte that is not part of valid UTF-8, and each backslash, is written ``\\xNN`` (two
lowercase hex digits); everything else is the name itself. The form is one-to-one (a
backslash in a shown name always starts an escape), so :func:`name_from_shown` takes a
shown name back to the exact bytes, and a file is served by its shown name.

>>> shown_name(b"bad\\xff.txt".decode("utf-8", "surrogateescape"))
'bad\\\\xff.txt'
>>> name_from_shown("bad\\\\xff.txt").encode("utf-8", "surrogateescape")
b'bad\\xff.txt'
>>> shown_name("a\\\\b")
'a\\\\x5cb'
"""

from __future__ import annotations

import re
from typing import Any

from runyard.errors import UnsafePath

_ESCAPE = re.compile(r"\\x([0-9a-f]{2})")
_BYTE = re.compile("[\udc80-\udcff]")
_SHOWN_AS_ESCAPE = re.compile("[\udc80-\udcff\\\\]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def is_text_name(name: str) -> bool:
    """True when ``name`` (as Python's ``os`` functions give it) is valid UTF-8 on disk."""
    return _BYTE.search(name) is None


def shown_name(name: str) -> str:
    """``name`` (a ``surrogateescape`` str) as text: undecodable bytes and backslashes as
    ``\\xNN``."""
    if _SHOWN_AS_ESCAPE.search(name) is None:
        return name
    return _SHOWN_AS_ESCAPE.sub(_escaped, name)


def _escaped(found: re.Match[str]) -> str:
    char = found.group()
    byte = 0x5C if char == "\\" else ord(char) - 0xDC00
    return f"\\x{byte:02x}"


def name_from_shown(shown: str) -> str:
    """The name (a ``surrogateescape`` str) whose :func:`shown_name` is ``shown``.

    A shown name that is not in the one form (an escape of a byte that would have been
    shown as itself, uppercase hex, a backslash that starts no escape) is refused with
    :class:`UnsafePath`: each file has exactly one shown name.
    """
    if _SURROGATE.search(shown):
        raise UnsafePath(printable(shown)[:64], "a shown file name is text, without surrogates")
    if "\\" not in shown:
        return shown
    pieces = _ESCAPE.split(shown)  # text, hex digits, text, hex digits, ..., text
    raw = b"".join(
        bytes([int(piece, 16)]) if index % 2 else piece.encode("utf-8")
        for index, piece in enumerate(pieces)
    )
    name = raw.decode("utf-8", "surrogateescape")
    if shown_name(name) != shown:
        raise UnsafePath(
            shown[:64],
            "a backslash in a shown file name starts \\xNN, a byte that is not UTF-8 text "
            "(or 5c, a backslash)",
        )
    return name


def printable(text: str) -> str:
    """``text`` with every lone surrogate written out (``\\xNN`` for an undecodable byte of a
    name, ``\\udNNN`` for any other), so that a message naming a file always has a UTF-8
    form; other text, backslashes included, is kept."""
    if _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(_written_out, text)


def _written_out(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def entry_to_json(entry: dict[str, Any]) -> dict[str, Any]:
    """A manifest entry ``{"path": ..., ...}`` fit for JSON: a path that is not UTF-8 goes
    as its shown name, with its exact bytes in hex under ``path_hex``."""
    path = entry["path"]
    if is_text_name(path):
        return entry
    raw = path.encode("utf-8", "surrogateescape")
    return {**entry, "path": shown_name(path), "path_hex": raw.hex()}


def entry_from_json(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry :func:`entry_to_json` wrote, its path the name on disk again."""
    entry = dict(entry)
    raw = entry.pop("path_hex", None)
    if raw is not None:
        entry["path"] = bytes.fromhex(raw).decode("utf-8", "surrogateescape")
    return entry
