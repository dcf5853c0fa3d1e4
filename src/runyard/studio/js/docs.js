// Starts the vendored Swagger UI on /docs (the page has no inline script: the CSP forbids it).
// The API description and "Try it out" requests carry this tab's token as a header, the same
// session token the Studio uses (from its sign-in or a link); nothing is fetched elsewhere.

import { adoptLinkToken, adoptLoginLink, getToken } from "./auth.js";

await adoptLinkToken();
await adoptLoginLink();
const note = document.getElementById("docs-note");
if (getToken()) note.hidden = true;

window.ui = window.SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  layout: "BaseLayout",
  presets: [window.SwaggerUIBundle.presets.apis],
  validatorUrl: null, // the default badge is an image from validator.swagger.io
  requestInterceptor: (request) => {
    const token = getToken();
    if (token) request.headers.Authorization = `Bearer ${token}`;
    return request;
  },
});
