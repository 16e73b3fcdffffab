/* SPDX-License-Identifier: Apache-2.0 */
#include "api-request.h"

#include "json-cleanup.h"
#include "json-field.h"
#include "network-policy.h"
#include "util.h"

int request_body_parse(const char *body, size_t len, json_t **ret, struct al_error *err)
{
	json_error_t jerr;
	/* JSON_REJECT_DUPLICATES: two "cmd" keys must not mean whichever came last. */
	json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "request body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
		                    jerr.column);
	if (!json_is_object(j)) {
		json_decref(j);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "request body must be a JSON object");
	}
	*ret = j;
	return 0;
}

int request_fields_check(json_t *obj, const char *const *allowed, struct al_error *err)
{
	const char *key;
	json_t *v;
	json_object_foreach (obj, key, v) {
		bool ok = false;
		for (size_t i = 0; allowed[i]; i++)
			if (!strcmp(key, allowed[i]))
				ok = true;
		if (!ok) {
			char list[256] = "";
			size_t off = 0;
			for (size_t i = 0; allowed[i] && off < sizeof(list); i++)
				off +=
				    (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", i ? ", " : "", allowed[i]);
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "unknown field \"%.64s\" (allowed: %s)", key, list);
		}
	}
	return 0;
}

static int get_uint(json_t *obj, const char *field, long long min, long long max, long long def, long long *ret,
                    struct al_error *err)
{
	json_t *v = json_object_get(obj, field);
	if (!v || json_is_null(v)) {
		*ret = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: must be an integer from %lld to %lld",
		                    field, min, max);
	*ret = json_integer_value(v);
	return 0;
}

/* What one entry of a string map must be: err set and < 0 if it is not. */
typedef int kv_entry_check(const char *key, json_t *value, const void *ctx, struct al_error *err);

/* Field `field` of obj, an object of strings (shape: what it must be, for the
 * message), into *ret: at most max entries, each passed by check(key, value,
 * ctx). Absent or null is an empty list. */
static int parse_string_map(const json_t *obj, const char *field, const char *shape, size_t max, kv_entry_check *check,
                            const void *ctx, struct kv_list *ret, struct al_error *err)
{
	json_t *m = json_object_get(obj, field);
	*ret = (struct kv_list){0};
	if (!m || json_is_null(m))
		return 0;
	if (!json_is_object(m))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: must be %s", field, shape);
	size_t n = json_object_size(m);
	if (n > max)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: at most %zu entries, got %zu", field,
		                    max, n);
	struct kv_list l = {.keys = xcalloc(n, sizeof(char *)), .values = xcalloc(n, sizeof(char *))};
	const char *key;
	json_t *v;
	json_object_foreach (m, key, v) {
		int r = check(key, v, ctx, err);
		if (r < 0) {
			kv_list_release(&l);
			return r;
		}
		l.keys[l.n] = xstrdup(key);
		l.values[l.n] = xstrdup(json_string_value(v));
		l.n++;
	}
	*ret = l;
	return 0;
}

/* The value of map.key: a string without NUL bytes of at most max bytes. */
static int string_value_check(const char *map, const char *key, json_t *v, size_t max, struct al_error *err)
{
	if (!json_is_string(v) || json_string_has_nul(v))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "%s.%.64s: must be a string without NUL bytes", map, key);
	if (json_string_length(v) > max)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s.%.64s: at most %zu bytes", map, key, max);
	return 0;
}

static int env_entry_check(const char *key, json_t *v, const void *ctx, struct al_error *err)
{
	(void)ctx;
	if (!env_name_valid(key))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "env: name \"%.64s\" must match [A-Za-z_][A-Za-z0-9_]* and be at most %d bytes",
		                    key, ENV_NAME_MAX);
	return string_value_check("env", key, v, ENV_VALUE_MAX, err);
}

