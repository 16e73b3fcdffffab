/* SPDX-License-Identifier: Apache-2.0 */
/* The template registry (templates.h): where a template's files are, who
 * may use it, what uses it, and the publishing of built and imported ones. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json-cleanup.h"
#include "log.h"
#include "snapshot.h"
#include "util.h"
#include "sandbox-internal.h"
#include "templates.h"

#define HELD_MAX 64

static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static char held[HELD_MAX][SANDBOX_TEMPLATE_NAME_MAX + 1];

char *templates_own_dir(void)
{
	return xasprintf("%s/templates", sb_cfg->state_dir);
}

/* Removes what a build or an import a crashed daemon left behind. */
static void sweep_leftovers(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, ".staging-", 9) && strncmp(de->d_name, ".trash-", 7))
			continue;
		cleanup_free char *p = xasprintf("%s/%s", dir, de->d_name);
		log_info("templates: removing %s, left by a build that did not finish", p);
		rm_rf(p);
	}
	closedir(d);
}

int templates_init(struct al_error *err)
{
	cleanup_free char *dir = templates_own_dir();
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "mkdir %s: %m", dir);
	sweep_leftovers(dir);
	return 0;
}

int template_dir(const char *name, char *out, size_t size)
{
	if (!template_name_valid(name))
		return -EINVAL;
	cleanup_free char *own = xasprintf("%s/templates/%s/" TEMPLATE_ROOTFS, sb_cfg->state_dir, name);
	const char *base = access(own, F_OK) == 0 ? sb_cfg->state_dir : sb_cfg->image_dir;
	if (snprintf_ok(out, size, "%s/templates/%s", base, name) < 0)
		return -ENAMETOOLONG;
	return 0;
}

static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static json_t *meta_load(const char *dir)
{
	cleanup_free char *path = xasprintf("%s/" TEMPLATE_META, dir);
	json_error_t je;
	json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	return json_is_object(j) ? j : (json_decref(j), json_object());
}

static enum template_source source_of(const char *s)
{
	if (s && !strcmp(s, "dockerfile"))
		return TEMPLATE_DOCKERFILE;
	if (s && !strcmp(s, "image"))
		return TEMPLATE_IMAGE;
	if (s && !strcmp(s, "cache"))
		return TEMPLATE_CACHE;
	return TEMPLATE_BUILTIN;
}

static const char *source_name(enum template_source s)
{
	static const char *const names[] = {[TEMPLATE_BUILTIN] = "builtin",
	                                    [TEMPLATE_DOCKERFILE] = "dockerfile",
	                                    [TEMPLATE_IMAGE] = "image",
	                                    [TEMPLATE_CACHE] = "cache"};
	return names[s];
}

/* The template's files as they are, without a visibility check. */
static int template_load(const char *name, struct template_info *ret)
{
	struct template_info t = {0};
	if (template_dir(name, t.dir, sizeof(t.dir)) < 0)
		return -EINVAL;
	cleanup_free char *rootfs = xasprintf("%s/" TEMPLATE_ROOTFS, t.dir);
	struct stat st;
	if (stat(rootfs, &st) < 0 || !S_ISREG(st.st_mode))
		return -ENOENT;
	strlcpy_al(t.name, name, sizeof(t.name));
	t.size_bytes = (uint64_t)st.st_size;
	t.meta = meta_load(t.dir);
	bool own = strncmp(t.dir, sb_cfg->state_dir, strlen(sb_cfg->state_dir)) == 0 &&
	           strcmp(sb_cfg->state_dir, sb_cfg->image_dir) != 0;
	t.source = own || json_object_get(t.meta, "source")
	               ? source_of(json_string_value(json_object_get(t.meta, "source")))
	               : TEMPLATE_BUILTIN;
	const char *tenant = json_string_value(json_object_get(t.meta, "tenant"));
	strlcpy_al(t.tenant, t.source == TEMPLATE_BUILTIN || !tenant ? "" : tenant, sizeof(t.tenant));
	*ret = t;
	return 0;
}

void template_info_release(struct template_info *t)
{
	json_decref(t->meta);
	t->meta = NULL;
}

static bool visible(const struct template_info *t, const char *tenant)
{
	return !tenant || !t->tenant[0] || !strcmp(t->tenant, tenant);
}

static const struct template_hooks *hooks;

void templates_set_hooks(const struct template_hooks *h)
{
	hooks = h;
}

