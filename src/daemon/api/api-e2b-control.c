/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's control API (docs/e2b.md, "Control API") mapped onto Airlock's
 * sandboxes: create, connect (resume), get, list, kill, timeout, pause,
 * network, metrics. Errors are answered the usual way; the server writes
 * them as {"code":STATUS,"message"} (e2b_error_render). */
#include <stdlib.h>
#include <time.h>

#include "api-e2b-request.h"
#include "api-e2b.h"
#include "api-handlers.h"
#include "airlock/proto.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "util.h"

#define E2B_CLIENT_ID "airlock"
#define E2B_NO_END "9999-12-31T23:59:59.000Z"

/* ---- sandboxes as E2B shows them ----------------------------------------------------------------- */

/* E2B knows two states; creating and snapshotting are moments of running. */
static const char *e2b_state_name(enum sandbox_state s)
{
	switch (s) {
	case SANDBOX_CREATING:
	case SANDBOX_RUNNING:
	case SANDBOX_SNAPSHOTTING:
		return "running";
	case SANDBOX_PAUSED:
		return "paused";
	default:
		return NULL;
	}
}

/* When its timeout ends, counted from now in running time (paused time does
 * not count: docs/api.md "Timeouts"). */
static void e2b_end_at(const struct sandbox_record *r, char buf[32])
{
	if (!r->timeout_s) {
		strlcpy_al(buf, E2B_NO_END, 32);
		return;
	}
	uint64_t now = now_ms_realtime();
	uint64_t ran = r->run_ms + (r->running_since_ms && now > r->running_since_ms ? now - r->running_since_ms : 0);
	uint64_t limit = (uint64_t)r->timeout_s * 1000;
	format_time_rfc3339(now + (ran < limit ? limit - ran : 0), buf);
}

static json_t *e2b_metadata(const struct sandbox_record *r)
{
	json_t *m = r->metadata_json ? json_loads(r->metadata_json, 0, NULL) : NULL;
	return json_is_object(m) ? m : (json_decref(m), json_object());
}

/* The sandbox's envd access token, for the Sandbox and SandboxDetail objects;
 * a failure is answered. */
static int e2b_token_make(const struct sandbox_record *r, char token[E2B_ENVD_TOKEN_LEN + 1], struct api_response *resp)
{
	int rc = e2b_envd_token(r->tenant, r->id, token);
	if (rc < 0)
		api_response_errorf(resp, AL_ERR_INTERNAL, "the envd access token of %s could not be made", r->id);
	return rc;
}

/* Where the SDK's getHost(port) points (PORT-ID.DOMAIN: the ports proxy,
 * docs/api.md "Ports"; null without one) and the token a private port
 * wants (its e2b-traffic-access-token header). */
static void e2b_traffic_set(json_t *o, const struct sandbox_record *r)
{
	const char *domain = api_config()->proxy_domain;
	json_object_set_new(o, "domain", domain ? json_string(domain) : json_null());
	char traffic[TRAFFIC_TOKEN_LEN + 1];
	if (sandbox_traffic_token(r->tenant, r->id, traffic) == 0)
		json_object_set_new(o, "trafficAccessToken", json_string(traffic));
	else
		json_object_set_new(o, "trafficAccessToken", json_null());
	explicit_bzero(traffic, sizeof(traffic));
}

/* The Sandbox object of create and connect. */
static json_t *e2b_sandbox_json(const struct sandbox_record *r, struct api_response *resp)
{
	char token[E2B_ENVD_TOKEN_LEN + 1];
	if (e2b_token_make(r, token, resp) < 0)
		return NULL;
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "sandboxID", r->id, "templateID", r->template_name,
	                      "alias", r->template_name, "clientID", E2B_CLIENT_ID, "envdVersion", E2B_ENVD_VERSION,
	                      "envdAccessToken", token);
	explicit_bzero(token, sizeof(token));
	e2b_traffic_set(o, r);
	return o;
}

