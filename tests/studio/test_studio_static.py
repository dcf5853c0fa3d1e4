"""The Studio's files and headers: strict CSP, no inline script, no HTML built from data."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runyard.api.studio import studio_dir

STUDIO = studio_dir()
VENDOR = STUDIO / "js" / "vendor"
# the Studio's own code; vendored libraries (marked, DOMPurify, Swagger UI) are checked below
SCRIPTS = sorted(p for p in STUDIO.rglob("*.js") if not p.is_relative_to(VENDOR))
UNSAFE_SINKS = re.compile(
    r"\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function\("
    r"|setTimeout\(\s*['\"`]|createContextualFragment"
)


@pytest.fixture(scope="module")
def client(static_studio: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=static_studio) as http:
        yield http


def test_index_is_served_with_a_strict_policy(client: httpx.Client) -> None:
    reply = client.get("/")
    assert reply.status_code == 200
    policy = reply.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "default-src 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["referrer-policy"] == "no-referrer"
    assert reply.headers["cache-control"] == "no-cache"
    assert reply.headers.get("etag")


def test_modules_and_styles_are_served(client: httpx.Client) -> None:
    for path in ("/js/main.js", "/css/studio.css", "/favicon.svg"):
        reply = client.get(path)
        assert reply.status_code == 200, path
        assert "content-security-policy" in reply.headers
    assert "javascript" in client.get("/js/main.js").headers["content-type"]


def test_index_has_no_inline_script_or_handlers() -> None:
    html = (STUDIO / "index.html").read_text()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag, tag
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", html), "inline script body"
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
    assert "style=" not in html


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(STUDIO)))
def test_scripts_never_parse_html_from_strings(script: Path) -> None:
    source = script.read_text()
    assert not UNSAFE_SINKS.search(source), f"{script.name} uses an HTML/code sink"
    assert 'setAttribute("style"' not in source and "setAttribute('style'" not in source


def test_every_module_import_resolves() -> None:
    for script in SCRIPTS:
        for target in re.findall(r"from\s+\"(\.[^\"]+)\"", script.read_text()):
            assert (script.parent / target).resolve().is_file(), f"{script}: {target}"


def test_token_is_kept_per_tab_and_sent_as_a_header() -> None:
    auth = (STUDIO / "js" / "auth.js").read_text()
    api = (STUDIO / "js" / "api.js").read_text()
    assert "sessionStorage" in auth and "localStorage" not in auth + api
    assert "Authorization" in api
    assert not re.search(r"[?&](token|access_token)=", "".join(p.read_text() for p in SCRIPTS))


def test_vendored_files_are_listed_with_their_licences_and_fetch_nothing_themselves() -> None:
    listed = (VENDOR / "VENDORED.txt").read_text()
    shipped = [p for p in VENDOR.rglob("*") if p.is_file() and p.name != "VENDORED.txt"]
    code = [p for p in shipped if p.suffix in (".js", ".css", ".png")]
    assert {p.name for p in code} >= {"marked.esm.js", "purify.es.js", "swagger-ui-bundle.js"}
    for path in code:
        assert path.relative_to(VENDOR).as_posix() in listed, path
        text = path.read_bytes()
        assert b"sourceMappingURL" not in text, f"{path.name} points at a map we do not ship"
    for licence in ("marked.LICENSE.txt", "dompurify.LICENSE.txt", "swagger/LICENSE.txt"):
        assert licence in listed and (VENDOR / licence).stat().st_size > 500, licence
    # the Studio's sanitiser is only ever reached through markdown.js
    users = [p.name for p in SCRIPTS if "vendor/purify" in p.read_text()]
    assert users == ["markdown.js"], users
