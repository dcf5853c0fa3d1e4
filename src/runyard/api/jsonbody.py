"""The one parser every JSON request body goes through: bounded nesting, finite numbers,
text of Unicode scalar values only.

Python's ``json`` recurses once per nesting level, and so do pydantic and the encoder that
echoes a body back in a 422: a body nested a thousand levels deep ends in a RecursionError
somewhere between them. And it accepts ``NaN``/``Infinity`` (and reads ``1e400`` as
infinity), which the answer's JSON encoder then refuses. Both used to answer 500. Here:

* nesting deeper than :data:`MAX_DEPTH` is refused *before* parsing, by a scan of the raw
  bytes that never recurses (:func:`nesting_exceeds`) — :class:`JsonTooDeep`;
* a non-finite number is refused while parsing — :class:`NonFiniteNumber`; its message
  names the problem without repeating the value (which no JSON answer can carry);
* a string or key holding a code point that is not a Unicode scalar value — a lone
  surrogate escape such as ``"\\ud800"`` — is refused — :class:`InvalidCodePoint`. Python's
  ``json`` reads it into a ``str`` that no UTF-8 encoder takes, so SQLite's insert, the
  log and the answer's encoder each failed with a 500 further on. Bytes that are not valid
  UTF-8 (an encoded surrogate ``ED A0 80`` among them, which ``json.loads`` lets through
  on its own) are :class:`MalformedJson`;
* anything else that is not JSON — :class:`MalformedJson`.

Their HTTP answers are rows of :mod:`runyard.api.errormap` (a body nested too deeply is a
400, the other refusals a 422).

>>> parse_json_body(b'{"arguments": {"x": 1}}')
{'arguments': {'x': 1}}
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from runyard.errors import InvalidInput

MAX_DEPTH = 64

# The skeleton of a body: quotes and brackets only, "{}" folded into "[]".
_SKELETON = bytes.maketrans(b"{}", b"[]")
_NOT_SKELETON = bytes(b for b in range(256) if b not in b'"[]{}')
# Number shapes: digits -> "0", exponent marks -> "e", "+" kept, everything else a space.
_NUMBER_SHAPE = bytes(
    0x30 if 0x30 <= b <= 0x39 else 0x65 if b in b"eE" else 0x2B if b == 0x2B else 0x20
    for b in range(256)
)
# A finite double is below 1e309: a literal can overflow only with a three-digit exponent
# or a run of at least 100 digits (below both, it stays under 1e100 * 1e99).
_OVERFLOW_SHAPES = (b"e000", b"e+000", b"0" * 100)
# After a strict decode, a surrogate can only come from an escape \\uD800..\\uDFFF; a pair
# of them is joined into one character by the parser, so one left in a str stands alone.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadJsonBody(InvalidInput):
    """A request body that is not JSON runyard accepts."""


class JsonTooDeep(BadJsonBody):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"JSON body is nested too deeply: at most {limit} levels are allowed")


class NonFiniteNumber(BadJsonBody):
    def __init__(self) -> None:
        super().__init__(
            "JSON body holds a non-finite number (not-a-number or infinite, or a literal too "
            "large for a double); only finite numbers are allowed"
        )


class InvalidCodePoint(BadJsonBody):
    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(
            f"JSON body holds an invalid code point in {where}: a lone UTF-16 surrogate "
            "escape (\\ud800 to \\udfff not in a high-low pair); strings and keys must be "
            "Unicode text"
        )


class MalformedJson(BadJsonBody):
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"Malformed JSON body: {reason}")


def parse_json_body(body: bytes | bytearray | str, max_depth: int = MAX_DEPTH) -> Any:
    """The value of a JSON document, or a :class:`BadJsonBody` that says what is wrong."""
    data, text = _utf8_view(body)
    if nesting_exceeds(data, max_depth):
        raise JsonTooDeep(max_depth)
    # the per-float check costs a call per float: only where one could overflow
    parse_float = _finite_float if _may_overflow(data) else None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=parse_float)
    except BadJsonBody:
        raise
    except RecursionError as exc:  # a net: the scan bounds what the parser can recurse into
        raise JsonTooDeep(max_depth) from exc
    except json.JSONDecodeError as exc:
        raise MalformedJson(str(exc)) from exc
    except UnicodeDecodeError as exc:
        raise MalformedJson(f"not valid {exc.encoding} text at byte {exc.start}") from exc
    except ValueError as exc:  # e.g. an integer past Python's digit limit
        raise MalformedJson("a number is out of range") from exc
    if _SURROGATE_ESCAPE.search(data):  # the walk costs a visit a value: only where needed
        _refuse_surrogates(value)
    return value


def _refuse_surrogates(value: Any) -> None:
    """Raise :class:`InvalidCodePoint` naming where ``value`` holds a lone surrogate.

    Iterative (the nesting is bounded already, but the walk need not lean on it); keys are
    checked as well as strings, at every depth.
    """
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise InvalidCodePoint(f"the string at {path}")
        elif isinstance(item, dict):
            for index, (key, child) in enumerate(item.items()):
                if _SURROGATE.search(key):
                    raise InvalidCodePoint(f"key number {index + 1} of the object at {path}")
                stack.append((f"{path}.{_shown(key)}", child))
        elif isinstance(item, list):
            stack.extend((f"{path}[{index}]", child) for index, child in enumerate(item))


def _shown(key: str) -> str:
    """A key fit for a message: valid text by now, cut short."""
    return key if len(key) <= 40 else key[:40] + "…"


def nesting_exceeds(data: bytes, limit: int) -> bool:
    """True when the brackets of ``data`` (outside strings) nest deeper than ``limit``.

    No recursion and no per-byte Python loop, only C-speed bytes operations: escapes and
    every byte but quotes and brackets go, then string contents; then each round deletes
    the innermost ``[]`` pairs, which peels one level off every nest. At most ``limit + 1``
    rounds over a shrinking skeleton, so the cost is linear in the body. Brackets never
    closed count as open at the end. A body with no more opening brackets than ``limit``
    cannot be deeper and costs two ``count`` calls.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    skeleton = _bracket_skeleton(data)
    for _ in range(limit):
        peeled = skeleton.replace(b"[]", b"")
        if len(peeled) == len(skeleton):
            # no pair left: what remains is "]]][[[", and its "[" are all open at the end
            return skeleton.count(b"[") > limit
        skeleton = peeled
    return b"[]" in skeleton or skeleton.count(b"[") > limit


