# SPDX-License-Identifier: Apache-2.0
"""A checker of requests against Firecracker's API spec (Swagger 2.0,
../shared/firecracker/firecracker.yaml): the path and method must be an
operation of the spec, the body must match the operation's body schema.

Strict where Firecracker is strict: its API parser rejects fields it does not
know (serde's deny_unknown_fields), so a property that is not in the schema is
an error unless the schema says additionalProperties. On top of the schema,
a few rules that the spec states in prose (RULES below).
"""
import json
import os

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# The project's shared copy of Firecracker's API spec when this checkout sits
# next to it; else the copy kept in the repository (tests/fc/firecracker.yaml,
# the same file: test_fcspec.py checks they are equal where both exist).
SHARED_SPEC = os.path.join(os.path.dirname(REPO), "shared", "firecracker", "firecracker.yaml")
VENDORED_SPEC = os.path.join(HERE, "firecracker.yaml")
DEFAULT_SPEC = os.environ.get("AIRLOCK_FC_SPEC") or (SHARED_SPEC if os.path.exists(SHARED_SPEC) else VENDORED_SPEC)


class Spec:
    def __init__(self, path=DEFAULT_SPEC):
        with open(path) as f:
            self.doc = yaml.safe_load(f)
        self.path = path
        self.version = self.doc["info"]["version"]
        self.defs = self.doc["definitions"]
        self.ops = {}  # (METHOD, template) -> operation
        for template, item in self.doc["paths"].items():
            for method, op in item.items():
                self.ops[(method.upper(), template)] = op

    # ---- routing

    def match(self, method, path):
        """(template, path parameters) of the operation, or raises ValueError."""
        segs = path.split("/")
        found_path = False
        for (m, template), _ in self.ops.items():
            tsegs = template.split("/")
            if len(tsegs) != len(segs):
                continue
            params = {}
            ok = True
            for t, s in zip(tsegs, segs):
                if t.startswith("{") and t.endswith("}"):
                    if not s:
                        ok = False
                        break
                    params[t[1:-1]] = s
                elif t != s:
                    ok = False
                    break
            if not ok:
                continue
            found_path = True
            if m == method:
                return template, params
        if found_path:
            raise ValueError(f"{method} is not an operation of {path} in the spec")
        raise ValueError(f"{path} is not a path of the spec")

    def body_schema(self, method, template):
        """(schema, required) of the operation's body parameter, or (None, False)."""
        for p in self.ops[(method, template)].get("parameters", []):
            if p.get("in") == "body":
                return p["schema"], bool(p.get("required"))
        return None, False

    def success_status(self, method, template):
        codes = [c for c in self.ops[(method, template)]["responses"] if isinstance(c, int) and c < 300]
        return codes[0]

    def response_schema(self, method, template, status):
        r = self.ops[(method, template)]["responses"].get(status) or self.ops[(method, template)]["responses"].get(
            "default")
        return (r or {}).get("schema")

    # ---- schemas

    def resolve(self, schema):
        while "$ref" in schema:
            name = schema["$ref"].split("/")[-1]
            schema = self.defs[name]
        return schema

    def validate(self, schema, value, where="body", request=True):
        """The list of problems of value against schema (empty: valid)."""
        problems = []
        s = self.resolve(schema)
        t = s.get("type")
        if t == "object" or (t is None and "properties" in s):
            if not isinstance(value, dict):
                return [f"{where}: expected an object, got {type(value).__name__}"]
            props = s.get("properties", {})
            for name in s.get("required", []):
                if name not in value:
                    problems.append(f"{where}: missing required field \"{name}\"")
            extra = s.get("additionalProperties")
            for name, v in value.items():
                if name in props:
                    ps = self.resolve(props[name])
                    if request and (props[name].get("readOnly") or ps.get("readOnly")):
                        problems.append(f"{where}.{name}: read-only, not accepted in a request")
                    problems += self.validate(props[name], v, f"{where}.{name}", request)
                elif extra is True:
                    continue
                elif isinstance(extra, dict):
                    problems += self.validate(extra, v, f"{where}.{name}", request)
                else:
                    problems.append(f"{where}: unknown field \"{name}\" (Firecracker rejects unknown fields)")
            return problems
        if t == "array":
            if not isinstance(value, list):
                return [f"{where}: expected an array"]
            for i, v in enumerate(value):
                problems += self.validate(s.get("items", {}), v, f"{where}[{i}]", request)
            return problems
        if t == "string":
            if not isinstance(value, str):
                return [f"{where}: expected a string, got {json.dumps(value)}"]
        elif t == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                return [f"{where}: expected an integer, got {json.dumps(value)}"]
            if value < 0 and s.get("format") in ("uint32", "uint64"):
                problems.append(f"{where}: negative")
        elif t == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return [f"{where}: expected a number"]
        elif t == "boolean":
            if not isinstance(value, bool):
                return [f"{where}: expected a boolean, got {json.dumps(value)}"]
        if "enum" in s and value not in s["enum"]:
            problems.append(f"{where}: {json.dumps(value)} is not one of {s['enum']}")
        if "minimum" in s and isinstance(value, (int, float)) and value < s["minimum"]:
            problems.append(f"{where}: {value} is below the minimum {s['minimum']}")
        if "maximum" in s and isinstance(value, (int, float)) and value > s["maximum"]:
            problems.append(f"{where}: {value} is above the maximum {s['maximum']}")
        return problems

    # ---- whole requests

    def check_request(self, method, path, headers, body_bytes):
        """(template, params, body, problems) for one HTTP request."""
        problems = []
        try:
            template, params = self.match(method, path)
        except ValueError as e:
            return None, {}, None, [str(e)]
        schema, required = self.body_schema(method, template)
        body = None
        if body_bytes:
            ctype = headers.get("content-type", "")
            if ctype.split(";")[0].strip().lower() != "application/json":
                problems.append(f"a body with Content-Type \"{ctype}\", not application/json")
            try:
                body = json.loads(body_bytes)
            except ValueError as e:
                return template, params, None, problems + [f"the body is not JSON: {e}"]
            if schema is None:
                problems.append(f"{method} {template} takes no body")
            else:
                problems += self.validate(schema, body)
        elif required:
            problems.append(f"{method} {template} needs a body ({schema.get('$ref', 'schema')})")
        problems += [p for rule in RULES for p in rule(method, template, params, body)]
        return template, params, body, problems


