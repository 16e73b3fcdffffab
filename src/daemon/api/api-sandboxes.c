/* SPDX-License-Identifier: Apache-2.0 */
/* /healthz and the /v1/sandboxes resource: create, list, get, delete, exec
 * (collected or streamed), metrics. */
#include <limits.h>
#include <inttypes.h>
#include <time.h>

#include "accel.h"
#include "api-handlers.h"
#include "api-request.h"
#include "auth.h"
#include "events.h"
#include "airlock/proto.h"
#include "cluster-node.h"
#include "json-cleanup.h"
#include "network-policy.h"
#include "metrics.h"
#include "process.h"
#include "sandbox.h"
#include "secrets.h"
#include "snapshot.h"
#include "util.h"
#include "version.h"

#define METADATA_FILTERS_MAX 16

/* ---- shared helpers ------------------------------------------------------------------------------- */

/* ?resume=true: resume a paused sandbox before the operation. False when the
 * answer is already an error. */
static bool maybe_resume(const struct api_request *req, struct api_response *resp)
{
	const char *resume = api_query(req, "resume");
	if (resume && strcmp(resume, "true") && strcmp(resume, "false")) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "resume must be true or false");
		return false;
	}
	if (resume && !strcmp(resume, "true")) {
		/* A sandbox that is not paused is left as it is; acquiring it says what is wrong. */
		struct al_error err = {0};
		struct sandbox_record rec;
		if (sandbox_resume(req->params[0], req->tenant, &rec, &err) == 0)
			sandbox_record_release(&rec);
	}
	return true;
}

struct sandbox *api_sandbox_acquire(const struct api_request *req, struct api_response *resp)
{
	struct al_error err = {0};
	struct sandbox *sb = NULL;
	if (!maybe_resume(req, resp))
		return NULL;
	if (sandbox_acquire(req->params[0], req->tenant, &sb, &err) < 0) {
		api_response_error(resp, &err);
		return NULL;
	}
	return sb;
}

json_t *api_parse_json_object(const struct api_request *req, struct api_response *resp)
{
	json_error_t jerr;
	json_t *j = json_loadb(req->body_len ? req->body : "{}", req->body_len ? req->body_len : 2,
	                       JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(j)) {
		if (j)
			json_decref(j);
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "request body must be a JSON object%s%s",
		                    jerr.text[0] ? ": " : "", jerr.text);
		return NULL;
	}
	return j;
}

static json_t *json_from_text(const char *text)
{
	json_t *j = text ? json_loads(text, 0, NULL) : NULL;
	return j ? j : json_object();
}

json_t *api_sandbox_json(const struct sandbox_record *r)
{
	char created[32], updated[32];
	format_time_rfc3339(r->created_ms, created);
	format_time_rfc3339(r->updated_ms, updated);
	uint64_t now = now_ms_realtime();
	uint64_t running_ms =
	    r->run_ms + (r->running_since_ms && now > r->running_since_ms ? now - r->running_since_ms : 0);
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:o, s:o, s:s, s:s, s:s, s:s, s:o, s:o}", "id", r->id,
	                      "tenant", r->tenant, "state", sandbox_state_name(r->state), "template", r->template_name,
	                      "vcpus", (json_int_t)r->vcpus, "memory_mib", (json_int_t)r->memory_mib, "env",
	                      json_from_text(r->env_json), "metadata", json_from_text(r->metadata_json), "backend",
	                      r->backend, "accel", r->accel, "created_at", created, "updated_at", updated, "boot_ms",
	                      r->boot_ms >= 0 ? json_integer(r->boot_ms) : json_null(), "error",
	                      r->error ? json_string(r->error) : json_null());
	json_object_set_new(o, "cpu", r->cpu[0] ? json_string(r->cpu) : json_null());
	json_object_set_new(o, "accel_reason", r->accel_reason[0] ? json_string(r->accel_reason) : json_null());
	json_object_set_new(o, "disk_mib", r->disk_mib ? json_integer(r->disk_mib) : json_null());
	json_object_set_new(o, "boot", r->boot_path[0] ? json_string(r->boot_path) : json_null());
	json_object_set_new(o, "timeout_s", json_integer(r->timeout_s));
	json_object_set_new(o, "on_timeout", json_string(r->on_timeout[0] ? r->on_timeout : "kill"));
	json_object_set_new(o, "idle_timeout_s", json_integer(r->idle_timeout_s));
	json_object_set_new(o, "auto_resume", json_boolean(r->auto_resume));
	json_object_set_new(o, "ports", api_ports_json(r));
	json_object_set_new(o, "running_ms", json_integer((json_int_t)running_ms));
	json_object_set_new(o, "network", json_from_text(r->network_json ? r->network_json : NETWORK_POLICY_EMPTY));
	/* Bindings without the secrets' ids (placeholders are not secret). */
	json_t *secrets = json_array();
	cleanup_json json_t *bindings = r->secrets_json ? json_loads(r->secrets_json, 0, NULL) : NULL;
	size_t i;
	json_t *b;
	json_array_foreach (bindings, i, b) {
		json_array_append_new(secrets, json_pack("{s:O, s:O, s:O}", "env", json_object_get(b, "env"), "secret",
		                                         json_object_get(b, "secret"), "placeholder",
		                                         json_object_get(b, "placeholder")));
	}
	json_object_set_new(o, "secrets", secrets);
	json_object_set_new(o, "ca_bundle", r->ca_bundle[0] ? json_string(r->ca_bundle) : json_null());
	return o;
}