int template_find(const char *name, const char *tenant, struct template_info *ret, struct al_error *err)
{
	if (!template_name_valid(name))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "template: a name is [a-z0-9][a-z0-9_-]{0,62}, got \"%.64s\"", name);
	struct template_info t;
	int lr = template_load(name, &t);
	if (lr < 0 && hooks && hooks->fetch && !template_name_reserved(name) && hooks->fetch(name) == 0)
		lr = template_load(name, &t);
	if (lr == 0 && visible(&t, tenant)) {
		*ret = t;
		return 0;
	}
	if (t.meta)
		template_info_release(&t);
	/* SECURITY: another tenant's template answers as one that does not
	 * exist; the error lists only what this tenant may use. */
	return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT,
	                    "template: unknown template \"%s\" (GET /v1/templates or 'airlock template ls' lists "
	                    "yours)",
	                    name);
}

json_t *template_to_json(const struct template_info *t, const struct template_usage *u)
{
	json_t *j = json_pack("{s:s, s:s, s:I}", "name", t->name, "source", source_name(t->source), "size_mib",
	                      (json_int_t)((t->size_bytes + (1u << 20) - 1) >> 20));
	json_object_set_new(j, "tenant", t->tenant[0] ? json_string(t->tenant) : json_null());
	static const char *const copied[] = {"parent", "description", "created_ms", "config", "steps", "layers"};
	for (size_t i = 0; i < ARRAY_SIZE(copied); i++) {
		json_t *v = json_object_get(t->meta, copied[i]);
		json_object_set(j, copied[i], v ? v : json_null());
	}
	if (u)
		json_object_set_new(j, "in_use",
		                    json_pack("{s:i, s:i, s:i}", "sandboxes", u->sandboxes, "snapshots", u->snapshots,
		                              "pools", u->pools));
	return j;
}

static void list_dir(const char *dir, const char *tenant, json_t *out)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!template_name_valid(de->d_name) || json_object_get(out, de->d_name))
			continue;
		struct template_info t;
		if (template_load(de->d_name, &t) < 0)
			continue;
		if (visible(&t, tenant) && t.source != TEMPLATE_CACHE) {
			struct template_usage u = {0};
			struct al_error ignored;
			template_usage_get(t.name, tenant, &u, &ignored);
			json_object_set_new(out, t.name, template_to_json(&t, &u));
		}
		template_info_release(&t);
	}
	closedir(d);
}

json_t *templates_list_json(const char *tenant)
{
	cleanup_json json_t *by_name = json_object();
	cleanup_free char *own = templates_own_dir();
	cleanup_free char *builtin = xasprintf("%s/templates", sb_cfg->image_dir);
	list_dir(own, tenant, by_name);
	list_dir(builtin, tenant, by_name);
	/* By name: json objects iterate in insertion order, sort the keys. */
	size_t n = json_object_size(by_name), k = 0;
	const char **keys = xcalloc(n + 1, sizeof(*keys));
	const char *key;
	json_t *v;
	json_object_foreach (by_name, key, v)
		keys[k++] = key;
	qsort(keys, n, sizeof(*keys), cmp_strp);
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append(arr, json_object_get(by_name, keys[i]));
	free(keys);
	return arr;
}

static bool counted(const char *owner, const char *tenant)
{
	return !tenant || !strcmp(owner, tenant);
}

