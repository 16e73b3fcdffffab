/* SPDX-License-Identifier: Apache-2.0 */
#include "egress-bindings.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include <openssl/crypto.h>

#include "egress-http.h"
#include "egress-policy.h"
#include "util.h"

struct egress_bindings {
	atomic_uint refs;
	size_t n;
	struct egress_binding *items;
};

/* ------------------------------------------------------------ freeing */

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void binding_release(struct egress_binding *b)
{
	free(b->secret);
	free(b->placeholder);
	if (b->value) {
		/* SECURITY: the credential does not outlive its binding. */
		OPENSSL_cleanse(b->value, b->value_len);
		free(b->value);
	}
	free(b->hosts);
	strv_free(b->host_texts, b->n_hosts);
	strv_free(b->paths, b->n_paths);
	strv_free(b->methods, b->n_methods);
	free(b->header);
	strv_free(b->headers, b->n_headers);
	if (b->format) {
		OPENSSL_cleanse(b->format, strlen(b->format));
		free(b->format);
	}
	*b = (struct egress_binding){0};
}

/* ------------------------------------------------------------ checks */

static bool token_valid(const char *s, size_t len, size_t max)
{
	if (len == 0 || len > max)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!s[i] || !egress_http_is_tchar((uint8_t)s[i]))
			return false;
	return true;
}

/* Text that can stand in a header field value: a string of at most max
 * bytes of HTAB, SP, visible ASCII and obs-text; no CR, LF, NUL or other
 * control character (they would end the line or smuggle another field).
 * airlockd checks the same. */
static bool field_text_valid(const char *s, size_t len, size_t max)
{
	if (!s || len > max || memchr(s, '\0', len))
		return false;
	for (size_t i = 0; i < len; i++) {
		if (!egress_http_is_field_char((uint8_t)s[i]))
			return false;
	}
	return true;
}

static bool printable_ascii(const char *s, size_t len, size_t max)
{
	if (len == 0 || len > max)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] < 0x21 || s[i] > 0x7e)
			return false;
	return true;
}

static bool placeholder_valid(const char *s, size_t len)
{
	const size_t plen = sizeof(POLICY_PLACEHOLDER_PREFIX) - 1;
	if (len != POLICY_PLACEHOLDER_LEN || memcmp(s, POLICY_PLACEHOLDER_PREFIX, plen) != 0)
		return false;
	for (size_t i = plen; i < len; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static const char *format_value_at(const char *format)
{
	return strstr(format, POLICY_FORMAT_VALUE);
}

/* A path prefix: "/" and visible ASCII. One that a safe path could never
 * start with ("/a/../b", "/x?y") is harmless: requests whose path is not
 * safe are refused before prefixes are looked at (egress_path_safe). */
static bool path_prefix_valid(const char *s, size_t len)
{
	if (len == 0 || len > EGRESS_BINDING_PATH_MAX || s[0] != '/')
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] < 0x21 || s[i] > 0x7e)
			return false;
	return true;
}

/* ------------------------------------------------------------ parsing */

/* An array of strings, each checked by ok(); at most max. The strings go
 * into *ret (*ret_n of them) as they are read: the binding owns what was
 * read before a bad one. */
static int strv_parse(const json_t *arr, size_t max, bool (*ok)(const char *, size_t), char ***ret, size_t *ret_n,
                      const char *what, struct al_error *err)
{
	*ret = NULL;
	*ret_n = 0;
	if (!arr || json_is_null(arr))
		return 0;
	if (!json_is_array(arr) || json_array_size(arr) > max)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"%s\" must be an array of at most %zu strings", what, max);
	size_t n = json_array_size(arr);
	*ret = n ? xcalloc(n, sizeof(**ret)) : NULL;
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_array_get(arr, i);
		const char *s = json_string_value(e);
		size_t len = json_string_length(e);
		if (!s || memchr(s, '\0', len) || !ok(s, len)) {
			char shown[80];
			if (s)
				egress_text_escape((const uint8_t *)s, len, shown, sizeof(shown));
			else
				snprintf(shown, sizeof(shown), "(not a string)");
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s[%zu] \"%s\" is not valid", what,
			                    i, shown);
		}
		(*ret)[i] = xstrndup(s, len);
		*ret_n = i + 1;
	}
	return 0;
}

static bool method_ok(const char *s, size_t len)
{
	return token_valid(s, len, EGRESS_BINDING_METHOD_MAX);
}

static bool header_name_ok(const char *s, size_t len)
{
	return token_valid(s, len, EGRESS_BINDING_HEADER_MAX) && !policy_header_reserved(s);
}

