/* SPDX-License-Identifier: Apache-2.0 */
/* The reaper: one front at a time (the session lock CLUSTER_LOCK_REAPER on a
 * connection of its own) declares lost the nodes whose lease lapsed more than
 * --lost-grace-s ago, takes their sandboxes off them in the same statement
 * (recovering when they have a snapshot, else lost), and has the recovering
 * ones adopted by other nodes, round after round until one does. */
#include <pthread.h>

#include "front.h"
#include "json-cleanup.h"
#include "util.h"

#define RECOVER_PER_ROUND 64
#define RETRY_LOG_MS 10000

static uint64_t last_warn_ms; /* the reaper's thread only */

/* One statement, so one transaction: the nodes, their sandboxes, the events. */
static const char mark_lost_sql[] =
    "WITH lost AS (UPDATE airlock_nodes SET state = 'lost', epoch = epoch + 1, updated_at = now()"
    "  WHERE state = 'up' AND lease_until < now() - make_interval(secs => $1::int) RETURNING name),"
    " moved AS (UPDATE airlock_sandboxes s SET node = NULL, node_epoch = NULL, updated_at = now(),"
    "  state = CASE WHEN s.snapshot IS NOT NULL THEN 'recovering' ELSE 'lost' END,"
    "  record = jsonb_set(s.record, '{state}',"
    "   to_jsonb(CASE WHEN s.snapshot IS NOT NULL THEN 'recovering' ELSE 'lost' END))"
    "  FROM lost WHERE s.node = lost.name AND s.state <> 'deleted'"
    "  RETURNING s.id, s.tenant, s.state, lost.name AS from_node),"
    " ev_nodes AS (INSERT INTO airlock_events (node, type) SELECT name, 'node.lost' FROM lost),"
    " ev_sandboxes AS (INSERT INTO airlock_events (node, tenant, sandbox, type, data)"
    "  SELECT from_node, tenant, id, CASE WHEN state = 'lost' THEN 'sandbox.lost' ELSE 'sandbox.recovering' END,"
    "  jsonb_build_object('node', from_node) FROM moved)"
    " SELECT (SELECT count(*) FROM lost), (SELECT count(*) FROM moved)";

static const char recovering_sql[] =
    "SELECT s.id, s.tenant, s.template, s.vcpus, s.memory_mib, coalesce((SELECT e.node FROM airlock_events e"
    "  WHERE e.sandbox = s.id AND e.type = 'sandbox.recovering' ORDER BY e.seq DESC LIMIT 1), '')"
    " FROM airlock_sandboxes s WHERE s.state = 'recovering' AND s.node IS NULL ORDER BY s.updated_at LIMIT 64";

static PGresult *exec_on(PGconn *db, const char *sql, int n, const char *const *params, struct al_error *err)
{
	PGresult *r = PQexecParams(db, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType s = PQresultStatus(r);
	if (s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK)
		return r;
	al_error_set(err, AL_ERR_UNAVAILABLE, EIO, "the reaper's query failed: %s",
	             r ? PQresultErrorMessage(r) : PQerrorMessage(db));
	err->message[strcspn(err->message, "\n")] = '\0';
	PQclear(r);
	return NULL;
}

static void recovered_event(PGconn *db, const char *id, const char *tenant, const char *from, const char *to)
{
	cleanup_json json_t *data = json_pack("{s:s, s:s}", "from", from, "to", to);
	cleanup_free char *text = json_dumps(data, JSON_COMPACT);
	const char *params[] = {to, tenant, id, text};
	struct al_error err = {0};
	PQclear(exec_on(db,
	                "INSERT INTO airlock_events (node, tenant, sandbox, type, data)"
	                " VALUES ($1, $2, $3, 'sandbox.recovered', $4)",
	                4, params, &err));
}

static void recover_one(PGconn *db, PGresult *res, int i)
{
	const char *id = PQgetvalue(res, i, 0), *tenant = PQgetvalue(res, i, 1), *from = PQgetvalue(res, i, 5);
	struct front_place p = {.template_name = PQgetvalue(res, i, 2),
	                        .vcpus = strtoll(PQgetvalue(res, i, 3), NULL, 10),
	                        .memory_mib = strtoll(PQgetvalue(res, i, 4), NULL, 10)};
	char url[CLUSTER_NODE_URL_MAX + 1], node[CLUSTER_NODE_NAME_MAX + 1];
	struct front_answer a = {0};
	struct al_error err = {0};
	int r = front_adopt(id, &p, url, node, &a, &err);
	front_answer_release(&a);
	if (r == 0) {
		recovered_event(db, id, tenant, from, node);
		fprintf(stderr, "airlock-api: reaper: %s recovered on %s (was on %s)\n", id, node, from);
	} else if (r != -EBUSY && now_ms_monotonic() - last_warn_ms >= RETRY_LOG_MS) {
		/* tried again every round: said at most every RETRY_LOG_MS */
		last_warn_ms = now_ms_monotonic();
		fprintf(stderr, "airlock-api: reaper: %s not recovered yet (retried every round): %s\n", id,
		        err.message);
	}
}

int front_reaper_round(PGconn *db, struct al_error *err)
{
	char grace[16];
	snprintf(grace, sizeof(grace), "%u", front_cfg.lost_grace_s);
	const char *params[] = {grace};
	PGresult *res = exec_on(db, mark_lost_sql, 1, params, err);
	if (!res)
		return -EIO;
	if (strcmp(PQgetvalue(res, 0, 0), "0"))
		fprintf(stderr, "airlock-api: reaper: %s node(s) lost, %s sandbox(es) taken off them\n",
		        PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1));
	PQclear(res);
	if (!(res = exec_on(db, recovering_sql, 0, NULL, err)))
		return -EIO;
	for (int i = 0; i < PQntuples(res) && i < RECOVER_PER_ROUND; i++)
		recover_one(db, res, i);
	PQclear(res);
	return 0;
}

/* Whether this front holds the reaper's lock (taken on db's session). */
static bool lock_try(PGconn *db)
{
	char sql[64];
	snprintf(sql, sizeof(sql), "SELECT pg_try_advisory_lock(%d)", CLUSTER_LOCK_REAPER);
	PGresult *r = PQexec(db, sql);
	bool held = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	return held;
}

static void *reaper_main(void *arg)
{
	(void)arg;
	PGconn *db = NULL;
	bool held = false;
	for (;;) {
		if (db && PQstatus(db) != CONNECTION_OK) {
			PQfinish(db);
			db = NULL;
		}
		if (!db) {
			db = front_pg_connect();
			held = false;
		}
		if (db && !held)
			held = lock_try(db);
		struct al_error err = {0};
		if (held && front_reaper_round(db, &err) < 0)
			fprintf(stderr, "airlock-api: reaper: %s\n", err.message);
		struct timespec ts = {.tv_sec = front_cfg.reaper_interval_ms / 1000,
		                      .tv_nsec = (long)(front_cfg.reaper_interval_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

void front_reaper_start(void)
{
	pthread_t t;
	if (pthread_create(&t, NULL, reaper_main, NULL) != 0)
		abort(); /* no thread at start-up: nothing sensible to do */
	pthread_detach(t);
}