int template_usage_get(const char *name, const char *tenant, struct template_usage *ret, struct al_error *err)
{
	struct template_usage u = {0};
	struct sandbox_record *recs = NULL;
	size_t n = 0;
	int r = store_sandbox_list(sb_cfg->store, false, &recs, &n, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		u.sandboxes += !strcmp(recs[i].template_name, name) && counted(recs[i].tenant, tenant);
		sandbox_record_release(&recs[i]);
	}
	free(recs);
	struct snapshot_info *snaps = NULL;
	if ((r = snapshot_list(NULL, NULL, &snaps, &n, err)) < 0)
		return r;
	for (size_t i = 0; i < n; i++)
		u.snapshots += !strcmp(snaps[i].template_name, name) && counted(snaps[i].tenant, tenant);
	free(snaps);
	struct pool_status *pools = NULL;
	if (sandbox_pools_list(tenant, &pools, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			u.pools += !strcmp(pools[i].spec.template_name, name) && counted(pools[i].spec.tenant, tenant);
		free(pools);
	}
	*ret = u;
	return 0;
}

static bool ids_from(json_t *config, unsigned *uid, unsigned *gid)
{
	json_t *u = json_object_get(config, "uid"), *g = json_object_get(config, "gid");
	if (!json_is_integer(u) || json_integer_value(u) < 0 || json_integer_value(u) > EXEC_ID_MAX)
		return false;
	*uid = (unsigned)json_integer_value(u);
	*gid = json_is_integer(g) && json_integer_value(g) >= 0 && json_integer_value(g) <= EXEC_ID_MAX
	           ? (unsigned)json_integer_value(g)
	           : *uid;
	return true;
}

bool template_start_get(const char *name, struct template_start *ret)
{
	*ret = (struct template_start){0};
	char dir[PATH_MAX];
	if (template_dir(name, dir, sizeof(dir)) < 0)
		return false;
	cleanup_json json_t *meta = meta_load(dir);
	json_t *config = json_object_get(meta, "config");
	if (!json_is_object(config))
		return false;
	json_t *env = json_object_get(config, "env");
	if (json_is_array(env) && json_array_size(env))
		ret->env = json_incref(env);
	const char *wd = json_string_value(json_object_get(config, "workdir"));
	if (wd && wd[0] == '/')
		strlcpy_al(ret->workdir, wd, sizeof(ret->workdir));
	ret->has_user = ids_from(config, &ret->uid, &ret->gid);
	return ret->env || ret->workdir[0] || ret->has_user;
}

void template_start_release(struct template_start *s)
{
	json_decref(s->env);
	s->env = NULL;
}

/* ---- builds and imports: names held, staging, publishing, removal ------------------------- */

/* The slot holding name ("": a free one), or -1. */
static int held_index(const char *name)
{
	for (int i = 0; i < HELD_MAX; i++)
		if (!strcmp(held[i], name))
			return i;
	return -1;
}

static unsigned own_count(void)
{
	cleanup_free char *dir = templates_own_dir();
	DIR *d = opendir(dir);
	unsigned n = 0;
	if (!d)
		return 0;
	struct dirent *de;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.' && !template_name_reserved(de->d_name);
	closedir(d);
	return n;
}

/* Whether an existing template of name may be taken by tenant's build. */
static int name_free_for(const char *name, const char *tenant, struct al_error *err)
{
	struct template_info t;
	/* Cluster mode: the namespace is the cluster's. */
	if (hooks && hooks->owner) {
		char owner[64];
		int o = hooks->owner(name, owner);
		if (o == 0 && (tenant ? strcmp(owner, tenant) : owner[0] != '\0'))
			return al_error_set(err, AL_ERR_CONFLICT, EEXIST,
			                    "template name \"%s\" is taken; choose another name", name);
	}
	if (template_load(name, &t) < 0)
		return 0;
	bool builtin = t.source == TEMPLATE_BUILTIN, theirs = tenant && strcmp(t.tenant, tenant);
	bool others = !tenant && t.tenant[0];
	template_info_release(&t);
	if (builtin)
		return al_error_set(err, AL_ERR_CONFLICT, EEXIST,
		                    "template \"%s\" is a built-in template (make images); choose another name", name);
	/* SECURITY: the namespace is the host's; a name another tenant holds
	 * is taken, and says no more than that. */
	if (theirs || others)
		return al_error_set(err, AL_ERR_CONFLICT, EEXIST, "template name \"%s\" is taken; choose another name",
		                    name);
	return 0;
}

static int not_in_use(const char *name, const char *doing, struct al_error *err)
{
	struct template_usage u;
	int r = template_usage_get(name, NULL, &u, err);
	if (r < 0)
		return r;
	if (u.sandboxes || u.snapshots || u.pools)
		return al_error_set(
		    err, AL_ERR_CONFLICT, EBUSY,
		    "template \"%s\" is in use (%u sandboxes, %u snapshots, %u warm pools) and cannot be "
		    "%s: delete them first%s",
		    name, u.sandboxes, u.snapshots, u.pools, doing,
		    strcmp(doing, "replaced") ? "" : ", or build under another name");
	return 0;
}

/* Marks name as being worked on (one build, import or delete at a time). */
static int hold(const char *name, struct al_error *err)
{
	pthread_mutex_lock(&held_lock);
	int slot = held_index(name) >= 0 ? -2 : held_index("");
	if (slot >= 0)
		strlcpy_al(held[slot], name, sizeof(held[slot]));
	pthread_mutex_unlock(&held_lock);
	if (slot == -2)
		return al_error_set(err, AL_ERR_CONFLICT, EBUSY, "template \"%s\" is being built, imported or deleted",
		                    name);
	if (slot < 0)
		return al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN,
		                    "%d template builds and imports are running, the most at once: try again later",
		                    HELD_MAX);
	return 0;
}

