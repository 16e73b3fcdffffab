/* SPDX-License-Identifier: Apache-2.0 */
/* Cluster mode's start and stop, and what the API asks of it. */
#include <string.h>
#include <unistd.h>

#include "cluster-internal.h"
#include "log.h"
#include "sandbox.h"
#include "util.h"

struct cluster *cl;

static const char schema_lock_sql[] = "SELECT pg_advisory_lock($1::bigint)";
static const char schema_unlock_sql[] = "SELECT pg_advisory_unlock($1::bigint)";

int cluster_config_check(const struct cluster_config *cfg, struct al_error *err)
{
	if (!cfg->db_conninfo)
		return 0;
	if (!cfg->key_file || !cfg->node_url || !cfg->shared_store)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--cluster-db needs --cluster-key-file, --node-url and --shared-store "
		                    "(docs/cluster.md)");
	if (!name_valid(cfg->node_name, CLUSTER_NODE_NAME_MAX))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--node-name: \"%.80s\" is not a node name ([a-z0-9][a-z0-9_-]{0,62})",
		                    cfg->node_name);
	if (strlen(cfg->node_url) > CLUSTER_NODE_URL_MAX || strncmp(cfg->node_url, "http://", 7))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--node-url must be http://HOST:PORT (at most %d bytes): where fronts reach this "
		                    "node's --listen",
		                    CLUSTER_NODE_URL_MAX);
	if (cfg->lease_s < 3 || cfg->lease_s > 300)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--node-lease-s must be 3 to 300");
	if (access(cfg->shared_store, W_OK | X_OK) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "--shared-store %s: %m", cfg->shared_store);
	return 0;
}

static int schema_make(struct al_error *err)
{
	char key[24];
	snprintf(key, sizeof(key), "%d", CLUSTER_LOCK_SCHEMA);
	const char *p[] = {key};
	struct cluster_db *db = &cl->lease_db;
	pthread_mutex_lock(&db->lock);
	PGresult *res = NULL;
	int r = cdb_exec(db, schema_lock_sql, 1, p, &res, err);
	if (res)
		PQclear(res);
	res = NULL;
	if (r == 0) {
		r = cdb_exec(db, CLUSTER_SCHEMA_SQL, 0, NULL, &res, err);
		if (res)
			PQclear(res);
		PGresult *u = NULL;
		struct al_error ignored;
		if (cdb_exec(db, schema_unlock_sql, 1, p, &u, &ignored) == 0)
			PQclear(u);
	}
	pthread_mutex_unlock(&db->lock);
	return r;
}

static int pause_hook(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	return cluster_pause(id, tenant, ret, err);
}

int cluster_gate(const char *what, struct al_error *err)
{
	if (cluster_valid_now())
		return 0;
	return al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN,
	                    "node %s cannot %s now: its cluster lease is not held (fenced or registering); retry "
	                    "through the front, which places it on another node",
	                    cl->cfg.node_name, what);
}

int cluster_prepare(const struct cluster_config *cfg, json_t *(*record_json)(const struct sandbox_record *r),
                    struct store *store, unsigned host_memory_mib, struct al_error *err)
{
	if (!cfg->db_conninfo)
		return 0;
	struct cluster *c = xcalloc(1, sizeof(*c));
	c->cfg = *cfg;
	c->store = store;
	c->host_memory_mib = host_memory_mib;
	c->record_json = record_json;
	char msg[256];
	int r = cluster_key_load(cfg->key_file, &c->key, msg, sizeof(msg));
	if (r < 0) {
		free(c);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, -r, "%s", msg);
	}
	pthread_mutex_init(&c->lock, NULL);
	cdb_init(&c->lease_db, cfg->db_conninfo, "lease");
	cdb_init(&c->index_db, cfg->db_conninfo, "index");
	cl = c;
	if ((r = schema_make(err)) < 0) {
		cdb_close(&c->lease_db);
		cdb_close(&c->index_db);
		cl = NULL;
		explicit_bzero(&c->key, sizeof(c->key));
		free(c);
		return r;
	}
	/* Before any sandbox is re-attached: their bindings are resolved there. */
	cluster_secrets_start();
	cluster_templates_start();
	return 0;
}

int cluster_start(struct al_error *err)
{
	if (!cl)
		return 0;
	int r = cluster_lease_start(err);
	if (r < 0)
		return r;
	store_set_observer(cluster_index_observe);
	sandboxes_set_cluster_hooks(pause_hook, cluster_gate);
	return 0;
}

void cluster_stop(void)
{
	if (!cl)
		return;
	cluster_lease_stop();
	sandboxes_set_cluster_hooks(NULL, NULL);
	store_set_observer(NULL);
	cdb_close(&cl->lease_db);
	cdb_close(&cl->index_db);
	/* cl itself stays: a request still finishing may read it. */
}

bool cluster_enabled(void)
{
	return cl != NULL;
}

const struct cluster_key *cluster_key_get(void)
{
	return cl ? &cl->key : NULL;
}

json_t *cluster_health_json(void)
{
	if (!cl)
		return NULL;
	pthread_mutex_lock(&cl->lock);
	json_t *j =
	    json_pack("{s:s, s:I, s:b, s:b}", "node", cl->cfg.node_name, "epoch", (json_int_t)cl->epoch, "lease",
	              cl->epoch > 0 && now_ms_monotonic() < cl->lease_until_mono_ms, "fenced", cl->fenced);
	pthread_mutex_unlock(&cl->lock);
	return j;
}