static int metadata_entry_check(const char *key, json_t *v, const void *ctx, struct al_error *err)
{
	(void)ctx;
	size_t klen = strlen(key);
	if (klen == 0 || klen > METADATA_KEY_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "metadata: keys must be 1 to %d bytes",
		                    METADATA_KEY_MAX);
	return string_value_check("metadata", key, v, METADATA_VALUE_MAX, err);
}

static int parse_env(const json_t *obj, struct kv_list *ret, struct al_error *err)
{
	return parse_string_map(obj, "env", "an object of strings", ENV_ENTRIES_MAX, env_entry_check, NULL, ret, err);
}

static int parse_metadata(const json_t *obj, struct kv_list *ret, struct al_error *err)
{
	return parse_string_map(obj, "metadata", "an object of strings", METADATA_ENTRIES_MAX, metadata_entry_check,
	                        NULL, ret, err);
}

/* ctx: the request's env (or NULL), which a grant must not name again. */
static int grant_entry_check(const char *key, json_t *v, const void *ctx, struct al_error *err)
{
	const struct kv_list *env = ctx;
	if (!env_name_valid(key))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "secrets: name \"%.64s\" must match [A-Za-z_][A-Za-z0-9_]* and be at most %d bytes",
		                    key, ENV_NAME_MAX);
	if (!json_is_string(v) || json_string_has_nul(v) || !secret_name_valid(json_string_value(v)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "secrets.%.64s: must be a secret name ([a-z0-9][a-z0-9_.-]{0,62})", key);
	for (size_t i = 0; env && i < env->n; i++)
		if (!strcmp(env->keys[i], key))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "secrets.%.64s: also set in env; a variable is either a secret's "
			                    "placeholder or a value",
			                    key);
	return 0;
}

int secret_grants_parse(const json_t *obj, const struct kv_list *env, struct kv_list *ret, struct al_error *err)
{
	/* SECURITY: client input; only names travel (never a value): each env
	 * name as for env, each secret name of the secret alphabet. Whether the
	 * secret exists is checked by the caller, for the sandbox's tenant. */
	return parse_string_map(obj, "secrets", "an object {\"ENV_NAME\": \"secret-name\", ...}", SANDBOX_SECRETS_MAX,
	                        grant_entry_check, env, ret, err);
}

static int parse_timeouts(json_t *j, struct timeout_request *t, struct al_error *err)
{
	long long v;
	int rc;
	*t = (struct timeout_request){0};
	json_t *to = json_object_get(j, "timeout_s"), *on = json_object_get(j, "on_timeout"),
	       *idle = json_object_get(j, "idle_timeout_s");
	if ((rc = get_uint(j, "timeout_s", 0, SANDBOX_TIMEOUT_S_MAX, 0, &v, err)) < 0)
		return rc;
	t->timeout_s = (unsigned)v;
	t->has_timeout = to && !json_is_null(to);
	if ((rc = get_uint(j, "idle_timeout_s", 0, SANDBOX_TIMEOUT_S_MAX, 0, &v, err)) < 0)
		return rc;
	t->idle_timeout_s = (unsigned)v;
	t->has_idle = idle && !json_is_null(idle);
	strlcpy_al(t->on_timeout, "kill", sizeof(t->on_timeout));
	if (on && !json_is_null(on)) {
		if (!json_is_string(on) ||
		    (strcmp(json_string_value(on), "kill") && strcmp(json_string_value(on), "pause")))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "on_timeout: must be \"kill\" or \"pause\"");
		strlcpy_al(t->on_timeout, json_string_value(on), sizeof(t->on_timeout));
		t->has_on_timeout = true;
	}
	json_t *ar = json_object_get(j, "auto_resume");
	if (ar && !json_is_null(ar)) {
		if (!json_is_boolean(ar))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "auto_resume: must be true or false");
		t->auto_resume = json_is_true(ar);
		t->has_auto_resume = true;
	}
	return 0;
}

