/* SPDX-License-Identifier: Apache-2.0 */
/* airlock mcp: what a client sends, parsed strictly (JSON-RPC 2.0 messages
 * and tool arguments), and the answers' envelopes. No I/O: fuzzed by
 * tests/fuzz/fuzz-mcp-message.c, tested by tests/unit/test-cli-mcp-msg.c. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli-mcp.h"
#include "json-cleanup.h"
#include "util.h"

const char *const mcp_protocol_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", NULL};

bool mcp_protocol_known(const char *version)
{
	for (size_t i = 0; version && mcp_protocol_versions[i]; i++)
		if (!strcmp(version, mcp_protocol_versions[i]))
			return true;
	return false;
}

const char *mcp_protocol_negotiate(const char *asked)
{
	for (size_t i = 0; asked && mcp_protocol_versions[i]; i++)
		if (!strcmp(asked, mcp_protocol_versions[i]))
			return mcp_protocol_versions[i];
	return mcp_protocol_versions[0];
}

int mcp_fault_set(struct mcp_fault *f, int code, const char *fmt, ...)
{
	f->code = code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(f->message, sizeof(f->message), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

void mcp_fault_release(struct mcp_fault *f)
{
	json_decref(f->id);
	f->id = NULL;
}

void mcp_message_release(struct mcp_message *m)
{
	json_decref(m->root);
	*m = (struct mcp_message){0};
}

static bool id_valid(json_t *id)
{
	if (json_is_integer(id))
		return true;
	return json_is_string(id) && json_string_length(id) <= MCP_ID_MAX;
}

int mcp_message_parse(const char *buf, size_t len, struct mcp_message *ret, struct mcp_fault *fault)
{
	*fault = (struct mcp_fault){0};
	/* SECURITY: the size is bounded before jansson allocates anything for it;
	 * jansson bounds the nesting depth (JSON_PARSER_MAX_DEPTH), rejects NUL
	 * bytes inside strings (no JSON_ALLOW_NUL) and invalid UTF-8. */
	if (len > MCP_MESSAGE_MAX)
		return mcp_fault_set(fault, MCP_INVALID_REQUEST, "the message is larger than %u bytes",
		                     MCP_MESSAGE_MAX);
	json_error_t jerr;
	cleanup_json json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!root)
		return mcp_fault_set(fault, MCP_PARSE_ERROR, "not JSON: %s (at byte %d)", jerr.text, jerr.position);
	if (json_is_array(root))
		return mcp_fault_set(fault, MCP_INVALID_REQUEST,
		                     "batches are not supported (MCP 2025-06-18 removed them): send one message");
	if (!json_is_object(root))
		return mcp_fault_set(fault, MCP_INVALID_REQUEST, "a message must be a JSON object");
	json_t *id = json_object_get(root, "id");
	/* Answer a fault with the message's id when it is usable. */
	if (id_valid(id))
		fault->id = json_incref(id);
	json_t *version = json_object_get(root, "jsonrpc");
	if (!json_is_string(version) || strcmp(json_string_value(version), "2.0"))
		return mcp_fault_set(fault, MCP_INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\"");
	if (id && !id_valid(id))
		return mcp_fault_set(fault, MCP_INVALID_REQUEST,
		                     "\"id\" must be a string (at most %d bytes) or an integer", MCP_ID_MAX);
	json_t *method = json_object_get(root, "method");
	json_t *params = json_object_get(root, "params");
	bool is_response = json_object_get(root, "result") || json_object_get(root, "error");
	const char *key;
	json_t *v;
	json_object_foreach (root, key, v) {
		static const char *const known[] = {"jsonrpc", "id", "method", "params", "result", "error"};
		bool ok = false;
		for (size_t i = 0; i < ARRAY_SIZE(known); i++)
			ok |= !strcmp(key, known[i]);
		if (!ok)
			return mcp_fault_set(fault, MCP_INVALID_REQUEST, "unknown member \"%.64s\" in the message",
			                     key);
	}
	struct mcp_message m = {0};
	if (is_response) {
		if (method || params || !id)
			return mcp_fault_set(fault, MCP_INVALID_REQUEST,
			                     "a response has an id and result or error, and no method or params");
		m.kind = MCP_RESPONSE;
	} else {
		if (!json_is_string(method) || json_string_length(method) == 0 ||
		    json_string_length(method) > MCP_METHOD_MAX)
			return mcp_fault_set(fault, MCP_INVALID_REQUEST, "\"method\" must be a string of 1 to %d bytes",
			                     MCP_METHOD_MAX);
		if (params && !json_is_object(params))
			return mcp_fault_set(fault, MCP_INVALID_REQUEST, "\"params\" must be an object");
		m.kind = id ? MCP_REQUEST : MCP_NOTIFICATION;
		m.method = json_string_value(method);
		m.params = params;
	}
	m.id = id;
	m.root = TAKE_PTR(root);
	*ret = m;
	mcp_fault_release(fault);
	return 0;
}

json_t *mcp_error_response(json_t *id, int code, const char *message)
{
	return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error", "code",
	                 code, "message", message);
}

