// Checks rendered Kubernetes objects offline, as an API server with strict
// field validation would (kubectl's default since 1.27):
// - the schema: kubernetes-models' validators, compiled from Kubernetes'
//   OpenAPI definitions (types, required fields, formats, enums);
// - no unknown field: those validators let any extra key through (as the
//   OpenAPI schemas do), so every key is also looked up in the field tables of
//   the official JavaScript client (@kubernetes/client-node), generated from
//   the same definitions. A misspelt field is an error, not a silent no-op.
import * as clientModels from "@kubernetes/client-node/dist/gen/models/ObjectSerializer.js";

const modelModules = new Map();

// The kubernetes-models class of an object: the module is its apiVersion
// ("v1", "apps/v1", "policy/v1"), the export its kind.
async function modelClass(apiVersion, kind) {
  if (!modelModules.has(apiVersion)) {
    let mod = null;
    try {
      mod = await import(`kubernetes-models/${apiVersion}`);
    } catch {
      mod = null;
    }
    modelModules.set(apiVersion, mod);
  }
  const mod = modelModules.get(apiVersion);
  return mod && typeof mod[kind] === "function" ? mod[kind] : null;
}

// The client's type name: V1Deployment for apps/v1 Deployment.
function clientTypeName(apiVersion, kind) {
  const version = apiVersion.split("/").pop();
  return version.charAt(0).toUpperCase() + version.slice(1) + kind;
}

const ARRAY = /^Array<(.+)>$/;
const MAP = /^\{ \[key: string\]: (.+); \}$/;

// Every key of `value` that type `type` does not have, with its path.
function unknownFields(value, type, path, out) {
  if (value === null || value === undefined) return;
  let m = ARRAY.exec(type);
  if (m) {
    if (Array.isArray(value)) value.forEach((v, i) => unknownFields(v, m[1], `${path}[${i}]`, out));
    return;
  }
  m = MAP.exec(type);
  if (m) {
    if (typeof value === "object") for (const [k, v] of Object.entries(value)) unknownFields(v, m[1], `${path}.${k}`, out);
    return;
  }
  const model = clientModels[type];
  if (!model || typeof model.getAttributeTypeMap !== "function" || typeof value !== "object") return;
  const attrs = new Map(model.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
  for (const [k, v] of Object.entries(value)) {
    if (!attrs.has(k)) out.push(`${path}.${k}: unknown field (${type} has no "${k}")`);
    else unknownFields(v, attrs.get(k), `${path}.${k}`, out);
  }
}

// What the API server decodes: kustomize writes a long Secret value in
// base64 over several lines, and Go's base64 decoder skips line breaks, which
// the "byte" format of the schema does not allow.
function asDecoded(obj) {
  if (obj.kind !== "Secret" || !obj.data) return obj;
  const data = Object.fromEntries(
    Object.entries(obj.data).map(([k, v]) => [k, typeof v === "string" ? v.replace(/[\r\n]/g, "") : v]),
  );
  return { ...obj, data };
}

// The problems of one object, as lines naming it; [] when it is valid.
export async function validateObject(obj) {
  const what = `${obj?.kind ?? "?"} ${obj?.metadata?.name ?? "?"}`;
  if (!obj || typeof obj.apiVersion !== "string" || typeof obj.kind !== "string")
    return [`${what}: no apiVersion or kind`];
  const Model = await modelClass(obj.apiVersion, obj.kind);
  const typeName = clientTypeName(obj.apiVersion, obj.kind);
  if (!Model || !clientModels[typeName])
    return [`${what}: no schema for ${obj.apiVersion} ${obj.kind} in kubernetes-models or @kubernetes/client-node`];
  const problems = [];
  try {
    new Model(asDecoded(obj)).validate();
  } catch (e) {
    problems.push(`${what}: ${e.message}`);
  }
  const unknown = [];
  unknownFields(obj, typeName, "", unknown);
  for (const u of unknown) problems.push(`${what}: ${u.slice(1)}`);
  return problems;
}

export async function validateAll(objects) {
  const problems = [];
  for (const o of objects) problems.push(...(await validateObject(o)));
  return problems;
}