int timeout_request_parse(const char *body, size_t len, struct timeout_request *ret, struct al_error *err)
{
	static const char *const fields[] = {"timeout_s", "on_timeout", "idle_timeout_s", "auto_resume", NULL};
	cleanup_json json_t *j = NULL;
	int rc;
	if ((rc = request_body_parse(body, len, &j, err)) < 0 || (rc = request_fields_check(j, fields, err)) < 0)
		return rc;
	return parse_timeouts(j, ret, err);
}

int create_request_parse(const char *body, size_t len, unsigned host_memory_mib, struct create_request *ret,
                         struct al_error *err)
{
	static const char *const fields[] = {"template", "vcpus",   "memory_mib",  "env",
	                                     "metadata", "tenant",  "snapshot",    "timeout_s",
	                                     "network",  "secrets", "on_timeout",  "idle_timeout_s",
	                                     "disk_mib", "boot",    "auto_resume", NULL};
	cleanup_json json_t *j = NULL;
	struct create_request r = {0};
	int rc;

	if (len == 0)
		body = "{}", len = 2;
	if ((rc = request_body_parse(body, len, &j, err)) < 0 || (rc = request_fields_check(j, fields, err)) < 0)
		return rc;

	json_t *t = json_object_get(j, "template");
	if (!t || json_is_null(t)) {
		strlcpy_al(r.template_name, "minimal", sizeof(r.template_name));
	} else if (!json_is_string(t) || json_string_has_nul(t) || !template_name_valid(json_string_value(t)) ||
	           template_name_reserved(json_string_value(t))) {
		return al_error_set(
		    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		    "template: must be a name of 1 to %d characters from [a-z0-9_-], not beginning with "
		    "\"" TEMPLATE_CACHE_PREFIX "\"",
		    SANDBOX_TEMPLATE_NAME_MAX);
	} else {
		strlcpy_al(r.template_name, json_string_value(t), sizeof(r.template_name));
	}

	json_t *tn = json_object_get(j, "tenant");
	if (tn && !json_is_null(tn)) {
		/* Same alphabet as template names. */
		if (!json_is_string(tn) || json_string_has_nul(tn) || !template_name_valid(json_string_value(tn)))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "tenant: must be a name of 1 to 63 characters from [a-z0-9_-]");
		strlcpy_al(r.tenant, json_string_value(tn), sizeof(r.tenant));
	}

	json_t *snap = json_object_get(j, "snapshot");
	if (snap && !json_is_null(snap)) {
		const char *sv = json_is_string(snap) ? json_string_value(snap) : "";
		bool ok = json_string_length(snap) == 21 && !strncmp(sv, "snap-", 5);
		for (size_t i = 5; ok && i < 21; i++)
			ok = (sv[i] >= '0' && sv[i] <= '9') || (sv[i] >= 'a' && sv[i] <= 'f');
		if (!ok)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "snapshot: must be a snapshot id (snap- and 16 hex digits)");
		strlcpy_al(r.snapshot, sv, sizeof(r.snapshot));
	}

	long long v;
	if ((rc = get_uint(j, "vcpus", 1, SANDBOX_VCPUS_MAX, 1, &v, err)) < 0)
		return rc;
	r.vcpus = (unsigned)v;
	unsigned mem_max = SANDBOX_MEMORY_MIB_MAX;
	if (host_memory_mib > 0 && host_memory_mib < mem_max)
		mem_max = host_memory_mib;
	if ((rc = get_uint(j, "memory_mib", SANDBOX_MEMORY_MIB_MIN, mem_max, 256, &v, err)) < 0)
		return rc;
	r.memory_mib = (unsigned)v;
	/* Against the template's size and --max-disk-mib when the template is known. */
	if ((rc = get_uint(j, "disk_mib", 1, SANDBOX_DISK_MIB_MAX, 0, &v, err)) < 0)
		return rc;
	r.disk_mib = (unsigned)v;
	json_t *boot = json_object_get(j, "boot");
	if (boot && !json_is_null(boot)) {
		const char *bv = json_is_string(boot) && !json_string_has_nul(boot) ? json_string_value(boot) : "";
		if (strcmp(bv, "auto") && strcmp(bv, "cold"))
			return al_error_set(
			    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			    "boot: \"auto\" (from the template's snapshot where there is one) or \"cold\"");
		r.cold_boot = !strcmp(bv, "cold");
	}

	if ((rc = parse_timeouts(j, &r.timeouts, err)) < 0)
		return rc;
	if ((rc = parse_env(j, &r.env, err)) < 0)
		return rc;
	if ((rc = parse_metadata(j, &r.metadata, err)) < 0) {
		create_request_release(&r);
		return rc;
	}
	json_t *net = json_object_get(j, "network");
	if (net && !json_is_null(net) && (rc = network_policy_parse(net, &r.network_json, err)) < 0) {
		create_request_release(&r);
		return rc;
	}
	if ((rc = secret_grants_parse(j, &r.env, &r.secrets, err)) < 0) {
		create_request_release(&r);
		return rc;
	}
	*ret = r;
	return 0;
}

