/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Moves of a sandbox between nodes (docs/cluster.md, "Pause, resume,
 * recovery"). A pause in cluster mode snapshots the sandbox into the shared
 * store and gives its row up (node NULL, state paused, the snapshot's key)
 * before it answers; only then is the VM deleted here. An adopt, on any
 * node a front chose, claims such a row and restores the snapshot under the
 * sandbox's own id: a resume, or the recovery of a lost node's sandbox.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cluster-internal.h"
#include "events.h"
#include "json-cleanup.h"
#include "log.h"
#include "sandbox-model.h"
#include "sandbox.h"
#include "snapshot.h"
#include "util.h"

static const char release_sql[] =
    "UPDATE airlock_sandboxes SET node = NULL, node_epoch = NULL, state = 'paused', snapshot = $4, "
    "record = $5::jsonb, updated_at = now() WHERE id = $1 AND node = $2 AND EXISTS (SELECT 1 FROM airlock_nodes "
    "WHERE name = $2 AND epoch = $3::bigint AND state = 'up' AND lease_until > now())";

static const char latest_sql[] =
    "UPDATE airlock_sandboxes SET snapshot = $4, updated_at = now() WHERE id = $1 AND node = $2 AND EXISTS "
    "(SELECT 1 FROM airlock_nodes WHERE name = $2 AND epoch = $3::bigint AND state = 'up' AND lease_until > now())";

static const char snapshot_row_sql[] =
    "INSERT INTO airlock_snapshots (key, tenant, sandbox, manifest, bytes) VALUES ($1, $2, $3, $4::jsonb, "
    "$5::bigint) ON CONFLICT (key) DO NOTHING";

static const char claim_sql[] =
    "UPDATE airlock_sandboxes s SET node = $2, node_epoch = $3::bigint, state = 'creating', updated_at = now() "
    "FROM (SELECT state AS was FROM airlock_sandboxes WHERE id = $1 FOR UPDATE) old "
    "WHERE s.id = $1 AND s.node IS NULL AND s.snapshot IS NOT NULL AND s.state IN ('paused', 'recovering') "
    "AND EXISTS (SELECT 1 FROM airlock_nodes WHERE name = $2 AND epoch = $3::bigint AND state = 'up' "
    "AND lease_until > now()) RETURNING s.tenant, old.was, s.snapshot, s.record::text, s.bindings::text";

static const char unclaim_sql[] = "UPDATE airlock_sandboxes SET node = NULL, node_epoch = NULL, state = $3, "
                                  "updated_at = now() WHERE id = $1 AND node = $2";

static const char event_sql[] =
    "INSERT INTO airlock_events (node, tenant, sandbox, type, data) VALUES ($1, $2, $3, $4, $5::jsonb)";

static void cluster_event(const char *tenant, const char *id, const char *type, json_t *data)
{
	cleanup_json json_t *d = data ? data : json_object();
	cleanup_free char *text = json_dumps(d, JSON_COMPACT);
	const char *p[] = {cl->cfg.node_name, tenant, id, type, text};
	struct al_error err = {0};
	pthread_mutex_lock(&cl->index_db.lock);
	cleanup_pgresult PGresult *res = NULL;
	if (cdb_exec(&cl->index_db, event_sql, 5, p, &res, &err) < 0)
		log_error("cluster: event %s of %s not recorded: %s", type, id, err.message);
	pthread_mutex_unlock(&cl->index_db.lock);
}

static void snapshot_row(const char *key, const char *tenant, const char *id, const json_t *manifest, uint64_t bytes)
{
	char size[24];
	snprintf(size, sizeof(size), "%llu", (unsigned long long)bytes);
	cleanup_free char *mtext = json_dumps(manifest, JSON_COMPACT);
	const char *q[] = {key, tenant, id, mtext, size};
	cleanup_pgresult PGresult *res = NULL;
	struct al_error err = {0};
	if (cdb_exec(&cl->index_db, snapshot_row_sql, 5, q, &res, &err) < 0)
		log_error("cluster: snapshot %s of %s not listed: %s", key, id, err.message);
}

/* The row becomes the paused sandbox's, on no node. 0 rows: not this node's. */
static int row_release(const struct sandbox_record *rec, const char *key, const json_t *manifest, uint64_t bytes,
                       struct al_error *err)
{
	char epoch[24];
	cluster_epoch_text(epoch);
	cleanup_json json_t *j = cl->record_json(rec);
	cleanup_free char *record = json_dumps(j, JSON_COMPACT);
	const char *p[] = {rec->id, cl->cfg.node_name, epoch, key, record};
	pthread_mutex_lock(&cl->index_db.lock);
	cleanup_pgresult PGresult *res = NULL;
	int r = cdb_exec(&cl->index_db, release_sql, 5, p, &res, err);
	if (r == 0 && cdb_rows(res) != 1)
		r = al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN,
		                 "node %s cannot pause sandbox %s: its index row is not this node's any more "
		                 "(the node is fenced)",
		                 cl->cfg.node_name, rec->id);
	if (r == 0)
		snapshot_row(key, rec->tenant, rec->id, manifest, bytes);
	pthread_mutex_unlock(&cl->index_db.lock);
	return r;
}

static void local_forget(const char *id, const char *snapshot_id)
{
	struct al_error err = {0};
	struct sandbox_record gone = {0};
	cluster_handed_off_add(id);
	if (sandbox_delete(id, NULL, &gone, &err) < 0)
		log_error("cluster: sandbox %s moved, but its VM here could not be deleted: %s", id, err.message);
	sandbox_record_release(&gone);
	if (snapshot_id && snapshot_delete(snapshot_id, NULL, &err) < 0)
		log_error("cluster: snapshot %s (a move's) not removed: %s", snapshot_id, err.message);
}

int cluster_snapshot_publish(const char *sandbox_id, const struct snapshot_info *snap, struct al_error *err)
{
	char key[72], epoch[24];
	uint64_t bytes = 0;
	cleanup_json json_t *manifest = NULL;
	int r = cluster_store_publish(snap, sandbox_id, key, &bytes, &manifest, err);
	if (r < 0)
		return r;
	cluster_epoch_text(epoch);
	const char *p[] = {sandbox_id, cl->cfg.node_name, epoch, key};
	pthread_mutex_lock(&cl->index_db.lock);
	cleanup_pgresult PGresult *res = NULL;
	r = cdb_exec(&cl->index_db, latest_sql, 4, p, &res, err);
	if (r == 0 && cdb_rows(res) != 1)
		r = al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN,
		                 "snapshot of %s not kept: node %s no longer holds its index row (fenced)", sandbox_id,
		                 cl->cfg.node_name);
	if (r == 0)
		snapshot_row(key, snap->tenant, sandbox_id, manifest, bytes);
	pthread_mutex_unlock(&cl->index_db.lock);
	return r;
}

