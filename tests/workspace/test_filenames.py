"""The one form of a file name as text: one-to-one, always valid UTF-8, taken back exactly."""

from __future__ import annotations

import json
import random

import pytest

from runyard.errors import UnsafePath
from runyard.workspace.filenames import (
    entry_from_json,
    entry_to_json,
    is_text_name,
    name_from_shown,
    printable,
    shown_name,
)


def name_of(raw: bytes) -> str:
    """A name as Python's os functions hand it over."""
    return raw.decode("utf-8", "surrogateescape")


def random_raw(rnd: random.Random) -> bytes:
    pieces = [b"\\", b"x", b"f", b"\xff", b"\xc3\xa9", b"\xc3", b"\xed\xa0\x80", b"a", b"%"]
    return b"".join(rnd.choices(pieces, k=rnd.randint(1, 8))) + bytes(
        rnd.randrange(1, 256) for _ in range(rnd.randint(0, 4))
    )


def test_every_byte_string_has_one_shown_form_that_takes_it_back() -> None:
    rnd = random.Random(48)
    seen: dict[str, bytes] = {}
    for _ in range(5_000):
        raw = random_raw(rnd)
        shown = shown_name(name_of(raw))
        shown.encode("utf-8")  # strict: text
        assert name_from_shown(shown).encode("utf-8", "surrogateescape") == raw
        assert seen.setdefault(shown, raw) == raw, (shown, raw)  # one-to-one


@pytest.mark.parametrize(
    ("raw", "shown", "text"),
    [
        (b"bad\xff.txt", "bad\\xff.txt", False),
        (b"d\xfe/in\xfd", "d\\xfe/in\\xfd", False),
        (b"bad\\xff.txt", "bad\\x5cxff.txt", True),  # a real backslash: never an escape
        (b"caf\xc3\xa9", "caf\u00e9", True),
        (b"\xed\xa0\x80", "\\xed\\xa0\\x80", False),  # an encoded surrogate: three bytes
        (b"plain", "plain", True),
    ],
)
def test_the_documented_form(raw: bytes, shown: str, text: bool) -> None:
    assert shown_name(name_of(raw)) == shown
    assert is_text_name(name_of(raw)) is text


@pytest.mark.parametrize(
    "shown",
    ["bad\\xFF.txt", "\\x41", "\\xc3\\xa9", "a\\b", "tail\\", "\\x4", "\\x5C", "x\ud800"],
)
def test_shown_names_not_in_the_one_form_are_refused(shown: str) -> None:
    with pytest.raises(UnsafePath):
        name_from_shown(shown)


def test_printable_writes_out_every_lone_surrogate_and_keeps_backslashes() -> None:
    backslash, byte = name_of(b"a\\b"), name_of(b"x\xff")
    text = printable(f"Unsafe path {backslash!r} and {byte} \ud800")
    assert text == "Unsafe path 'a\\\\b' and x\\xff \\ud800"
    text.encode("utf-8")


def test_manifest_entries_keep_the_exact_bytes_through_json() -> None:
    entries = [{"path": name_of(b"w/bad\xff"), "size": 1}, {"path": "w/ok", "size": 2}]
    written = json.dumps([entry_to_json(entry) for entry in entries], ensure_ascii=False)
    assert json.loads(written)[0] == {"path": "w/bad\\xff", "size": 1, "path_hex": "772f626164ff"}
    assert [entry_from_json(entry) for entry in json.loads(written)] == entries