static int parse_argv(json_t *j, struct exec_request *r, struct al_error *err)
{
	json_t *cmd = json_object_get(j, "cmd");
	if (!cmd)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "cmd: required, an array of strings such as [\"sh\", \"-c\", \"echo hi\"]");
	if (!json_is_array(cmd) || json_array_size(cmd) == 0 || json_array_size(cmd) > EXEC_ARGV_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "cmd: must be an array of 1 to %d strings",
		                    EXEC_ARGV_MAX);
	size_t n = json_array_size(cmd), total = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *a = json_array_get(cmd, i);
		if (!json_is_string(a) || json_string_has_nul(a))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "cmd[%zu]: must be a string without NUL bytes", i);
		if (json_string_length(a) > EXEC_ARG_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "cmd[%zu]: at most %u bytes", i,
			                    EXEC_ARG_MAX);
		total += json_string_length(a);
	}
	if (total > EXEC_ARGV_TOTAL_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "cmd: at most %u bytes in total",
		                    EXEC_ARGV_TOTAL_MAX);
	if (json_string_length(json_array_get(cmd, 0)) == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "cmd[0]: must not be empty");
	r->argv = xcalloc(n + 1, sizeof(char *));
	for (size_t i = 0; i < n; i++)
		r->argv[i] = xstrdup(json_string_value(json_array_get(cmd, i)));
	r->argc = n;
	return 0;
}

static int parse_stdin(json_t *j, struct exec_request *r, struct al_error *err)
{
	json_t *s = json_object_get(j, "stdin");
	json_t *enc = json_object_get(j, "stdin_encoding");
	bool b64 = false;
	if (enc && !json_is_null(enc)) {
		if (!json_is_string(enc) ||
		    (strcmp(json_string_value(enc), "utf8") && strcmp(json_string_value(enc), "base64")))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "stdin_encoding: must be \"utf8\" or \"base64\"");
		b64 = !strcmp(json_string_value(enc), "base64");
	}
	if (!s || json_is_null(s))
		return 0;
	if (!json_is_string(s))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "stdin: must be a string");
	const char *v = json_string_value(s);
	size_t n = json_string_length(s);
	if (b64) {
		if (n / 4 * 3 > EXEC_STDIN_MAX + 2)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "stdin: at most %u bytes",
			                    EXEC_STDIN_MAX);
		if (base64_decode(v, n, &r->stdin_data, &r->stdin_len) < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "stdin: not valid base64");
	} else {
		r->stdin_data = xmalloc(n);
		memcpy(r->stdin_data, v, n);
		r->stdin_len = n;
	}
	if (r->stdin_len > EXEC_STDIN_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "stdin: at most %u bytes", EXEC_STDIN_MAX);
	return 0;
}

