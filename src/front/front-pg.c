/* SPDX-License-Identifier: Apache-2.0 */
/* The front's PostgreSQL connections: a small pool behind a mutex, each
 * connection reset when it broke; the schema made once at start. Every
 * query is parameterized (PQexecParams): no client byte is ever spliced
 * into SQL. */
#include <pthread.h>

#include "front.h"
#include "util.h"

#define PG_CONNS_MAX 32  /* connections open at once (the reaper's own aside) */
#define PG_WAIT_MS 10000 /* a request waits this long for one, then 503 */

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cond;
static PGconn *pool[PG_CONNS_MAX]; /* idle ones */
static size_t pool_n, open_n;      /* idle; open (idle or in use) */
static const char *pool_conninfo;

PGconn *front_pg_connect(void)
{
	PGconn *c = PQconnectdb(pool_conninfo);
	if (PQstatus(c) != CONNECTION_OK) {
		PQfinish(c);
		return NULL;
	}
	return c;
}

/* An idle connection, or a new one while fewer than PG_CONNS_MAX are open:
 * 1024 requests at once must not open 1024 connections to the database. */
static PGconn *pool_take(void)
{
	struct timespec deadline = monotonic_in_ms(PG_WAIT_MS);
	PGconn *c = NULL;
	bool opening = false;
	pthread_mutex_lock(&pool_lock);
	while (!pool_n && open_n >= PG_CONNS_MAX)
		if (pthread_cond_timedwait(&pool_cond, &pool_lock, &deadline) == ETIMEDOUT)
			break;
	if (pool_n)
		c = pool[--pool_n];
	else if (open_n < PG_CONNS_MAX)
		opening = true, open_n++;
	pthread_mutex_unlock(&pool_lock);
	if (!opening)
		return c;
	if (!(c = front_pg_connect())) {
		pthread_mutex_lock(&pool_lock);
		open_n--;
		pthread_cond_signal(&pool_cond);
		pthread_mutex_unlock(&pool_lock);
	}
	return c;
}

/* A connection goes back only when it is healthy and idle; else it is closed. */
static void pool_give(PGconn *c)
{
	bool keep = PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_IDLE;
	if (!keep)
		PQfinish(c);
	pthread_mutex_lock(&pool_lock);
	if (keep)
		pool[pool_n++] = c;
	else
		open_n--;
	pthread_cond_signal(&pool_cond);
	pthread_mutex_unlock(&pool_lock);
}

static bool result_ok(const PGresult *r)
{
	ExecStatusType s = PQresultStatus(r);
	return s == PGRES_TUPLES_OK || s == PGRES_COMMAND_OK;
}

int front_pg_exec(const char *what, const char *sql, int n, const char *const *params, PGresult **ret,
                  struct al_error *err)
{
	/* A pooled connection may have died since (a restart of the server):
	 * one retry on a fresh one. */
	for (int attempt = 0; attempt < 2; attempt++) {
		PGconn *c = pool_take();
		if (!c)
			return al_error_set(
			    err, AL_ERR_UNAVAILABLE, EIO,
			    "the cluster database cannot be reached, or its %d connections stayed busy for "
			    "%d s (%s); retry, or check --cluster-db",
			    PG_CONNS_MAX, PG_WAIT_MS / 1000, what);
		PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
		if (r && result_ok(r)) {
			pool_give(c);
			*ret = r;
			return 0;
		}
		bool broken = PQstatus(c) != CONNECTION_OK;
		char msg[256];
		strlcpy_al(msg, r ? PQresultErrorMessage(r) : PQerrorMessage(c), sizeof(msg));
		msg[strcspn(msg, "\n")] = '\0';
		PQclear(r);
		if (broken) {
			pool_give(c); /* closes it */
			continue;
		}
		pool_give(c);
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "the cluster database failed to %s: %s", what, msg);
	}
	return al_error_set(err, AL_ERR_UNAVAILABLE, EIO, "the cluster database went away (%s)", what);
}

/* The schema, once, whichever process is first (CLUSTER_LOCK_SCHEMA). */
static int schema_step(PGconn *c, const char *sql, struct al_error *err)
{
	PGresult *r = PQexec(c, sql);
	bool ok = r && result_ok(r);
	char msg[256];
	strlcpy_al(msg, ok ? "" : r ? PQresultErrorMessage(r) : PQerrorMessage(c), sizeof(msg));
	PQclear(r);
	msg[strcspn(msg, "\n")] = '\0';
	if (!ok)
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot create the cluster schema: %s", msg);
	return 0;
}

static int schema_create(PGconn *c, struct al_error *err)
{
	char lock[64], unlock[64];
	snprintf(lock, sizeof(lock), "SELECT pg_advisory_lock(%d)", CLUSTER_LOCK_SCHEMA);
	snprintf(unlock, sizeof(unlock), "SELECT pg_advisory_unlock(%d)", CLUSTER_LOCK_SCHEMA);
	int r = schema_step(c, lock, err);
	if (r < 0)
		return r;
	r = schema_step(c, CLUSTER_SCHEMA_SQL, err);
	int u = schema_step(c, unlock, err);
	return r < 0 ? r : u;
}

int front_pg_init(const char *conninfo, struct al_error *err)
{
	pool_conninfo = conninfo;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pool_cond, &ca);
	pthread_condattr_destroy(&ca);
	PGconn *c = PQconnectdb(conninfo);
	if (PQstatus(c) != CONNECTION_OK) {
		al_error_set(err, AL_ERR_UNAVAILABLE, EIO, "cannot connect to the cluster database (--cluster-db): %s",
		             PQerrorMessage(c));
		err->message[strcspn(err->message, "\n")] = '\0';
		PQfinish(c);
		return -EIO;
	}
	int r = schema_create(c, err);
	if (r < 0) {
		PQfinish(c);
		return r;
	}
	open_n = 1;
	pool_give(c);
	return 0;
}
