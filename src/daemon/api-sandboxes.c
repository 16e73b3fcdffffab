/* SPDX-License-Identifier: Apache-2.0 */
/* Routing and the /v1/sandboxes resource. */
#include "api-request.h"
#include "api.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "util.h"
#include "version.h"

static const char *const healthz_path = "/healthz";
static const char *const sandboxes_path = "/v1/sandboxes";

static const struct daemon_config *api_cfg;

void api_set_config(const struct daemon_config *cfg);
void api_set_config(const struct daemon_config *cfg)
{
	api_cfg = cfg;
}

/* Splits /v1/sandboxes/{id}[/{action}]; false if the path is not of that shape. */
static bool split_sandbox_path(const char *path, char id[64], char action[32])
{
	size_t n = strlen(sandboxes_path);
	if (strncmp(path, sandboxes_path, n) != 0 || path[n] != '/')
		return false;
	const char *p = path + n + 1;
	const char *slash = strchr(p, '/');
	size_t id_len = slash ? (size_t)(slash - p) : strlen(p);
	if (id_len == 0 || id_len >= 64)
		return false;
	memcpy(id, p, id_len);
	id[id_len] = '\0';
	action[0] = '\0';
	if (slash) {
		if (strlen(slash + 1) == 0 || strlen(slash + 1) >= 32 || strchr(slash + 1, '/'))
			return false;
		strlcpy_al(action, slash + 1, 32);
	}
	return true;
}

size_t api_body_limit(const char *method, const char *path)
{
	char id[64], action[32];
	if (strcmp(method, "POST") != 0)
		return 0;
	if (!strcmp(path, sandboxes_path))
		return API_CREATE_BODY_MAX;
	if (split_sandbox_path(path, id, action) && !strcmp(action, "exec"))
		return API_EXEC_BODY_MAX;
	return API_CREATE_BODY_MAX;
}

static json_t *json_from_text(const char *text)
{
	json_t *j = text ? json_loads(text, 0, NULL) : NULL;
	return j ? j : json_object();
}

static json_t *sandbox_to_json(const struct sandbox_record *r)
{
	char created[32], updated[32];
	format_time_rfc3339(r->created_ms, created);
	format_time_rfc3339(r->updated_ms, updated);
	return json_pack("{s:s, s:s, s:s, s:I, s:I, s:o, s:o, s:s, s:s, s:s, s:s, s:o, s:o}", "id", r->id, "state",
			 sandbox_state_name(r->state), "template", r->template_name, "vcpus", (json_int_t)r->vcpus,
			 "memory_mib", (json_int_t)r->memory_mib, "env", json_from_text(r->env_json), "metadata",
			 json_from_text(r->metadata_json), "backend", r->backend, "accel", r->accel, "created_at",
			 created, "updated_at", updated, "boot_ms",
			 r->boot_ms >= 0 ? json_integer(r->boot_ms) : json_null(), "error",
			 r->error ? json_string(r->error) : json_null());
}

static void method_not_allowed(const struct api_request *req, struct api_response *resp, const char *allowed)
{
	struct al_error err;
	al_error_set(&err, AL_ERR_METHOD, EINVAL, "%s is not allowed on %s (allowed: %s)", req->method, req->path,
		     allowed);
	api_response_error(resp, &err);
}