static int get_bool(json_t *obj, const char *field, bool *ret, struct al_error *err)
{
	json_t *v = json_object_get(obj, field);
	if (!v || json_is_null(v)) {
		*ret = false;
		return 0;
	}
	if (!json_is_boolean(v))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: must be true or false", field);
	*ret = json_is_true(v);
	return 0;
}

/* stream, stdin_stream, pty, tag: what the streaming and process endpoints add. */
static int parse_exec_extras(json_t *j, struct exec_request *r, struct al_error *err)
{
	int rc;
	if ((rc = get_bool(j, "stream", &r->stream, err)) < 0 ||
	    (rc = get_bool(j, "stdin_stream", &r->stdin_stream, err)) < 0)
		return rc;
	if (r->stdin_stream && r->stdin_data)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "stdin and stdin_stream: give one or the other");
	json_t *pty = json_object_get(j, "pty");
	if (pty && !json_is_null(pty)) {
		static const char *const pty_fields[] = {"rows", "cols", NULL};
		if (!json_is_object(pty))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "pty: must be an object {\"rows\": R, \"cols\": C}");
		if ((rc = request_fields_check(pty, pty_fields, err)) < 0) {
			al_error_prefix(err, "pty");
			return rc;
		}
		long long v;
		if ((rc = get_uint(pty, "rows", 1, PTY_ROWS_MAX, 24, &v, err)) < 0)
			return rc;
		r->pty_rows = (unsigned)v;
		if ((rc = get_uint(pty, "cols", 1, PTY_COLS_MAX, 80, &v, err)) < 0)
			return rc;
		r->pty_cols = (unsigned)v;
	}
	json_t *tag = json_object_get(j, "tag");
	if (tag && !json_is_null(tag)) {
		if (!json_is_string(tag) || json_string_has_nul(tag) || json_string_length(tag) > EXEC_TAG_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "tag: must be a string of at most %d bytes", EXEC_TAG_MAX);
		strlcpy_al(r->tag, json_string_value(tag), sizeof(r->tag));
	}
	return 0;
}

int exec_request_parse(const char *body, size_t len, struct exec_request *ret, struct al_error *err)
{
	static const char *const fields[] = {"cmd",
	                                     "env",
	                                     "cwd",
	                                     "stdin",
	                                     "stdin_encoding",
	                                     "uid",
	                                     "gid",
	                                     "timeout_s",
	                                     "max_output_bytes",
	                                     "stream",
	                                     "stdin_stream",
	                                     "pty",
	                                     "tag",
	                                     NULL};
	cleanup_json json_t *j = NULL;
	struct exec_request r = {0};
	int rc;

	if ((rc = request_body_parse(body, len, &j, err)) < 0 || (rc = request_fields_check(j, fields, err)) < 0)
		return rc;
	if ((rc = parse_argv(j, &r, err)) < 0)
		goto fail;
	if ((rc = parse_env(j, &r.env, err)) < 0)
		goto fail;

	json_t *cwd = json_object_get(j, "cwd");
	if (cwd && !json_is_null(cwd)) {
		if (!json_is_string(cwd) || json_string_has_nul(cwd) || json_string_value(cwd)[0] != '/' ||
		    json_string_length(cwd) > EXEC_CWD_MAX) {
			rc = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                  "cwd: must be an absolute path of at most %d bytes", EXEC_CWD_MAX);
			goto fail;
		}
		r.cwd = xstrdup(json_string_value(cwd));
	} else {
		r.cwd = xstrdup("/");
		r.cwd_default = true;
	}
	r.user_default = !json_object_get(j, "uid") && !json_object_get(j, "gid");
	if ((rc = parse_stdin(j, &r, err)) < 0)
		goto fail;

	long long v;
	if ((rc = get_uint(j, "uid", 0, EXEC_ID_MAX, 0, &v, err)) < 0)
		goto fail;
	r.uid = (unsigned)v;
	if ((rc = get_uint(j, "gid", 0, EXEC_ID_MAX, 0, &v, err)) < 0)
		goto fail;
	r.gid = (unsigned)v;
	if ((rc = get_uint(j, "timeout_s", 1, EXEC_TIMEOUT_S_MAX, EXEC_TIMEOUT_S_DEFAULT, &v, err)) < 0)
		goto fail;
	r.timeout_s = (unsigned)v;
	r.timeout_given = json_object_get(j, "timeout_s") && !json_is_null(json_object_get(j, "timeout_s"));
	if ((rc = parse_exec_extras(j, &r, err)) < 0)
		goto fail;
	if ((rc = get_uint(j, "max_output_bytes", 1, EXEC_OUTPUT_MAX, EXEC_OUTPUT_DEFAULT, &v, err)) < 0)
		goto fail;
	r.max_output_bytes = (size_t)v;
	*ret = r;
	return 0;
