/* SPDX-License-Identifier: Apache-2.0 */
/* One PostgreSQL connection of cluster mode (libpq), reconnected when it
 * breaks. Every statement is parameterized; every call is bounded by the
 * connection's statement_timeout and libpq's connect_timeout, so that a
 * database that went away costs a node its lease, not a hung thread. */
#ifndef AIRLOCK_CLUSTER_DB_H
#define AIRLOCK_CLUSTER_DB_H

#include <libpq-fe.h>
#include <pthread.h>

#include "error.h"

#define CLUSTER_DB_TIMEOUT_MS 3000 /* statement_timeout of each statement */

struct cluster_db {
	pthread_mutex_t lock; /* held by the caller around cdb_exec and what it reads of the result */
	PGconn *conn;         /* NULL until connected, or after a failure */
	const char *conninfo;
	const char *what; /* "lease", "index": names the connection in errors */
};

void cdb_init(struct cluster_db *db, const char *conninfo, const char *what);
void cdb_close(struct cluster_db *db);
/* Runs sql with n text parameters (NULL = SQL NULL). Connects first when
 * needed; a broken connection is dropped (the next call connects again).
 * *ret: the result of a statement that succeeded. AL_ERR_UNAVAILABLE when
 * the database cannot be reached. With db->lock held. */
int cdb_exec(struct cluster_db *db, const char *sql, int n, const char *const *params, PGresult **ret,
             struct al_error *err);
/* Rows a statement changed or returned. */
int cdb_rows(PGresult *res);

static inline void pgresult_clearp(PGresult **r)
{
	if (*r)
		PQclear(*r);
}
#define cleanup_pgresult __attribute__((cleanup(pgresult_clearp)))

#endif
