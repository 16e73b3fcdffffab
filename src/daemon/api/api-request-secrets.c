/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The body of POST /v1/secrets (api-request.h): a credential and the
 * binding spec that says where it may be sent. The store (secrets.h) keeps
 * what this accepts; the egress gateway checks the binding again
 * (egress-bindings.c) with the same policy grammar (policy-rule.h).
 */
#include "api-request.h"

#include <string.h>
#include <strings.h>

#include "json-cleanup.h"
#include "json-field.h"
#include "policy-rule.h"
#include "secrets.h"
#include "util.h"

/* Header field values: visible ASCII, space, HT and UTF-8 (obs-text); no
 * other control characters (CR and LF would split the header). */
static bool header_text_valid(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return false;
	}
	return true;
}

static bool tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       strchr("!#$%&'*+-.^_`|~", c);
}

static int parse_hosts(json_t *j, json_t *out, struct al_error *err)
{
	json_t *hosts = json_object_get(j, "hosts");
	if (!json_is_array(hosts) || json_array_size(hosts) == 0 || json_array_size(hosts) > SECRET_HOSTS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "hosts: required, an array of 1 to %d host patterns (\"api.example.com\", "
		                    "\"*.example.com\", optionally with :PORT) the secret may be sent to",
		                    SECRET_HOSTS_MAX);
	size_t i;
	json_t *v;
	json_array_foreach (hosts, i, v) {
		const char *text = json_string_value(v);
		size_t len = json_string_length(v);
		struct policy_rule rule;
		struct al_error e = {0};
		if (!json_is_string(v) || json_string_has_nul(v) || len > POLICY_RULE_TEXT_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "hosts[%zu]: must be a host pattern",
			                    i);
		if (policy_rule_parse(text, len, &rule, &e) < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "hosts[%zu] \"%.*s\": %s", i,
			                    (int)MIN(len, 200), text, e.message);
		/* SECURITY: secrets are only put into TLS connections that the
		 * gateway intercepts by SNI, which is a name: an address or a
		 * network would bind nothing (or everything behind a CDN). */
		if (!policy_rule_is_host_pattern(&rule))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "hosts[%zu] \"%.*s\": a secret is bound to host names (TLS SNI), not to "
			                    "addresses or networks",
			                    i, (int)MIN(len, 200), text);
		json_array_append_new(out, json_stringn(text, len));
	}
	return 0;
}

static int parse_paths(json_t *j, json_t *out, struct al_error *err)
{
	json_t *paths = json_object_get(j, "paths");
	if (!paths || json_is_null(paths))
		return 0;
	if (!json_is_array(paths) || json_array_size(paths) > SECRET_PATHS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "paths: an array of at most %d path prefixes such as \"/v1/\" (empty: any path)",
		                    SECRET_PATHS_MAX);
	size_t i;
	json_t *v;
	json_array_foreach (paths, i, v) {
		const char *p = json_string_value(v);
		size_t len = json_string_length(v);
		bool ok = json_is_string(v) && len >= 1 && len <= SECRET_PATH_MAX && p[0] == '/';
		for (size_t k = 0; ok && k < len; k++)
			ok = p[k] > 0x20 && p[k] < 0x7f && p[k] != '#';
		if (!ok)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "paths[%zu]: must start with \"/\" and be 1 to %d visible ASCII characters "
			                    "(no spaces, no '#')",
			                    i, SECRET_PATH_MAX);
		json_array_append_new(out, json_stringn(p, len));
	}
	return 0;
}

static int parse_methods(json_t *j, json_t *out, struct al_error *err)
{
	/* TRACE would echo the credential back; CONNECT opens a tunnel. */
	static const char *const known[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"};
	json_t *methods = json_object_get(j, "methods");
	if (!methods || json_is_null(methods))
		return 0;
	if (!json_is_array(methods) || json_array_size(methods) > ARRAY_SIZE(known))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "methods: an array of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS (empty: any of "
		                    "them)");
	bool seen[ARRAY_SIZE(known)] = {false};
	size_t i;
	json_t *v;
	json_array_foreach (methods, i, v) {
		size_t k = 0;
		for (; json_is_string(v) && k < ARRAY_SIZE(known); k++)
			if (!strcasecmp(json_string_value(v), known[k]) && json_string_length(v) == strlen(known[k]))
				break;
		if (!json_is_string(v) || k == ARRAY_SIZE(known))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "methods[%zu]: must be one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
			                    i);
		seen[k] = true;
	}
	for (size_t k = 0; k < ARRAY_SIZE(known); k++)
		if (seen[k])
			json_array_append_new(out, json_string(known[k]));
	return 0;
}