static void handle_create(const struct api_request *req, struct api_response *resp)
{
	struct al_error err = {0};
	struct create_request cr;
	if (create_request_parse(req->body, req->body_len, api_cfg->host_memory_mib, &cr, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct sandbox_record rec;
	if (sandbox_create(&cr, &rec, &err) < 0) {
		api_response_error(resp, &err);
	} else {
		resp->status = 201;
		resp->body = sandbox_to_json(&rec);
		sandbox_record_release(&rec);
	}
	create_request_release(&cr);
}

static void handle_list(const struct api_request *req, struct api_response *resp)
{
	struct al_error err = {0};
	bool all = req->arg_all && (!strcmp(req->arg_all, "true") || !strcmp(req->arg_all, "1"));
	struct sandbox_record *recs = NULL;
	size_t n = 0;
	if (store_sandbox_list(api_cfg->store, all, &recs, &n, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		/* The live view is fresher than the store for running sandboxes. */
		struct sandbox_record live;
		if (sandbox_get(recs[i].id, &live, &err) == 0) {
			json_array_append_new(arr, sandbox_to_json(&live));
			sandbox_record_release(&live);
		} else {
			json_array_append_new(arr, sandbox_to_json(&recs[i]));
		}
		sandbox_record_release(&recs[i]);
	}
	free(recs);
	resp->body = json_pack("{s:o}", "sandboxes", arr);
}

static json_t *output_json(const struct exec_output *o, const char **ret_encoding)
{
	if (utf8_valid(o->data, o->len)) {
		*ret_encoding = "utf8";
		return json_stringn(o->len ? (const char *)o->data : "", o->len);
	}
	*ret_encoding = "base64";
	cleanup_free char *b = base64_encode(o->data, o->len, NULL);
	return json_string(b);
}

static void handle_exec(const char *id, const struct api_request *req, struct api_response *resp)
{
	struct al_error err = {0};
	struct exec_request er;
	if (exec_request_parse(req->body, req->body_len, &er, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct exec_result res;
	if (sandbox_exec(id, &er, &res, &err) < 0) {
		api_response_error(resp, &err);
		exec_request_release(&er);
		return;
	}
	const char *enc_out, *enc_err;
	json_t *out = output_json(&res.out[0], &enc_out);
	json_t *errj = output_json(&res.out[1], &enc_err);
	resp->body = json_pack("{s:o, s:o, s:b, s:o, s:o, s:s, s:s, s:b, s:b, s:I}", "exit_code",
			       res.exited ? json_integer(res.exit_code) : json_null(), "signal",
			       res.exited ? json_null() : json_integer(res.signal), "timed_out", res.timed_out,
			       "stdout", out, "stderr", errj, "stdout_encoding", enc_out, "stderr_encoding", enc_err,
			       "stdout_truncated", res.out[0].truncated, "stderr_truncated", res.out[1].truncated,
			       "duration_ms", (json_int_t)res.duration_ms);
	exec_result_release(&res);
	exec_request_release(&er);
}

static void handle_sandbox(const char *id, const struct api_request *req, struct api_response *resp)
{
	struct al_error err = {0};
	struct sandbox_record rec;
	int r;
	if (!strcmp(req->method, "GET"))
		r = sandbox_get(id, &rec, &err);
	else if (!strcmp(req->method, "DELETE"))
		r = sandbox_delete(id, &rec, &err);
	else {
		method_not_allowed(req, resp, "GET, DELETE");
		return;
	}
	if (r < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->body = sandbox_to_json(&rec);
	sandbox_record_release(&rec);
}

void api_dispatch(const struct api_request *req, struct api_response *resp)
{
	char id[64], action[32];
	if (!strcmp(req->path, healthz_path)) {
		if (strcmp(req->method, "GET")) {
			method_not_allowed(req, resp, "GET");
			return;
		}
		resp->body = json_pack("{s:s, s:s, s:s, s:s}", "status", "ok", "version", AIRLOCK_VERSION, "backend",
				       api_cfg->vmm->name, "accel", api_cfg->vmm->accel());
		return;
	}
	if (!strcmp(req->path, sandboxes_path) || !strcmp(req->path, "/v1/sandboxes/")) {
		if (!strcmp(req->method, "GET")) {
			handle_list(req, resp);
			return;
		}
		if (!strcmp(req->method, "POST")) {
			handle_create(req, resp);
			return;
		}
		method_not_allowed(req, resp, "GET, POST");
		return;
	}
	if (split_sandbox_path(req->path, id, action)) {
		if (!action[0]) {
			handle_sandbox(id, req, resp);
			return;
		}
		if (!strcmp(action, "exec")) {
			if (strcmp(req->method, "POST")) {
				method_not_allowed(req, resp, "POST");
				return;
			}
			handle_exec(id, req, resp);
			return;
		}
	}
	struct al_error err;
	al_error_set(&err, AL_ERR_NOT_FOUND, ENOENT, "no such endpoint: %s %.200s (see docs/api.md)", req->method,
		     req->path);
	api_response_error(resp, &err);
}
