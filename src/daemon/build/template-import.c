/* SPDX-License-Identifier: Apache-2.0 */
/* Imports (template-builds.h): airlock-oci turns a docker save archive or an
 * OCI layout into an ext4 image and the image's config; this publishes it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json-cleanup.h"
#include "log.h"
#include "util.h"
#include "build-child.h"
#include "template-builds.h"
#include "templates.h"

static struct template_build_config cfg = {.step_timeout_s = TEMPLATE_STEP_TIMEOUT_S_DEFAULT};

void template_builds_configure(const struct template_build_config *c)
{
	cfg = *c;
}

const struct template_build_config *template_builds_config(void)
{
	return &cfg;
}

struct import {
	char name[SANDBOX_TEMPLATE_NAME_MAX + 1];
	char tenant[64];
	char *staging;
	bool published;
	struct template_job *job;
};

static void import_free(void *p)
{
	struct import *im = p;
	if (!im->published)
		template_discard(im->staging);
	template_release_name(im->name);
	free(im->staging);
	free(im);
}

/* SECURITY: airlock-oci's stdout is parsed as JSON and only numbers are
 * copied out of it into the progress lines. */
static void import_progress(void *ctx, const char *line)
{
	struct import *im = ctx;
	cleanup_json json_t *j = json_loads(line, 0, NULL);
	const char *phase = json_string_value(json_object_get(j, "phase"));
	if (!phase || strlen(phase) > 16)
		return;
	json_t *out = json_pack("{s:s, s:s}", "type", "progress", "phase", phase);
	static const char *const nums[] = {"layer", "layers", "bytes", "size_mib"};
	for (size_t i = 0; i < ARRAY_SIZE(nums); i++) {
		json_t *v = json_object_get(j, nums[i]);
		if (json_is_integer(v) && json_integer_value(v) >= 0)
			json_object_set_new(out, nums[i], json_integer(json_integer_value(v)));
	}
	template_job_emit(im->job, out);
}

static bool import_cancelled(void *ctx)
{
	return template_job_cancelled(((struct import *)ctx)->job);
}

/* A string array of at most max strings of at most len bytes, or null. */
static json_t *strings_or_null(json_t *v, size_t max, size_t len)
{
	if (!json_is_array(v) || json_array_size(v) > max)
		return json_null();
	size_t i;
	json_t *s;
	json_array_foreach (v, i, s)
		if (!json_is_string(s) || json_string_length(s) > len ||
		    memchr(json_string_value(s), '\0', json_string_length(s)))
			return json_null();
	return json_deep_copy(v);
}

/* SECURITY: config.json describes a tenant's image: every field is checked
 * for type and size; USER's ids are those airlock-oci resolved in the
 * image (numbers within the exec's range), else none. */
static json_t *import_config(const char *path)
{
	cleanup_json json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
	json_t *c = json_object();
	json_t *env = strings_or_null(json_object_get(j, "env"), 1024, 32768);
	json_object_set_new(c, "env", json_is_null(env) ? (json_decref(env), json_array()) : env);
	json_object_set_new(c, "cmd", strings_or_null(json_object_get(j, "cmd"), 1024, 32768));
	json_object_set_new(c, "entrypoint", strings_or_null(json_object_get(j, "entrypoint"), 1024, 32768));
	const char *wd = json_string_value(json_object_get(j, "workdir"));
	json_object_set_new(c, "workdir", json_string(wd && wd[0] == '/' && strlen(wd) < 4096 ? wd : "/"));
	const char *user = json_string_value(json_object_get(j, "user"));
	json_object_set_new(c, "user", json_string(user && strlen(user) < 256 ? user : ""));
	/* The ids airlock-oci found for it (a name looked up in the image's own
	 * account files); none: a sandbox's commands run as root by default. */
	json_t *uid = json_object_get(j, "uid"), *gid = json_object_get(j, "gid");
	if (json_is_integer(uid) && json_is_integer(gid) && json_integer_value(uid) >= 0 &&
	    json_integer_value(uid) <= EXEC_ID_MAX && json_integer_value(gid) >= 0 &&
	    json_integer_value(gid) <= EXEC_ID_MAX) {
		json_object_set(c, "uid", uid);
		json_object_set(c, "gid", gid);
	}
	return c;
}

static int import_run(struct template_job *job, void *arg, json_t **ret_done, struct al_error *err)
{
	struct import *im = arg;
	im->job = job;
	cleanup_free char *archive = xasprintf("%s/" TEMPLATE_UPLOAD_FILE, im->staging);
	cleanup_free char *out = xasprintf("%s/oci", im->staging);
	char *argv[] = {(char *)cfg.oci_bin, "import", "--label", im->name, archive, out, NULL};
	struct build_child_io io = {.line = import_progress, .cancelled = import_cancelled, .ctx = im};
	int r = build_child_run(argv, &io, "import the image", err);
	unlink(archive);
	if (r < 0)
		return r;
	cleanup_free char *from = xasprintf("%s/" TEMPLATE_ROOTFS, out);
	cleanup_free char *to = xasprintf("%s/" TEMPLATE_ROOTFS, im->staging);
	cleanup_free char *config_path = xasprintf("%s/config.json", out);
	if (rename(from, to) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "import the image: airlock-oci made no %s: %m", from);
	cleanup_json json_t *config_j = json_load_file(config_path, 0, NULL);
	cleanup_json json_t *meta = json_pack("{s:s, s:s, s:I, s:o}", "name", im->name, "source", "image", "created_ms",
	                                      (json_int_t)now_ms_realtime(), "config", import_config(config_path));
	json_t *layers = json_object_get(config_j, "layers");
	if (json_is_integer(layers))
		json_object_set(meta, "layers", layers);
	if (im->tenant[0])
		json_object_set_new(meta, "tenant", json_string(im->tenant));
	rm_rf(out);
	if ((r = template_publish(im->name, im->staging, meta, err)) < 0)
		return r;
	im->published = true;
	log_info("template %s: imported%s%s", im->name, im->tenant[0] ? " for tenant " : "", im->tenant);
	struct template_info t;
	if (template_find(im->name, NULL, &t, err) < 0)
		return -EIO;
	*ret_done = template_to_json(&t, &(struct template_usage){0});
	template_info_release(&t);
	return 0;
}

int template_import_start(const char *name, const char *tenant, char *staging, struct template_job **ret,
                          struct al_error *err)
{
	struct import *im = xcalloc(1, sizeof(*im));
	strlcpy_al(im->name, name, sizeof(im->name));
	strlcpy_al(im->tenant, tenant ? tenant : "", sizeof(im->tenant));
	im->staging = staging;
	return template_job_start(import_run, im, import_free, ret, err);
}
