/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's control API requests as Airlock's: pure parsers (api-e2b-request.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api-e2b-request.h"
#include "json-cleanup.h"
#include "network-policy.h"
#include "sandbox-model.h"
#include "util.h"

/* A JSON object body ("" is {}), duplicates refused; the parser's message
 * never quotes the body. */
static int e2b_body_parse(const char *body, size_t len, json_t **ret, struct al_error *err)
{
	json_error_t jerr;
	json_t *j = json_loadb(len ? body : "{}", len ? len : 2, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(j)) {
		json_decref(j);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "request body must be a JSON object (line %d, column %d)", jerr.line, jerr.column);
	}
	*ret = j;
	return 0;
}

/* ---- the network of a create or an update ------------------------------------------------------- */

static bool e2b_string_array(const json_t *a)
{
	size_t i;
	const json_t *v;
	if (!json_is_array(a))
		return false;
	json_array_foreach (a, i, v)
		if (!json_is_string(v))
			return false;
	return true;
}

static bool e2b_array_has(const json_t *a, const char *s)
{
	size_t i;
	const json_t *v;
	json_array_foreach (a, i, v)
		if (!strcmp(json_string_value(v), s))
			return true;
	return false;
}

/* Fields of E2B's network config that are about the sandbox's URLs:
 * accepted and ignored (docs/e2b.md: Airlock's ports are private unless
 * exposed public, whatever allowPublicTraffic says). */
static const char *const e2b_network_fields[] = {"allowOut",           "denyOut",         "rules",      "egressProxy",
                                                 "allowPublicTraffic", "maskRequestHost", "httpsPorts", NULL};

/*
 * E2B's egress options as an Airlock policy {"allow","deny"} (*ret NULL:
 * none asked, the operator's default applies). E2B opens the internet
 * unless told otherwise and lets allowOut win over denyOut; Airlock lets out
 * only what a policy names and lets deny win. So only a closed world maps:
 * allowInternetAccess false or denyOut holding 0.0.0.0/0, with allowOut the
 * allow rules and the rest of denyOut (less what allowOut names) the deny
 * rules. An open world would be more than Airlock can give: refused.
 * SECURITY: client input; only the shapes are checked here, every rule is
 * then parsed by network_policy_parse (and bounded by the ceiling) on the
 * way into the create or the update.
 */
static int e2b_network_translate(const json_t *internet, const json_t *net, json_t **ret, struct al_error *err)
{
	*ret = NULL;
	if (internet && !json_is_null(internet) && !json_is_boolean(internet))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "allow_internet_access: must be a boolean");
	if (net && json_is_null(net))
		net = NULL;
	if (net && !json_is_object(net))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "network: must be an object");
	if (net && request_fields_check((json_t *)net, e2b_network_fields, err) < 0) {
		al_error_prefix(err, "network");
		return -EINVAL;
	}
	const json_t *allow = json_object_get(net, "allowOut"), *deny = json_object_get(net, "denyOut");
	const json_t *rules = json_object_get(net, "rules"), *proxy = json_object_get(net, "egressProxy");
	if ((allow && !e2b_string_array(allow)) || (deny && !e2b_string_array(deny)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "network.allowOut and network.denyOut: must be arrays of strings");
	if (rules && !json_is_null(rules) && json_object_size(rules) > 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "network.rules: request transforms are not supported by Airlock; use Airlock "
		                    "secrets (docs/api.md \"Secrets\") to add credentials to requests");
	if (proxy && !json_is_null(proxy))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "network.egressProxy: not supported by Airlock (its egress gateway dials itself)");
	bool internet_off = json_is_false(internet);
	if (!allow && !deny && !(internet && !json_is_null(internet)))
		return 0;
	if (!internet_off && !(deny && e2b_array_has(deny, E2B_ALL_TRAFFIC)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "network: Airlock cannot open the whole internet to a sandbox (its egress gateway "
		                    "lets out only what a policy names): deny all traffic (network.denyOut [\"%s\"] "
		                    "or allowInternetAccess: false) and list the hosts in network.allowOut, or send no "
		                    "network option to get the operator's default policy",
		                    E2B_ALL_TRAFFIC);
	json_t *p = json_pack("{s:[], s:[]}", "allow", "deny");
	json_t *pa = json_object_get(p, "allow"), *pd = json_object_get(p, "deny");
	size_t i;
	json_t *v;
	json_array_foreach ((json_t *)allow, i, v)
		json_array_append(pa, v);
	json_array_foreach ((json_t *)deny, i, v) {
		const char *s = json_string_value(v);
		if (strcmp(s, E2B_ALL_TRAFFIC) && !(allow && e2b_array_has(allow, s)))
			json_array_append(pd, v);
	}
	*ret = p;
	return 0;
}

