/* SPDX-License-Identifier: Apache-2.0 */
/*
 * This node's lease (docs/cluster.md, "Leases and fencing"). The lease
 * thread renews airlock_nodes.lease_until every third of --node-lease-s,
 * with the node's capacity. The node counts its lease from the moment it
 * sent a renewal that succeeded, on its own monotonic clock, so that its view
 * ends before the database's: when the view ends (the database unreachable,
 * or the row no longer its epoch) the node fences itself: it refuses new
 * work and pauses every sandbox it runs, before any front's reaper (which
 * waits for the database's lease_until and a grace) may give them to another
 * node. It then registers again under a new epoch; a sandbox whose row is
 * still its own is resumed, one another node took is deleted here.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cluster-internal.h"
#include "json-cleanup.h"
#include "log.h"
#include "sandbox.h"
#include "templates.h"
#include "util.h"

static const char register_sql[] =
    "WITH old AS (SELECT state FROM airlock_nodes WHERE name = $1) "
    "INSERT INTO airlock_nodes (name, url, epoch, state, lease_until, proxy_url) "
    "VALUES ($1, $2, 1, 'up', now() + make_interval(secs => $3::integer), $4) "
    "ON CONFLICT (name) DO UPDATE SET url = EXCLUDED.url, proxy_url = EXCLUDED.proxy_url, "
    "epoch = airlock_nodes.epoch + 1, state = 'up', "
    "lease_until = EXCLUDED.lease_until, started_at = now(), updated_at = now() "
    "RETURNING epoch, (SELECT state FROM old)";

static const char renew_sql[] =
    "UPDATE airlock_nodes SET lease_until = now() + make_interval(secs => $3::integer), vcpus_total = $4::integer,"
    " vcpus_used = $5::integer, memory_total_mib = $6::bigint, memory_used_mib = $7::bigint,"
    " memory_free_mib = $8::bigint, sandboxes = $9::integer, templates = $10::jsonb, updated_at = now()"
    " WHERE name = $1 AND epoch = $2::bigint AND state = 'up' AND lease_until > now()";

bool cluster_valid_now(void)
{
	if (!cl)
		return true;
	pthread_mutex_lock(&cl->lock);
	bool ok = cl->epoch > 0 && !cl->fenced && now_ms_monotonic() < cl->lease_until_mono_ms;
	pthread_mutex_unlock(&cl->lock);
	return ok;
}

struct capacity {
	unsigned vcpus_used, sandboxes;
	uint64_t memory_used_mib;
};

static void frozen_add(const char *id)
{
	pthread_mutex_lock(&cl->lock);
	cl->frozen = xrealloc(cl->frozen, (cl->n_frozen + 1) * sizeof(*cl->frozen));
	strlcpy_al(cl->frozen[cl->n_frozen++], id, sizeof(cl->frozen[0]));
	pthread_mutex_unlock(&cl->lock);
}

static void capacity_add(const struct sandbox_record *r, void *ctx)
{
	struct capacity *c = ctx;
	enum sandbox_state s = r->state;
	if (s == SANDBOX_CREATING || s == SANDBOX_RUNNING || s == SANDBOX_PAUSED || s == SANDBOX_SNAPSHOTTING) {
		c->sandboxes++;
		c->vcpus_used += r->vcpus;
		c->memory_used_mib += r->memory_mib;
	}
}

static void capacity_count(struct capacity *c)
{
	*c = (struct capacity){0};
	cluster_records_each(capacity_add, c);
}

/* The names of the templates a create may name here (built-in, shared and
 * every tenant's: a front places a tenant's create only where the name is). */
static char *templates_text(void)
{
	cleanup_json json_t *all = templates_list_json(NULL);
	cleanup_json json_t *names = json_array();
	size_t i;
	json_t *t;
	json_array_foreach (all, i, t) {
		const char *name = json_string_value(json_object_get(t, "name"));
		if (name)
			json_array_append_new(names, json_string(name));
	}
	return json_dumps(names, JSON_COMPACT);
}