static bool edge_space(const char *s, size_t len)
{
	return len > 0 && (s[0] == ' ' || s[0] == '\t' || s[len - 1] == ' ' || s[len - 1] == '\t');
}

/* Placeholder mode (issue 17): the header fields the placeholder is
 * replaced in, and nowhere else (an Origin or a custom header that a server
 * echoes back must not carry the value). Default: Authorization. */
static int parse_headers(json_t *j, const char *header, json_t *spec, struct al_error *err)
{
	json_t *hs = json_object_get(j, "headers");
	if (!hs || json_is_null(hs)) {
		if (!header)
			json_object_set_new(spec, "headers", json_pack("[s]", SECRET_HEADERS_DEFAULT));
		return 0;
	}
	if (header)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "headers: only without header (with one, the value goes into that header alone)");
	if (!json_is_array(hs) || json_array_size(hs) == 0 || json_array_size(hs) > SECRET_HEADERS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "headers: an array of 1 to %d header names the placeholder is replaced in "
		                    "(default [\"" SECRET_HEADERS_DEFAULT "\"])",
		                    SECRET_HEADERS_MAX);
	json_t *out = json_array();
	json_object_set_new(spec, "headers", out);
	size_t i;
	json_t *v;
	json_array_foreach (hs, i, v) {
		const char *name = json_string_value(v);
		size_t len = json_string_length(v);
		bool ok = name && !json_string_has_nul(v) && len >= 1 && len <= SECRET_HEADER_MAX;
		for (size_t k = 0; ok && k < len; k++)
			ok = tchar(name[k]);
		if (!ok)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "headers[%zu]: must be a header name (1 to %d token characters)", i,
			                    SECRET_HEADER_MAX);
		if (policy_header_reserved(name))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "headers[%zu]: \"%s\" frames or routes the request; a secret cannot be put "
			                    "there",
			                    i, name);
		for (size_t k = 0; k < i; k++)
			if (!strcasecmp(json_string_value(json_array_get(out, k)), name))
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "headers[%zu]: \"%s\" twice",
				                    i, name);
		json_array_append_new(out, json_stringn(name, len));
	}
	return 0;
}

static int parse_header_format(json_t *j, json_t *spec, struct al_error *err)
{
	const char *h, *f;
	int r;
	if ((r = json_field_string(j, "header", &h, err)) < 0 || (r = json_field_string(j, "format", &f, err)) < 0)
		return r;
	if (h) {
		const char *name = h;
		size_t len = strlen(h);
		bool ok = len >= 1 && len <= SECRET_HEADER_MAX;
		for (size_t i = 0; ok && i < len; i++)
			ok = tchar(name[i]);
		if (!ok)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "header: must be a header name (1 to %d token characters, e.g. "
			                    "\"Authorization\")",
			                    SECRET_HEADER_MAX);
		if (policy_header_reserved(name))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "header: \"%s\" frames or routes the request; a secret cannot be put there",
			                    name);
	}
	if (f) {
		const char *fmt = f;
		size_t len = strlen(f);
		const char *first = strstr(fmt, POLICY_FORMAT_VALUE);
		if (!h)
			return al_error_set(
			    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			    "format: needs header (without a header the placeholder is replaced where it "
			    "appears in request headers)");
		if (len > SECRET_FORMAT_MAX || !header_text_valid(fmt, len) || !first ||
		    strstr(first + 1, POLICY_FORMAT_VALUE) || edge_space(fmt, len))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "format: at most %d characters without control characters or spaces at "
			                    "either end, with "
			                    "\"" POLICY_FORMAT_VALUE
			                    "\" exactly once (e.g. \"Bearer " POLICY_FORMAT_VALUE "\")",
			                    SECRET_FORMAT_MAX);
	}
	json_object_set_new(spec, "header", h ? json_string(h) : json_null());
	json_object_set_new(spec, "format", f ? json_string(f) : h ? json_string(POLICY_FORMAT_VALUE) : json_null());
	return parse_headers(j, h, spec, err);
}