/* "headers" (placeholder mode only): the fields the placeholder may be
 * replaced in; absent or null: Authorization alone. */
static int headers_parse(const json_t *in, struct egress_binding *b, struct al_error *err)
{
	const json_t *hs = json_object_get(in, "headers");
	if (b->header) {
		if (hs && !json_is_null(hs))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "\"headers\" only without a \"header\" (placeholder mode)");
		return 0;
	}
	if (!hs || json_is_null(hs)) {
		b->headers = xcalloc(1, sizeof(*b->headers));
		b->headers[0] = xstrdup(EGRESS_BINDING_HEADERS_DEFAULT);
		b->n_headers = 1;
		return 0;
	}
	if (json_is_array(hs) && json_array_size(hs) == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"headers\" must name at least one header field");
	return strv_parse(hs, EGRESS_BINDING_HEADERS_MAX, header_name_ok, &b->headers, &b->n_headers, "headers", err);
}

static int hosts_parse(const json_t *arr, struct egress_binding *b, struct al_error *err)
{
	if (!json_is_array(arr) || json_array_size(arr) == 0 || json_array_size(arr) > EGRESS_BINDING_HOSTS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"hosts\" must be an array of 1 to %d host patterns", EGRESS_BINDING_HOSTS_MAX);
	size_t n = json_array_size(arr);
	b->hosts = xcalloc(n, sizeof(*b->hosts));
	b->host_texts = xcalloc(n, sizeof(*b->host_texts));
	for (size_t i = 0; i < n; i++) {
		const json_t *e = json_array_get(arr, i);
		const char *s = json_string_value(e);
		size_t len = json_string_length(e);
		struct al_error perr = {0};
		int r = -EINVAL;
		if (s && !memchr(s, '\0', len))
			r = policy_host_pattern_parse(s, len, &b->hosts[i], &perr);
		if (r < 0) {
			char shown[80] = "(not a string)";
			if (s)
				egress_text_escape((const uint8_t *)s, len, shown, sizeof(shown));
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "hosts[%zu] \"%s\": %.150s", i, shown,
			                    perr.message[0] ? perr.message : "not a host pattern");
		}
		b->host_texts[i] = xstrndup(s, len);
		b->n_hosts = i + 1;
	}
	return 0;
}

/* A copy of text that can stand in a header field value, or NULL when it
 * cannot (field_text_valid). */
static char *field_text_dup(const char *s, size_t len, size_t max)
{
	return field_text_valid(s, len, max) ? xstrndup(s, len) : NULL;
}

static int keys_check(const json_t *in, struct al_error *err)
{
	static const char *const keys[] = {"secret",  "placeholder", "value",  "hosts",  "paths",
	                                   "methods", "header",      "format", "headers"};
	const char *key;
	const json_t *v;
	json_object_foreach ((json_t *)in, key, v) {
		bool known = false;
		for (size_t i = 0; i < ARRAY_SIZE(keys) && !known; i++)
			known = strcmp(key, keys[i]) == 0;
		if (!known) {
			char shown[64];
			egress_text_escape((const uint8_t *)key, strlen(key), shown, sizeof(shown));
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "unknown key \"%s\"", shown);
		}
	}
	return 0;
}

/* "header" and "format": header mode, or (both absent) placeholder mode.
 * SECURITY: nothing of "format" (it may hold a literal part of the
 * credential) is ever copied into err. */
static int header_parse(const json_t *in, struct egress_binding *b, struct al_error *err)
{
	const json_t *hj = json_object_get(in, "header");
	const json_t *fj = json_object_get(in, "format");
	if (!hj || json_is_null(hj)) {
		if (fj && !json_is_null(fj))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "\"format\" needs a \"header\" (without one the placeholder is replaced)");
		return 0;
	}
	const char *h = json_string_value(hj);
	if (!h || !token_valid(h, json_string_length(hj), EGRESS_BINDING_HEADER_MAX))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"header\" must be null or a header field name of 1-%d characters",
		                    EGRESS_BINDING_HEADER_MAX);
	if (policy_header_reserved(h)) {
		char shown[EGRESS_BINDING_HEADER_MAX + 1];
		snprintf(shown, sizeof(shown), "%s", h);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"header\" %s frames or routes the request and cannot be set", shown);
	}
	b->header = xstrdup(h);
	const char *f = fj && !json_is_null(fj) ? json_string_value(fj) : POLICY_FORMAT_VALUE;
	size_t flen = f ? (fj && !json_is_null(fj) ? json_string_length(fj) : strlen(f)) : 0;
	const char *at = f ? format_value_at(f) : NULL;
	if (!at || strstr(at + 1, POLICY_FORMAT_VALUE) ||
	    !(b->format = field_text_dup(f, flen, EGRESS_BINDING_FORMAT_MAX)))
		return al_error_set(
		    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		    "\"format\" must be null or a header value of at most %d bytes with \"" POLICY_FORMAT_VALUE "\" "
		    "exactly once",
		    EGRESS_BINDING_FORMAT_MAX);
	return 0;
}