/* What ListedSandbox and SandboxDetail share. */
static json_t *e2b_listed_json(const struct sandbox_record *r)
{
	char started[32], end[32];
	format_time_rfc3339(r->created_ms, started);
	e2b_end_at(r, end);
	return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:s, s:s, s:o, s:s, s:s, s:[]}", "sandboxID", r->id,
	                 "templateID", r->template_name, "alias", r->template_name, "clientID", E2B_CLIENT_ID,
	                 "cpuCount", (json_int_t)r->vcpus, "memoryMB", (json_int_t)r->memory_mib, "diskSizeMB",
	                 (json_int_t)r->disk_mib, "envdVersion", E2B_ENVD_VERSION, "startedAt", started, "metadata",
	                 e2b_metadata(r), "endAt", end, "state", e2b_state_name(r->state), "volumeMounts");
}

/* Airlock's policy as E2B's network: what is not allowed is denied. */
static json_t *e2b_network_json(const struct sandbox_record *r)
{
	cleanup_json json_t *p = r->network_json ? json_loads(r->network_json, 0, NULL) : NULL;
	json_t *allow = json_object_get(p, "allow"), *deny = json_object_get(p, "deny");
	json_t *deny_out = json_is_array(deny) ? json_deep_copy(deny) : json_array();
	json_array_insert_new(deny_out, 0, json_string(E2B_ALL_TRAFFIC));
	return json_pack("{s:o, s:o}", "allowOut", json_is_array(allow) ? json_deep_copy(allow) : json_array(),
	                 "denyOut", deny_out);
}

static json_t *e2b_detail_json(const struct sandbox_record *r, struct api_response *resp)
{
	char token[E2B_ENVD_TOKEN_LEN + 1];
	if (e2b_token_make(r, token, resp) < 0)
		return NULL;
	json_t *o = e2b_listed_json(r);
	json_object_set_new(o, "envdAccessToken", json_string(token));
	explicit_bzero(token, sizeof(token));
	e2b_traffic_set(o, r);
	/* Airlock never opens the whole internet: the policy names what goes out. */
	json_object_set_new(o, "allowInternetAccess", json_false());
	json_object_set_new(o, "network", e2b_network_json(r));
	json_object_set_new(o, "lifecycle",
	                    json_pack("{s:s, s:b}", "onTimeout", !strcmp(r->on_timeout, "pause") ? "pause" : "kill",
	                              "autoResume", r->auto_resume));
	return o;
}

/* The caller's sandbox as E2B can see it: a deleted one is not found, one
 * in a state E2B has no name for is a conflict that says which. */
static int e2b_sandbox_get(const struct api_request *req, struct api_response *resp, struct sandbox_record *ret)
{
	struct al_error err = {0};
	if (sandbox_get(req->params[0], req->tenant, ret, &err) < 0) {
		api_response_error(resp, &err);
		return -ENOENT;
	}
	if (ret->state == SANDBOX_DELETED) {
		api_response_errorf(resp, AL_ERR_NOT_FOUND, "sandbox %s was killed", ret->id);
		sandbox_record_release(ret);
		return -ENOENT;
	}
	if (!e2b_state_name(ret->state)) {
		api_response_errorf(resp, AL_ERR_CONFLICT,
		                    "sandbox %s is %s%s%s: E2B has no such state; kill it, or see it with GET "
		                    "/v1/sandboxes/%s (POST /v1/sandboxes/%s/recover brings back one in error)",
		                    ret->id, sandbox_state_name(ret->state), ret->error ? ": " : "",
		                    ret->error ? ret->error : "", ret->id, ret->id);
		sandbox_record_release(ret);
		return -EBUSY;
	}
	return 0;
}

/* The state of the caller's sandbox as E2B can see it (e2b_sandbox_get),
 * checked before an operation (ret may be NULL); a failure is answered. */
static int e2b_sandbox_state(const struct api_request *req, struct api_response *resp, enum sandbox_state *ret)
{
	struct sandbox_record rec;
	int r = e2b_sandbox_get(req, resp, &rec);
	if (r < 0)
		return r;
	if (ret)
		*ret = rec.state;
	sandbox_record_release(&rec);
	return 0;
}