static int lease_renew(const char *epoch, bool *ret_held, struct al_error *err)
{
	struct capacity c;
	capacity_count(&c);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t total = cl->host_memory_mib, free_mib = total > c.memory_used_mib ? total - c.memory_used_mib : 0;
	char lease[16], vt[24], vu[16], mt[24], mu[24], mf[24], sb[16];
	snprintf(lease, sizeof(lease), "%u", cl->cfg.lease_s);
	snprintf(vt, sizeof(vt), "%ld", cpus > 0 ? cpus : 1);
	snprintf(vu, sizeof(vu), "%u", c.vcpus_used);
	snprintf(mt, sizeof(mt), "%llu", (unsigned long long)total);
	snprintf(mu, sizeof(mu), "%llu", (unsigned long long)c.memory_used_mib);
	snprintf(mf, sizeof(mf), "%llu", (unsigned long long)free_mib);
	snprintf(sb, sizeof(sb), "%u", c.sandboxes);
	cleanup_free char *tpl = templates_text();
	const char *p[] = {cl->cfg.node_name, epoch, lease, vt, vu, mt, mu, mf, sb, tpl};
	pthread_mutex_lock(&cl->lease_db.lock);
	cleanup_pgresult PGresult *res = NULL;
	int r = cdb_exec(&cl->lease_db, renew_sql, 10, p, &res, err);
	pthread_mutex_unlock(&cl->lease_db.lock);
	if (r == 0)
		*ret_held = cdb_rows(res) == 1;
	return r;
}

/* Every running sandbox here is paused (memory stays; nothing runs) and
 * remembered, to be resumed if it is still this node's when it registers
 * again. */
static void freeze_one(const struct sandbox_record *r, void *ctx)
{
	(void)ctx;
	struct al_error err = {0};
	struct sandbox_record out = {0};
	if (r->state != SANDBOX_RUNNING)
		return;
	if (sandbox_pause_local(r->id, NULL, &out, &err) < 0)
		log_error("cluster: fenced: cannot freeze sandbox %s: %s", r->id, err.message);
	else
		frozen_add(r->id);
	sandbox_record_release(&out);
}

static void freeze_all(void)
{
	cluster_records_each(freeze_one, NULL);
}

static void fence(const char *why)
{
	pthread_mutex_lock(&cl->lock);
	bool was = cl->fenced;
	cl->fenced = true;
	pthread_mutex_unlock(&cl->lock);
	if (!was)
		log_error(
		    "cluster: node %s is fenced (%s): no new work, its sandboxes frozen, until it registers again",
		    cl->cfg.node_name, why);
	freeze_all();
}

/* After a registration: each sandbox here whose row is not this node's is
 * deleted (cluster_index_resync); one a fence froze that still is, resumed. */
static void thaw_owned(void)
{
	cluster_index_resync();
	pthread_mutex_lock(&cl->lock);
	char(*ids)[SANDBOX_ID_MAX + 1] = TAKE_PTR(cl->frozen);
	size_t n = cl->n_frozen;
	cl->n_frozen = 0;
	pthread_mutex_unlock(&cl->lock);
	for (size_t i = 0; i < n; i++) {
		struct al_error err = {0};
		struct sandbox_record out = {0};
		if (!cluster_handed_off(ids[i]) && sandbox_resume(ids[i], NULL, &out, &err) < 0)
			log_error("cluster: cannot thaw sandbox %s: %s", ids[i], err.message);
		sandbox_record_release(&out);
	}
	free(ids);
}

