"""studio.pages in runyard.yaml: AxonX's rules, a page id that is not a slug refused at load
(a page's link is built from its id, so none can be a javascript: or outside address)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from runyard.config import Settings
from runyard.configfile import read_config_file
from runyard.errors import ConfigError

PAGE = {
    "title": {"en": "Data updates", "zh": "数据更新"},
    "view": "tasks",
    "category": "data_update",
}


def load(tmp_path: Path, studio: Any) -> Settings:
    path = tmp_path / "runyard.yaml"
    path.write_text(yaml.safe_dump({"studio": studio}, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return Settings(**read_config_file(Settings, path))


def test_pages_load_in_config_order_with_their_ids(tmp_path: Path) -> None:
    sync = {"title": {"en": "Sync", "zh": "同步"}, "view": "schedules", "schedules": ["nightly"]}
    settings = load(tmp_path, {"pages": {"sync-2": sync, "data": PAGE}})
    pages = [page.model_dump(mode="json") for page in settings.studio.listed()]
    assert pages == [
        {"id": "sync-2", "category": None, **sync},
        {"id": "data", "schedules": [], **PAGE},
    ]
    assert Settings().studio.listed() == []


@pytest.mark.parametrize(
    "page_id",
    ["javascript:alert(1)", "javascript", "https://evil.example", "//evil", "../tasks", "a/b",
     "Data", "1st", "_x", "x y", "x?y=1", "x#y", "", "données"],
)  # fmt: skip
def test_a_page_id_that_is_not_a_lowercase_slug_is_refused(tmp_path: Path, page_id: str) -> None:
    if page_id == "javascript":  # a slug: the word alone is a fine id, it is never a scheme
        assert [p.id for p in load(tmp_path, {"pages": {page_id: PAGE}}).studio.listed()]
        return
    with pytest.raises((ConfigError, ValueError), match="lowercase URL slugs"):
        load(tmp_path, {"pages": {page_id: PAGE}})


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"title": {"en": "Only English"}}, "en and zh"),
        ({"title": {"en": "x", "zh": " "}}, "en and zh"),
        ({"view": "schedules"}, "cannot select Tasks"),
        ({"category": None}, "require a TaskCategory"),
        ({"category": "weather"}, "category"),
        ({"view": "html"}, "view"),
        ({"url": "javascript:alert(1)"}, "url"),
    ],
)
def test_axonx_page_rules(tmp_path: Path, change: dict[str, Any], says: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=says):
        load(tmp_path, {"pages": {"data": {**PAGE, **change}}})