int template_hold_name(const char *name, const char *tenant, struct al_error *err)
{
	if (!template_name_valid(name) || template_name_reserved(name))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "name: a template name is [a-z0-9][a-z0-9_-]{0,62} and does not begin with "
		                    "\"" TEMPLATE_CACHE_PREFIX "\", got \"%.64s\"",
		                    name);
	int r = name_free_for(name, tenant, err);
	if (r < 0 || (r = not_in_use(name, "replaced", err)) < 0)
		return r;
	cleanup_free char *dir = templates_own_dir();
	cleanup_free char *dst = xasprintf("%s/%s", dir, name);
	if (access(dst, F_OK) < 0 && own_count() >= TEMPLATES_MAX)
		return al_error_set(err, AL_ERR_QUOTA, ENOSPC,
		                    "this host holds %d built and imported templates, its most: delete some first",
		                    TEMPLATES_MAX);
	return hold(name, err);
}

void template_release_name(const char *name)
{
	pthread_mutex_lock(&held_lock);
	int i = held_index(name);
	if (i >= 0)
		held[i][0] = '\0';
	pthread_mutex_unlock(&held_lock);
}

int template_staging_new(char **ret, struct al_error *err)
{
	cleanup_free char *dir = templates_own_dir();
	char *p = xasprintf("%s/.staging-XXXXXX", dir);
	if (!mkdtemp(p)) {
		int e = errno;
		free(p);
		return al_error_set(err, AL_ERR_INTERNAL, e, "mkdtemp in %s: %s", dir, strerror(e));
	}
	*ret = p;
	return 0;
}

void template_discard(const char *staging)
{
	if (staging)
		rm_rf(staging);
}

int template_publish(const char *name, const char *staging, json_t *meta, struct al_error *err)
{
	cleanup_free char *meta_path = xasprintf("%s/" TEMPLATE_META, staging);
	cleanup_free char *tmp = xasprintf("%s.tmp", meta_path);
	if (json_dump_file(meta, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) < 0 || rename(tmp, meta_path) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno ? errno : EIO, "write %s: %m", meta_path);
	cleanup_free char *dir = templates_own_dir();
	cleanup_free char *dst = xasprintf("%s/%s", dir, name);
	cleanup_free char *trash = xasprintf("%s/.trash-%s", dir, name);
	/* A sandbox may have started from the template it replaces since the
	 * build began: its disk names this file, which must not change. */
	int r = access(dst, F_OK) == 0 && !template_name_reserved(name) ? not_in_use(name, "replaced", err) : 0;
	if (r < 0)
		return r;
	rm_rf(trash);
	if (rename(dst, trash) < 0 && errno != ENOENT)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "move the old %s aside: %m", dst);
	if (rename(staging, dst) < 0) {
		int e = errno;
		rename(trash, dst);
		return al_error_set(err, AL_ERR_INTERNAL, e, "publish %s: %s", dst, strerror(e));
	}
	rm_rf(trash);
	if (hooks && hooks->published && !template_name_reserved(name))
		hooks->published(name, dst, meta);
	return 0;
}

int template_delete(const char *name, const char *tenant, struct al_error *err)
{
	struct template_info t;
	int r = template_find(name, tenant, &t, err);
	if (r < 0)
		return r;
	enum template_source src = t.source;
	bool shared = !t.tenant[0];
	template_info_release(&t);
	/* SECURITY: a tenant deletes its own templates only; the operator's
	 * (shared) ones only over the unix socket. */
	if (tenant && shared && src != TEMPLATE_BUILTIN)
		return al_error_set(err, AL_ERR_FORBIDDEN, EPERM,
		                    "template \"%s\" is the operator's (shared): only the operator deletes it", name);
	if (src == TEMPLATE_BUILTIN)
		return al_error_set(
		    err, AL_ERR_FORBIDDEN, EPERM,
		    "template \"%s\" is built in (the operator's image dir): it cannot be deleted over the "
		    "API",
		    name);
	if ((r = not_in_use(name, "deleted", err)) < 0 || (r = hold(name, err)) < 0)
		return r;
	cleanup_free char *dir = templates_own_dir();
	cleanup_free char *dst = xasprintf("%s/%s", dir, name);
	cleanup_free char *trash = xasprintf("%s/.trash-%s", dir, name);
	rm_rf(trash);
	r = rename(dst, trash) < 0 ? al_error_set(err, AL_ERR_INTERNAL, errno, "remove %s: %m", dst) : 0;
	template_release_name(name);
	if (r == 0) {
		rm_rf(trash);
		log_info("template %s: deleted", name);
		if (hooks && hooks->deleted)
			hooks->deleted(name);
	}
	return r;
}