int cluster_pause(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	int r = cluster_gate("pause a sandbox", err);
	struct sandbox_record rec = {0};
	if (r < 0 || (r = sandbox_pause_local(id, tenant, &rec, err)) < 0)
		return r;
	struct snapshot_info snap;
	if ((r = sandbox_snapshot(id, tenant, id, true, &snap, err)) < 0) {
		sandbox_record_release(&rec);
		return r;
	}
	char key[72];
	uint64_t bytes = 0;
	cleanup_json json_t *manifest = NULL;
	r = cluster_store_publish(&snap, id, key, &bytes, &manifest, err);
	if (r == 0)
		r = row_release(&rec, key, manifest, bytes, err);
	if (r < 0) {
		struct al_error ignored;
		snapshot_delete(snap.id, NULL, &ignored);
		al_error_prefix(err, "sandbox %s stays paused on node %s", id, cl->cfg.node_name);
		sandbox_record_release(&rec);
		return r;
	}
	local_forget(id, snap.id);
	cluster_event(rec.tenant, id, "sandbox.paused", json_pack("{s:s}", "snapshot", key));
	log_info("cluster: sandbox %s paused into the shared store as %s", id, key);
	*ret = rec;
	return 0;
}

/* ---- adopt ---- */

struct claim {
	char tenant[64];
	char was[16]; /* the row's state before the claim, for an undo */
	char key[72];
	json_t *record; /* the API's view of the sandbox when it left its node */
	char *bindings; /* its secret bindings (secrets.h), JSON */
};

static int row_claim(const char *id, struct claim *ret, struct al_error *err)
{
	char epoch[24];
	cluster_epoch_text(epoch);
	const char *p[] = {id, cl->cfg.node_name, epoch};
	pthread_mutex_lock(&cl->index_db.lock);
	cleanup_pgresult PGresult *res = NULL;
	int r = cdb_exec(&cl->index_db, claim_sql, 3, p, &res, err);
	if (r == 0 && PQntuples(res) == 1) {
		strlcpy_al(ret->tenant, PQgetvalue(res, 0, 0), sizeof(ret->tenant));
		strlcpy_al(ret->was, PQgetvalue(res, 0, 1), sizeof(ret->was));
		strlcpy_al(ret->key, PQgetvalue(res, 0, 2), sizeof(ret->key));
		ret->record = json_loads(PQgetvalue(res, 0, 3), 0, NULL);
		ret->bindings = xstrdup(PQgetvalue(res, 0, 4));
	} else if (r == 0) {
		r = al_error_set(err, AL_ERR_CONFLICT, EBUSY,
		                 "sandbox %s cannot be adopted by node %s: it is on a node already, has no snapshot in "
		                 "the shared store, or is gone",
		                 id, cl->cfg.node_name);
	}
	pthread_mutex_unlock(&cl->index_db.lock);
	if (r == 0 && !json_is_object(ret->record))
		r = al_error_set(err, AL_ERR_INTERNAL, EBADMSG, "sandbox %s: its index row holds no record", id);
	return r;
}