static int node_register(struct al_error *err)
{
	char lease[16];
	snprintf(lease, sizeof(lease), "%u", cl->cfg.lease_s);
	const char *p[] = {cl->cfg.node_name, cl->cfg.node_url, lease, cl->cfg.proxy_url ? cl->cfg.proxy_url : ""};
	uint64_t sent = now_ms_monotonic();
	pthread_mutex_lock(&cl->lease_db.lock);
	cleanup_pgresult PGresult *res = NULL;
	int r = cdb_exec(&cl->lease_db, register_sql, 4, p, &res, err);
	long long epoch = r == 0 && PQntuples(res) == 1 ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
	char old[16] = "";
	if (r == 0 && PQntuples(res) == 1)
		strlcpy_al(old, PQgetvalue(res, 0, 1), sizeof(old));
	pthread_mutex_unlock(&cl->lease_db.lock);
	if (r < 0)
		return r;
	if (epoch <= 0)
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cluster database: registration returned no epoch");
	pthread_mutex_lock(&cl->lock);
	cl->epoch = epoch;
	cl->lease_until_mono_ms = sent + (uint64_t)cl->cfg.lease_s * 1000u;
	pthread_mutex_unlock(&cl->lock);
	log_info("cluster: node %s registered at %s, epoch %lld%s", cl->cfg.node_name, cl->cfg.node_url, epoch,
	         !strcmp(old, CLUSTER_NODE_LOST) ? " (it had been declared lost: its sandboxes are others' now)" : "");
	pthread_mutex_lock(&cl->lock);
	cl->fenced = false;
	pthread_mutex_unlock(&cl->lock);
	thaw_owned();
	return 0;
}

/* One round: register when not registered (or fenced), else renew; a lease
 * whose view ended fences. */
static void lease_round(void)
{
	struct al_error err = {0};
	pthread_mutex_lock(&cl->lock);
	bool registered = cl->epoch > 0 && !cl->fenced, dirty = cl->dirty;
	bool lapsed = now_ms_monotonic() >= cl->lease_until_mono_ms;
	pthread_mutex_unlock(&cl->lock);
	if (registered && lapsed) {
		fence("its lease lapsed before a renewal got through");
		registered = false;
	}
	if (!registered) {
		if (node_register(&err) < 0)
			log_error("cluster: cannot register node %s: %s", cl->cfg.node_name, err.message);
		return;
	}
	char epoch[24];
	cluster_epoch_text(epoch);
	bool held = false;
	uint64_t sent = now_ms_monotonic();
	if (lease_renew(epoch, &held, &err) < 0) {
		log_error("cluster: lease renewal failed: %s", err.message);
		return; /* the lease may still hold: the next round sees */
	}
	if (!held) {
		fence("the database no longer holds its epoch: a front declared it lost");
		return;
	}
	pthread_mutex_lock(&cl->lock);
	cl->lease_until_mono_ms = sent + (uint64_t)cl->cfg.lease_s * 1000u;
	pthread_mutex_unlock(&cl->lock);
	if (dirty)
		cluster_index_resync();
	cluster_templates_prune();
}

static void *lease_thread(void *arg)
{
	(void)arg;
	uint64_t period_ms = (uint64_t)cl->cfg.lease_s * 1000u / 3u;
	pthread_mutex_lock(&cl->lock);
	while (!cl->stopping) {
		pthread_mutex_unlock(&cl->lock);
		lease_round();
		pthread_mutex_lock(&cl->lock);
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		uint64_t ns = (uint64_t)until.tv_nsec + (period_ms % 1000u) * 1000000u;
		until.tv_sec += (time_t)(period_ms / 1000u + ns / 1000000000u);
		until.tv_nsec = (long)(ns % 1000000000u);
		if (!cl->stopping)
			pthread_cond_timedwait(&cl->wake, &cl->lock, &until);
	}
	pthread_mutex_unlock(&cl->lock);
	return NULL;
}

int cluster_lease_start(struct al_error *err)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&cl->wake, &a);
	pthread_condattr_destroy(&a);
	int r = node_register(err);
	if (r < 0)
		return r;
	if ((r = pthread_create(&cl->thread, NULL, lease_thread, NULL)) != 0)
		return al_error_set(err, AL_ERR_INTERNAL, r, "cannot start the cluster lease thread: %s", strerror(r));
	return 0;
}

void cluster_lease_stop(void)
{
	pthread_mutex_lock(&cl->lock);
	cl->stopping = true;
	pthread_cond_signal(&cl->wake);
	pthread_mutex_unlock(&cl->lock);
	pthread_join(cl->thread, NULL);
}
