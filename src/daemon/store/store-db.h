/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Access to the state store's SQLite connection for the modules that keep
 * their own tables in it (auth, secrets, snapshots) and for the store itself.
 *
 * A `struct db_conn` is a module's handle on the connection: set by its init,
 * cleared by its shutdown. `life` is read-held while the connection is in use
 * and write-held to set or clear it, so that shutdown waits for users. A
 * `struct db_query` is one statement on a held connection: it also holds the
 * connection's mutex, so that a sequence of calls (step, changes, errmsg) is
 * not interleaved with another thread's. Never call events_emit() while
 * holding one (events takes its locks first).
 */
#ifndef AIRLOCK_STORE_DB_H
#define AIRLOCK_STORE_DB_H

#include <pthread.h>
#include <sqlite3.h>

#include "error.h"

struct db_conn {
	pthread_rwlock_t life;
	sqlite3 *db;      /* NULL before init and after shutdown */
	const char *what; /* what is unavailable without it: "secrets" */
};
#define DB_CONN_INIT(what_)                                                                                            \
	{                                                                                                              \
		.life = PTHREAD_RWLOCK_INITIALIZER, .what = (what_)                                                    \
	}

/* Sets (or with NULL clears) the connection, after the current users are done. */
void db_conn_set(struct db_conn *c, sqlite3 *db);
/* The error for a connection that is cleared: the daemon is shutting down. */
int db_conn_closed(const struct db_conn *c, struct al_error *err);

struct db_query {
	struct db_conn *conn; /* NULL: nothing held */
	sqlite3_stmt *stmt;
	const char *what; /* "list tokens": names the query in its errors */
};

/* Takes c (read) and its mutex and prepares sql. On failure nothing is held. */
int db_query_prepare(struct db_conn *c, const char *sql, const char *what, struct db_query *ret, struct al_error *err);
/* "state store: <what>: <SQLite's message>" (call before the query finishes). */
int db_query_error(const struct db_query *q, struct al_error *err);
/* Finalizes the statement and lets go of the connection; accepts a zeroed q. */
void db_query_finish(struct db_query *q);
#define cleanup_db_query __attribute__((cleanup(db_query_finish)))

/* "state store: <what>: <SQLite's message>". */
int db_error(sqlite3 *db, const char *what, struct al_error *err);
/* A statement on db; on failure err says what. */
int db_prepare(sqlite3 *db, const char *sql, const char *what, sqlite3_stmt **ret, struct al_error *err);
/* Runs SQL without results (a schema); on failure "cannot <what>: <message>". */
int db_exec(sqlite3 *db, const char *sql, const char *what, struct al_error *err);
/* Column i as text; "" for NULL. */
const char *db_column_text(sqlite3_stmt *st, int i);

static inline void db_stmt_finalizep(sqlite3_stmt **st)
{
	sqlite3_finalize(*st); /* accepts NULL */
}
#define cleanup_stmt __attribute__((cleanup(db_stmt_finalizep)))

#endif
