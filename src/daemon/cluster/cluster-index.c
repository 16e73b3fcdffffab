/* SPDX-License-Identifier: Apache-2.0 */
/* The index rows of this node's sandboxes (include/airlock/cluster.h,
 * airlock_sandboxes). Every write names this node and its epoch and only
 * lands while the node's lease holds and the row is this node's: a fenced
 * node, or one whose sandbox was moved, writes nothing. */
#include <stdio.h>
#include <string.h>

#include "cluster-internal.h"
#include "json-cleanup.h"
#include "log.h"
#include "sandbox.h"
#include "util.h"

#define NODE_VALID_SQL                                                                                                 \
	"EXISTS (SELECT 1 FROM airlock_nodes WHERE name = $3 AND epoch = $4::bigint AND state = 'up' "                 \
	"AND lease_until > now())"

static const char upsert_sql[] =
    "INSERT INTO airlock_sandboxes (id, tenant, node, node_epoch, state, template, vcpus, memory_mib, record,"
    " bindings) SELECT $1, $2, $3, $4::bigint, $5, $6, $7::integer, $8::integer, $9::jsonb, $10::jsonb "
    "WHERE " NODE_VALID_SQL " ON CONFLICT (id) DO UPDATE SET node_epoch = EXCLUDED.node_epoch, state = EXCLUDED.state,"
    " vcpus = EXCLUDED.vcpus, memory_mib = EXCLUDED.memory_mib, record = EXCLUDED.record,"
    " bindings = EXCLUDED.bindings, updated_at = now()"
    " WHERE airlock_sandboxes.node = EXCLUDED.node";

static const char valid_sql[] = "SELECT 1 FROM airlock_nodes WHERE name = $1 AND epoch = $2::bigint AND state = 'up' "
                                "AND lease_until > now()";

void cluster_epoch_text(char out[24])
{
	pthread_mutex_lock(&cl->lock);
	snprintf(out, 24, "%lld", (long long)cl->epoch);
	pthread_mutex_unlock(&cl->lock);
}

static int node_still_valid(const char *epoch, bool *ret_valid, struct al_error *err)
{
	const char *p[] = {cl->cfg.node_name, epoch};
	cleanup_pgresult PGresult *res = NULL;
	int r = cdb_exec(&cl->index_db, valid_sql, 2, p, &res, err);
	if (r == 0)
		*ret_valid = cdb_rows(res) == 1;
	return r;
}

int cluster_index_write(const struct sandbox_record *r, bool *ret_mine, bool *ret_fenced, struct al_error *err)
{
	char epoch[24], vcpus[16], mem[16];
	cluster_epoch_text(epoch);
	snprintf(vcpus, sizeof(vcpus), "%u", r->vcpus);
	snprintf(mem, sizeof(mem), "%u", r->memory_mib);
	cleanup_json json_t *j = cl->record_json(r);
	cleanup_free char *record = json_dumps(j, JSON_COMPACT);
	const char *p[] = {r->id,
	                   r->tenant,
	                   cl->cfg.node_name,
	                   epoch,
	                   sandbox_state_name(r->state),
	                   r->template_name,
	                   vcpus,
	                   mem,
	                   record,
	                   r->secrets_json ? r->secrets_json : "[]"};
	pthread_mutex_lock(&cl->index_db.lock);
	PGresult *res = NULL;
	int rc = cdb_exec(&cl->index_db, upsert_sql, 10, p, &res, err);
	bool mine = rc == 0 && cdb_rows(res) == 1, valid = true;
	if (res)
		PQclear(res);
	if (rc == 0 && !mine)
		rc = node_still_valid(epoch, &valid, err);
	pthread_mutex_unlock(&cl->index_db.lock);
	if (rc < 0)
		return rc;
	*ret_mine = mine;
	*ret_fenced = !valid;
	return 0;
}

void cluster_handed_off_add(const char *id)
{
	pthread_mutex_lock(&cl->lock);
	strlcpy_al(cl->handed_off[cl->handed_off_next], id, sizeof(cl->handed_off[0]));
	cl->handed_off_next = (cl->handed_off_next + 1) % CLUSTER_HANDED_OFF_MAX;
	pthread_mutex_unlock(&cl->lock);
}