/* The ceiling's refusal is a 403 in Airlock's API; E2B's clients get a 400
 * naming what was asked. */
static void e2b_network_error(struct al_error *err)
{
	if (err->code == AL_ERR_FORBIDDEN && strstr(err->message, "network"))
		err->code = AL_ERR_INVALID_ARGUMENT;
}

/* ---- POST /v2/sandboxes ------------------------------------------------------------------------- */

static const char *const e2b_create_fields[] = {"templateID",   "metadata",
                                                "envVars",      "timeout",
                                                "autoPause",    "autoPauseMemory",
                                                "autoResume",   "secure",
                                                "network",      "allow_internet_access",
                                                "mcp",          "iam",
                                                "volumeMounts", NULL};

/* Options Airlock has no counterpart for: refused unless they ask for nothing. */
static int e2b_create_unsupported(const json_t *b, struct al_error *err)
{
	const json_t *mcp = json_object_get(b, "mcp"), *iam = json_object_get(b, "iam"),
	             *vol = json_object_get(b, "volumeMounts"), *resume = json_object_get(b, "autoResume");
	if (mcp && !json_is_null(mcp))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "mcp: MCP gateways are not supported by Airlock");
	if (iam && !json_is_null(iam))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "iam: workload identity is not supported by Airlock");
	if (vol && !json_is_null(vol) && !(json_is_array(vol) && json_array_size(vol) == 0))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "volumeMounts: volumes are not supported by Airlock");
	if (resume && !json_is_null(resume) &&
	    !(json_is_object(resume) && json_is_boolean(json_object_get(resume, "enabled")) &&
	      json_object_size(resume) == 1))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "autoResume: must be {\"enabled\": true|false}");
	const char *bools[] = {"autoPause", "autoPauseMemory", "secure"};
	for (size_t i = 0; i < ARRAY_SIZE(bools); i++) {
		const json_t *v = json_object_get(b, bools[i]);
		if (v && !json_is_null(v) && !json_is_boolean(v))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: must be a boolean", bools[i]);
	}
	return 0;
}

/* SECURITY: client input. The E2B body is checked for its fields and shapes
 * and rewritten as an Airlock create body, which create_request_parse then
 * checks as it checks every create (names, sizes, limits, the network
 * ceiling). */
static int e2b_create_translate(json_t *b, char **ret_body, struct al_error *err)
{
	int r;
	if ((r = request_fields_check(b, e2b_create_fields, err)) < 0 || (r = e2b_create_unsupported(b, err)) < 0)
		return r;
	json_t *tmpl = json_object_get(b, "templateID");
	if (!json_is_string(tmpl))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "templateID: required, the name of an Airlock template (such as \"base\")");
	json_t *timeout = json_object_get(b, "timeout");
	if (timeout && !json_is_null(timeout) &&
	    (!json_is_integer(timeout) || json_integer_value(timeout) < 1 ||
	     json_integer_value(timeout) > SANDBOX_TIMEOUT_S_MAX))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "timeout: must be 1 to %u seconds",
		                    SANDBOX_TIMEOUT_S_MAX);
	cleanup_json json_t *policy = NULL;
	if ((r = e2b_network_translate(json_object_get(b, "allow_internet_access"), json_object_get(b, "network"),
	                               &policy, err)) < 0)
		return r;
	cleanup_json json_t *native =
	    json_pack("{s:O, s:i, s:i, s:I, s:s}", "template", tmpl, "vcpus", E2B_VCPUS, "memory_mib", E2B_MEMORY_MIB,
	              "timeout_s",
	              timeout && !json_is_null(timeout) ? (json_int_t)json_integer_value(timeout)
	                                                : (json_int_t)E2B_TIMEOUT_DEFAULT_S,
	              "on_timeout", json_is_true(json_object_get(b, "autoPause")) ? "pause" : "kill");
	/* Traffic to its ports (the proxy) resumes it when paused. */
	if (json_is_true(json_object_get(json_object_get(b, "autoResume"), "enabled")))
		json_object_set_new(native, "auto_resume", json_true());
	json_t *env = json_object_get(b, "envVars"), *meta = json_object_get(b, "metadata");
	if (env && !json_is_null(env))
		json_object_set(native, "env", env);
	if (meta && !json_is_null(meta))
		json_object_set(native, "metadata", meta);
	if (policy)
		json_object_set(native, "network", policy);
	*ret_body = json_dumps(native, JSON_COMPACT);
	return 0;
}