static void row_unclaim(const char *id, const char *was)
{
	const char *p[] = {id, cl->cfg.node_name, was};
	struct al_error err = {0};
	pthread_mutex_lock(&cl->index_db.lock);
	cleanup_pgresult PGresult *res = NULL;
	if (cdb_exec(&cl->index_db, unclaim_sql, 3, p, &res, &err) < 0)
		log_error("cluster: sandbox %s: cannot give its row back: %s", id, err.message);
	pthread_mutex_unlock(&cl->index_db.lock);
}

static uint64_t rfc3339_ms(const char *s)
{
	struct tm tm = {0};
	unsigned ms = 0;
	if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3uZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
	                 &tm.tm_min, &tm.tm_sec, &ms) != 7)
		return now_ms_realtime();
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (uint64_t)timegm(&tm) * 1000u + ms;
}

static void kv_from_json(json_t *o, struct kv_list *l)
{
	const char *k;
	json_t *v;
	json_object_foreach (o, k, v)
		if (json_is_string(v))
			kv_list_add(l, k, json_string_value(v));
}

/* What the sandbox was (its record's API view) as a create's request: the
 * restore keeps its id, creation time, env, metadata, policy, timeouts and
 * ports; its secret bindings come with the claim (adopt_restore). */
static void request_from_record(json_t *rec, const char *tenant, struct create_request *req,
                                struct sandbox_record *adopt)
{
	strlcpy_al(req->tenant, tenant, sizeof(req->tenant));
	kv_from_json(json_object_get(rec, "env"), &req->env);
	kv_from_json(json_object_get(rec, "metadata"), &req->metadata);
	json_t *net = json_object_get(rec, "network");
	req->network_json = json_is_object(net) ? json_dumps(net, JSON_COMPACT) : NULL;
	req->timeouts.timeout_s = (unsigned)json_integer_value(json_object_get(rec, "timeout_s"));
	req->timeouts.idle_timeout_s = (unsigned)json_integer_value(json_object_get(rec, "idle_timeout_s"));
	const char *on = json_string_value(json_object_get(rec, "on_timeout"));
	strlcpy_al(req->timeouts.on_timeout, on && (!strcmp(on, "kill") || !strcmp(on, "pause")) ? on : "kill",
	           sizeof(req->timeouts.on_timeout));
	req->timeouts.auto_resume = json_is_true(json_object_get(rec, "auto_resume"));
	adopt->created_ms = rfc3339_ms(json_string_value(json_object_get(rec, "created_at")));
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(rec, "ports"), i, p) {
		json_int_t port = json_integer_value(json_object_get(p, "port"));
		if (adopt->n_ports < SANDBOX_RECORD_PORTS_MAX && port > 0 && port < 65536) {
			adopt->ports[adopt->n_ports].port = (uint16_t)port;
			adopt->ports[adopt->n_ports++].public_port = json_is_true(json_object_get(p, "public"));
		}
	}
}

static int adopt_restore(const char *id, const struct claim *c, struct sandbox_record *ret, struct al_error *err)
{
	struct snapshot_info fetched, usable;
	int r = cluster_store_fetch(c->key, c->tenant, &fetched, err);
	if (r < 0)
		return r;
	if ((r = sandbox_snapshot_usable(fetched.id, c->tenant, &usable, err)) == 0) {
		struct create_request req = {0};
		struct sandbox_record adopt = {0};
		strlcpy_al(adopt.id, id, sizeof(adopt.id));
		request_from_record(c->record, c->tenant, &req, &adopt);
		/* The same bindings and placeholders: the guest has them in its env. */
		adopt.secrets_json = c->bindings;
		req.adopt = &adopt;
		r = sandbox_create(&req, c->tenant, NULL, &usable, ret, err);
		create_request_release(&req);
	}
	struct al_error ignored;
	snapshot_delete(fetched.id, NULL, &ignored);
	return r;
}

int cluster_adopt(const char *id, struct sandbox_record *ret, struct al_error *err)
{
	if (!cl)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "this airlockd is not in a cluster (--cluster-db)");
	int r = cluster_gate("adopt a sandbox", err);
	struct claim c = {0};
	if (r < 0 || (r = row_claim(id, &c, err)) < 0) {
		json_decref(c.record);
		free(c.bindings);
		return r;
	}
	cluster_handed_off_clear(id); /* it may have been paused here */
	r = adopt_restore(id, &c, ret, err);
	if (r < 0) {
		/* Nothing of it stays here; the row goes back as it was. */
		struct sandbox_record gone = {0};
		struct al_error ignored;
		cluster_handed_off_add(id);
		sandbox_delete(id, NULL, &gone, &ignored);
		sandbox_record_release(&gone);
		row_unclaim(id, c.was);
		al_error_prefix(err, "node %s cannot adopt sandbox %s", cl->cfg.node_name, id);
	} else {
		/* A recovery's event is the reaper's (sandbox.recovered, from and to). */
		if (strcmp(c.was, "recovering"))
			cluster_event(c.tenant, id, "sandbox.resumed", json_pack("{s:s}", "snapshot", c.key));
		log_info("cluster: sandbox %s adopted from the shared store (%s)", id, c.key);
	}
	json_decref(c.record);
	free(c.bindings);
	return r;
}