bool cluster_handed_off(const char *id)
{
	bool found = false;
	pthread_mutex_lock(&cl->lock);
	for (unsigned i = 0; i < CLUSTER_HANDED_OFF_MAX && !found; i++)
		found = !strcmp(cl->handed_off[i], id);
	pthread_mutex_unlock(&cl->lock);
	return found;
}

void cluster_handed_off_clear(const char *id)
{
	pthread_mutex_lock(&cl->lock);
	for (unsigned i = 0; i < CLUSTER_HANDED_OFF_MAX; i++)
		if (!strcmp(cl->handed_off[i], id))
			cl->handed_off[i][0] = '\0';
	pthread_mutex_unlock(&cl->lock);
}

static void index_trouble(bool fenced)
{
	pthread_mutex_lock(&cl->lock);
	cl->dirty = true;
	if (fenced)
		cl->lease_until_mono_ms = 0; /* the lease thread fences at once */
	pthread_cond_signal(&cl->wake);
	pthread_mutex_unlock(&cl->lock);
}

/* Called by the store after each write of a record, from whatever thread
 * made the change (with the sandbox's locks held: no call back into core
 * here; what needs one is left to the lease thread). */
void cluster_index_observe(const struct sandbox_record *r)
{
	if (!cl || cluster_handed_off(r->id))
		return;
	struct al_error err = {0};
	bool mine = false, fenced = false;
	if (cluster_index_write(r, &mine, &fenced, &err) < 0) {
		log_error("cluster: sandbox %s: index write failed: %s", r->id, err.message);
		index_trouble(false);
	} else if (!mine) {
		log_error("cluster: sandbox %s: its index row is not this node's%s", r->id,
		          fenced ? " (this node is fenced)" : "");
		index_trouble(fenced);
	}
}

void cluster_records_each(void (*fn)(const struct sandbox_record *r, void *ctx), void *ctx)
{
	struct al_error err = {0};
	struct sandbox_record *recs = NULL;
	size_t n = 0;
	if (store_sandbox_list(cl->store, false, &recs, &n, &err) < 0) {
		log_error("cluster: cannot list this node's sandboxes: %s", err.message);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		fn(&recs[i], ctx);
		sandbox_record_release(&recs[i]);
	}
	free(recs);
}

static bool record_live(const struct sandbox_record *r)
{
	return r->state != SANDBOX_DELETED && r->state != SANDBOX_STOPPED;
}

static void stale_delete(const char *id)
{
	struct al_error err = {0};
	struct sandbox_record gone = {0};
	cluster_handed_off_add(id);
	if (sandbox_delete(id, NULL, &gone, &err) < 0)
		log_error("cluster: stale sandbox %s: cannot delete it: %s", id, err.message);
	else
		log_info("cluster: sandbox %s is another node's now (or on none): its copy here is deleted", id);
	sandbox_record_release(&gone);
}

struct resync {
	bool ok;     /* every write landed */
	bool fenced; /* a write found this node fenced: the others are not tried */
};

static void resync_one(const struct sandbox_record *r, void *ctx)
{
	struct resync *rs = ctx;
	struct al_error err = {0};
	bool mine = false, fenced = false;
	if (rs->fenced || !record_live(r) || cluster_handed_off(r->id))
		return;
	if (cluster_index_write(r, &mine, &fenced, &err) < 0) {
		log_error("cluster: sandbox %s: index write failed: %s", r->id, err.message);
		rs->ok = false;
	} else if (fenced) {
		rs->ok = false;
		rs->fenced = true;
	} else if (!mine) {
		stale_delete(r->id);
	}
}

void cluster_index_resync(void)
{
	struct resync rs = {.ok = true};
	cluster_records_each(resync_one, &rs);
	pthread_mutex_lock(&cl->lock);
	cl->dirty = !rs.ok;
	pthread_mutex_unlock(&cl->lock);
}