int e2b_create_request_parse(const char *body, size_t len, unsigned host_memory_mib, struct create_request *ret,
                             struct al_error *err)
{
	cleanup_json json_t *b = NULL;
	cleanup_free char *native = NULL;
	int r;
	if ((r = e2b_body_parse(body, len, &b, err)) < 0 || (r = e2b_create_translate(b, &native, err)) < 0)
		return r;
	if ((r = create_request_parse(native, strlen(native), host_memory_mib, ret, err)) < 0)
		e2b_create_error_explain(err);
	return r;
}

void e2b_create_error_explain(struct al_error *err)
{
	e2b_network_error(err);
	if (err->code == AL_ERR_INVALID_ARGUMENT)
		al_error_prefix(err, "as an Airlock create (docs/e2b.md: templateID → template, envVars → env, "
		                     "timeout → timeout_s)");
}

int e2b_network_request_parse(const char *body, size_t len, char **ret_policy_json, struct al_error *err)
{
	static const char *const fields[] = {"allow_internet_access", "allowOut", "denyOut", "rules",
	                                     "egressProxy",           NULL};
	cleanup_json json_t *b = NULL;
	cleanup_json json_t *policy = NULL;
	int r;
	if ((r = e2b_body_parse(body, len, &b, err)) < 0 || (r = request_fields_check(b, fields, err)) < 0)
		return r;
	cleanup_json json_t *net = json_deep_copy(b);
	json_object_del(net, "allow_internet_access");
	if ((r = e2b_network_translate(json_object_get(b, "allow_internet_access"), net, &policy, err)) < 0)
		return r;
	if (!policy)
		policy = json_pack("{s:[], s:[]}", "allow", "deny");
	if ((r = network_policy_parse(policy, ret_policy_json, err)) < 0)
		e2b_network_error(err);
	return r;
}

/* ---- the query of a list ------------------------------------------------------------------------ */

/* SECURITY: decodes %XX (and '+' as a space when form is true) in place;
 * false for a bad escape or a NUL. The result is never longer. */
