/* SPDX-License-Identifier: Apache-2.0 */
/* /v1/templates (docs/api.md, "Templates"): list, inspect and delete
 * templates; build one from a Dockerfile and its context, or import a
 * container image. Builds and imports take their body as a stream into a
 * staging directory, then run as a job whose progress is the answer. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api-handlers.h"
#include "json-cleanup.h"
#include "network-policy.h"
#include "template-builds.h"
#include "templates.h"
#include "util.h"

API_HANDLER(api_template_list)
{
	resp->body = json_pack("{s:o}", "templates", templates_list_json(req->tenant));
}

/* A layer of the build cache is no template a client names. */
static int find_named(const struct api_request *req, struct template_info *t, struct al_error *err)
{
	const char *name = req->params[0];
	if (template_name_reserved(name))
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "template: unknown template \"%s\"", name);
	return template_find(name, req->tenant, t, err);
}

API_HANDLER(api_template_get)
{
	struct al_error err = {0};
	struct template_info t;
	if (find_named(req, &t, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct template_usage u = {0};
	template_usage_get(t.name, req->tenant, &u, &err);
	resp->body = template_to_json(&t, &u);
	template_info_release(&t);
}

API_HANDLER(api_template_delete)
{
	struct al_error err = {0};
	struct template_info t;
	if (find_named(req, &t, &err) == 0)
		template_info_release(&t);
	if (err.code || template_delete(req->params[0], req->tenant, &err) < 0)
		api_response_error(resp, &err);
	else
		resp->status = 204;
}

/* ---- uploads ------------------------------------------------------------------------------ */

struct template_upload {
	char name[SANDBOX_TEMPLATE_NAME_MAX + 1];
	char tenant[64];
	char *staging; /* owned until a job takes it */
	int fd;
	int conn_fd; /* the client's, to notice it going away during the job */
	uint64_t bytes;
	struct template_build_params *build; /* NULL: an import */
	bool name_held;
};

/* What a failed upload leaves goes now, before its answer is sent. */
static void upload_abandon(struct template_upload *u)
{
	if (u->fd >= 0)
		close(u->fd);
	u->fd = -1;
	if (u->staging)
		template_discard(u->staging);
	free(u->staging);
	u->staging = NULL;
	if (u->name_held)
		template_release_name(u->name);
	u->name_held = false;
}

static void upload_free(struct template_upload *u)
{
	upload_abandon(u);
	if (u->build) {
		kv_list_release(&u->build->build_args);
		free(u->build->network_json);
		free(u->build);
	}
	free(u);
}

static int upload_data(void *ctx, const uint8_t *buf, size_t len, struct al_error *err)
{
	struct template_upload *u = ctx;
	u->bytes += len;
	if (u->bytes > template_builds_config()->max_upload_bytes)
		return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG,
		                    "the upload is larger than --max-template-upload-mib (%" PRIu64 " MiB)",
		                    template_builds_config()->max_upload_bytes >> 20);
	if (write_full(u->fd, buf, len) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "write the upload: %m");
	return 0;
}

struct job_reader {
	struct template_job *job;
	int conn_fd;
};

static ssize_t job_read(void *ctx, uint8_t *buf, size_t max)
{
	struct job_reader *jr = ctx;
	for (;;) {
		ssize_t n = template_job_read(jr->job, buf, max, 1000);
		if (n != -ETIMEDOUT)
			return n;
		if (api_client_gone(jr->conn_fd))
			return -1;
	}
}

static void job_reader_free(void *ctx)
{
	struct job_reader *jr = ctx;
	template_job_cancel(jr->job);
	template_job_unref(jr->job);
	free(jr);
}

static void upload_end(void *ctx, bool failed, const struct al_error *data_err, struct api_response *resp)
{
	struct template_upload *u = ctx;
	if (failed) {
		upload_abandon(u);
		api_response_error(resp, data_err);
		return;
	}
	close(u->fd);
	u->fd = -1;
	struct al_error err = {0};
	struct template_job *job = NULL;
	char *staging = TAKE_PTR(u->staging);
	u->name_held = false; /* the job releases it */
	int r;
	if (u->build)
		r = template_build_start(TAKE_PTR(u->build), staging, &job, &err);
	else
		r = template_import_start(u->name, u->tenant, staging, &job, &err);
	if (r < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct job_reader *jr = xcalloc(1, sizeof(*jr));
	jr->job = job;
	jr->conn_fd = u->conn_fd;
	resp->status = 200;
	resp->reader = job_read;
	resp->reader_free = job_reader_free;
	resp->reader_ctx = jr;
	resp->content_type = "application/x-ndjson";
	resp->content_length = -1;
}

static void upload_release(void *ctx)
{
	upload_free(ctx);
}

/* The owner of what is made: the token's tenant; over the unix socket the
 * `tenant` argument, else the operator's (shared). */
static int upload_owner(const struct api_request *req, char *out, size_t size, struct al_error *err)
{
	const char *asked = api_query(req, "tenant");
	if (req->tenant && asked && strcmp(asked, req->tenant))
		return al_error_set(err, AL_ERR_FORBIDDEN, EPERM,
		                    "tenant: your token belongs to tenant \"%s\"; it cannot make templates for \"%s\"",
		                    req->tenant, asked);
	const char *owner = req->tenant ? req->tenant : asked ? asked : "";
	if (owner[0] && !name_valid(owner, 63))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "tenant: must match [a-z0-9][a-z0-9_-]{0,62}");
	strlcpy_al(out, owner, size);
	return 0;
}

/* The part of a begin common to builds and imports: the name held, the
 * staging directory and the file the body goes to. */
static int upload_begin(const struct api_request *req, struct template_upload *u, struct al_error *err)
{
	u->fd = -1;
	u->conn_fd = req->conn_fd;
	const char *name = api_query(req, "name");
	if (!name)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "name: the template's name is required (?name=)");
	int r = upload_owner(req, u->tenant, sizeof(u->tenant), err);
	if (r < 0 || (r = template_hold_name(name, u->tenant[0] ? u->tenant : NULL, err)) < 0)
		return r;
	strlcpy_al(u->name, name, sizeof(u->name));
	u->name_held = true;
	if ((r = template_staging_new(&u->staging, err)) < 0)
		return r;
	cleanup_free char *path = xasprintf("%s/" TEMPLATE_UPLOAD_FILE, u->staging);
	u->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (u->fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "create %s: %m", path);
	return 0;
}