fail:
	exec_request_release(&r);
	return rc;
}

/* ------------------------------------------------------------ tokens */

int token_create_request_parse(const char *body, size_t len, struct token_create_request *ret, struct al_error *err)
{
	/* SECURITY: body is client input capped by the caller; checked here
	 * field by field before anything is copied. */
	static const char *const allowed[] = {"tenant", "description", NULL};
	if (len > AUTH_BODY_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "request body is %zu bytes; the limit is %d", len,
		                    AUTH_BODY_MAX);
	cleanup_json json_t *j = NULL;
	const char *tenant, *description;
	int r;
	if ((r = request_body_parse(body, len, &j, err)) < 0 || (r = request_fields_check(j, allowed, err)) < 0 ||
	    (r = json_field_string(j, "tenant", &tenant, err)) < 0)
		return r;
	if (!tenant)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "tenant: required (the tenant the token acts for, e.g. \"default\")");
	if (!tenant_name_valid(tenant))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "tenant: must match [a-z0-9][a-z0-9_-]{0,62}, got \"%.64s\"", tenant);
	if ((r = json_field_string(j, "description", &description, err)) < 0)
		return r;
	if (description && !token_description_valid(description))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "description: must be at most %d bytes of UTF-8 without control characters",
		                    TOKEN_DESCRIPTION_MAX);
	struct token_create_request t = {0};
	strlcpy_al(t.tenant, tenant, sizeof(t.tenant));
	strlcpy_al(t.description, description ? description : "", sizeof(t.description));
	*ret = t;
	return 0;
}

/* ------------------------------------------------------------ tenants */

static int get_quota(json_t *obj, const char *field, unsigned *ret, struct al_error *err)
{
	json_t *v = json_object_get(obj, field);
	if (!v || json_is_null(v)) {
		*ret = 0;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (json_int_t)QUOTA_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "%s: must be an integer from 0 (unlimited) to %u", field, QUOTA_MAX);
	*ret = (unsigned)json_integer_value(v);
	return 0;
}

int quota_request_parse(const char *body, size_t len, struct tenant_quota *ret, struct al_error *err)
{
	/* SECURITY: body is client input capped by the caller. */
	static const char *const allowed[] = {"max_sandboxes", "max_vcpus", "max_memory_mib", "max_snapshot_mib", NULL};
	if (len > AUTH_BODY_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "request body is %zu bytes; the limit is %d", len,
		                    AUTH_BODY_MAX);
	cleanup_json json_t *j = NULL;
	int r;
	if ((r = request_body_parse(body, len, &j, err)) < 0 || (r = request_fields_check(j, allowed, err)) < 0)
		return r;
	struct tenant_quota q;
	if ((r = get_quota(j, "max_sandboxes", &q.max_sandboxes, err)) < 0 ||
	    (r = get_quota(j, "max_vcpus", &q.max_vcpus, err)) < 0 ||
	    (r = get_quota(j, "max_memory_mib", &q.max_memory_mib, err)) < 0 ||
	    (r = get_quota(j, "max_snapshot_mib", &q.max_snapshot_mib, err)) < 0)
		return r;
	*ret = q;
	return 0;
}