/* The end of an operation that gave a record (r its result): its error, or
 * 204 with the record let go. */
static void e2b_answer_done(struct api_response *resp, int r, struct sandbox_record *rec, const struct al_error *err)
{
	if (r < 0) {
		api_response_error(resp, err);
		return;
	}
	sandbox_record_release(rec);
	resp->status = 204;
}

API_HANDLER(api_e2b_create)
{
	struct al_error err = {0};
	struct create_request cr;
	if (e2b_create_request_parse(req->body, req->body_len, api_config()->host_memory_mib, &cr, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct tenant_quota quota = {0};
	struct sandbox_record rec;
	if (auth_quota_get(req->tenant, &quota, &err) < 0 ||
	    sandbox_create(&cr, req->tenant, &quota, NULL, &rec, &err) < 0) {
		e2b_create_error_explain(&err);
		api_response_error(resp, &err);
		if (err.code == AL_ERR_UNAVAILABLE)
			resp->retry_after_s = 1;
	} else {
		resp->body = e2b_sandbox_json(&rec, resp);
		if (resp->body)
			resp->status = 201;
		sandbox_record_release(&rec);
	}
	create_request_release(&cr);
}

/* ---- GET, DELETE, timeout, pause, connect ------------------------------------------------------- */

API_HANDLER(api_e2b_get)
{
	struct sandbox_record rec;
	if (e2b_sandbox_get(req, resp, &rec) < 0)
		return;
	resp->body = e2b_detail_json(&rec, resp);
	sandbox_record_release(&rec);
}

API_HANDLER(api_e2b_kill)
{
	struct sandbox_record rec;
	struct al_error err = {0};
	if (sandbox_get(req->params[0], req->tenant, &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	bool gone = rec.state == SANDBOX_DELETED;
	sandbox_record_release(&rec);
	if (gone) {
		api_response_errorf(resp, AL_ERR_NOT_FOUND, "sandbox %s was killed already", req->params[0]);
		return;
	}
	e2b_answer_done(resp, sandbox_delete(req->params[0], req->tenant, &rec, &err), &rec, &err);
}

/* A body's "timeout" in seconds (required: E2B's SandboxTimeoutRequest). */
static int e2b_timeout_field(const json_t *b, const char *const *fields, bool required, unsigned *ret,
                             struct al_error *err)
{
	int r = request_fields_check((json_t *)b, fields, err);
	if (r < 0)
		return r;
	const json_t *t = json_object_get(b, "timeout");
	*ret = 0;
	if (!t || json_is_null(t)) {
		if (required)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "timeout: required, in seconds");
		return 0;
	}
	if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > SANDBOX_TIMEOUT_S_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "timeout: must be 0 to %u seconds",
		                    SANDBOX_TIMEOUT_S_MAX);
	*ret = (unsigned)json_integer_value(t);
	return 1;
}

/* E2B's timeout counts from now: the sandbox ends in timeout_s of running. */
static int e2b_set_timeout(const char *id, const char *tenant, unsigned timeout_s, struct al_error *err)
{
	struct timeout_request t = {.has_timeout = true, .timeout_s = timeout_s};
	struct sandbox_record rec;
	int r = sandbox_set_timeouts(id, tenant, &t, &rec, err);
	if (r == 0)
		sandbox_record_release(&rec);
	return r;
}

API_HANDLER(api_e2b_timeout)
{
	static const char *const fields[] = {"timeout", NULL};
	cleanup_json json_t *b = api_parse_json_object(req, resp);
	if (!b)
		return;
	struct al_error err = {0};
	unsigned timeout_s;
	if (e2b_timeout_field(b, fields, true, &timeout_s, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	if (e2b_sandbox_state(req, resp, NULL) < 0)
		return;
	/* 0 would be "no timeout" in Airlock; in E2B it is "now". */
	if (e2b_set_timeout(req->params[0], req->tenant, timeout_s ? timeout_s : 1, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->status = 204;
}

API_HANDLER(api_e2b_pause)
{
	static const char *const fields[] = {"memory", NULL};
	cleanup_json json_t *b = api_parse_json_object(req, resp);
	if (!b)
		return;
	struct al_error err = {0};
	json_t *memory = json_object_get(b, "memory");
	if (request_fields_check(b, fields, &err) < 0 ||
	    (memory && !json_is_null(memory) && !json_is_boolean(memory) &&
	     al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "memory: must be a boolean") < 0)) {
		api_response_error(resp, &err);
		return;
	}
	/* memory: false (a filesystem-only pause) keeps the memory all the same. */
	enum sandbox_state state;
	if (e2b_sandbox_state(req, resp, &state) < 0)
		return;
	if (state == SANDBOX_PAUSED) {
		api_response_errorf(resp, AL_ERR_CONFLICT, "sandbox %s is already paused", req->params[0]);
		return;
	}
	struct sandbox_record rec;
	e2b_answer_done(resp, sandbox_pause(req->params[0], req->tenant, &rec, &err), &rec, &err);
}

/* POST /v2/sandboxes/{id}/connect, /sandboxes/{id}/connect and
 * /sandboxes/{id}/resume: a paused sandbox is resumed (201), a running one
 * answered as it is (200; E2B's connect only ever lengthens its timeout). */
static void e2b_connect(const struct api_request *req, struct api_response *resp, bool resume_only)
{
	static const char *const fields[] = {"timeout", "memory", "autoPause", NULL};
	cleanup_json json_t *b = api_parse_json_object(req, resp);
	if (!b)
		return;
	struct al_error err = {0};
	unsigned timeout_s = 0;
	int has_timeout = e2b_timeout_field(b, fields, false, &timeout_s, &err);
	json_t *memory = json_object_get(b, "memory"), *auto_pause = json_object_get(b, "autoPause");
	if (has_timeout >= 0 && memory && !json_is_null(memory) && !json_is_true(memory))
		has_timeout = al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                           "memory: Airlock resumes a paused sandbox from its memory; a reboot "
		                           "(onResume: 'reboot') is not supported");
	if (has_timeout >= 0 && auto_pause && !json_is_null(auto_pause) && !json_is_boolean(auto_pause))
		has_timeout = al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "autoPause: must be a boolean");
	if (has_timeout < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct sandbox_record rec;
	if (e2b_sandbox_get(req, resp, &rec) < 0)
		return;
	bool paused = rec.state == SANDBOX_PAUSED;
	uint64_t now = now_ms_realtime();
	uint64_t ran =
	    rec.run_ms + (rec.running_since_ms && now > rec.running_since_ms ? now - rec.running_since_ms : 0);
	bool longer = rec.timeout_s && (uint64_t)timeout_s * 1000 >
	                                   (uint64_t)rec.timeout_s * 1000 - MIN(ran, (uint64_t)rec.timeout_s * 1000);
	sandbox_record_release(&rec);
	if (resume_only && !paused) {
		api_response_errorf(resp, AL_ERR_CONFLICT, "sandbox %s is already running", req->params[0]);
		return;
	}
	if (paused && sandbox_resume(req->params[0], req->tenant, &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	if (paused)
		sandbox_record_release(&rec);
	int r = 0;
	if (has_timeout > 0 && timeout_s && (paused || longer))
		r = e2b_set_timeout(req->params[0], req->tenant, timeout_s, &err);
	if (r == 0 && auto_pause && json_is_boolean(auto_pause)) {
		struct timeout_request t = {.has_on_timeout = true};
		strlcpy_al(t.on_timeout, json_is_true(auto_pause) ? "pause" : "kill", sizeof(t.on_timeout));
		r = sandbox_set_timeouts(req->params[0], req->tenant, &t, &rec, &err);
		if (r == 0)
			sandbox_record_release(&rec);
	}
	if (r < 0 || sandbox_get(req->params[0], req->tenant, &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->body = e2b_sandbox_json(&rec, resp);
	if (resp->body)
		resp->status = paused ? 201 : 200;
	sandbox_record_release(&rec);
}

API_HANDLER(api_e2b_connect)
{
	e2b_connect(req, resp, false);
}

API_HANDLER(api_e2b_resume)
{
	e2b_connect(req, resp, true);
}

/* ---- PUT /sandboxes/{id}/network ---------------------------------------------------------------- */

API_HANDLER(api_e2b_network_put)
{
	struct al_error err = {0};
	cleanup_free char *policy = NULL;
	if (e2b_network_request_parse(req->body, req->body_len, &policy, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	if (e2b_sandbox_state(req, resp, NULL) < 0)
		return;
	struct sandbox_record rec;
	e2b_answer_done(resp, sandbox_network_set(req->params[0], req->tenant, policy, &rec, &err), &rec, &err);
}

/* ---- GET /sandboxes/{id}/metrics ---------------------------------------------------------------- */

static int e2b_metrics_sample(struct sandbox *sb, json_t **ret, struct al_error *err)
{
	cleanup_json json_t *msg = json_object();
	return guest_channel_call(sandbox_channel(sb), AIRLOCK_FRAME_METRICS, msg, now_ms_monotonic() + 10000,
	                          "the metrics request", ret, err);
}

static json_int_t e2b_int(const json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

/* One sample, now: CPU use over a short interval measured here. */
API_HANDLER(api_e2b_metrics)
{
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	if (!sb)
		return;
	struct al_error err = {0};
	cleanup_json json_t *a = NULL;
	cleanup_json json_t *m = NULL;
	uint64_t t0 = now_ms_monotonic();
	int r = e2b_metrics_sample(sb, &a, &err);
	if (r == 0) {
		struct timespec ts = {.tv_nsec = 250 * 1000000L};
		nanosleep(&ts, NULL);
		r = e2b_metrics_sample(sb, &m, &err);
	}
	sandbox_release(sb);
	if (r < 0) {
		api_response_error(resp, &err);
		return;
	}
	double wall_us = (double)(now_ms_monotonic() - t0) * 1000.0;
	json_int_t cpus = e2b_int(m, "cpus") > 0 ? e2b_int(m, "cpus") : 1;
	double used = (double)(e2b_int(m, "cpu_usage_usec") - e2b_int(a, "cpu_usage_usec"));
	double pct = wall_us > 0 && used > 0 ? 100.0 * used / (wall_us * (double)cpus) : 0.0;
	char ts_text[32];
	uint64_t now = now_ms_realtime();
	format_time_rfc3339(now, ts_text);
	json_int_t total = e2b_int(m, "mem_total_kib") * 1024;
	json_t *sample =
	    json_pack("{s:s, s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:I}", "timestamp", ts_text, "timestampUnix",
	              (json_int_t)(now / 1000), "cpuUsedPct", pct > 100.0 ? 100.0 : pct, "cpuCount", cpus, "memTotal",
	              total, "memUsed", total - e2b_int(m, "mem_available_kib") * 1024, "memCache", (json_int_t)0,
	              "diskTotal", e2b_int(m, "disk_total_bytes"), "diskUsed", e2b_int(m, "disk_used_bytes"));
	resp->body = json_pack("[o]", sample);
}

/* ---- GET /v2/sandboxes and /sandboxes ----------------------------------------------------------- */

static bool e2b_list_matches(const struct e2b_list_query *q, const struct sandbox_record *r)
{
	if ((r->state == SANDBOX_PAUSED && !q->paused) || (r->state != SANDBOX_PAUSED && !q->running))
		return false;
	if (r->created_ms < q->started_after_ms || (q->template_name && strcmp(q->template_name, r->template_name)))
		return false;
	if (q->n_meta == 0)
		return true;
	cleanup_json json_t *m = json_loads(r->metadata_json ? r->metadata_json : "{}", 0, NULL);
	for (size_t i = 0; i < q->n_meta; i++) {
		json_t *v = json_object_get(m, q->keys[i]);
		if (!json_is_string(v) || strcmp(json_string_value(v), q->values[i]))
			return false;
	}
	return true;
}

struct e2b_listed {
	uint64_t created_ms;
	char id[SANDBOX_ID_MAX + 1];
	json_t *json;
};

/* Newest first (desc) by start, then id; asc the other way round. */
static int e2b_listed_cmp_desc(const void *a, const void *b)
{
	const struct e2b_listed *x = a, *y = b;
	if (x->created_ms != y->created_ms)
		return x->created_ms > y->created_ms ? -1 : 1;
	return -strcmp(x->id, y->id);
}

static int e2b_listed_cmp_asc(const void *a, const void *b)
{
	return e2b_listed_cmp_desc(b, a);
}

/* Is item after the token in the list's order? */
static bool e2b_after_token(const struct e2b_list_query *q, const struct e2b_listed *item)
{
	if (!q->has_token)
		return true;
	struct e2b_listed t = {.created_ms = q->token_ms};
	strlcpy_al(t.id, q->token_id, sizeof(t.id));
	return (q->asc ? e2b_listed_cmp_asc(&t, item) : e2b_listed_cmp_desc(&t, item)) < 0;
}

static void e2b_list(const struct api_request *req, struct api_response *resp, bool v2)
{
	struct al_error err = {0};
	struct e2b_list_query q __attribute__((cleanup(e2b_list_query_release))) = {0};
	const struct e2b_list_args args = {
	    .metadata = api_query(req, "metadata"),
	    .state = api_query(req, "state"),
	    .limit = api_query(req, "limit"),
	    .next_token = api_query(req, "nextToken"),
	    .order = api_query(req, "order"),
	    .started_after = api_query(req, "startedAfter"),
	    .template_name = api_query(req, "template"),
	};
	if (e2b_list_query_parse(&args, v2, &q, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct sandbox_record *recs = NULL;
	size_t n = 0;
	if (store_sandbox_list(api_config()->store, false, &recs, &n, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct e2b_listed *items = xcalloc(n ? n : 1, sizeof(*items));
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		/* SECURITY: the store lists every tenant's; only the caller's are shown. */
		struct sandbox_record live;
		struct sandbox_record *rec = &recs[i];
		bool have_live = sandbox_get(recs[i].id, req->tenant, &live, &err) == 0;
		if (have_live)
			rec = &live;
		if (!strcmp(req->tenant, rec->tenant) && e2b_state_name(rec->state) && e2b_list_matches(&q, rec)) {
			items[m].created_ms = rec->created_ms;
			strlcpy_al(items[m].id, rec->id, sizeof(items[m].id));
			items[m].json = e2b_listed_json(rec);
			m++;
		}
		if (have_live)
			sandbox_record_release(&live);
		sandbox_record_release(&recs[i]);
	}
	free(recs);
	qsort(items, m, sizeof(*items), q.asc ? e2b_listed_cmp_asc : e2b_listed_cmp_desc);
	json_t *arr = json_array();
	const struct e2b_listed *last = NULL;
	bool more = false;
	for (size_t i = 0; i < m; i++) {
		if (!e2b_after_token(&q, &items[i]))
			continue;
		if (v2 && json_array_size(arr) == q.limit) {
			more = true;
			break;
		}
		json_array_append(arr, items[i].json);
		last = &items[i];
	}
	if (more && last) {
		char token[E2B_NEXT_TOKEN_MAX + 1];
		e2b_next_token_format(last->created_ms, last->id, token);
		resp->header_name = "X-Next-Token";
		resp->header_value = xstrdup(token);
	}
	for (size_t i = 0; i < m; i++)
		json_decref(items[i].json);
	free(items);
	resp->body = arr;
}

API_HANDLER(api_e2b_list)
{
	e2b_list(req, resp, true);
}

API_HANDLER(api_e2b_list_v1)
{
	e2b_list(req, resp, false);
}

/* ---- what Airlock does not serve ---------------------------------------------------------------- */

/* Answered with a 400 that says so, not a 404 the SDK would read as an
 * unknown sandbox. */
API_HANDLER(api_e2b_unsupported)
{
	api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
	                    "%s %s is not supported by Airlock's E2B compatibility (docs/e2b.md); use Airlock's "
	                    "own API (docs/api.md) for snapshots, forks and logs",
	                    req->method, req->path);
}
