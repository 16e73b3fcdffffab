/* SPDX-License-Identifier: Apache-2.0 */
#include "snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "store-db.h"
#include "store.h"
#include "util.h"

static struct db_conn snap_db = DB_CONN_INIT("snapshots");
static char *snapshots_root;

static const char schema[] = "CREATE TABLE IF NOT EXISTS snapshots ("
                             " id TEXT PRIMARY KEY, name TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
                             " tenant TEXT NOT NULL, template TEXT NOT NULL, vcpus INTEGER NOT NULL,"
                             " memory_mib INTEGER NOT NULL, backend TEXT NOT NULL, kernel_sha TEXT NOT NULL,"
                             " initrd_sha TEXT NOT NULL, memory_sha TEXT NOT NULL, disk_sha TEXT NOT NULL,"
                             " created_ms INTEGER NOT NULL, size_bytes INTEGER NOT NULL,"
                             " generation INTEGER NOT NULL, internal INTEGER NOT NULL,"
                             " state_sha TEXT NOT NULL DEFAULT '');";

/* A store made before a column existed gets it: state_sha (empty: the
 * snapshot keeps no device state apart), accel and cpu (empty: not known,
 * any accelerator is tried). */
static int add_column(sqlite3 *db, const char *column, struct al_error *err)
{
	sqlite3_stmt *st = NULL;
	bool has = false;
	if (sqlite3_prepare_v2(db, "PRAGMA table_info(snapshots)", -1, &st, NULL) != SQLITE_OK)
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "state store: %s", sqlite3_errmsg(db));
	while (sqlite3_step(st) == SQLITE_ROW) {
		const unsigned char *name = sqlite3_column_text(st, 1);
		has |= name && !strcmp((const char *)name, column);
	}
	sqlite3_finalize(st);
	char *msg = NULL;
	cleanup_free char *sql = xasprintf("ALTER TABLE snapshots ADD COLUMN %s TEXT NOT NULL DEFAULT ''", column);
	if (!has && sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		int r =
		    al_error_set(err, AL_ERR_INTERNAL, EIO, "state store: snapshots.%s: %s", column, msg ? msg : "?");
		sqlite3_free(msg);
		return r;
	}
	return 0;
}

int snapshots_init(struct store *s, const char *state_dir, struct al_error *err)
{
	sqlite3 *db = store_db(s);
	free(snapshots_root);
	snapshots_root = xasprintf("%s/snapshots", state_dir);
	int r = mkdir_p(snapshots_root, 0700);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot create %s: %s", snapshots_root, strerror(-r));
	char *msg = NULL;
	if (sqlite3_exec(db, schema, NULL, NULL, &msg) != SQLITE_OK) {
		r = al_error_set(err, AL_ERR_INTERNAL, EIO, "state store: snapshots table: %s", msg ? msg : "?");
		sqlite3_free(msg);
		return r;
	}
	if ((r = add_column(db, "state_sha", err)) < 0 || (r = add_column(db, "accel", err)) < 0 ||
	    (r = add_column(db, "cpu", err)) < 0)
		return r;
	db_conn_set(&snap_db, db);
	return 0;
}

void snapshots_shutdown(void)
{
	db_conn_set(&snap_db, NULL);
}

const char *snapshot_disk_name(enum snapshot_disk_kind kind)
{
	return kind == SNAPSHOT_DISK_WHOLE ? SNAPSHOT_DISK_RAW : SNAPSHOT_DISK;
}

