/* SPDX-License-Identifier: Apache-2.0 */
#include "store-db.h"

#include "util.h"

void db_conn_set(struct db_conn *c, sqlite3 *db)
{
	pthread_rwlock_wrlock(&c->life);
	c->db = db;
	pthread_rwlock_unlock(&c->life);
}

int db_conn_closed(const struct db_conn *c, struct al_error *err)
{
	return al_error_set(err, AL_ERR_UNAVAILABLE, ESHUTDOWN, "%s are unavailable: the daemon is shutting down",
	                    c->what);
}

int db_error(sqlite3 *db, const char *what, struct al_error *err)
{
	return al_error_set(err, AL_ERR_INTERNAL, EIO, "state store: %s: %s", what, sqlite3_errmsg(db));
}

int db_prepare(sqlite3 *db, const char *sql, const char *what, sqlite3_stmt **ret, struct al_error *err)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return db_error(db, what, err);
	*ret = st;
	return 0;
}

int db_exec(sqlite3 *db, const char *sql, const char *what, struct al_error *err)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
	if (rc == SQLITE_OK)
		return 0;
	int r = al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot %s: %s", what, msg ? msg : sqlite3_errstr(rc));
	sqlite3_free(msg);
	return r;
}

const char *db_column_text(sqlite3_stmt *st, int i)
{
	const unsigned char *t = sqlite3_column_text(st, i);
	return t ? (const char *)t : "";
}

int db_query_prepare(struct db_conn *c, const char *sql, const char *what, struct db_query *ret, struct al_error *err)
{
	pthread_rwlock_rdlock(&c->life);
	if (!c->db) {
		pthread_rwlock_unlock(&c->life);
		return db_conn_closed(c, err);
	}
	struct db_query q = {.conn = c, .what = what};
	sqlite3_mutex_enter(sqlite3_db_mutex(c->db));
	int r = db_prepare(c->db, sql, what, &q.stmt, err);
	if (r < 0) {
		db_query_finish(&q);
		return r;
	}
	*ret = q;
	return 0;
}

int db_query_error(const struct db_query *q, struct al_error *err)
{
	return db_error(q->conn->db, q->what, err);
}

void db_query_finish(struct db_query *q)
{
	if (!q->conn)
		return;
	sqlite3_finalize(q->stmt);
	sqlite3_mutex_leave(sqlite3_db_mutex(q->conn->db));
	pthread_rwlock_unlock(&q->conn->life);
	*q = (struct db_query){0};
}