# ---- rules the spec states in prose ----------------------------------------------------------

def _id_matches_path(method, template, params, body):
    pairs = {"/drives/{drive_id}": "drive_id", "/network-interfaces/{iface_id}": "iface_id", "/pmem/{id}": "id"}
    key = pairs.get(template)
    if key and isinstance(body, dict) and key in body and body[key] != params.get(key):
        return [f"{template}: the body's {key} \"{body[key]}\" is not the path's \"{params.get(key)}\""]
    return []


def _snapshot_load_memory(method, template, params, body):
    # "Exactly one of the two mem_* fields must be present."
    if template == "/snapshot/load" and isinstance(body, dict):
        n = ("mem_file_path" in body) + ("mem_backend" in body)
        if n != 1:
            return ["/snapshot/load: exactly one of mem_file_path and mem_backend must be given"]
    return []


def _vcpus_with_smt(method, template, params, body):
    # "With SMT enabled, the vCPU count is required to be either 1 or an even number."
    if template == "/machine-config" and isinstance(body, dict) and body.get("smt") is True:
        n = body.get("vcpu_count")
        if isinstance(n, int) and n != 1 and n % 2:
            return ["/machine-config: with smt, vcpu_count must be 1 or even"]
    return []


def _virtio_block_path(method, template, params, body):
    # path_on_host and is_read_only are "required for virtio-block config".
    if method == "PUT" and template == "/drives/{drive_id}" and isinstance(body, dict) and "socket" not in body:
        missing = [k for k in ("path_on_host", "is_read_only") if k not in body]
        if missing:
            return [f"/drives: a virtio-block drive needs {', '.join(missing)}"]
    return []


RULES = [_id_matches_path, _snapshot_load_memory, _vcpus_with_smt, _virtio_block_path]
