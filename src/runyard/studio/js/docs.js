// Starts the vendored Swagger UI on /docs (the page has no inline script: the CSP forbids it).
// The API description and "Try it out" requests carry this tab's token as a header, the same
// session token the Studio uses (from its sign-in or a link); nothing is fetched elsewhere.
// The description is fetched here, not by Swagger UI, and drawn as apispec.js says: without
// the jobs' `/events` twins and in OpenAPI 3.0 terms (Swagger UI's 3.1 resolver took most of
// the load time); operations start collapsed under their tags, drawn when one is opened.

import { adoptLinkToken, adoptLoginLink, getToken } from "./auth.js";
import { forDocsPage } from "./apispec.js";

await adoptLinkToken();
await adoptLoginLink();
const note = document.getElementById("docs-note");
const twinsNote = document.getElementById("docs-events-note");
if (getToken()) note.hidden = true;

function withToken(request) {
  const token = getToken();
  if (token) request.headers.Authorization = `Bearer ${token}`;
  return request;
}

async function fetchSpec() {
  const headers = getToken() ? { Authorization: `Bearer ${getToken()}` } : {};
  const response = await fetch("/openapi.json", { headers, cache: "no-store", credentials: "same-origin" });
  if (!response.ok) throw new Error(`the API description answered HTTP ${response.status}`);
  return response.json();
}

function showFailure(error) {
  note.hidden = false;
  const box = document.getElementById("swagger-ui");
  box.textContent = "";
  const message = document.createElement("p");
  message.className = "docs-note docs-error";
  message.setAttribute("role", "alert");
  message.textContent = `Could not load the API description: ${error.message}.`;
  box.append(message);
}

try {
  const { spec, hidden } = forDocsPage(await fetchSpec());
  twinsNote.hidden = hidden === 0;
  window.ui = window.SwaggerUIBundle({
    spec,
    dom_id: "#swagger-ui",
    deepLinking: true,
    docExpansion: "none", // operations are drawn when their tag is opened
    defaultModelsExpandDepth: -1, // no Schemas section: each operation shows its own
    layout: "BaseLayout",
    presets: [window.SwaggerUIBundle.presets.apis],
    validatorUrl: null, // the default badge is an image from validator.swagger.io
    requestInterceptor: withToken,
  });
} catch (error) {
  showFailure(error);
}