/* Fills b as it reads in: on error, b holds what was read (released by
 * the caller). SECURITY: nothing of "value" is ever copied into err. */
static int binding_parse(const json_t *in, struct egress_binding *b, struct al_error *err)
{
	if (!json_is_object(in))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "must be an object");
	int r = keys_check(in, err);
	if (r < 0)
		return r;
	const json_t *sj = json_object_get(in, "secret");
	if (!json_is_string(sj) ||
	    !printable_ascii(json_string_value(sj), json_string_length(sj), EGRESS_BINDING_SECRET_MAX))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"secret\" must be a name of 1-%d printable ASCII characters",
		                    EGRESS_BINDING_SECRET_MAX);
	b->secret = xstrdup(json_string_value(sj));
	const json_t *pj = json_object_get(in, "placeholder");
	if (!json_is_string(pj) || !placeholder_valid(json_string_value(pj), json_string_length(pj)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"placeholder\" must be \"" POLICY_PLACEHOLDER_PREFIX "\" and 64 hex digits");
	b->placeholder = xstrdup(json_string_value(pj));
	const json_t *vj = json_object_get(in, "value");
	size_t value_len = json_string_length(vj);
	b->value = value_len ? field_text_dup(json_string_value(vj), value_len, POLICY_SECRET_VALUE_MAX) : NULL;
	if (!b->value)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"value\" must be a string of 1-%d bytes that can stand in a header field (no "
		                    "control characters)",
		                    POLICY_SECRET_VALUE_MAX);
	b->value_len = value_len;
	/* It would be replaced again on the next request's pass. */
	if (strstr(b->value, POLICY_PLACEHOLDER_PREFIX))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"value\" must not contain \"" POLICY_PLACEHOLDER_PREFIX "\"");
	r = hosts_parse(json_object_get(in, "hosts"), b, err);
	if (r == 0)
		r = strv_parse(json_object_get(in, "paths"), EGRESS_BINDING_PATHS_MAX, path_prefix_valid, &b->paths,
		               &b->n_paths, "paths", err);
	if (r == 0)
		r = strv_parse(json_object_get(in, "methods"), EGRESS_BINDING_METHODS_MAX, method_ok, &b->methods,
		               &b->n_methods, "methods", err);
	if (r == 0)
		r = header_parse(in, b, err);
	if (r == 0)
		r = headers_parse(in, b, err);
	return r;
}

int egress_bindings_parse(const json_t *in, struct egress_bindings **ret, struct al_error *err)
{
	if (in && !json_is_null(in) && !json_is_array(in))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"bindings\" must be an array");
	size_t n = in ? json_array_size(in) : 0;
	if (n > EGRESS_BINDINGS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"bindings\" has %zu entries, at most %d", n,
		                    EGRESS_BINDINGS_MAX);
	cleanup_egress_bindings struct egress_bindings *b = xcalloc(1, sizeof(*b));
	atomic_init(&b->refs, 1);
	b->items = n ? xcalloc(n, sizeof(*b->items)) : NULL;
	for (size_t i = 0; i < n; i++) {
		b->n = i + 1;
		int r = binding_parse(json_array_get(in, i), &b->items[i], err);
		if (r < 0) {
			const char *secret = b->items[i].secret;
			al_error_prefix(err, "bindings[%zu]%s%s%s", i, secret ? " (secret " : "", secret ? secret : "",
			                secret ? ")" : "");
			return r;
		}
	}
	/* Two bindings with one placeholder would make "which secret was
	 * seen" ambiguous in events; airlockd never sends that. */
	for (size_t i = 0; i < n; i++)
		for (size_t k = i + 1; k < n; k++)
			if (strcmp(b->items[i].placeholder, b->items[k].placeholder) == 0)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
				                    "bindings[%zu] and bindings[%zu] have the same placeholder", i, k);
	*ret = TAKE_PTR(b);
	return 0;
}

