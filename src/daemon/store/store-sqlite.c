/* SPDX-License-Identifier: Apache-2.0 */
#include "store.h"

#include "store-db.h"
#include "util.h"

struct store {
	sqlite3 *db;
	struct db_conn conn; /* db, for the queries: one at a time, until store_close() */
};

static const char *const state_names[SANDBOX_STATE_COUNT] = {
    [SANDBOX_CREATING] = "creating", [SANDBOX_RUNNING] = "running",
    [SANDBOX_STOPPING] = "stopping", [SANDBOX_STOPPED] = "stopped",
    [SANDBOX_ERROR] = "error",       [SANDBOX_DELETED] = "deleted",
    [SANDBOX_PAUSED] = "paused",     [SANDBOX_SNAPSHOTTING] = "snapshotting",
};

const char *sandbox_state_name(enum sandbox_state s)
{
	return (unsigned)s < SANDBOX_STATE_COUNT ? state_names[s] : "unknown";
}

int sandbox_state_from_name(const char *name, enum sandbox_state *ret)
{
	for (unsigned i = 0; i < SANDBOX_STATE_COUNT; i++)
		if (!strcmp(name, state_names[i])) {
			*ret = (enum sandbox_state)i;
			return 0;
		}
	return -EINVAL;
}

void sandbox_record_release(struct sandbox_record *r)
{
	free(r->env_json);
	free(r->metadata_json);
	free(r->network_json);
	free(r->secrets_json);
	free(r->error);
	r->env_json = r->metadata_json = r->error = r->network_json = r->secrets_json = NULL;
}

void sandbox_record_copy(struct sandbox_record *dst, const struct sandbox_record *src)
{
	*dst = *src;
	dst->env_json = src->env_json ? xstrdup(src->env_json) : NULL;
	dst->metadata_json = src->metadata_json ? xstrdup(src->metadata_json) : NULL;
	dst->network_json = src->network_json ? xstrdup(src->network_json) : NULL;
	dst->secrets_json = src->secrets_json ? xstrdup(src->secrets_json) : NULL;
	dst->error = src->error ? xstrdup(src->error) : NULL;
}

static const char schema[] = "CREATE TABLE IF NOT EXISTS sandboxes ("
                             " id TEXT PRIMARY KEY,"
                             " state TEXT NOT NULL,"
                             " template TEXT NOT NULL,"
                             " vcpus INTEGER NOT NULL,"
                             " memory_mib INTEGER NOT NULL,"
                             " env TEXT NOT NULL,"
                             " metadata TEXT NOT NULL,"
                             " backend TEXT NOT NULL,"
                             " accel TEXT NOT NULL,"
                             " created_ms INTEGER NOT NULL,"
                             " updated_ms INTEGER NOT NULL,"
                             " boot_ms INTEGER NOT NULL,"
                             " error TEXT,"
                             " vmm_pid INTEGER NOT NULL);"
                             "CREATE INDEX IF NOT EXISTS sandboxes_created ON sandboxes(created_ms);";

