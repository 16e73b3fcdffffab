/* SPDX-License-Identifier: Apache-2.0 */
/* The build layer cache (template-cache.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json-cleanup.h"
#include "log.h"
#include "util.h"
#include "template-cache.h"
#include "templates.h"

void template_cache_name(const uint8_t key[32], char out[SANDBOX_TEMPLATE_NAME_MAX + 1])
{
	static const char hex[] = "0123456789abcdef";
	size_t o = strlen(TEMPLATE_CACHE_PREFIX);
	memcpy(out, TEMPLATE_CACHE_PREFIX, o);
	for (size_t i = 0; i < TEMPLATE_CACHE_KEY_HEX / 2; i++) {
		out[o++] = hex[key[i] >> 4];
		out[o++] = hex[key[i] & 15];
	}
	out[o] = '\0';
}

json_t *template_cache_get(const char *name)
{
	char dir[PATH_MAX];
	if (template_dir(name, dir, sizeof(dir)) < 0)
		return NULL;
	cleanup_free char *rootfs = xasprintf("%s/" TEMPLATE_ROOTFS, dir);
	cleanup_free char *meta = xasprintf("%s/" TEMPLATE_META, dir);
	if (access(rootfs, R_OK) < 0)
		return NULL;
	cleanup_json json_t *j = json_load_file(meta, 0, NULL);
	json_t *state = json_object_get(j, "config");
	if (!json_is_object(state))
		return NULL;
	utimensat(AT_FDCWD, meta, NULL, 0); /* used now */
	return json_incref(state);
}

int template_cache_put(const char *name, const char *tenant, const char *image, json_t *state, struct al_error *err)
{
	char *staging = NULL;
	int r = template_staging_new(&staging, err);
	if (r < 0)
		return r;
	cleanup_free char *dst = xasprintf("%s/" TEMPLATE_ROOTFS, staging);
	cleanup_json json_t *meta = json_pack("{s:s, s:s, s:s, s:I, s:O}", "name", name, "source", "cache", "tenant",
	                                      tenant, "created_ms", (json_int_t)now_ms_realtime(), "config", state);
	if (rename(image, dst) < 0)
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "keep the layer: %m");
	else
		r = template_publish(name, staging, meta, err);
	if (r < 0)
		template_discard(staging);
	free(staging);
	return r;
}

struct layer {
	char name[SANDBOX_TEMPLATE_NAME_MAX + 1];
	int64_t used_ns;
	uint64_t bytes;
};

static int layer_cmp(const void *a, const void *b)
{
	const struct layer *x = a, *y = b;
	return x->used_ns < y->used_ns ? -1 : x->used_ns > y->used_ns;
}

/* The layers on disk (malloc'd), their sizes as allocated. */
static size_t layers_list(const char *dir, struct layer **ret, uint64_t *ret_total)
{
	struct layer *v = NULL;
	size_t n = 0;
	uint64_t total = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, TEMPLATE_CACHE_PREFIX, strlen(TEMPLATE_CACHE_PREFIX)))
			continue;
		cleanup_free char *img = xasprintf("%s/%s/" TEMPLATE_ROOTFS, dir, de->d_name);
		cleanup_free char *meta = xasprintf("%s/%s/" TEMPLATE_META, dir, de->d_name);
		struct stat si, sm;
		if (stat(img, &si) < 0 || stat(meta, &sm) < 0)
			continue;
		v = xrealloc(v, (n + 1) * sizeof(*v));
		strlcpy_al(v[n].name, de->d_name, sizeof(v[n].name));
		v[n].used_ns = (int64_t)sm.st_mtim.tv_sec * 1000000000 + sm.st_mtim.tv_nsec;
		/* A hard link shared with a published template counts once there. */
		v[n].bytes = si.st_nlink > 1 ? 0 : (uint64_t)si.st_blocks * 512u;
		total += v[n].bytes;
		n++;
	}
	if (d)
		closedir(d);
	*ret = v;
	*ret_total = total;
	return n;
}

void template_cache_prune(uint64_t max_bytes)
{
	cleanup_free char *dir = templates_own_dir();
	struct layer *v = NULL;
	uint64_t total = 0;
	size_t n = layers_list(dir, &v, &total);
	qsort(v, n, sizeof(*v), layer_cmp);
	for (size_t i = 0; i < n && total > max_bytes; i++) {
		struct al_error err = {0};
		if (template_delete(v[i].name, NULL, &err) == 0) {
			total -= v[i].bytes;
			log_info("template build cache: %s removed (least recently used)", v[i].name);
		}
	}
	free(v);
}
