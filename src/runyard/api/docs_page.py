"""``/docs``: the API's Swagger UI, served entirely from this package (no CDN).

FastAPI's own page loads Swagger UI from a CDN and starts it with an inline script, so it is
blank offline and cannot run under a strict Content-Security-Policy. This page links the
vendored Swagger UI files (``studio/js/vendor/swagger``, see ``VENDORED.txt``) and a start
module of ours (``studio/js/docs.js``); its policy is the Studio's (``'self'`` only). The
bundle is deferred (it runs before the start module, in document order) so the page's notes
draw at once; what is drawn leaves the jobs' ``/events`` twins out and is put in OpenAPI 3.0
terms (``studio/js/apispec.js``: Swagger UI's 3.1 resolver was most of the load time), and
the page says both.

The page itself is open like the Studio's files: it holds no data. The API description
(``/openapi.json``) still needs the token; the start module sends the one this tab holds
(the Studio's sign-in, or a login link opened here) as an ``Authorization`` header.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.responses import HTMLResponse

from runyard.api.studio import SECURITY_HEADERS

DOCS_PATH = "/docs"

DOCS_HTML = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <meta name="referrer" content="no-referrer">
  <title>runyard API</title>
  <link rel="icon" type="image/png" href="/js/vendor/swagger/favicon-32x32.png">
  <link rel="stylesheet" href="/js/vendor/swagger/swagger-ui.css">
  <link rel="stylesheet" href="/css/docs.css">
  <script src="/js/vendor/swagger/swagger-ui-bundle.js" defer></script>
  <script type="module" src="/js/docs.js"></script>
</head>
<body>
  <p class="docs-note" id="docs-note">The API description needs this server's token: open
    this page from the Studio (the <a href="/">API</a> link) once signed in there
    (<code>runyard studio</code> prints a sign-in link).</p>
  <p class="docs-note" id="docs-events-note" hidden>Every Task Job API call
    <code>POST /jobs/&lt;name&gt;</code> also answers as a stream of Server-Sent Events at
    <code>POST /jobs/&lt;name&gt;/events</code>, with the same body; those twins are not
    listed here. The description is drawn in OpenAPI 3.0 terms (a field that may be null is
    marked nullable), which loads much faster; <code>/openapi.json</code> itself is OpenAPI
    3.1.</p>
  <div id="swagger-ui"></div>
</body>
</html>
"""


def mount_docs(app: FastAPI) -> None:
    """Serve ``/docs`` (the app must be made with ``docs_url=None``)."""
    headers = {name.decode(): value.decode() for name, value in SECURITY_HEADERS}

    @app.get(DOCS_PATH, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(DOCS_HTML, headers=headers)