bool snapshot_id_valid(const char *id)
{
	if (strlen(id) != 21 || strncmp(id, "snap-", 5))
		return false;
	for (size_t i = 5; i < 21; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	return true;
}

bool snapshot_name_valid(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > SNAPSHOT_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			return false;
	return true;
}

void snapshot_new_id(char out[SNAPSHOT_ID_MAX + 1])
{
	uint8_t b[8];
	char hex[17];
	random_bytes(b, sizeof(b));
	hex_encode(b, sizeof(b), hex);
	snprintf(out, SNAPSHOT_ID_MAX + 1, "snap-%s", hex);
}

char *snapshot_dir(const char *id)
{
	return xasprintf("%s/%s", snapshots_root, id);
}

static void bind_info(sqlite3_stmt *st, const struct snapshot_info *i)
{
	sqlite3_bind_text(st, 1, i->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, i->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, i->sandbox_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, i->tenant, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, i->template_name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, i->vcpus);
	sqlite3_bind_int64(st, 7, i->memory_mib);
	sqlite3_bind_text(st, 8, i->backend, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 9, i->kernel_sha, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 10, i->initrd_sha, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 11, i->memory_sha, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 12, i->disk_sha, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 13, (sqlite3_int64)i->created_ms);
	sqlite3_bind_int64(st, 14, (sqlite3_int64)i->size_bytes);
	sqlite3_bind_int64(st, 15, (sqlite3_int64)i->generation);
	sqlite3_bind_int(st, 16, i->internal);
	sqlite3_bind_text(st, 17, i->state_sha, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 18, i->accel, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 19, i->cpu, -1, SQLITE_STATIC);
}

static void copy_col(sqlite3_stmt *st, int col, char *dst, size_t size)
{
	const unsigned char *t = sqlite3_column_text(st, col);
	strlcpy_al(dst, t ? (const char *)t : "", size);
}

static void row_to_info(sqlite3_stmt *st, struct snapshot_info *i)
{
	*i = (struct snapshot_info){0};
	copy_col(st, 0, i->id, sizeof(i->id));
	copy_col(st, 1, i->name, sizeof(i->name));
	copy_col(st, 2, i->sandbox_id, sizeof(i->sandbox_id));
	copy_col(st, 3, i->tenant, sizeof(i->tenant));
	copy_col(st, 4, i->template_name, sizeof(i->template_name));
	i->vcpus = (unsigned)sqlite3_column_int64(st, 5);
	i->memory_mib = (unsigned)sqlite3_column_int64(st, 6);
	copy_col(st, 7, i->backend, sizeof(i->backend));
	copy_col(st, 8, i->kernel_sha, sizeof(i->kernel_sha));
	copy_col(st, 9, i->initrd_sha, sizeof(i->initrd_sha));
	copy_col(st, 10, i->memory_sha, sizeof(i->memory_sha));
	copy_col(st, 11, i->disk_sha, sizeof(i->disk_sha));
	i->created_ms = (uint64_t)sqlite3_column_int64(st, 12);
	i->size_bytes = (uint64_t)sqlite3_column_int64(st, 13);
	i->generation = (uint64_t)sqlite3_column_int64(st, 14);
	i->internal = sqlite3_column_int(st, 15) != 0;
	copy_col(st, 16, i->state_sha, sizeof(i->state_sha));
	copy_col(st, 17, i->accel, sizeof(i->accel));
	copy_col(st, 18, i->cpu, sizeof(i->cpu));
}

#define COLUMNS                                                                                                        \
	"id, name, sandbox_id, tenant, template, vcpus, memory_mib, backend, kernel_sha, initrd_sha, memory_sha,"      \
	" disk_sha, created_ms, size_bytes, generation, internal, state_sha, accel, cpu"

int snapshot_insert(const struct snapshot_info *info, struct al_error *err)
{
	cleanup_db_query struct db_query q = {0};
	int r = db_query_prepare(&snap_db,
	                         "INSERT INTO snapshots (" COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9,"
	                         " ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
	                         "record a snapshot", &q, err);
	if (r < 0)
		return r;
	bind_info(q.stmt, info);
	if (sqlite3_step(q.stmt) != SQLITE_DONE)
		return db_query_error(&q, err);
	return 0;
}

int snapshot_get(const char *id, const char *tenant, struct snapshot_info *ret, struct al_error *err)
{
	if (!snapshot_id_valid(id))
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "no snapshot with id \"%.64s\"", id);
	cleanup_db_query struct db_query q = {0};
	int r = db_query_prepare(&snap_db, "SELECT " COLUMNS " FROM snapshots WHERE id=?1", "get a snapshot", &q, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(q.stmt, 1, id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(q.stmt);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return db_query_error(&q, err);
	if (rc == SQLITE_ROW)
		row_to_info(q.stmt, ret);
	if (rc != SQLITE_ROW || (tenant && strcmp(tenant, ret->tenant)))
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "no snapshot with id \"%.64s\"", id);
	return 0;
}

int snapshot_list(const char *tenant, const char *sandbox_id, struct snapshot_info **ret, size_t *ret_n,
                  struct al_error *err)
{
	cleanup_db_query struct db_query q = {0};
	int r = db_query_prepare(&snap_db,
	                         "SELECT " COLUMNS " FROM snapshots WHERE internal=0 AND (?1 IS NULL OR tenant=?1)"
	                         " AND (?2 IS NULL OR sandbox_id=?2) ORDER BY created_ms DESC, id",
	                         "list snapshots", &q, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = q.stmt;
	if (tenant)
		sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
	if (sandbox_id)
		sqlite3_bind_text(st, 2, sandbox_id, -1, SQLITE_STATIC);
	size_t n = 0, cap = 8;
	struct snapshot_info *v = xcalloc(cap, sizeof(*v));
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap)
			v = xrealloc(v, (cap *= 2) * sizeof(*v));
		row_to_info(st, &v[n++]);
	}
	if (rc != SQLITE_DONE) {
		free(v); /* snapshot_info holds no pointers */
		return db_query_error(&q, err);
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

int snapshot_delete(const char *id, const char *tenant, struct al_error *err)
{
	struct snapshot_info info;
	int r = snapshot_get(id, tenant, &info, err);
	if (r < 0)
		return r;
	/* Files first: a record without files is reported by verify; files
	 * without a record would leak space nobody sees. */
	cleanup_free char *dir = snapshot_dir(id);
	if ((r = rm_rf(dir)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot remove %s: %s", dir, strerror(-r));
	cleanup_db_query struct db_query q = {0};
	if ((r = db_query_prepare(&snap_db, "DELETE FROM snapshots WHERE id=?1", "delete a snapshot", &q, err)) < 0)
		return r;
	sqlite3_bind_text(q.stmt, 1, id, -1, SQLITE_STATIC);
	if (sqlite3_step(q.stmt) != SQLITE_DONE)
		return db_query_error(&q, err);
	return 0;
}

/* The ids of the internal snapshots (*ret_n of them). */
static int internal_ids(char (**ret)[SNAPSHOT_ID_MAX + 1], size_t *ret_n, struct al_error *err)
{
	cleanup_db_query struct db_query q = {0};
	int r = db_query_prepare(&snap_db, "SELECT id FROM snapshots WHERE internal!=0", "list forks", &q, err);
	if (r < 0)
		return r;
	size_t n = 0, cap = 4;
	char(*v)[SNAPSHOT_ID_MAX + 1] = xcalloc(cap, sizeof(*v));
	int rc;
	while ((rc = sqlite3_step(q.stmt)) == SQLITE_ROW) {
		if (n == cap)
			v = xrealloc(v, (cap *= 2) * sizeof(*v));
		strlcpy_al(v[n++], (const char *)sqlite3_column_text(q.stmt, 0) ?: "", sizeof(*v));
	}
	if (rc != SQLITE_DONE) {
		free(v);
		return db_query_error(&q, err);
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

/* Whether a directory named `name` under snapshots/ belongs to no record:
 * a *.tmp, or a snapshot id the store does not know (a store error keeps it). */
static bool dir_unowned(const char *name)
{
	size_t n = strlen(name);
	if (n > 4 && !strcmp(name + n - 4, ".tmp"))
		return true;
	struct snapshot_info info;
	struct al_error e = {0};
	return snapshot_id_valid(name) && snapshot_get(name, NULL, &info, &e) < 0 && e.code == AL_ERR_NOT_FOUND;
}

int snapshot_sweep(unsigned *ret_forks, unsigned *ret_dirs, struct al_error *err)
{
	char(*ids)[SNAPSHOT_ID_MAX + 1] = NULL;
	size_t n = 0;
	int r = internal_ids(&ids, &n, err);
	if (r < 0)
		return r;
	unsigned forks = 0, dirs = 0;
	for (size_t i = 0; i < n && r == 0; i++)
		if ((r = snapshot_delete(ids[i], NULL, err)) == 0)
			forks++;
	free(ids);
	if (r < 0)
		return r;
	DIR *d = opendir(snapshots_root);
	if (!d)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot read %s: %m", snapshots_root);
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && dir_unowned(de->d_name)) {
			cleanup_free char *p = xasprintf("%s/%s", snapshots_root, de->d_name);
			if (rm_rf(p) == 0)
				dirs++;
		}
	closedir(d);
	*ret_forks = forks;
	*ret_dirs = dirs;
	return 0;
}

int snapshot_tenant_bytes(const char *tenant, uint64_t *ret, struct al_error *err)
{
	cleanup_db_query struct db_query q = {0};
	int r = db_query_prepare(&snap_db, "SELECT COALESCE(SUM(size_bytes),0) FROM snapshots WHERE tenant=?1",
	                         "sum a tenant's snapshots", &q, err);
	if (r < 0)
		return r;
	sqlite3_bind_text(q.stmt, 1, tenant, -1, SQLITE_STATIC);
	if (sqlite3_step(q.stmt) != SQLITE_ROW)
		return db_query_error(&q, err);
	*ret = (uint64_t)sqlite3_column_int64(q.stmt, 0);
	return 0;
}

int snapshot_verify(const struct snapshot_info *info, enum snapshot_disk_kind disk, struct al_error *err)
{
	cleanup_free char *dir = snapshot_dir(info->id);
	const struct {
		const char *file;
		const char *want;
	} files[] = {{SNAPSHOT_MEMORY, info->memory_sha},
	             {snapshot_disk_name(disk), info->disk_sha},
	             {info->state_sha[0] ? SNAPSHOT_STATE : NULL, info->state_sha}};
	for (size_t i = 0; i < ARRAY_SIZE(files) && files[i].file; i++) {
		cleanup_free char *path = xasprintf("%s/%s", dir, files[i].file);
		char got[65];
		int r = file_sha256(path, got);
		if (r < 0)
			return al_error_set(err, AL_ERR_CONFLICT, -r, "snapshot %s is damaged: %s: %s", info->id,
			                    files[i].file, strerror(-r));
		/* SECURITY: a snapshot whose files changed is never loaded into a VMM. */
		if (strcmp(got, files[i].want))
			return al_error_set(err, AL_ERR_CONFLICT, EBADMSG,
			                    "snapshot %s failed its digest check (%s changed since it was taken); it "
			                    "cannot be restored",
			                    info->id, files[i].file);
	}
	return 0;
}

json_t *snapshot_to_json(const struct snapshot_info *i)
{
	char created[32];
	format_time_rfc3339(i->created_ms, created);
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:s, s:I, s:I, s:{s:s, s:s, s:s, s:s}}", "id",
	                      i->id, "name", i->name, "sandbox_id", i->sandbox_id, "tenant", i->tenant, "template",
	                      i->template_name, "vcpus", (json_int_t)i->vcpus, "memory_mib", (json_int_t)i->memory_mib,
	                      "backend", i->backend, "created_at", created, "size_bytes", (json_int_t)i->size_bytes,
	                      "generation", (json_int_t)i->generation, "digests", "memory", i->memory_sha, "disk",
	                      i->disk_sha, "kernel", i->kernel_sha, "initramfs", i->initrd_sha);
	json_object_set_new(o, "accel", i->accel[0] ? json_string(i->accel) : json_null());
	json_object_set_new(o, "cpu", i->cpu[0] ? json_string(i->cpu) : json_null());
	/* The device state a backend keeps beside the memory. */
	if (i->state_sha[0])
		json_object_set_new(json_object_get(o, "digests"), "state", json_string(i->state_sha));
	return o;
}
