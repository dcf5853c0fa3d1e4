// What /docs draws of the API description, and why it is not /openapi.json as served.
//
// - Every Task Job API call `POST /jobs/<name>` has an `/events` twin (the same body, answered
//   as a Server-Sent Events stream); listing both doubled the page for nothing new, so the
//   twins are left out and the page says so.
// - The description is OpenAPI 3.1 (FastAPI's). Swagger UI resolves a 3.1 document through
//   ApiDOM, which took most of the page's load time; a 3.0 document goes through its older,
//   much cheaper resolver. What FastAPI writes that 3.0 lacks is two forms, rewritten here:
//   `anyOf: [X, {type: "null"}]` (X, nullable) and a numeric `exclusiveMinimum`/`Maximum`.

export const EVENTS_SUFFIX = "/events";
export const SHOWN_VERSION = "3.0.3";

/** Is `path` the `/events` twin of another `/jobs/...` path of `paths`? */
export function isEventTwin(path, paths) {
  if (!path.startsWith("/jobs/") || !path.endsWith(EVENTS_SUFFIX)) return false;
  return Object.hasOwn(paths, path.slice(0, -EVENTS_SUFFIX.length));
}

/** A copy of the OpenAPI document `spec` without the `/events` twins of its jobs; answers
 * {spec, hidden} (`hidden`: how many were left out). Other paths named `.../events` (an
 * agent run's own event stream) have no twin and stay. */
export function withoutEventTwins(spec) {
  const paths = spec?.paths && typeof spec.paths === "object" ? spec.paths : {};
  const kept = {};
  let hidden = 0;
  for (const [path, item] of Object.entries(paths)) {
    if (isEventTwin(path, paths)) hidden += 1;
    else kept[path] = item;
  }
  return { spec: { ...spec, paths: kept }, hidden };
}

const isNullType = (schema) => schema && typeof schema === "object" && schema.type === "null"
  && Object.keys(schema).every((key) => key === "type" || key === "title");

/** One schema object in 3.0 terms (its children are done by the caller's walk). */
function nullableFor30(node) {
  if (Array.isArray(node.anyOf) && node.anyOf.some(isNullType)) {
    const rest = node.anyOf.filter((schema) => !isNullType(schema));
    delete node.anyOf;
    node.nullable = true;
    if (rest.length > 1) node.anyOf = rest;
    else if (rest.length === 1 && "$ref" in rest[0]) node.allOf = [rest[0]]; // 3.0 ignores $ref's siblings
    else if (rest.length === 1) {
      for (const [key, value] of Object.entries(rest[0])) if (!(key in node)) node[key] = value;
    }
  }
  if (Array.isArray(node.type) && node.type.includes("null")) {
    const types = node.type.filter((type) => type !== "null");
    node.nullable = true;
    if (types.length === 1) node.type = types[0];
    else delete node.type;
  }
  for (const [bound, inclusive] of [["exclusiveMinimum", "minimum"], ["exclusiveMaximum", "maximum"]]) {
    if (typeof node[bound] === "number") {
      node[inclusive] = node[bound];
      node[bound] = true;
    }
  }
}

function walk(value) {
  if (Array.isArray(value)) value.forEach(walk);
  else if (value && typeof value === "object") {
    nullableFor30(value);
    Object.values(value).forEach(walk);
  }
}

/** A copy of an OpenAPI 3.1 document `spec` that says the same in OpenAPI 3.0 terms, for
 * drawing only; any other version is copied as it is. */
export function as30(spec) {
  const copy = structuredClone(spec);
  if (!String(copy?.openapi || "").startsWith("3.1")) return copy;
  walk(copy.paths);
  walk(copy.components);
  copy.openapi = SHOWN_VERSION;
  return copy;
}

/** What /docs draws: {spec, hidden} (see withoutEventTwins and as30). */
export function forDocsPage(spec) {
  const { spec: kept, hidden } = withoutEventTwins(spec);
  return { spec: as30(kept), hidden };
}