static struct template_upload *upload_new(void)
{
	struct template_upload *u = xcalloc(1, sizeof(*u));
	u->fd = u->conn_fd = -1;
	return u;
}

API_UPLOAD(api_template_import)
{
	struct template_upload *u = upload_new();
	int r = upload_begin(req, u, err);
	if (r < 0) {
		upload_free(u);
		return r;
	}
	*ret = (struct api_upload){.data = upload_data, .end = upload_end, .release = upload_release, .ctx = u};
	return 0;
}

struct args_ctx {
	struct kv_list *args;
	struct al_error *err;
	int r;
};

static void build_arg_one(void *ctx, const char *key, const char *value)
{
	struct args_ctx *a = ctx;
	if (a->r < 0 || strcmp(key, "build_arg"))
		return;
	const char *eq = value ? strchr(value, '=') : NULL;
	cleanup_free char *k = eq ? xstrndup(value, (size_t)(eq - value)) : NULL;
	if (!k || !env_name_valid(k) || strlen(eq + 1) > ENV_VALUE_MAX)
		a->r =
		    al_error_set(a->err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                 "build_arg: NAME=VALUE with NAME a variable name, got \"%.64s\"", value ? value : "");
	else if (a->args->n >= TEMPLATE_BUILD_ARGS_MAX)
		a->r = al_error_set(a->err, AL_ERR_INVALID_ARGUMENT, E2BIG, "build_arg: at most %d",
		                    TEMPLATE_BUILD_ARGS_MAX);
	else
		kv_list_add(a->args, k, eq + 1);
}

static int query_flag(const struct api_request *req, const char *name)
{
	const char *v = api_query(req, name);
	if (!v)
		return 0;
	if (!strcmp(v, "1") || !strcmp(v, "true"))
		return 1;
	if (!strcmp(v, "0") || !strcmp(v, "false"))
		return 0;
	return -1;
}

static int build_network(const struct api_request *req, struct template_build_params *p, struct al_error *err)
{
	const char *text = api_query(req, "network");
	if (!text)
		return 0;
	json_error_t je;
	cleanup_json json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!j)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "network: not JSON: %s", je.text);
	int r = network_policy_parse(j, &p->network_json, err);
	if (r < 0)
		al_error_prefix(err, "network");
	return r;
}

/* The build's query arguments (docs/api.md, "Templates"). */
static int build_params(const struct api_request *req, struct template_build_params *p, struct al_error *err)
{
	const char *df = api_query(req, "dockerfile");
	if (df && (!df[0] || strlen(df) >= sizeof(p->dockerfile)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "dockerfile: a path in the context, at most %zu bytes", sizeof(p->dockerfile) - 1);
	strlcpy_al(p->dockerfile, df ? df : "Dockerfile", sizeof(p->dockerfile));
	int no_cache = query_flag(req, "no_cache"), snap = query_flag(req, "snapshot");
	if (no_cache < 0 || snap < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: 1/true or 0/false",
		                    no_cache < 0 ? "no_cache" : "snapshot");
	p->no_cache = no_cache;
	p->snapshot = snap;
	const char *disk = api_query(req, "disk_mib");
	if (disk) {
		char *end = NULL;
		unsigned long v = strtoul(disk, &end, 10);
		if (!disk[0] || *end || v < 16 || v > SANDBOX_DISK_MIB_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "disk_mib: from 16 to %d",
			                    SANDBOX_DISK_MIB_MAX);
		p->disk_mib = (unsigned)v;
	}
	struct args_ctx a = {&p->build_args, err, 0};
	api_query_foreach(req, build_arg_one, &a);
	if (a.r < 0)
		return a.r;
	return build_network(req, p, err);
}

API_UPLOAD(api_template_build)
{
	struct template_upload *u = upload_new();
	u->build = xcalloc(1, sizeof(*u->build));
	int r = build_params(req, u->build, err);
	if (r == 0)
		r = upload_begin(req, u, err);
	if (r < 0) {
		upload_free(u);
		return r;
	}
	strlcpy_al(u->build->name, u->name, sizeof(u->build->name));
	strlcpy_al(u->build->tenant, u->tenant, sizeof(u->build->tenant));
	*ret = (struct api_upload){.data = upload_data, .end = upload_end, .release = upload_release, .ctx = u};
	return 0;
}
