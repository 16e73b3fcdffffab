/* SPDX-License-Identifier: Apache-2.0 */
/* Tokens, tenants and quotas, the event log, and Prometheus metrics. */
#include "accel.h"
#include "api-handlers.h"
#include "api-request.h"
#include "auth.h"
#include "events.h"
#include "json-cleanup.h"
#include "metrics.h"
#include "sandbox.h"
#include "util.h"

#define EVENTS_POLL_MS 500

/* ---- tokens --------------------------------------------------------------------------------------- */

API_HANDLER(api_token_create)
{
	struct al_error err = {0};
	struct token_create_request tr;
	struct token_info info;
	char secret[TOKEN_SECRET_LEN + 1];
	if (token_create_request_parse(req->body, req->body_len, &tr, &err) < 0 ||
	    auth_token_create(tr.tenant, tr.description, &info, secret, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	json_t *o = token_info_to_json(&info);
	json_object_set_new(o, "token", json_string(secret));
	explicit_bzero(secret, sizeof(secret));
	resp->status = 201;
	resp->body = o;
}

API_HANDLER(api_token_list)
{
	struct al_error err = {0};
	struct token_info *tokens = NULL;
	size_t n = 0;
	if (auth_token_list(NULL, &tokens, &n, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, token_info_to_json(&tokens[i]));
	free(tokens);
	resp->body = json_pack("{s:o}", "tokens", arr);
}

API_HANDLER(api_token_revoke)
{
	struct al_error err = {0};
	if (auth_token_revoke(req->params[0], &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->status = 204;
}

/* ---- tenants -------------------------------------------------------------------------------------- */

static void answer_tenant(const char *name, struct api_response *resp)
{
	struct al_error err = {0};
	struct tenant_quota q = {0};
	struct tenant_usage u = {0};
	if (auth_quota_get(name, &q, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	sandbox_usage(name, &u.sandboxes, &u.vcpus, &u.memory_mib);
	resp->body = tenant_to_json(name, &q, &u);
}

API_HANDLER(api_tenant_put)
{
	struct al_error err = {0};
	struct tenant_quota q;
	const char *name = req->params[0];
	if (!tenant_name_valid(name)) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "tenant names are 1 to 63 characters from [a-z0-9_-]");
		return;
	}
	if (quota_request_parse(req->body, req->body_len, &q, &err) < 0 || auth_quota_set(name, &q, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	answer_tenant(name, resp);
}

API_HANDLER(api_tenant_get)
{
	const char *name = req->params[0];
	if (!tenant_name_valid(name) || (req->tenant && strcmp(req->tenant, name))) {
		api_response_errorf(resp, AL_ERR_NOT_FOUND, "no tenant \"%.64s\" for you to see", name);
		return;
	}
	answer_tenant(name, resp);
}

/* ---- events --------------------------------------------------------------------------------------- */

struct event_stream {
	struct event_filter f;
	char sandbox[EVENT_SANDBOX_MAX + 1], type[EVENT_TYPE_MAX + 1], tenant[TENANT_NAME_MAX + 1];
	bool follow;
	uint64_t last;
	struct api_line_stream *ls;
	bool done;
};

static ssize_t event_stream_read(void *ctx, uint8_t *buf, size_t max)
{
	struct event_stream *es = ctx;
	for (;;) {
		if (!api_line_stream_empty(es->ls))
			return (ssize_t)api_line_stream_take(es->ls, buf, max);
		if (es->done)
			return 0;
		json_t *arr = NULL;
		uint64_t last = es->last;
		struct al_error err = {0};
		if (events_read(&es->f, es->last, EVENTS_READ_MAX, &arr, &last, &err) < 0)
			return -1;
		size_t i;
		json_t *e;
		json_array_foreach (arr, i, e) {
			api_line_stream_push(es->ls, json_incref(e));
		}
		size_t n = json_array_size(arr);
		json_decref(arr);
		es->last = last;
		if (n > 0)
			continue;
		if (!es->follow) {
			es->done = true;
			continue;
		}
		int r = events_wait(es->last, now_ms_monotonic() + EVENTS_POLL_MS);
		if (r == -ESHUTDOWN)
			es->done = true;
		else if (r == -ETIMEDOUT && api_client_gone(api_line_stream_fd(es->ls)))
			return -1;
	}
}

static void event_stream_free(void *ctx)
{
	struct event_stream *es = ctx;
	api_line_stream_free(es->ls);
	free(es);
}

API_HANDLER(api_events)
{
	struct al_error err = {0};
	struct event_stream *es = xcalloc(1, sizeof(*es));
	/* since=now: what happens from now on (a console's live view), not the history. */
	const char *since = api_query(req, "since");
	char now[24];
	if (since && !strcmp(since, "now")) {
		snprintf(now, sizeof(now), "%llu", (unsigned long long)events_last_seq());
		since = now;
	}
	if (event_filter_parse_query(api_query(req, "sandbox"), api_query(req, "type"), since, api_query(req, "follow"),
	                             &es->f, &es->follow, &err) < 0) {
		free(es);
		api_response_error(resp, &err);
		return;
	}
	/* The filter points into the query; keep our own copies. */
	if (es->f.sandbox) {
		strlcpy_al(es->sandbox, es->f.sandbox, sizeof(es->sandbox));
		es->f.sandbox = es->sandbox;
	}
	if (es->f.type_prefix) {
		strlcpy_al(es->type, es->f.type_prefix, sizeof(es->type));
		es->f.type_prefix = es->type;
	}
	/* SECURITY: a token sees only its own tenant's events. */
	if (req->tenant) {
		strlcpy_al(es->tenant, req->tenant, sizeof(es->tenant));
		es->f.tenant = es->tenant;
	}
	es->last = es->f.since;
	es->ls = api_line_stream_new(req->conn_fd);
	resp->status = 200;
	resp->reader = event_stream_read;
	resp->reader_free = event_stream_free;
	resp->reader_ctx = es;
	resp->content_type = "application/x-ndjson";
	resp->content_length = -1;
}

/* ---- Prometheus ----------------------------------------------------------------------------------- */

struct text_body {
	uint8_t *text;
	size_t len, off;
};

static ssize_t text_read(void *ctx, uint8_t *buf, size_t max)
{
	struct text_body *t = ctx;
	size_t n = MIN(max, t->len - t->off);
	memcpy(buf, t->text + t->off, n);
	t->off += n;
	return (ssize_t)n;
}

static void text_free(void *ctx)
{
	struct text_body *t = ctx;
	free(t->text);
	free(t);
}

API_HANDLER(api_prometheus)
{
	(void)req;
	struct al_error err = {0};
	struct sandbox_record *recs = NULL;
	size_t n = 0;
	if (store_sandbox_list(api_config()->store, true, &recs, &n, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	unsigned counts[SANDBOX_STATE_COUNT] = {0};
	const char *names[SANDBOX_STATE_COUNT];
	for (unsigned i = 0; i < SANDBOX_STATE_COUNT; i++)
		names[i] = sandbox_state_name((enum sandbox_state)i);
	for (size_t i = 0; i < n; i++) {
		if (recs[i].state < SANDBOX_STATE_COUNT)
			counts[recs[i].state]++;
		sandbox_record_release(&recs[i]);
	}
	free(recs);
	struct accel_info accel;
	accel_get(&accel);
	metrics_set_accel(accel_name(&accel), accel.cpu, accel.reason, accel.probe_ms);
	cleanup_free char *base = metrics_render(counts, SANDBOX_STATE_COUNT, names);
	cleanup_free char *pools = pools_metrics_text();
	cleanup_free char *ports = ports_metrics_text();
	api_answer_text(resp, xasprintf("%s%s%s", base, pools, ports), "text/plain; version=0.0.4");
}

void api_answer_text(struct api_response *resp, char *text, const char *content_type)
{
	api_answer_bytes(resp, (uint8_t *)text, strlen(text), content_type);
}

void api_answer_bytes(struct api_response *resp, uint8_t *data, size_t len, const char *content_type)
{
	struct text_body *t = xcalloc(1, sizeof(*t));
	t->text = data;
	t->len = len;
	if (resp->body)
		json_decref(resp->body);
	resp->body = NULL;
	resp->status = 200;
	resp->reader = text_read;
	resp->reader_free = text_free;
	resp->reader_ctx = t;
	resp->content_type = content_type;
	resp->content_length = (int64_t)t->len;
}
