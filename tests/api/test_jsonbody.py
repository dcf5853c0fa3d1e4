"""The JSON body parser: the depth scan agrees with the real nesting, numbers stay finite;
its refusals answer 400 (too deep) or 422 (the rest) through the error table."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from runyard.api.errormap import render
from runyard.api.jsonbody import (
    MAX_DEPTH,
    BadJsonBody,
    InvalidCodePoint,
    JsonTooDeep,
    MalformedJson,
    NonFiniteNumber,
    _may_overflow,
    nesting_exceeds,
    parse_json_body,
)

# characters that confuse a naive scan when they sit inside strings
TRICKY = ["[", "]", "{", "}", '"', "\\", "\\\\", 'a"', "\n", "é", "\u2028", "\\u005b"]


def http_status(refusal: BadJsonBody) -> int:
    """The status both surfaces answer ``refusal`` with (checked equal), from the table."""
    job = render(refusal, "/jobs/submit")
    api = render(refusal, "/api/v1/sessions")
    assert json.loads(job.body) == {"detail": str(refusal)}
    code = json.loads(api.body)["error"]["code"]
    assert (api.status_code, code) in ((400, "bad_request"), (422, "invalid"))
    assert job.status_code == api.status_code
    return job.status_code


def depth_of(value: Any) -> int:
    if isinstance(value, dict | list):
        children = value.values() if isinstance(value, dict) else value
        return 1 + max((depth_of(child) for child in children), default=0)
    return 0


def random_document(rnd: random.Random, budget: int) -> Any:
    roll = rnd.random()
    if budget <= 0 or roll < 0.25:
        return rnd.choice([0, -1.5, None, True, "".join(rnd.choices(TRICKY, k=rnd.randint(0, 5)))])
    if roll < 0.6:
        return [random_document(rnd, budget - 1) for _ in range(rnd.randint(0, 3))]
    keys = ("".join(rnd.choices(TRICKY, k=rnd.randint(0, 4))) for _ in range(rnd.randint(0, 3)))
    return {key: random_document(rnd, budget - 1) for key in keys}


def test_the_depth_scan_agrees_with_the_parsed_nesting_on_random_documents() -> None:
    rnd = random.Random(20261129)
    for _ in range(1_500):
        document = random_document(rnd, rnd.randint(0, 14))
        text = json.dumps(document, ensure_ascii=rnd.random() < 0.5, indent=rnd.choice([None, 1]))
        depth = depth_of(document)
        for limit in range(0, 16):
            assert nesting_exceeds(text.encode(), limit) == (depth > limit), (text, limit)


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ('{"a": "[[[[[[", "b": "\\"[[[[[["}', 1),  # an escaped quote does not end the string
        ('["\\\\", [[]]]', 3),  # an escaped backslash does: the quote after it closes
        ('["\\\\\\"[[[[[[", []]', 2),
        ('[[],"",[],"[",[""],"]"]', 2),  # empty strings, strings of brackets, between nests
        ("[" * 70, 70),  # never closed: every bracket is open at the end
        ("]]]" + "[" * 3, 3),
    ],
)
def test_brackets_inside_strings_do_not_count_and_unclosed_ones_do(text: str, depth: int) -> None:
    assert nesting_exceeds(text.encode(), depth - 1)
    assert not nesting_exceeds(text.encode(), depth)


def test_exactly_the_limit_parses_and_one_more_is_refused() -> None:
    assert parse_json_body("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(JsonTooDeep) as refused:
        parse_json_body(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    assert http_status(refused.value) == 400 and "64" in str(refused.value)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32-be", "utf-8-sig"])
def test_bodies_in_every_json_encoding_are_scanned_and_parsed(encoding: str) -> None:
    shallow = '{"a": ["[[[[é"]}'
    assert parse_json_body(shallow.encode(encoding)) == {"a": ["[[[[é"]}
    deep = "[" * 1_000 + "]" * 1_000
    with pytest.raises(JsonTooDeep):
        parse_json_body(deep.encode(encoding))


@pytest.mark.parametrize(
    "literal", ["NaN", "Infinity", "-Infinity", "1e309", "-2E+308", "1" * 400 + ".0", "0.1e400"]
)
def test_non_finite_numbers_are_refused_without_repeating_them(literal: str) -> None:
    for body in (literal, f'{{"x": [1, {{"y": {literal}}}]}}'):
        with pytest.raises(NonFiniteNumber) as refused:
            parse_json_body(body.encode())
        assert http_status(refused.value) == 422
        assert literal not in str(refused.value) and "NaN" not in str(refused.value)


@pytest.mark.parametrize(
    "literal", ["1e308", "-1.7976931348623157e308", "1e-999", "0.0", "1" * 300]
)
def test_large_but_finite_numbers_are_kept(literal: str) -> None:
    assert parse_json_body(literal.encode()) == json.loads(literal)


def test_the_overflow_precheck_never_misses_a_literal_that_overflows() -> None:
    rnd = random.Random(7)
    for _ in range(20_000):
        whole = str(rnd.randint(1, 9)) + "".join(rnd.choices("0123456789", k=rnd.randint(0, 120)))
        fraction = "." + "9" * rnd.randint(1, 5) if rnd.random() < 0.5 else ""
        exponent = (
            f"e{rnd.choice(['', '+', '-'])}{rnd.randint(0, 400)}" if rnd.random() < 0.7 else ""
        )
        literal = whole + fraction + exponent
        if float(literal) in (float("inf"), float("-inf")):
            assert _may_overflow(literal.encode()), literal


@pytest.mark.parametrize(
    "body", [b"", b"{", b"\xff\xfe\xfd", b'{"a": 1} x', b"9" * 5_000, b'{"a": "\x01"}']
)
def test_malformed_bodies_are_a_422(body: bytes) -> None:
    with pytest.raises(MalformedJson) as refused:
        parse_json_body(body)
    assert http_status(refused.value) == 422 and str(refused.value).startswith(
        "Malformed JSON body"
    )


@pytest.mark.parametrize(
    "text",
    [
        '"\\ud800"',
        '"\\uDFFF"',
        '{"\\udc00": 1}',
        '{"a": [1, {"b": ["ok", "x\\udbffy"]}]}',
        '[[[{"k": {"\\ud800\\ud800": null}}]]]',
        '"\\ude00\\ud83d"',  # a pair in the wrong order is two lone halves
        '"\\\\\\ud800"',  # an escaped backslash, then a real escape
    ],
)
def test_lone_surrogate_escapes_are_a_422_in_keys_and_values_at_any_depth(text: str) -> None:
    for body in (text.encode(), text):
        with pytest.raises(InvalidCodePoint) as refused:
            parse_json_body(body)
        assert http_status(refused.value) == 422
        assert "invalid code point" in str(refused.value)


@pytest.mark.parametrize(
    "body",
    [
        b'"\xed\xa0\x80"',  # an encoded surrogate: json.loads alone reads it as text
        b'{"\xed\xbf\xbf": 1}',
        b'["\xf4\x90\x80\x80"]',  # past U+10FFFF
        b'"\xc0\xaf"',  # overlong
        '"\ud800"'.encode("utf-16-le", "surrogatepass"),
        '["\udc00"]'.encode("utf-32-be", "surrogatepass"),
    ],
)
def test_bytes_that_are_not_unicode_text_are_a_422(body: bytes) -> None:
    with pytest.raises(MalformedJson) as refused:
        parse_json_body(body)
    assert http_status(refused.value) == 422


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('"\\ud83d\\ude00"', "\U0001f600"),
        ('{"\\uD83D\\uDE00": "\\\\ud800"}', {"\U0001f600": "\\ud800"}),  # escaped: six letters
        ('"\\ufffe\\uffff\\u0000"', "\ufffe\uffff\x00"),  # scalar values, if odd ones
    ],
)
def test_surrogate_pairs_and_other_scalar_values_are_kept(text: str, value: object) -> None:
    assert parse_json_body(text.encode()) == value
    assert parse_json_body(text.encode("utf-16")) == value
