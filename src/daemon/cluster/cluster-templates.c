/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Templates in cluster mode (docs/cluster.md, "Templates"): a template built
 * or imported on one node is put in the shared store (its rootfs.ext4 by
 * content, a manifest with its template.json) and named in PostgreSQL's
 * airlock_templates; any other node fetches it the first time a create (or
 * an adopt) names it, checking the image against its digest. A node's
 * fetched copies that the table no longer names (deleted, or rebuilt
 * elsewhere) are dropped by the lease thread once nothing here uses them.
 *
 * SECURITY: the store is the nodes', not the tenants'; still a fetched
 * template is taken only if its manifest hashes to its key and its image to
 * the manifest's digest, and it keeps the owner the manifest names (the
 * owner the node that built it recorded), so another tenant's template
 * stays invisible everywhere.
 */
#include <string.h>

#include "cluster-internal.h"
#include "digest.h"
#include "json-cleanup.h"
#include "log.h"
#include "templates.h"
#include "util.h"

#define FETCHED_KEY "cluster_key" /* in a shared template's template.json: its key in the store */

static __thread bool pruning; /* a drop of a stale copy is not a delete of the template */

static int run(const char *sql, int n, const char *const *p, PGresult **ret_res, struct al_error *err)
{
	pthread_mutex_lock(&cl->index_db.lock);
	int r = cdb_exec(&cl->index_db, sql, n, p, ret_res, err);
	pthread_mutex_unlock(&cl->index_db.lock);
	return r;
}

static void tpl_published(const char *name, const char *dir, json_t *meta)
{
	if (json_object_get(meta, FETCHED_KEY))
		return; /* it came from the store */
	struct al_error err = {0};
	cleanup_free char *rootfs = xasprintf("%s/" TEMPLATE_ROOTFS, dir);
	char sha[65], key[72];
	const char *tenant = json_string_value(json_object_get(meta, "tenant"));
	int r = file_sha256(rootfs, sha);
	if (r < 0) {
		log_error("cluster: template %s: cannot hash its image: %s", name, strerror(-r));
		return;
	}
	cleanup_json json_t *m = json_pack("{s:i, s:s, s:s?, s:s, s:O}", "version", 1, "template", name, "tenant",
	                                   tenant, "rootfs", sha, "meta", meta);
	if ((r = cluster_store_put(rootfs, sha, m, key, &err)) == 0) {
		const char *p[] = {name, tenant ? tenant : "", key};
		cleanup_pgresult PGresult *res = NULL;
		r = run("INSERT INTO airlock_templates (name, tenant, key) VALUES ($1, $2, $3) ON CONFLICT (name) DO "
		        "UPDATE SET tenant = EXCLUDED.tenant, key = EXCLUDED.key, updated_at = now()",
		        3, p, &res, &err);
	}
	if (r < 0) {
		log_error("cluster: template %s: not shared with the other nodes: %s", name, err.message);
		return;
	}
	/* This copy is the shared one: it goes like a fetched one when the
	 * cluster no longer names it (deleted through another node). */
	cleanup_json json_t *mine = json_deep_copy(meta);
	json_object_set_new(mine, FETCHED_KEY, json_string(key));
	cleanup_free char *path = xasprintf("%s/" TEMPLATE_META, dir);
	cleanup_free char *tmp = xasprintf("%s.tmp", path);
	if (json_dump_file(mine, tmp, JSON_INDENT(2) | JSON_SORT_KEYS) < 0 || rename(tmp, path) < 0)
		log_error("cluster: template %s: cannot note its key in %s", name, path);
	log_info("cluster: template %s shared as %s", name, key);
}

static void tpl_deleted(const char *name)
{
	if (pruning)
		return;
	const char *p[] = {name};
	cleanup_pgresult PGresult *res = NULL;
	struct al_error err = {0};
	if (run("DELETE FROM airlock_templates WHERE name = $1", 1, p, &res, &err) < 0)
		log_error("cluster: template %s: still named in the cluster: %s", name, err.message);
}

static int tpl_owner(const char *name, char owner[64])
{
	const char *p[] = {name};
	cleanup_pgresult PGresult *res = NULL;
	struct al_error err = {0};
	if (run("SELECT tenant FROM airlock_templates WHERE name = $1", 1, p, &res, &err) < 0 || PQntuples(res) != 1)
		return -ENOENT;
	strlcpy_al(owner, PQgetvalue(res, 0, 0), 64);
	return 0;
}

