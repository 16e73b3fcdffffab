/* SPDX-License-Identifier: Apache-2.0 */
#include "cluster-db.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

void cdb_init(struct cluster_db *db, const char *conninfo, const char *what)
{
	*db = (struct cluster_db){.conninfo = conninfo, .what = what};
	pthread_mutex_init(&db->lock, NULL);
}

void cdb_close(struct cluster_db *db)
{
	pthread_mutex_lock(&db->lock);
	if (db->conn)
		PQfinish(db->conn);
	db->conn = NULL;
	pthread_mutex_unlock(&db->lock);
}

static int cdb_connect(struct cluster_db *db, struct al_error *err)
{
	/* The conninfo may be a URL or key=value pairs; the timeouts come
	 * after it as separate keywords so that either form keeps them. */
	const char *keys[] = {"dbname", "connect_timeout", "application_name", "options", NULL};
	const char *vals[] = {db->conninfo, "5", "airlockd", "-c statement_timeout=3000", NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);
	if (!c || PQstatus(c) != CONNECTION_OK) {
		char msg[256];
		strlcpy_al(msg, c ? PQerrorMessage(c) : "out of memory", sizeof(msg));
		msg[strcspn(msg, "\n")] = '\0';
		if (c)
			PQfinish(c);
		return al_error_set(err, AL_ERR_UNAVAILABLE, ECONNREFUSED,
		                    "cluster database (%s): cannot connect: %s (airlockd --cluster-db)", db->what, msg);
	}
	db->conn = c;
	return 0;
}

int cdb_exec(struct cluster_db *db, const char *sql, int n, const char *const *params, PGresult **ret,
             struct al_error *err)
{
	int r;
	if (!db->conn && (r = cdb_connect(db, err)) < 0)
		return r;
	/* Without parameters, a script of several statements (the schema). */
	PGresult *res = n ? PQexecParams(db->conn, sql, n, NULL, params, NULL, NULL, 0) : PQexec(db->conn, sql);
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
		*ret = res;
		return 0;
	}
	char msg[256];
	strlcpy_al(msg, res ? PQresultErrorMessage(res) : PQerrorMessage(db->conn), sizeof(msg));
	msg[strcspn(msg, "\n")] = '\0';
	if (res)
		PQclear(res);
	bool broken = PQstatus(db->conn) != CONNECTION_OK;
	if (broken) {
		PQfinish(db->conn);
		db->conn = NULL;
	}
	return al_error_set(err, broken ? AL_ERR_UNAVAILABLE : AL_ERR_INTERNAL, broken ? ECONNRESET : EIO,
	                    "cluster database (%s): %s", db->what, msg);
}

int cdb_rows(PGresult *res)
{
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		return PQntuples(res);
	const char *t = PQcmdTuples(res);
	return t && *t ? (int)strtol(t, NULL, 10) : 0;
}
