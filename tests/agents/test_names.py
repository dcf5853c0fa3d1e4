from __future__ import annotations

import pytest

from runyard.agents.errors import AgentInvalid
from runyard.agents.models import (
    check_file_name,
    check_grant_name,
    check_relative_path,
    media_type_for,
    paths_overlap,
    placement_name,
)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("../etc/passwd", "'..'"),
        ("data/../../x", "'..'"),
        ("/etc/passwd", "relative"),
        ("C:/x", "relative"),
        ("a\\b", "'\\\\'"),
        ("a//b", "empty"),
        ("./a", "'.'"),
        ("a/\x00b", "U+0000"),
        ("a/\x1bb", "U+001B"),
        ("a\u202eb", "U+202E"),
        ("x" * 256, "255 bytes"),
        ("/".join(["d"] * 40), "deeper"),
        ("/".join(["d" * 200] * 6), "1024 bytes"),
        ("run-context.json", "reserved"),
    ],
)
def test_bad_relative_paths_are_refused_with_the_rule(bad: str, why: str) -> None:
    with pytest.raises(AgentInvalid) as info:
        check_relative_path(bad)
    assert why.replace("\\\\", "\\") in str(info.value)


def test_good_relative_paths_are_kept() -> None:
    assert check_relative_path("data/prices.csv") == "data/prices.csv"
    assert check_relative_path("données/日本.csv") == "données/日本.csv"
    assert check_relative_path(None) == "" and check_relative_path("") == ""


@pytest.mark.parametrize("bad", ["", None, "..", "a/b", "a\\b", "x\x00", "\x07bell", "é" * 200])
def test_bad_file_names(bad: str | None) -> None:
    with pytest.raises(AgentInvalid):
        check_file_name(bad)


def test_placement_name_keeps_a_safe_charset() -> None:
    assert placement_name("art-1", "prices 2024 (final).csv") == "art-1-prices_2024_final_.csv"
    assert placement_name("art-1", "...") == "art-1-file"
    assert placement_name("art-1", "日本.csv") == "art-1-csv"


def test_grant_names_and_media_types_and_overlap() -> None:
    assert check_grant_name("data-2024") == "data-2024"
    for bad in ("", "../x", "a/b", ".hidden", "x" * 65):
        with pytest.raises(AgentInvalid):
            check_grant_name(bad)
    assert media_type_for("a.csv", None) == "text/csv"
    assert media_type_for("a.bin", "application/x-thing; charset=x") == "application/x-thing"
    assert media_type_for("a.unknownext", "bad type") == "application/octet-stream"
    assert paths_overlap("a/b", "a") and paths_overlap("a", "a") and not paths_overlap("ab", "a")
