// Reads response schemas out of openapi/openapi.yaml as plain JSON Schema: every $ref inlined and
// OpenAPI 3.0's `nullable` turned into a JSON Schema null type. CommonJS, because Dredd's hooks load it too.
const { readFileSync } = require('node:fs');
const { join } = require('node:path');
const { parse } = require('yaml');

const CONTRACT_FILE = join(__dirname, '..', '..', 'openapi', 'openapi.yaml');

function loadContract() {
  return parse(readFileSync(CONTRACT_FILE, 'utf8'));
}

function resolvePointer(doc, ref) {
  if (!ref.startsWith('#/')) throw new Error(`only local $refs are supported: ${ref}`);
  return ref
    .slice(2)
    .split('/')
    .reduce((node, part) => node[part.replace(/~1/g, '/').replace(/~0/g, '~')], doc);
}

/** Inlines $refs and rewrites `nullable` so a JSON Schema validator (Ajv, Dredd's Gavel) reads it as meant. */
function toJsonSchema(doc, node) {
  if (Array.isArray(node)) return node.map((item) => toJsonSchema(doc, item));
  if (node === null || typeof node !== 'object') return node;
  if (node.$ref) {
    const target = toJsonSchema(doc, resolvePointer(doc, node.$ref));
    return node.nullable ? { anyOf: [target, { type: 'null' }] } : target;
  }
  const out = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === 'nullable' || key === 'example' || key === 'examples' || key === 'xml') continue;
    out[key] = key === 'properties' ? mapValues(value, (v) => toJsonSchema(doc, v)) : toJsonSchema(doc, value);
  }
  if (node.nullable === true) {
    if (typeof out.type === 'string') out.type = [out.type, 'null'];
    if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
    if (out.allOf || out.oneOf || out.anyOf) return { anyOf: [out, { type: 'null' }] };
  }
  return out;
}

function mapValues(object, fn) {
  return Object.fromEntries(Object.entries(object).map(([key, value]) => [key, fn(value)]));
}

/** The documented response for an operation and status, or undefined when the contract has none. */
function documentedResponse(doc, method, pathTemplate, status) {
  const operation = doc.paths?.[pathTemplate]?.[method.toLowerCase()];
  if (!operation) return undefined;
  let response = operation.responses?.[String(status)] ?? operation.responses?.default;
  if (response?.$ref) response = resolvePointer(doc, response.$ref);
  return response;
}

/** JSON Schema of the body documented for that response and content type (without parameters). */
function responseSchema(doc, method, pathTemplate, status, contentType) {
  const response = documentedResponse(doc, method, pathTemplate, status);
  const media = response?.content?.[contentType];
  return media?.schema ? toJsonSchema(doc, media.schema) : undefined;
}

module.exports = { loadContract, documentedResponse, responseSchema, toJsonSchema };