def _bracket_skeleton(data: bytes) -> bytes:
    """The brackets of ``data`` that are outside strings, ``{}`` folded into ``[]``."""
    if b"\\" in data:
        # an escaped backslash first, so that the quote in \\" still ends its string
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = data.translate(_SKELETON, _NOT_SKELETON)
    # "" is an empty string, or the end of one and the start of the next with nothing
    # between: either way dropping it keeps every bracket on its side of the quotes
    skeleton = skeleton.replace(b'""', b"")
    if b'"' in skeleton:
        skeleton = b"".join(skeleton.split(b'"')[::2])
    return skeleton


def _may_overflow(data: bytes) -> bool:
    shapes = data.translate(_NUMBER_SHAPE)
    return any(shape in shapes for shape in _OVERFLOW_SHAPES)


def _utf8_view(body: bytes | bytearray | str) -> tuple[bytes, bytes | str]:
    """The body as UTF-8 bytes to scan, and the text to hand to ``json.loads``.

    In UTF-8 no byte of a multi-byte character is ASCII, so brackets and quotes are found
    byte-wise; a body in UTF-16/32 (which JSON allows) is re-encoded first. The bytes are
    decoded strictly here: ``json.loads`` would decode them with ``surrogatepass``, letting
    an encoded lone surrogate through as text.
    """
    if isinstance(body, str):
        try:
            return body.encode("utf-8"), body
        except UnicodeEncodeError as exc:
            raise MalformedJson(f"not Unicode text at character {exc.start}") from exc
    raw = bytes(body)
    encoding = json.detect_encoding(raw)
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        raise MalformedJson(f"not valid {encoding} text at byte {exc.start}") from exc
    if encoding in ("utf-8", "utf-8-sig"):
        return raw, text
    return text.encode("utf-8"), text


def _refuse_constant(name: str) -> Any:
    raise NonFiniteNumber()


def _finite_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise NonFiniteNumber()
    return value