static int parse_value(json_t *j, struct secret_request *r, struct al_error *err)
{
	/* SECURITY: no message here may quote the value. */
	json_t *v = json_object_get(j, "value");
	if (!json_is_string(v))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "value: required, a string of 1 to %d bytes (it is stored encrypted and never "
		                    "shown again)",
		                    POLICY_SECRET_VALUE_MAX);
	const char *s = json_string_value(v);
	size_t len = json_string_length(v);
	if (len == 0 || len > POLICY_SECRET_VALUE_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "value: must be 1 to %d bytes, got %zu",
		                    POLICY_SECRET_VALUE_MAX, len);
	if (json_string_has_nul(v) || !header_text_valid(s, len))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "value: must not contain NUL, CR, LF or other control characters (it goes into a "
		                    "request header)");
	/* A header field value cannot begin or end with whitespace (RFC 9110
	 * 5.5): the gateway would refuse to send it. */
	if (edge_space(s, len))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "value: must not begin or end with a space or tab (it goes into a request header)");
	r->value = xmalloc(len + 1);
	memcpy(r->value, s, len + 1);
	r->value_len = len;
	return 0;
}

static int parse_fields(json_t *j, struct secret_request *r, json_t *spec, struct al_error *err)
{
	static const char *const allowed[] = {"name",   "value",   "hosts",  "paths",  "methods",
	                                      "header", "headers", "format", "tenant", NULL};
	const char *name, *tenant;
	int rc;
	if ((rc = request_fields_check(j, allowed, err)) < 0 || (rc = json_field_string(j, "name", &name, err)) < 0)
		return rc;
	if (!name || !secret_name_valid(name))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "name: required, 1 to %d characters of [a-z0-9_.-] starting with a letter or digit",
		                    SECRET_NAME_MAX);
	strlcpy_al(r->name, name, sizeof(r->name));
	if ((rc = json_field_string(j, "tenant", &tenant, err)) < 0)
		return rc;
	if (tenant && !tenant_name_valid(tenant))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "tenant: must be a name of 1 to 63 characters from [a-z0-9_-]");
	if (tenant)
		strlcpy_al(r->tenant, tenant, sizeof(r->tenant));
	json_t *hosts = json_array(), *paths = json_array(), *methods = json_array();
	json_object_set_new(spec, "hosts", hosts);
	json_object_set_new(spec, "paths", paths);
	json_object_set_new(spec, "methods", methods);
	if ((rc = parse_hosts(j, hosts, err)) < 0 || (rc = parse_paths(j, paths, err)) < 0 ||
	    (rc = parse_methods(j, methods, err)) < 0 || (rc = parse_header_format(j, spec, err)) < 0)
		return rc;
	return parse_value(j, r, err);
}

int secret_request_parse(const char *body, size_t len, struct secret_request *ret, struct al_error *err)
{
	if (len > SECRET_BODY_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "request body is %zu bytes; the limit is %u", len,
		                    SECRET_BODY_MAX);
	json_error_t jerr;
	cleanup_json json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	/* SECURITY: jansson's message quotes the text near the error, which may
	 * be the value: give the position only. */
	if (!j)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "request body is not valid JSON (line %d, column %d)", jerr.line, jerr.column);
	if (!json_is_object(j)) {
		secret_json_wipe(j);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "request body must be a JSON object");
	}
	struct secret_request r = {0};
	cleanup_json json_t *spec = json_object();
	int rc = parse_fields(j, &r, spec, err);
	secret_json_wipe(j);
	if (rc < 0) {
		secret_request_release(&r);
		return rc;
	}
	r.spec_json = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
	if (!r.spec_json)
		abort();
	*ret = r;
	return 0;
}