struct egress_bindings *egress_bindings_ref(struct egress_bindings *b)
{
	if (b)
		atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
	return b;
}

void egress_bindings_unref(struct egress_bindings *b)
{
	if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (size_t i = 0; i < b->n; i++)
		binding_release(&b->items[i]);
	free(b->items);
	free(b);
}

size_t egress_bindings_count(const struct egress_bindings *b)
{
	return b ? b->n : 0;
}

const struct egress_binding *egress_bindings_get(const struct egress_bindings *b, size_t i)
{
	return b && i < b->n ? &b->items[i] : NULL;
}

/* ------------------------------------------------------------ matching */

bool egress_binding_names_host(const struct egress_binding *b, const struct policy_host *host)
{
	for (size_t i = 0; i < b->n_hosts; i++)
		if (policy_rule_match(&b->hosts[i], host, POLICY_PORT_TLS))
			return true;
	return false;
}

bool egress_bindings_name_host(const struct egress_bindings *b, const struct policy_host *host, const char **ret_secret)
{
	for (size_t i = 0; b && i < b->n; i++)
		if (egress_binding_names_host(&b->items[i], host)) {
			if (ret_secret)
				*ret_secret = b->items[i].secret;
			return true;
		}
	return false;
}

enum egress_binding_verdict egress_binding_check(const struct egress_binding *b, const struct policy_host *host,
                                                 const char *method, size_t method_len, const char *path,
                                                 size_t path_len)
{
	if (!egress_binding_names_host(b, host))
		return EGRESS_BINDING_HOST;
	bool path_ok = b->n_paths == 0;
	for (size_t i = 0; i < b->n_paths && !path_ok; i++) {
		size_t plen = strlen(b->paths[i]);
		path_ok = plen <= path_len && memcmp(path, b->paths[i], plen) == 0;
	}
	if (!path_ok)
		return EGRESS_BINDING_PATH;
	bool method_match = b->n_methods == 0;
	for (size_t i = 0; i < b->n_methods && !method_match; i++)
		method_match = strlen(b->methods[i]) == method_len && memcmp(b->methods[i], method, method_len) == 0;
	return method_match ? EGRESS_BINDING_APPLIES : EGRESS_BINDING_METHOD;
}

const char *egress_binding_verdict_reason(enum egress_binding_verdict v)
{
	switch (v) {
	case EGRESS_BINDING_HOST:
		return "host not bound";
	case EGRESS_BINDING_PATH:
		return "path";
	case EGRESS_BINDING_METHOD:
		return "method";
	default:
		return NULL;
	}
}

int egress_path_safe(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		char c = p[i];
		if (c == '\0' || c == '\\')
			return -EINVAL;
		if (c == '%') {
			if (i + 2 >= len)
				return -EINVAL;
			int hi = hex_digit_value((unsigned char)p[i + 1]),
			    lo = hex_digit_value((unsigned char)p[i + 2]);
			if (hi < 0 || lo < 0)
				return -EINVAL;
			int byte = hi << 4 | lo;
			if (byte == '.' || byte == '/' || byte == '\\' || byte == 0)
				return -EINVAL;
		}
		/* ".." as a whole segment, or "..;params" (some servers strip
		 * path parameters before normalising). */
		if ((i == 0 || p[i - 1] == '/') && i + 1 < len && c == '.' && p[i + 1] == '.' &&
		    (i + 2 == len || p[i + 2] == '/' || p[i + 2] == ';'))
			return -EINVAL;
	}
	return 0;
}

/* ------------------------------------------------------------ the slot */

void egress_bindings_slot_init(struct egress_bindings_slot *slot)
{
	pthread_mutex_init(&slot->lock, NULL);
	slot->bindings = NULL;
}

struct egress_bindings *egress_bindings_slot_get(struct egress_bindings_slot *slot)
{
	pthread_mutex_lock(&slot->lock);
	struct egress_bindings *b = egress_bindings_ref(slot->bindings);
	pthread_mutex_unlock(&slot->lock);
	return b;
}

void egress_bindings_slot_set(struct egress_bindings_slot *slot, struct egress_bindings *b)
{
	pthread_mutex_lock(&slot->lock);
	struct egress_bindings *old = slot->bindings;
	slot->bindings = b;
	pthread_mutex_unlock(&slot->lock);
	egress_bindings_unref(old);
}

void egress_bindings_slot_release(struct egress_bindings_slot *slot)
{
	egress_bindings_unref(slot->bindings);
	slot->bindings = NULL;
	pthread_mutex_destroy(&slot->lock);
}