json_t *mcp_result_response(json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

/* ------------------------------------------------------------ tool arguments */

static bool string_ok(json_t *v, size_t max)
{
	/* jansson gives valid UTF-8; a \u0000 escape would make an embedded NUL. */
	size_t len = json_string_length(v);
	return len <= max && strlen(json_string_value(v)) == len;
}

static int check_one(const struct mcp_arg *a, json_t *v, char *msg, size_t size)
{
	size_t max = a->max > 0 ? (size_t)a->max : MCP_STRING_MAX;
	switch (a->type) {
	case MCP_ARG_STRING:
		if (!json_is_string(v) || !string_ok(v, max))
			return snprintf(msg, size, "\"%s\" must be a string of at most %zu bytes without NUL", a->name,
			                max),
			       -EINVAL;
		if (a->choices) {
			for (const char *const *c = a->choices; *c; c++)
				if (!strcmp(*c, json_string_value(v)))
					return 0;
			return snprintf(msg, size, "\"%s\" must be one of the values its schema lists", a->name),
			       -EINVAL;
		}
		return 0;
	case MCP_ARG_INTEGER:
		if (!json_is_integer(v) || json_integer_value(v) < a->min || json_integer_value(v) > a->max)
			return snprintf(msg, size, "\"%s\" must be an integer from %lld to %lld", a->name, a->min,
			                a->max),
			       -EINVAL;
		return 0;
	case MCP_ARG_BOOLEAN:
		if (!json_is_boolean(v))
			return snprintf(msg, size, "\"%s\" must be true or false", a->name), -EINVAL;
		return 0;
	case MCP_ARG_STRING_ARRAY: {
		if (!json_is_array(v) || json_array_size(v) > max)
			return snprintf(msg, size, "\"%s\" must be an array of at most %zu strings", a->name, max),
			       -EINVAL;
		size_t i;
		json_t *e;
		json_array_foreach (v, i, e)
			if (!json_is_string(e) || !string_ok(e, MCP_STRING_MAX))
				return snprintf(msg, size, "\"%s\"[%zu] must be a string of at most %d bytes", a->name,
				                i, MCP_STRING_MAX),
				       -EINVAL;
		return 0;
	}
	case MCP_ARG_STRING_MAP: {
		if (!json_is_object(v) || json_object_size(v) > max)
			return snprintf(msg, size, "\"%s\" must be an object of at most %zu strings", a->name, max),
			       -EINVAL;
		const char *k;
		json_t *e;
		json_object_foreach (v, k, e)
			if (!json_is_string(e) || !string_ok(e, MCP_STRING_MAX) || strlen(k) > 256)
				return snprintf(msg, size, "\"%s\" must map names (at most 256 bytes) to strings",
				                a->name),
				       -EINVAL;
		return 0;
	}
	}
	return -EINVAL;
}

int mcp_args_check(const struct mcp_arg *spec, size_t n, json_t *args, char *msg, size_t msg_size)
{
	if (args && !json_is_object(args))
		return snprintf(msg, msg_size, "\"arguments\" must be an object"), -EINVAL;
	const char *key;
	json_t *v;
	json_object_foreach (args, key, v) {
		const struct mcp_arg *a = NULL;
		for (size_t i = 0; i < n && !a; i++)
			if (!strcmp(spec[i].name, key))
				a = &spec[i];
		if (!a)
			return snprintf(msg, msg_size, "unknown argument \"%.64s\"", key), -EINVAL;
		if (check_one(a, v, msg, msg_size) < 0)
			return -EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		if (spec[i].required && !json_object_get(args, spec[i].name))
			return snprintf(msg, msg_size, "missing the required argument \"%s\"", spec[i].name), -EINVAL;
	return 0;
}

static json_t *arg_schema(const struct mcp_arg *a)
{
	size_t max = a->max > 0 ? (size_t)a->max : MCP_STRING_MAX;
	json_t *s = NULL;
	switch (a->type) {
	case MCP_ARG_STRING:
		s = json_pack("{s:s, s:I}", "type", "string", "maxLength", (json_int_t)max);
		if (a->choices) {
			json_t *e = json_array();
			for (const char *const *c = a->choices; *c; c++)
				json_array_append_new(e, json_string(*c));
			json_object_set_new(s, "enum", e);
		}
		break;
	case MCP_ARG_INTEGER:
		s = json_pack("{s:s, s:I, s:I}", "type", "integer", "minimum", (json_int_t)a->min, "maximum",
		              (json_int_t)a->max);
		break;
	case MCP_ARG_BOOLEAN:
		s = json_pack("{s:s}", "type", "boolean");
		break;
	case MCP_ARG_STRING_ARRAY:
		s = json_pack("{s:s, s:{s:s, s:i}, s:I}", "type", "array", "items", "type", "string", "maxLength",
		              MCP_STRING_MAX, "maxItems", (json_int_t)max);
		break;
	case MCP_ARG_STRING_MAP:
		s = json_pack("{s:s, s:{s:s, s:i}, s:I}", "type", "object", "additionalProperties", "type", "string",
		              "maxLength", MCP_STRING_MAX, "maxProperties", (json_int_t)max);
		break;
	}
	json_object_set_new(s, "description", json_string(a->description));
	return s;
}

json_t *mcp_args_schema(const struct mcp_arg *spec, size_t n)
{
	json_t *props = json_object(), *required = json_array();
	for (size_t i = 0; i < n; i++) {
		json_object_set_new(props, spec[i].name, arg_schema(&spec[i]));
		if (spec[i].required)
			json_array_append_new(required, json_string(spec[i].name));
	}
	return json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required", required,
	                 "additionalProperties", 0);
}
