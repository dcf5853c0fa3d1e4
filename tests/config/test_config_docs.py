"""docs/configuration.md documents every setting, with its default and its variable."""

from __future__ import annotations

import re
from pathlib import Path

from runyard.config import Settings

DOC = Path(__file__).parents[2] / "docs" / "configuration.md"


def test_every_setting_has_a_row_with_its_environment_variable() -> None:
    rows = {
        match.group(1): match.group(0)
        for match in re.finditer(r"^\| `([a-z_]+)` \|.*$", DOC.read_text(), re.MULTILINE)
    }
    missing = [name for name in Settings.model_fields if name not in rows]
    assert missing == []
    for name in Settings.model_fields:
        cells = [cell.strip() for cell in rows[name].strip("|").split("|")]
        assert len(cells) == 4 and all(cells), rows[name]
        assert cells[2].startswith(f"`RUNYARD_{name.upper()}"), rows[name]
    assert not set(rows) - set(Settings.model_fields), "a documented setting does not exist"