int store_open(const char *path, struct store **ret, struct al_error *err)
{
	struct store *s = xcalloc(1, sizeof(*s));
	s->conn = (struct db_conn)DB_CONN_INIT("sandboxes");
	int rc =
	    sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
	if (rc != SQLITE_OK) {
		int r = al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot open state store %s: %s", path,
		                     s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
		store_close(s);
		return r;
	}
	sqlite3_busy_timeout(s->db, 5000);
	char *msg = NULL;
	rc = sqlite3_exec(s->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, &msg);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(s->db, schema, NULL, NULL, &msg);
	if (rc == SQLITE_OK) {
		/* Databases from before tenants: add the column (an error just means it is there). */
		static const char *const added[] = {
		    "ALTER TABLE sandboxes ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default'",
		    "ALTER TABLE sandboxes ADD COLUMN timeout_s INTEGER NOT NULL DEFAULT 0",
		    "ALTER TABLE sandboxes ADD COLUMN on_timeout TEXT NOT NULL DEFAULT 'kill'",
		    "ALTER TABLE sandboxes ADD COLUMN idle_timeout_s INTEGER NOT NULL DEFAULT 0",
		    "ALTER TABLE sandboxes ADD COLUMN run_ms INTEGER NOT NULL DEFAULT 0",
		    "ALTER TABLE sandboxes ADD COLUMN running_since_ms INTEGER NOT NULL DEFAULT 0",
		    "ALTER TABLE sandboxes ADD COLUMN network TEXT NOT NULL DEFAULT '{\"allow\":[],\"deny\":[]}'",
		    "ALTER TABLE sandboxes ADD COLUMN secrets TEXT NOT NULL DEFAULT '[]'",
		    "ALTER TABLE sandboxes ADD COLUMN ca_bundle TEXT NOT NULL DEFAULT ''",
		    "ALTER TABLE sandboxes ADD COLUMN disk_mib INTEGER NOT NULL DEFAULT 0",
		    "ALTER TABLE sandboxes ADD COLUMN jail_uid INTEGER NOT NULL DEFAULT 0",
		    "ALTER TABLE sandboxes ADD COLUMN boot_path TEXT NOT NULL DEFAULT ''",
		    "ALTER TABLE sandboxes ADD COLUMN cpu TEXT NOT NULL DEFAULT ''",
		    "ALTER TABLE sandboxes ADD COLUMN accel_reason TEXT NOT NULL DEFAULT ''",
		    "ALTER TABLE sandboxes ADD COLUMN fork_of TEXT NOT NULL DEFAULT ''",
		    "ALTER TABLE sandboxes ADD COLUMN guest_mac TEXT NOT NULL DEFAULT ''",
		    "ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0",
		    "ALTER TABLE sandboxes ADD COLUMN ports TEXT NOT NULL DEFAULT ''",
		};
		for (size_t i = 0; i < ARRAY_SIZE(added); i++)
			sqlite3_exec(s->db, added[i], NULL, NULL, NULL);
	}
	if (rc != SQLITE_OK) {
		int r = al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot initialise state store %s: %s", path,
		                     msg ? msg : sqlite3_errstr(rc));
		sqlite3_free(msg);
		store_close(s);
		return r;
	}
	db_conn_set(&s->conn, s->db);
	*ret = s;
	return 0;
}

void store_close(struct store *s)
{
	if (!s)
		return;
	db_conn_set(&s->conn, NULL); /* after the queries in progress */
	pthread_rwlock_destroy(&s->conn.life);
	sqlite3_close(s->db);
	free(s);
}

struct sqlite3 *store_db(struct store *s)
{
	return s->db;
}

/* Every column of a record after id, in the order of bind_record() and
 * row_to_record() (id is ?1 and column 0), and their parameters. */
#define RECORD_COLUMNS                                                                                                 \
	"state, template, vcpus, memory_mib, env, metadata, backend, accel, created_ms, updated_ms, boot_ms, error,"   \
	" vmm_pid, tenant, timeout_s, on_timeout, idle_timeout_s, run_ms, running_since_ms, network, secrets,"         \
	" ca_bundle, disk_mib, jail_uid, boot_path, cpu, accel_reason, fork_of,"                                       \
	" guest_mac, auto_resume, ports"
#define RECORD_PARAMS                                                                                                  \
	"?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24,"   \
	" ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32"

/* The ports column: "8000p,3000" (p: public), in the record's order. */
static void ports_format(const struct sandbox_record *r, char *out, size_t size)
{
	size_t o = 0;
	out[0] = 0;
	for (unsigned i = 0; i < r->n_ports && i < SANDBOX_RECORD_PORTS_MAX && o < size; i++)
		o += (size_t)snprintf(out + o, size - o, "%s%u%s", i ? "," : "", r->ports[i].port,
		                      r->ports[i].public_port ? "p" : "");
}

/* Its parse; what is not a port (1-65535) is skipped, as is what does not fit. */
static void ports_parse(const char *s, struct sandbox_record *r)
{
	r->n_ports = 0;
	while (*s && r->n_ports < SANDBOX_RECORD_PORTS_MAX) {
		char *end;
		unsigned long v = strtoul(s, &end, 10);
		bool pub = *end == 'p';
		if (pub)
			end++;
		if (end != s && v >= 1 && v <= 65535)
			r->ports[r->n_ports++] = (struct sandbox_port){.port = (uint16_t)v, .public_port = pub};
		s = *end == ',' ? end + 1 : end + strlen(end);
	}
}

