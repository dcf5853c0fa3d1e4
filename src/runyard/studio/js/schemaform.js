// A form generated from a task's input JSON Schema (as pydantic writes it): integers,
// numbers, booleans, strings, enums, nullable fields (anyOf with null), $ref into $defs,
// and JSON text for anything else. Validation messages appear next to their field.

import { h } from "./dom.js";

const INTEGER = /^[+-]?\d+$/;
const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

function resolveRef(schema, root, depth = 0) {
  if (!schema || typeof schema !== "object" || depth > 16) return schema || {};
  if (schema.$ref) {
    const path = schema.$ref.replace(/^#\//, "").split("/");
    const target = path.reduce((node, key) => node?.[key], root);
    const { $ref, ...rest } = schema;
    return resolveRef({ ...target, ...rest }, root, depth + 1);
  }
  if (Array.isArray(schema.allOf) && schema.allOf.length === 1) {
    const { allOf, ...rest } = schema;
    return resolveRef({ ...resolveRef(allOf[0], root, depth + 1), ...rest }, root, depth + 1);
  }
  return schema;
}

const isNull = (s) => s?.type === "null" || (Array.isArray(s?.enum) && s.enum.length === 1 && s.enum[0] === null);

/** Everything the form needs to know about one property. */
export function describeField(name, propSchema, root, required) {
  let schema = resolveRef(propSchema, root);
  let nullable = false;
  const options = schema.anyOf || schema.oneOf;
  if (Array.isArray(options)) {
    const rest = options.filter((option) => !isNull(resolveRef(option, root)));
    nullable = rest.length < options.length;
    const { anyOf, oneOf, ...outer } = schema;
    schema = rest.length === 1 ? { ...resolveRef(rest[0], root), ...outer } : { ...outer, anyOf: rest };
  }
  let type = schema.type;
  if (Array.isArray(type)) {
    nullable = nullable || type.includes("null");
    const rest = type.filter((t) => t !== "null");
    type = rest.length === 1 ? rest[0] : undefined;
  }
  const enumValues = Array.isArray(schema.enum) ? schema.enum.filter((v) => v !== null)
    : schema.const !== undefined ? [schema.const] : null;
  if (Array.isArray(schema.enum) && schema.enum.includes(null)) nullable = true;
  let kind = "json";
  if (enumValues) kind = "enum";
  else if (type === "boolean") kind = "boolean";
  else if (type === "integer") kind = "integer";
  else if (type === "number") kind = "number";
  else if (type === "string") kind = "string";
  return {
    name, kind, nullable, required,
    title: propSchema.title || schema.title || name,
    description: propSchema.description || schema.description || "",
    enumValues,
    hasDefault: "default" in propSchema || "default" in schema,
    default: "default" in propSchema ? propSchema.default : schema.default,
    minimum: schema.minimum, maximum: schema.maximum,
    exclusiveMinimum: schema.exclusiveMinimum, exclusiveMaximum: schema.exclusiveMaximum,
    minLength: schema.minLength, maxLength: schema.maxLength, pattern: schema.pattern,
  };
}

/** The fields of an object schema, in schema order. */
export function describeFields(schema) {
  const root = schema || {};
  const required = new Set(root.required || []);
  return Object.entries(root.properties || {}).map(([name, prop]) => describeField(name, prop, root, required.has(name)));
}

function checkBounds(field, value) {
  if (field.minimum !== undefined && value < field.minimum) return `Must be at least ${field.minimum}.`;
  if (field.maximum !== undefined && value > field.maximum) return `Must be at most ${field.maximum}.`;
  if (field.exclusiveMinimum !== undefined && value <= field.exclusiveMinimum) return `Must be greater than ${field.exclusiveMinimum}.`;
  if (field.exclusiveMaximum !== undefined && value >= field.exclusiveMaximum) return `Must be less than ${field.exclusiveMaximum}.`;
  return null;
}

function checkString(field, value) {
  const length = [...value].length;
  if (field.minLength !== undefined && length < field.minLength) {
    return `Must be at least ${field.minLength} character${field.minLength === 1 ? "" : "s"}.`;
  }
  if (field.maxLength !== undefined && length > field.maxLength) return `Must be at most ${field.maxLength} characters.`;
  if (field.pattern) {
    let re = null;
    try {
      re = new RegExp(field.pattern, "u");
    } catch {
      re = null; // a pattern JavaScript cannot read is left to the server
    }
    if (re && !re.test(value)) return `Must match the pattern ${field.pattern}.`;
  }
  return null;
}

/**
 * Turn what was entered into a value: {value} to send, {omit: true} to leave it to the
 * server's default, or {error} to show. `raw` is a string, or a boolean for a checkbox.
 */
export function readField(field, raw) {
  if (field.kind === "boolean" && typeof raw === "boolean") return { value: raw };
  const text = typeof raw === "string" ? raw : String(raw ?? "");
  const blank = field.kind === "string" ? text === "" : text.trim() === "";
  if (blank) {
    if (field.kind === "string" && field.hasDefault && field.default !== null && field.default !== undefined) {
      return withCheck(field, "");
    }
    if (field.required) return field.nullable ? { value: null } : { error: "Required." };
    return { omit: true };
  }
  if (field.kind === "integer") {
    if (!INTEGER.test(text.trim())) return { error: "Enter a whole number." };
    const value = Number(text.trim());
    if (!Number.isSafeInteger(value)) return { error: "The number is too large." };
    return withBounds(field, value);
  }
  if (field.kind === "number") {
    if (!NUMBER.test(text.trim())) return { error: "Enter a number." };
    return withBounds(field, Number(text.trim()));
  }
  if (field.kind === "boolean") return { value: text === "true" };
  if (field.kind === "enum") return { value: field.enumValues[Number(text)] };
  if (field.kind === "json") {
    try {
      return { value: JSON.parse(text) };
    } catch (error) {
      return { error: `Not valid JSON: ${error.message}` };
    }
  }
  return withCheck(field, text);
}

function withBounds(field, value) {
  const error = checkBounds(field, value);
  return error ? { error } : { value };
}

function withCheck(field, value) {
  const error = checkString(field, value);
  return error ? { error } : { value };
}

const escapeRe = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const tidy = (message) => message.trim().replace(/\s*\[type=.*$/, "").replace(/^Value error, /, "").replace(/;\s*$/, "");

/**
 * Map a server failure text to fields: {fields, general}. Understands runyard's one-line
 * form ("ValueError: Invalid input for task demo: x: Field required; y: ...") and pydantic's
 * multi-line ValidationError text. `general` is what is left to say above the form.
 */
export function parseServerErrors(answer, names) {
  const text = String(answer || "").trim();
  const found = text.includes("\n") ? multiLineErrors(text, names) : oneLineErrors(text, names);
  if (!found.fields.size) return { fields: found.fields, general: text };
  return found;
}

function oneLineErrors(text, names) {
  const fields = new Map();
  if (!names.size) return { fields, general: text };
  const alternatives = [...names].map(escapeRe).join("|");
  const marker = new RegExp(`(?:^|: |; )(${alternatives})(?:\\.[\\w.]+)?: `, "g");
  const hits = [...text.matchAll(marker)];
  hits.forEach((hit, i) => {
    const from = hit.index + hit[0].length;
    const to = i + 1 < hits.length ? hits[i + 1].index : text.length;
    const message = tidy(text.slice(from, to));
    fields.set(hit[1], fields.has(hit[1]) ? `${fields.get(hit[1])} ${message}` : message);
  });
  const general = hits.length ? text.slice(0, hits[0].index).replace(/^\w*Error: /, "") : text;
  return { fields, general };
}

function multiLineErrors(text, names) {
  const fields = new Map();
  const lines = text.split("\n");
  for (let i = 0; i < lines.length - 1; i++) {
    const loc = lines[i];
    const next = lines[i + 1];
    if (!loc || /^\s/.test(loc) || !/^\s{2}\S/.test(next)) continue;
    const name = loc.trim().split(".")[0];
    if (!names.has(name)) continue;
    const message = tidy(next);
    fields.set(name, fields.has(name) ? `${fields.get(name)} ${message}` : message);
  }
  return { fields, general: (lines[0] || "").replace(/^\w*Error: /, "").trim() };
}

/** The inputs of one task definition; `initial` prefills (e.g. from an earlier run's config). */
export class SchemaForm {
  constructor(schema, { initial = {}, groups = [], idPrefix = "in" } = {}) {
    this.fields = describeFields(schema);
    this.idPrefix = idPrefix;
    this.controls = new Map();
    const grouped = new Map(groups.map((g) => [g.title, []]));
    const main = [];
    for (const field of this.fields) {
      const group = groups.find((g) => g.names.includes(field.name));
      (group ? grouped.get(group.title) : main).push(this.fieldElement(field, initial));
    }
    this.el = h("div", { class: "schema-form" },
      main.length ? h("fieldset", { class: "fieldset" }, h("legend", {}, "Inputs"), main) : null,
      groups.map((g) => (grouped.get(g.title).length
        ? h("fieldset", { class: "fieldset" }, h("legend", {}, g.title), g.note ? h("p", { class: "muted small" }, g.note) : null, grouped.get(g.title))
        : null)));
  }

  get names() {
    return new Set(this.fields.map((f) => f.name));
  }

  fieldElement(field, initial) {
    const id = `${this.idPrefix}-${field.name}`;
    const helpId = `${id}-help`;
    const errorId = `${id}-error`;
    const start = field.name in initial ? initial[field.name] : field.default;
    const control = this.control(field, id, start);
    control.setAttribute("aria-describedby", `${field.description ? helpId : ""} ${errorId}`.trim());
    if (field.required) control.setAttribute("aria-required", "true");
    const error = h("p", { class: "field-error", id: errorId, hidden: true });
    const label = h("label", { for: id }, field.title, field.required ? h("span", { class: "req", "aria-hidden": "true" }, " *") : null);
    const help = [field.description, constraintText(field)].filter(Boolean).join(" ");
    const wrapper = h("div", { class: `field field-${field.kind}`, "data-field": field.name },
      field.kind === "boolean" && !field.nullable
        ? h("div", { class: "check-row" }, control, label)
        : [label, control],
      help ? h("p", { class: "help", id: helpId }, help) : null,
      error);
    this.controls.set(field.name, { field, control, error, wrapper });
    return wrapper;
  }

  control(field, id, start) {
    const name = field.name;
    if (field.kind === "boolean" && !field.nullable) {
      return h("input", { id, name, type: "checkbox", checked: start === true });
    }
    if (field.kind === "boolean" || field.kind === "enum") {
      const values = field.kind === "boolean" ? [true, false] : field.enumValues;
      const blank = field.required && !field.nullable ? "Choose…" : field.hasDefault ? `(default: ${JSON.stringify(field.default)})` : "(not set)";
      return h("select", { id, name },
        h("option", { value: "", selected: start === undefined || start === null }, blank),
        values.map((v, i) => h("option", {
          value: field.kind === "boolean" ? String(v) : String(i),
          selected: start !== undefined && start !== null && JSON.stringify(start) === JSON.stringify(v),
        }, typeof v === "string" ? v : JSON.stringify(v))));
    }
    const text = start === undefined || start === null ? "" : field.kind === "json" ? JSON.stringify(start, null, 2) : String(start);
    if (field.kind === "json") {
      return h("textarea", { id, name, rows: "3", spellcheck: "false", value: text });
    }
    const numeric = field.kind === "integer" || field.kind === "number";
    return h("input", {
      id, name, type: "text", value: text, autocomplete: "off", spellcheck: "false",
      inputmode: numeric ? (field.kind === "integer" ? "numeric" : "decimal") : null,
      placeholder: field.nullable && !field.required ? "(not set)" : null,
    });
  }

  /** {values, errors}: errors is a Map of field name to message. */
  collect() {
    const values = {};
    const errors = new Map();
    for (const [name, { field, control }] of this.controls) {
      const raw = control.type === "checkbox" ? control.checked : control.value;
      const read = readField(field, raw);
      if (read.error) errors.set(name, read.error);
      else if (!read.omit) values[name] = read.value;
    }
    return { values, errors };
  }

  showErrors(errors) {
    for (const [name, { control, error }] of this.controls) {
      const message = errors.get(name);
      error.hidden = !message;
      error.textContent = message || "";
      if (message) control.setAttribute("aria-invalid", "true");
      else control.removeAttribute("aria-invalid");
    }
  }

  focus(name) {
    this.controls.get(name)?.control.focus();
  }
}

function constraintText(field) {
  const bits = [];
  if (field.minimum !== undefined) bits.push(`≥ ${field.minimum}`);
  if (field.exclusiveMinimum !== undefined) bits.push(`> ${field.exclusiveMinimum}`);
  if (field.maximum !== undefined) bits.push(`≤ ${field.maximum}`);
  if (field.exclusiveMaximum !== undefined) bits.push(`< ${field.exclusiveMaximum}`);
  if (field.kind === "integer") bits.unshift("Whole number");
  if (field.kind === "json") bits.unshift("JSON value");
  return bits.length ? `(${bits.join(", ")})` : "";
}