static int store_key_of(const char *name, char key[72])
{
	const char *p[] = {name};
	cleanup_pgresult PGresult *res = NULL;
	struct al_error err = {0};
	if (run("SELECT key FROM airlock_templates WHERE name = $1", 1, p, &res, &err) < 0 || PQntuples(res) != 1)
		return -ENOENT;
	strlcpy_al(key, PQgetvalue(res, 0, 0), 72);
	return 0;
}

/* Its image and template.json into staging, both checked. */
static int fetch_into(const char *name, const char *key, const char *staging, json_t **ret_meta, struct al_error *err)
{
	cleanup_json json_t *m = NULL;
	int r = cluster_store_manifest(key, &m, err);
	if (r < 0)
		return r;
	const char *sha = json_string_value(json_object_get(m, "rootfs"));
	const char *tname = json_string_value(json_object_get(m, "template"));
	json_t *meta = json_object_get(m, "meta");
	if (!sha || !tname || strcmp(tname, name) || !json_is_object(meta))
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG, "shared store: template %s: bad manifest", name);
	cleanup_free char *dst = xasprintf("%s/" TEMPLATE_ROOTFS, staging);
	if ((r = cluster_store_get(sha, dst, err)) < 0)
		return r;
	char got[65];
	if (file_sha256(dst, got) < 0 || strcmp(got, sha))
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG,
		                    "shared store: template %s: its image does not match its digest", name);
	json_t *copy = json_deep_copy(meta);
	json_object_set_new(copy, FETCHED_KEY, json_string(key));
	*ret_meta = copy;
	return 0;
}

static int tpl_fetch(const char *name)
{
	char key[72], owner[64];
	if (store_key_of(name, key) < 0 || tpl_owner(name, owner) < 0)
		return -ENOENT;
	struct al_error err = {0};
	/* Held as its owner's: the name is theirs in the whole cluster. */
	int r = template_hold_name(name, owner[0] ? owner : NULL, &err);
	if (r < 0) {
		log_error("cluster: template %s: not fetched: %s", name, err.message);
		return r; /* another fetch or build of it is running */
	}
	cleanup_free char *staging = NULL;
	cleanup_json json_t *meta = NULL;
	if ((r = template_staging_new(&staging, &err)) == 0 && (r = fetch_into(name, key, staging, &meta, &err)) == 0)
		r = template_publish(name, staging, meta, &err);
	if (r < 0 && staging)
		template_discard(staging);
	template_release_name(name);
	if (r < 0)
		log_error("cluster: template %s: cannot fetch it from the shared store: %s", name, err.message);
	else
		log_info("cluster: template %s fetched from the shared store (%s)", name, key);
	return r;
}

/* The lease thread's round: a fetched copy whose key the table no longer
 * names goes, when nothing here uses it (the next use fetches anew). */
void cluster_templates_prune(void)
{
	cleanup_pgresult PGresult *res = NULL;
	struct al_error err = {0};
	if (run("SELECT name, key FROM airlock_templates", 0, NULL, &res, &err) < 0)
		return;
	cleanup_json json_t *all = templates_list_json(NULL);
	size_t i;
	json_t *t;
	json_array_foreach (all, i, t) {
		const char *name = json_string_value(json_object_get(t, "name"));
		struct template_info info;
		if (!name || template_find(name, NULL, &info, &err) < 0)
			continue;
		const char *key = json_string_value(json_object_get(info.meta, FETCHED_KEY));
		bool current = !key;
		for (int row = 0; key && row < PQntuples(res) && !current; row++)
			current = !strcmp(PQgetvalue(res, row, 0), name) && !strcmp(PQgetvalue(res, row, 1), key);
		template_info_release(&info);
		if (!current) {
			pruning = true;
			if (template_delete(name, NULL, &err) == 0)
				log_info("cluster: template %s: the copy here is stale: dropped", name);
			pruning = false;
		}
	}
}

static const struct template_hooks hooks = {
    .published = tpl_published,
    .deleted = tpl_deleted,
    .fetch = tpl_fetch,
    .owner = tpl_owner,
};

void cluster_templates_start(void)
{
	templates_set_hooks(&hooks);
}