static void bind_record(sqlite3_stmt *st, const struct sandbox_record *r)
{
	sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, sandbox_state_name(r->state), -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, r->template_name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, r->vcpus);
	sqlite3_bind_int64(st, 5, r->memory_mib);
	sqlite3_bind_text(st, 6, r->env_json ? r->env_json : "{}", -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 7, r->metadata_json ? r->metadata_json : "{}", -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 8, r->backend, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 9, r->accel, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 10, (sqlite3_int64)r->created_ms);
	sqlite3_bind_int64(st, 11, (sqlite3_int64)r->updated_ms);
	sqlite3_bind_int64(st, 12, r->boot_ms);
	if (r->error)
		sqlite3_bind_text(st, 13, r->error, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 13);
	sqlite3_bind_int64(st, 14, r->vmm_pid);
	sqlite3_bind_text(st, 15, r->tenant[0] ? r->tenant : "default", -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 16, r->timeout_s);
	sqlite3_bind_text(st, 17, r->on_timeout[0] ? r->on_timeout : "kill", -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 18, r->idle_timeout_s);
	sqlite3_bind_int64(st, 19, (sqlite3_int64)r->run_ms);
	sqlite3_bind_int64(st, 20, (sqlite3_int64)r->running_since_ms);
	sqlite3_bind_text(st, 21, r->network_json ? r->network_json : NETWORK_POLICY_EMPTY, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 22, r->secrets_json ? r->secrets_json : "[]", -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 23, r->ca_bundle, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 24, r->disk_mib);
	sqlite3_bind_int64(st, 25, r->jail_uid);
	sqlite3_bind_text(st, 26, r->boot_path, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 27, r->cpu, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 28, r->accel_reason, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 29, r->fork_of, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 30, r->guest_mac, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 31, r->auto_resume);
	char ports[SANDBOX_RECORD_PORTS_MAX * 8 + 1];
	ports_format(r, ports, sizeof(ports));
	sqlite3_bind_text(st, 32, ports, -1, SQLITE_TRANSIENT);
}

static int exec_write(struct store *s, const char *sql, const struct sandbox_record *r, const char *what,
                      struct al_error *err)
{
	cleanup_db_query struct db_query q = {0};
	int res = db_query_prepare(&s->conn, sql, what, &q, err);
	if (res < 0)
		return res;
	bind_record(q.stmt, r);
	int rc = sqlite3_step(q.stmt);
	if (rc == SQLITE_CONSTRAINT)
		return al_error_set(err, AL_ERR_CONFLICT, EEXIST, "state store: sandbox %s already exists", r->id);
	if (rc != SQLITE_DONE)
		return db_query_error(&q, err);
	if (sqlite3_changes(s->db) == 0)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "state store: no sandbox %s", r->id);
	return 0;
}

static void (*observer)(const struct sandbox_record *r);

void store_set_observer(void (*fn)(const struct sandbox_record *r))
{
	observer = fn;
}

int store_sandbox_insert(struct store *s, const struct sandbox_record *r, struct al_error *err)
{
	int rc = exec_write(s, "INSERT INTO sandboxes (id, " RECORD_COLUMNS ") VALUES (?1, " RECORD_PARAMS ")", r,
	                    "insert", err);
	if (rc == 0 && observer)
		observer(r);
	return rc;
}

int store_sandbox_update(struct store *s, const struct sandbox_record *r, struct al_error *err)
{
	int rc = exec_write(s, "UPDATE sandboxes SET (" RECORD_COLUMNS ") = (" RECORD_PARAMS ") WHERE id=?1", r,
	                    "update", err);
	if (rc == 0 && observer)
		observer(r);
	return rc;
}