/* ---- /healthz ------------------------------------------------------------------------------------- */

API_HANDLER(api_healthz)
{
	(void)req;
	const struct daemon_config *cfg = api_config();
	struct accel_info accel;
	accel_get(&accel);
	resp->body = json_pack("{s:s, s:s, s:s, s:s, s:s?, s:s}", "status", "ok", "version", AIRLOCK_VERSION, "backend",
	                       cfg->vmm->name, "accel", accel_name(&accel), "cpu",
	                       accel.decided && accel.cpu[0] ? accel.cpu : NULL, "accel_reason", accel.reason);
	if (accel.probe_ms)
		json_object_set_new(resp->body, "accel_probe_ms", json_integer((json_int_t)accel.probe_ms));
	json_object_set_new(resp->body, "reattaching", json_integer(sandboxes_reattaching()));
	json_t *cluster = cluster_health_json();
	if (cluster)
		json_object_set_new(resp->body, "cluster", cluster);
}

/* ---- create, list, get, delete ------------------------------------------------------------------- */

API_HANDLER(api_sandbox_create)
{
	struct al_error err = {0};
	struct create_request cr;
	const struct daemon_config *cfg = api_config();
	if (create_request_parse(req->body, req->body_len, cfg->host_memory_mib, &cr, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	const char *tenant = req->tenant ? req->tenant : cr.tenant[0] ? cr.tenant : TENANT_DEFAULT;
	struct tenant_quota quota = {0};
	struct sandbox_record rec;
	struct snapshot_info snap;
	uint64_t t0 = now_ms_monotonic();
	/* A restore: the snapshot must be the caller's, intact, and for this kernel. */
	if ((cr.snapshot[0] && sandbox_snapshot_usable(cr.snapshot, req->tenant, &snap, &err) < 0) ||
	    auth_quota_get(tenant, &quota, &err) < 0 ||
	    sandbox_create(&cr, req->tenant, &quota, cr.snapshot[0] ? &snap : NULL, &rec, &err) < 0) {
		if (err.code == AL_ERR_BOOT_FAILED)
			metrics_count_boot_failure();
		api_response_error(resp, &err);
		if (err.code == AL_ERR_UNAVAILABLE)
			resp->retry_after_s = 1; /* no start slot came free: nothing was created */
	} else {
		metrics_observe_create((double)(now_ms_monotonic() - t0) / 1000.0);
		resp->status = 201;
		resp->body = api_sandbox_json(&rec);
		sandbox_record_release(&rec);
	}
	create_request_release(&cr);
}

struct list_filter {
	size_t n;
	const char *keys[METADATA_FILTERS_MAX];
	const char *values[METADATA_FILTERS_MAX];
	bool bad;
	char bad_key[80];
};

static void collect_filter(void *ctx, const char *key, const char *value)
{
	struct list_filter *f = ctx;
	if (!strcmp(key, "all"))
		return;
	if (strncmp(key, "metadata.", 9) != 0 || !key[9] || strlen(key) > 9 + METADATA_KEY_MAX ||
	    strlen(value) > METADATA_VALUE_MAX || f->n >= METADATA_FILTERS_MAX) {
		f->bad = true;
		strlcpy_al(f->bad_key, key, sizeof(f->bad_key));
		return;
	}
	f->keys[f->n] = key + 9;
	f->values[f->n] = value;
	f->n++;
}

static bool filter_matches(const struct list_filter *f, const char *metadata_json)
{
	if (f->n == 0)
		return true;
	cleanup_json json_t *m = json_from_text(metadata_json);
	for (size_t i = 0; i < f->n; i++) {
		json_t *v = json_object_get(m, f->keys[i]);
		if (!json_is_string(v) || strcmp(json_string_value(v), f->values[i]))
			return false;
	}
	return true;
}

API_HANDLER(api_sandbox_list)
{
	struct al_error err = {0};
	const char *all_arg = api_query(req, "all");
	bool all = all_arg && (!strcmp(all_arg, "true") || !strcmp(all_arg, "1"));
	struct list_filter f = {0};
	api_query_foreach(req, collect_filter, &f);
	if (f.bad) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "query argument \"%.64s\": only all=true and up to %d metadata.KEY=VALUE filters "
		                    "are allowed",
		                    f.bad_key, METADATA_FILTERS_MAX);
		return;
	}
	struct sandbox_record *recs = NULL;
	size_t n = 0;
	if (store_sandbox_list(api_config()->store, all, &recs, &n, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		/* The live view is fresher than the store for running sandboxes. */
		struct sandbox_record live;
		struct sandbox_record *r = &recs[i];
		bool have_live = sandbox_get(recs[i].id, req->tenant, &live, &err) == 0;
		if (have_live)
			r = &live;
		if ((!req->tenant || !strcmp(req->tenant, r->tenant)) && filter_matches(&f, r->metadata_json))
			json_array_append_new(arr, api_sandbox_json(r));
		if (have_live)
			sandbox_record_release(&live);
		sandbox_record_release(&recs[i]);
	}
	free(recs);
	resp->body = json_pack("{s:o}", "sandboxes", arr);
}

API_HANDLER(api_sandbox_get)
{
	struct al_error err = {0};
	struct sandbox_record rec;
	if (sandbox_get(req->params[0], req->tenant, &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->body = api_sandbox_json(&rec);
	sandbox_record_release(&rec);
}

API_HANDLER(api_sandbox_delete)
{
	struct al_error err = {0};
	struct sandbox_record rec;
	if (sandbox_delete(req->params[0], req->tenant, &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->body = api_sandbox_json(&rec);
	sandbox_record_release(&rec);
}

static void pause_or_resume(const struct api_request *req, struct api_response *resp, bool pause)
{
	struct al_error err = {0};
	struct sandbox_record rec;
	int r = pause ? sandbox_pause(req->params[0], req->tenant, &rec, &err)
	              : sandbox_resume(req->params[0], req->tenant, &rec, &err);
	if (r < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->body = api_sandbox_json(&rec);
	sandbox_record_release(&rec);
}

API_HANDLER(api_sandbox_pause)
{
	pause_or_resume(req, resp, true);
}

API_HANDLER(api_sandbox_resume)
{
	pause_or_resume(req, resp, false);
}

/* ---- snapshots and forks ------------------------------------------------------------------------- */

API_HANDLER(api_snapshot_create)
{
	cleanup_json json_t *body = api_parse_json_object(req, resp);
	if (!body)
		return;
	json_t *name = json_object_get(body, "name");
	if (json_object_size(body) > (name ? 1u : 0u) ||
	    (name && (!json_is_string(name) || !snapshot_name_valid(json_string_value(name)) ||
	              strlen(json_string_value(name)) != json_string_length(name)))) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "body: {\"name\": 1 to %d printable characters} (the only field)",
		                    SNAPSHOT_NAME_MAX);
		return;
	}
	struct al_error err = {0};
	struct snapshot_info info;
	struct tenant_quota quota = {0};
	struct sandbox_record rec;
	if (sandbox_get(req->params[0], req->tenant, &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	uint64_t used = 0;
	int r = auth_quota_get(rec.tenant, &quota, &err);
	if (r == 0 && quota.max_snapshot_mib)
		r = snapshot_tenant_bytes(rec.tenant, &used, &err);
	if (r == 0 && quota.max_snapshot_mib && used >= (uint64_t)quota.max_snapshot_mib << 20)
		r = al_error_set(&err, AL_ERR_QUOTA, EDQUOT,
		                 "tenant %s may keep %u MiB of snapshots and holds %" PRIu64
		                 " MiB; delete some or raise the quota with PUT /v1/tenants/%s",
		                 rec.tenant, quota.max_snapshot_mib, used >> 20, rec.tenant);
	sandbox_record_release(&rec);
	if (r == 0)
		r = sandbox_snapshot(req->params[0], req->tenant, name ? json_string_value(name) : req->params[0],
		                     false, &info, &err);
	/* Cluster mode: the snapshot is the sandbox's way back if its node is
	 * lost: answered once it is durable in the shared store. */
	if (r == 0 && cluster_enabled() && (r = cluster_snapshot_publish(req->params[0], &info, &err)) < 0) {
		struct al_error ignored;
		snapshot_delete(info.id, NULL, &ignored);
	}
	if (r < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->status = 201;
	resp->body = snapshot_to_json(&info);
}

API_HANDLER(api_snapshot_list)
{
	struct al_error err = {0};
	struct snapshot_info *v = NULL;
	size_t n = 0;
	const char *sandbox = api_query(req, "sandbox");
	if (snapshot_list(req->tenant, sandbox, &v, &n, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, snapshot_to_json(&v[i]));
	free(v);
	resp->body = json_pack("{s:o}", "snapshots", arr);
}

API_HANDLER(api_snapshot_get)
{
	struct al_error err = {0};
	struct snapshot_info info;
	if (snapshot_get(req->params[0], req->tenant, &info, &err) < 0 || info.internal) {
		if (!err.message[0])
			al_error_set(&err, AL_ERR_NOT_FOUND, ENOENT, "no snapshot with id \"%s\"", req->params[0]);
		api_response_error(resp, &err);
		return;
	}
	resp->body = snapshot_to_json(&info);
}

API_HANDLER(api_snapshot_delete)
{
	struct al_error err = {0};
	if (snapshot_delete(req->params[0], req->tenant, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->status = 204;
}

API_HANDLER(api_sandbox_timeout)
{
	struct al_error err = {0};
	struct timeout_request t;
	struct sandbox_record rec;
	if (timeout_request_parse(req->body_len ? req->body : "{}", req->body_len ? req->body_len : 2, &t, &err) < 0 ||
	    sandbox_set_timeouts(req->params[0], req->tenant, &t, &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->body = api_sandbox_json(&rec);
	sandbox_record_release(&rec);
}

/* ---- /v1/sandboxes/{id}/network ------------------------------------------------------------------ */

#define STR_(x) #x
#define STR(x) STR_(x)

/* The policy, the guest's side of the network plan, and what the rules
 * dropped (null when the namespace cannot be read). */
static json_t *network_to_json(const struct sandbox_record *rec, const char *tenant)
{
	uint64_t packets = 0, bytes = 0;
	struct al_error ignored;
	bool have = sandbox_network_dropped(rec->id, tenant, &packets, &bytes, &ignored) == 0;
	return json_pack(
	    "{s:s, s:o, s:{s:s, s:s, s:s, s:s}, s:o}", "sandbox", rec->id, "policy",
	    json_from_text(rec->network_json ? rec->network_json : NETWORK_POLICY_EMPTY), "guest", "address",
	    AIRLOCK_NET_GUEST_ADDR "/" STR(AIRLOCK_NET_PREFIX_LEN), "gateway", AIRLOCK_NET_GATEWAY, "dns",
	    AIRLOCK_NET_DNS, "mac", rec->guest_mac[0] ? rec->guest_mac : AIRLOCK_NET_GUEST_MAC, "dropped",
	    have ? json_pack("{s:I, s:I}", "packets", (json_int_t)packets, "bytes", (json_int_t)bytes) : json_null());
}

API_HANDLER(api_sandbox_network_get)
{
	struct al_error err = {0};
	struct sandbox_record rec;
	if (sandbox_get(req->params[0], req->tenant, &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->body = network_to_json(&rec, req->tenant);
	sandbox_record_release(&rec);
}

API_HANDLER(api_sandbox_network_put)
{
	cleanup_json json_t *body = api_parse_json_object(req, resp);
	if (!body)
		return;
	struct al_error err = {0};
	cleanup_free char *policy = NULL;
	struct sandbox_record rec;
	if (network_policy_parse(body, &policy, &err) < 0 ||
	    sandbox_network_set(req->params[0], req->tenant, policy, &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->body = network_to_json(&rec, req->tenant);
	sandbox_record_release(&rec);
}

API_HANDLER(api_sandbox_recover)
{
	cleanup_json json_t *body = api_parse_json_object(req, resp);
	if (!body)
		return;
	json_t *memory = json_object_get(body, "memory");
	if (json_object_size(body) > (memory ? 1u : 0u) || (memory && !json_is_boolean(memory))) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "body: {\"memory\": true|false} (the only field)");
		return;
	}
	struct al_error err = {0};
	struct sandbox_record rec;
	if (sandbox_recover(req->params[0], req->tenant, !memory || json_is_true(memory), &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->body = api_sandbox_json(&rec);
	sandbox_record_release(&rec);
}

API_HANDLER(api_sandbox_fork)
{
	cleanup_json json_t *body = api_parse_json_object(req, resp);
	if (!body)
		return;
	json_t *count = json_object_get(body, "count");
	size_t known = (count ? 1u : 0u) + (json_object_get(body, "secrets") ? 1u : 0u);
	if (json_object_size(body) > known || (count && !json_is_integer(count))) {
		api_response_errorf(
		    resp, AL_ERR_INVALID_ARGUMENT,
		    "body: {\"count\": N (1 to 16), \"secrets\": {\"ENV\": \"secret-name\", ...}} (both "
		    "optional; no other field)");
		return;
	}
	struct al_error err = {0};
	struct kv_list grants = {0};
	if (secret_grants_parse(body, NULL, &grants, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct sandbox_record parent, *recs = NULL;
	if (sandbox_get(req->params[0], req->tenant, &parent, &err) < 0) {
		kv_list_release(&grants);
		api_response_error(resp, &err);
		return;
	}
	struct tenant_quota quota = {0};
	unsigned n = count ? (unsigned)MAX(0, MIN(json_integer_value(count), 1000)) : 1;
	/* The grants are checked before the fork's snapshot is taken. */
	cleanup_free char *dry = NULL;
	int r = secret_bindings_grant(parent.tenant, &grants, &dry, &err);
	if (r == 0)
		r = auth_quota_get(parent.tenant, &quota, &err);
	sandbox_record_release(&parent);
	if (r == 0)
		r = sandbox_fork(req->params[0], req->tenant, &quota, n, &grants, &recs, &err);
	kv_list_release(&grants);
	if (r < 0) {
		api_response_error(resp, &err);
		return;
	}
	json_t *arr = json_array();
	for (unsigned i = 0; i < n; i++) {
		json_array_append_new(arr, api_sandbox_json(&recs[i]));
		sandbox_record_release(&recs[i]);
	}
	free(recs);
	resp->status = 201;
	resp->body = json_pack("{s:o}", "sandboxes", arr);
}

/* ---- exec ----------------------------------------------------------------------------------------- */

static json_t *output_json(const uint8_t *data, size_t len, const char **ret_encoding)
{
	if (utf8_valid(data, len)) {
		*ret_encoding = "utf8";
		return json_stringn(len ? (const char *)data : "", len);
	}
	*ret_encoding = "base64";
	cleanup_free char *b = base64_encode(data, len, NULL);
	return json_string(b);
}

json_t *api_output_line(uint8_t type, const uint8_t *data, size_t len)
{
	const char *enc;
	json_t *d = output_json(data, len, &enc);
	return json_pack("{s:s, s:o, s:s}", "type", type == AIRLOCK_FRAME_STDERR ? "stderr" : "stdout", "data", d,
	                 "encoding", enc);
}

json_t *api_exit_line(uint8_t type, json_t *result, uint64_t duration_ms)
{
	struct exec_exit ex;
	struct al_error err = {0};
	if (guest_result_to_exit(type, result, &ex, &err) < 0)
		return json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "code", al_error_code_name(err.code),
		                 "message", err.message);
	return json_pack("{s:s, s:o, s:o, s:b, s:I}", "type", "exit", "exit_code",
	                 ex.exited ? json_integer(ex.exit_code) : json_null(), "signal",
	                 ex.exited ? json_null() : json_integer(ex.signal), "timed_out", ex.timed_out, "duration_ms",
	                 (json_int_t)duration_ms);
}

/* A streamed exec or process output: JSON lines from a log cursor. */
struct output_stream {
	struct sandbox *sb;
	struct guest_channel *ch;
	struct guest_stream *s; /* our reference */
	struct guest_cursor cur;
	struct api_line_stream *ls;
	bool follow;        /* else stop at the present */
	bool kill_on_close; /* a streaming exec: the process dies with the request */
	bool finished;
	uint64_t start_ms;
	uint64_t stop_at; /* !follow: the log position when the request came */
};

static ssize_t output_stream_read(void *ctx, uint8_t *buf, size_t max)
{
	struct output_stream *os = ctx;
	for (;;) {
		if (!api_line_stream_empty(os->ls))
			return (ssize_t)api_line_stream_take(os->ls, buf, max);
		if (os->finished)
			return 0;
		if (!os->follow && os->cur.pos >= os->stop_at) {
			os->finished = true;
			continue;
		}
		uint8_t type;
		uint8_t *data = NULL;
		size_t len;
		uint64_t dropped = 0;
		int r = guest_cursor_read(os->ch, &os->cur, now_ms_monotonic() + 500, &type, &data, &len, &dropped);
		if (r == -ETIMEDOUT) {
			if (api_client_gone(api_line_stream_fd(os->ls)))
				return -1;
			continue;
		}
		if (dropped)
			api_line_stream_push(os->ls,
			                     json_pack("{s:s, s:I}", "type", "dropped", "bytes", (json_int_t)dropped));
		if (r == 1) {
			api_line_stream_push(os->ls, api_output_line(type, data, len));
			free(data);
			continue;
		}
		/* The end of the output: the process ended. */
		uint8_t rtype = 0;
		cleanup_json json_t *result = NULL;
		guest_stream_done(os->ch, os->s, &rtype, &result);
		api_line_stream_push(os->ls, api_exit_line(rtype, result, now_ms_monotonic() - os->start_ms));
		os->finished = true;
	}
}

static void output_stream_free(void *ctx)
{
	struct output_stream *os = ctx;
	if (os->kill_on_close && !guest_stream_done(os->ch, os->s, NULL, NULL)) {
		/* The client went away from a streaming exec: the process goes too. */
		cleanup_json json_t *sig = json_pack("{s:i}", "signal", 9);
		guest_stream_send_control(os->ch, os->s, AIRLOCK_FRAME_SIGNAL, sig);
	}
	guest_cursor_close(os->ch, &os->cur);
	guest_stream_unref(os->ch, os->s);
	api_line_stream_free(os->ls);
	sandbox_release(os->sb);
	free(os);
}

/* Sets resp to stream the output of s (a reference is taken over). */
void api_stream_output(const struct api_request *req, struct api_response *resp, struct sandbox *sb,
                       struct guest_stream *s, bool from_start, bool follow, bool kill_on_close, json_t *first_line)
{
	struct output_stream *os = xcalloc(1, sizeof(*os));
	os->sb = sb;
	os->ch = sandbox_channel(sb);
	os->s = s;
	os->ls = api_line_stream_new(req->conn_fd);
	os->follow = follow;
	os->kill_on_close = kill_on_close;
	os->start_ms = now_ms_monotonic();
	if (guest_cursor_open(os->ch, s, from_start, &os->cur) < 0) {
		guest_stream_unref(os->ch, s);
		api_line_stream_free(os->ls);
		sandbox_release(sb);
		free(os);
		if (first_line)
			json_decref(first_line);
		api_response_errorf(resp, AL_ERR_CONFLICT, "too many readers of this process's output; try later");
		return;
	}
	uint64_t bytes = 0, dropped = 0;
	guest_stream_stats(os->ch, s, &bytes, &dropped);
	os->stop_at = bytes;
	if (first_line)
		api_line_stream_push(os->ls, first_line);
	resp->status = 200;
	resp->reader = output_stream_read;
	resp->reader_free = output_stream_free;
	resp->reader_ctx = os;
	resp->content_type = "application/x-ndjson";
	resp->content_length = -1;
}

static void exec_collected(const struct api_request *req, struct api_response *resp, struct exec_request *er)
{
	struct al_error err = {0};
	struct exec_result res;
	char pid[32] = "";
	if (!maybe_resume(req, resp))
		return;
	if (sandbox_exec(req->params[0], req->tenant, er, &res, pid, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	const char *enc_out, *enc_err;
	json_t *out = output_json(res.out[0].data, res.out[0].len, &enc_out);
	json_t *errj = output_json(res.out[1].data, res.out[1].len, &enc_err);
	resp->body = json_pack("{s:s, s:o, s:o, s:b, s:o, s:o, s:s, s:s, s:b, s:b, s:I}", "process_id", pid,
	                       "exit_code", res.status.exited ? json_integer(res.status.exit_code) : json_null(),
	                       "signal", res.status.exited ? json_null() : json_integer(res.status.signal), "timed_out",
	                       res.status.timed_out, "stdout", out, "stderr", errj, "stdout_encoding", enc_out,
	                       "stderr_encoding", enc_err, "stdout_truncated", res.out[0].truncated, "stderr_truncated",
	                       res.out[1].truncated, "duration_ms", (json_int_t)res.duration_ms);
	guest_exec_result_release(&res);
}

/* Starts a process for a request (env merged, stdin sent); answers errors itself. */
int api_start_process(const struct api_request *req, struct api_response *resp, struct sandbox *sb,
                      const struct exec_request *er, char ret_pid[32], struct guest_stream **ret_stream)
{
	(void)req;
	struct al_error err = {0};
	size_t n_env = 0;
	char **env = sandbox_env_merge(sb, &er->env, &n_env);
	char cwd[PATH_MAX];
	struct exec_request with_defaults = sandbox_exec_defaults(sb, er, cwd, sizeof(cwd));
	er = &with_defaults;
	struct guest_channel *ch = sandbox_channel(sb);
	char pid[PROCESS_ID_MAX + 1];
	struct guest_stream *s = NULL;
	int r = process_start(sandbox_processes(sb), ch, er, env, n_env, GUEST_STREAM_LOG, pid, &s, &err);
	sandbox_env_free(env, n_env);
	if (r < 0) {
		api_response_error(resp, &err);
		return r;
	}
	if (er->stdin_data) {
		uint64_t deadline = now_ms_monotonic() + 60000;
		r = guest_stream_send_data(ch, s, AIRLOCK_FRAME_STDIN, er->stdin_data, er->stdin_len, deadline);
		if (r == 0 && er->stdin_len > 0)
			guest_stream_send_data(ch, s, AIRLOCK_FRAME_STDIN, NULL, 0, deadline);
	}
	strlcpy_al(ret_pid, pid, 32);
	*ret_stream = s;
	return 0;
}

API_HANDLER(api_sandbox_exec)
{
	struct al_error err = {0};
	struct exec_request er;
	if (exec_request_parse(req->body, req->body_len, &er, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	if (er.pty_rows) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "pty: start a PTY process with POST /v1/sandboxes/{id}/processes and attach to it");
	} else if (!er.stream) {
		if (er.stdin_stream)
			api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
			                    "stdin_stream needs \"stream\": true (or a background process)");
		else
			exec_collected(req, resp, &er);
	} else {
		struct sandbox *sb = api_sandbox_acquire(req, resp);
		char pid[32];
		struct guest_stream *s = NULL;
		if (sb && api_start_process(req, resp, sb, &er, pid, &s) == 0)
			api_stream_output(req, resp, sb, s, true, true, true,
			                  json_pack("{s:s, s:s}", "type", "start", "process_id", pid));
		else
			sandbox_release(sb);
	}
	exec_request_release(&er);
}

/* ---- metrics of one sandbox ---------------------------------------------------------------------- */

API_HANDLER(api_sandbox_metrics)
{
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	if (!sb)
		return;
	struct al_error err = {0};
	cleanup_json json_t *msg = json_object();
	json_t *result = NULL;
	if (guest_channel_call(sandbox_channel(sb), AIRLOCK_FRAME_METRICS, msg, now_ms_monotonic() + 10000,
	                       "the metrics request", &result, &err) < 0)
		api_response_error(resp, &err);
	else
		resp->body = result;
	sandbox_release(sb);
}