static bool e2b_unescape(char *s, bool form)
{
	char *o = s;
	for (const char *p = s; *p; p++) {
		if (*p == '%') {
			int hi = hex_digit_value((unsigned char)p[1]),
			    lo = hi < 0 ? -1 : hex_digit_value((unsigned char)p[2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				return false;
			*o++ = (char)(hi << 4 | lo);
			p += 2;
		} else {
			*o++ = form && *p == '+' ? ' ' : *p;
		}
	}
	*o = '\0';
	return true;
}

/*
 * SECURITY: ?metadata= is client input: "k1=v1&k2=v2" where the SDK
 * encoded each key and value (encodeURIComponent), then the pairs as a form
 * (URLSearchParams), then the whole as a query value, which the server has
 * decoded. So: split on '&' and the first '=', decode as a form, then once
 * more. At most E2B_METADATA_FILTERS_MAX pairs; keys and values within the
 * metadata limits.
 */
static int e2b_metadata_filter_parse(const char *text, struct e2b_list_query *q, struct al_error *err)
{
	q->meta_text = xstrdup(text);
	char *save = NULL;
	for (char *pair = strtok_r(q->meta_text, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(pair, '=');
		if (!eq || q->n_meta >= E2B_METADATA_FILTERS_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "metadata: at most %d KEY=VALUE pairs joined by &, each key and value "
			                    "URL-encoded",
			                    E2B_METADATA_FILTERS_MAX);
		*eq = '\0';
		char *k = pair, *v = eq + 1;
		if (!e2b_unescape(k, true) || !e2b_unescape(k, false) || !e2b_unescape(v, true) ||
		    !e2b_unescape(v, false) || !k[0] || strlen(k) > METADATA_KEY_MAX || strlen(v) > METADATA_VALUE_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "metadata: a key (1 to %d bytes) or value (at most %d bytes) is too long "
			                    "or badly encoded",
			                    METADATA_KEY_MAX, METADATA_VALUE_MAX);
		q->keys[q->n_meta] = k;
		q->values[q->n_meta] = v;
		q->n_meta++;
	}
	return 0;
}

/* SECURITY: "YYYY-MM-DDTHH:MM:SS[.fff]Z" (toISOString()), strictly. */
static int e2b_time_parse(const char *s, uint64_t *ret_ms)
{
	unsigned y, mo, d, h, mi, sec, ms = 0;
	int n = 0;
	if (strlen(s) > 40 || sscanf(s, "%4u-%2u-%2uT%2u:%2u:%2u%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 || n != 19)
		return -EINVAL;
	const char *p = s + n;
	if (*p == '.') {
		unsigned digits = 0, frac = 0;
		for (p++; *p >= '0' && *p <= '9' && digits < 9; p++, digits++)
			frac = frac * 10 + (unsigned)(*p - '0');
		for (; digits < 3; digits++)
			frac *= 10;
		for (; digits > 3; digits--)
			frac /= 10;
		ms = frac;
	}
	if (strcmp(p, "Z") || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
		return -EINVAL;
	struct tm tm = {.tm_year = (int)y - 1900,
	                .tm_mon = (int)mo - 1,
	                .tm_mday = (int)d,
	                .tm_hour = (int)h,
	                .tm_min = (int)mi,
	                .tm_sec = (int)sec};
	time_t t = timegm(&tm);
	if (t < 0)
		return -EINVAL;
	*ret_ms = (uint64_t)t * 1000 + ms;
	return 0;
}

/* SECURITY: the next token is ours ("MS.sb-…": the created time and id of
 * the last item of the previous page), but comes back from the client. */
static int e2b_token_parse(const char *s, struct e2b_list_query *q)
{
	const char *dot = strchr(s, '.');
	if (strlen(s) > E2B_NEXT_TOKEN_MAX || !dot || dot == s || dot - s > 20 || !sandbox_id_valid(dot + 1))
		return -EINVAL;
	uint64_t ms = 0;
	for (const char *p = s; p < dot; p++) {
		if (*p < '0' || *p > '9' || ms > UINT64_MAX / 10 - 1)
			return -EINVAL;
		ms = ms * 10 + (uint64_t)(*p - '0');
	}
	q->token_ms = ms;
	strlcpy_al(q->token_id, dot + 1, sizeof(q->token_id));
	q->has_token = true;
	return 0;
}

int e2b_list_query_parse(const struct e2b_list_args *a, bool v2, struct e2b_list_query *q, struct al_error *err)
{
	*q = (struct e2b_list_query){.running = true, .paused = v2, .limit = E2B_LIST_LIMIT_MAX};
	const char *meta = a->metadata;
	if (meta && e2b_metadata_filter_parse(meta, q, err) < 0)
		return -EINVAL;
	if (!v2)
		return 0;
	const char *state = a->state;
	if (state) {
		q->running = q->paused = false;
		cleanup_free char *copy = xstrdup(state);
		char *save = NULL;
		for (char *s = strtok_r(copy, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
			if (!strcmp(s, "running"))
				q->running = true;
			else if (!strcmp(s, "paused"))
				q->paused = true;
			else
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
				                    "state: running, paused or both (comma-separated)");
		}
		if (!q->running && !q->paused)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "state: running, paused or both (comma-separated)");
	}
	const char *limit = a->limit, *token = a->next_token;
	const char *order = a->order, *after = a->started_after;
	uint64_t v = 0;
	if (limit && (parse_u64(limit, &v) < 0 || v < 1 || v > E2B_LIST_LIMIT_MAX))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "limit: 1 to %d", E2B_LIST_LIMIT_MAX);
	if (limit)
		q->limit = (size_t)v;
	if (token && token[0] && e2b_token_parse(token, q) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "nextToken: not a token this server gave (the X-Next-Token of a page)");
	if (order && strcmp(order, "asc") && strcmp(order, "desc"))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "order: asc or desc");
	q->asc = order && !strcmp(order, "asc");
	if (after && e2b_time_parse(after, &q->started_after_ms) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "startedAfter: a time such as 2026-01-02T03:04:05.000Z");
	q->template_name = a->template_name;
	if (q->template_name && !q->template_name[0])
		q->template_name = NULL;
	return 0;
}

void e2b_list_query_release(struct e2b_list_query *q)
{
	free(q->meta_text);
	q->meta_text = NULL;
}

void e2b_next_token_format(uint64_t created_ms, const char *id, char buf[E2B_NEXT_TOKEN_MAX + 1])
{
	snprintf(buf, E2B_NEXT_TOKEN_MAX + 1, "%" PRIu64 ".%s", created_ms, id);
}