static int row_to_record(sqlite3_stmt *st, struct sandbox_record *r)
{
	*r = (struct sandbox_record){0};
	strlcpy_al(r->id, db_column_text(st, 0), sizeof(r->id));
	if (sandbox_state_from_name(db_column_text(st, 1), &r->state) < 0)
		r->state = SANDBOX_ERROR;
	strlcpy_al(r->template_name, db_column_text(st, 2), sizeof(r->template_name));
	r->vcpus = (unsigned)sqlite3_column_int64(st, 3);
	r->memory_mib = (unsigned)sqlite3_column_int64(st, 4);
	r->env_json = xstrdup(db_column_text(st, 5));
	r->metadata_json = xstrdup(db_column_text(st, 6));
	strlcpy_al(r->backend, db_column_text(st, 7), sizeof(r->backend));
	strlcpy_al(r->accel, db_column_text(st, 8), sizeof(r->accel));
	r->created_ms = (uint64_t)sqlite3_column_int64(st, 9);
	r->updated_ms = (uint64_t)sqlite3_column_int64(st, 10);
	r->boot_ms = sqlite3_column_int64(st, 11);
	r->error = sqlite3_column_type(st, 12) == SQLITE_NULL ? NULL : xstrdup(db_column_text(st, 12));
	r->vmm_pid = sqlite3_column_int64(st, 13);
	strlcpy_al(r->tenant, db_column_text(st, 14), sizeof(r->tenant));
	r->timeout_s = (unsigned)sqlite3_column_int64(st, 15);
	strlcpy_al(r->on_timeout, db_column_text(st, 16), sizeof(r->on_timeout));
	r->idle_timeout_s = (unsigned)sqlite3_column_int64(st, 17);
	r->run_ms = (uint64_t)sqlite3_column_int64(st, 18);
	r->running_since_ms = (uint64_t)sqlite3_column_int64(st, 19);
	r->network_json =
	    xstrdup(sqlite3_column_type(st, 20) == SQLITE_NULL ? NETWORK_POLICY_EMPTY : db_column_text(st, 20));
	r->secrets_json = xstrdup(sqlite3_column_type(st, 21) == SQLITE_NULL ? "[]" : db_column_text(st, 21));
	strlcpy_al(r->ca_bundle, db_column_text(st, 22), sizeof(r->ca_bundle));
	r->disk_mib = (unsigned)sqlite3_column_int64(st, 23);
	r->jail_uid = (uint32_t)sqlite3_column_int64(st, 24);
	strlcpy_al(r->boot_path, db_column_text(st, 25), sizeof(r->boot_path));
	strlcpy_al(r->cpu, db_column_text(st, 26), sizeof(r->cpu));
	strlcpy_al(r->accel_reason, db_column_text(st, 27), sizeof(r->accel_reason));
	strlcpy_al(r->fork_of, db_column_text(st, 28), sizeof(r->fork_of));
	strlcpy_al(r->guest_mac, db_column_text(st, 29), sizeof(r->guest_mac));
	r->auto_resume = sqlite3_column_int64(st, 30) != 0;
	ports_parse(db_column_text(st, 31), r);
	return 0;
}

#define SELECT_COLUMNS "SELECT id, " RECORD_COLUMNS " FROM sandboxes"

int store_sandbox_get(struct store *s, const char *id, struct sandbox_record *ret, struct al_error *err)
{
	cleanup_db_query struct db_query q = {0};
	int r = db_query_prepare(&s->conn, SELECT_COLUMNS " WHERE id=?1", "get", &q, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(q.stmt, 1, id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(q.stmt);
	if (rc == SQLITE_DONE)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "no sandbox with id \"%s\"", id);
	if (rc != SQLITE_ROW)
		return db_query_error(&q, err);
	return row_to_record(q.stmt, ret);
}

int store_fork_finish(struct store *s, const char *snapshot_id, struct al_error *err)
{
	cleanup_db_query struct db_query q = {0};
	int r = db_query_prepare(&s->conn, "UPDATE sandboxes SET fork_of='' WHERE fork_of=?1", "fork", &q, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(q.stmt, 1, snapshot_id, -1, SQLITE_STATIC);
	return sqlite3_step(q.stmt) == SQLITE_DONE ? 0 : db_query_error(&q, err);
}

int store_sandbox_purge(struct store *s, const char *id, struct al_error *err)
{
	cleanup_db_query struct db_query q = {0};
	int r = db_query_prepare(&s->conn, "DELETE FROM sandboxes WHERE id=?1 AND state='deleted'", "purge", &q, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(q.stmt, 1, id, -1, SQLITE_STATIC);
	return sqlite3_step(q.stmt) == SQLITE_DONE ? 0 : db_query_error(&q, err);
}

int store_sandbox_list(struct store *s, bool include_deleted, struct sandbox_record **ret, size_t *ret_n,
                       struct al_error *err)
{
	const char *sql = include_deleted ? SELECT_COLUMNS " ORDER BY created_ms DESC, id"
	                                  : SELECT_COLUMNS " WHERE state != 'deleted' ORDER BY created_ms DESC, id";
	cleanup_db_query struct db_query q = {0};
	int r = db_query_prepare(&s->conn, sql, "list", &q, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = q.stmt;
	size_t n = 0, cap = 16;
	struct sandbox_record *v = xcalloc(cap, sizeof(*v));
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			cap *= 2;
			v = xrealloc(v, cap * sizeof(*v));
		}
		row_to_record(st, &v[n++]);
	}
	if (rc != SQLITE_DONE) {
		for (size_t i = 0; i < n; i++)
			sandbox_record_release(&v[i]);
		free(v);
		return db_query_error(&q, err);
	}
	*ret = v;
	*ret_n = n;
	return 0;
}
