/* SPDX-License-Identifier: Apache-2.0 */
#include "secrets.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "events.h"
#include "json-cleanup.h"
#include "store-db.h"
#include "store.h"
#include "util.h"

#define SECRET_AAD_MAX (1 + TENANT_NAME_MAX + 1 + SECRET_NAME_MAX)

/* ------------------------------------------------------------ wiping */

void secret_wipe_free(void *p, size_t len)
{
	if (!p)
		return;
	explicit_bzero(p, len);
	free(p);
}

void secret_json_wipe(json_t *v)
{
	if (json_is_object(v)) {
		const char *k;
		json_t *m;
		json_object_foreach (v, k, m) {
			if (json_is_string(m) && (!strcmp(k, "value") || !strcmp(k, "key_pem")))
				/* jansson owns a private copy of the text: wipe it in place. */
				explicit_bzero((char *)json_string_value(m), json_string_length(m));
			else
				secret_json_wipe(m);
		}
	} else if (json_is_array(v)) {
		size_t i;
		json_t *m;
		json_array_foreach (v, i, m)
			secret_json_wipe(m);
	}
}

/* ------------------------------------------------------------ the host key */

static int key_create(const char *path, struct al_error *err)
{
	cleanup_free char *tmp = xasprintf("%s.tmp", path);
	unlink(tmp); /* a crash during an earlier creation */
	cleanup_close int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create the secrets key %s: %m", tmp);
	uint8_t key[SECRET_KEY_BYTES];
	random_bytes(key, sizeof(key));
	int r = fchmod(fd, 0600) < 0 ? -errno : write_full(fd, key, sizeof(key));
	explicit_bzero(key, sizeof(key));
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	/* link, not rename: never replace a key that appeared meanwhile. */
	if (r == 0 && link(tmp, path) < 0 && errno != EEXIST)
		r = -errno;
	unlink(tmp);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot write the secrets key %s: %s", path,
		                    strerror(-r));
	return 0;
}

int secret_key_load(const char *path, uint8_t ret_key[SECRET_KEY_BYTES], struct al_error *err)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		int r = key_create(path, err);
		if (r < 0)
			return r;
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open the secrets key %s: %m", path);
	cleanup_close int kfd = fd;
	struct stat st;
	if (fstat(kfd, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "secrets key %s: %m", path);
	/* SECURITY: whoever can read this file can read every secret in the
	 * store: it must be ours alone. */
	if (!S_ISREG(st.st_mode))
		return al_error_set(err, AL_ERR_INTERNAL, EPERM, "secrets key %s is not a regular file", path);
	if (st.st_uid != geteuid())
		return al_error_set(err, AL_ERR_INTERNAL, EPERM,
		                    "secrets key %s belongs to uid %u, not to airlockd's uid %u: chown it (or restore "
		                    "the right file)",
		                    path, (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & 07177)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM,
		                    "secrets key %s has mode %04o; it may be readable by others: chmod 600 it (and "
		                    "consider rotating the secrets it protects)",
		                    path, (unsigned)(st.st_mode & 07777));
	if (st.st_size != SECRET_KEY_BYTES)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM,
		                    "secrets key %s is %lld bytes, not %d: it is damaged (restore it from a backup; "
		                    "without it the stored secrets cannot be read)",
		                    path, (long long)st.st_size, SECRET_KEY_BYTES);
	uint8_t key[SECRET_KEY_BYTES];
	ssize_t n = read_full(kfd, key, sizeof(key));
	if (n != SECRET_KEY_BYTES) {
		explicit_bzero(key, sizeof(key));
		return al_error_set(err, AL_ERR_INTERNAL, n < 0 ? (int)-n : EIO, "cannot read the secrets key %s",
		                    path);
	}
	memcpy(ret_key, key, sizeof(key));
	explicit_bzero(key, sizeof(key));
	return 0;
}

/* ------------------------------------------------------------ AES-256-GCM */

static size_t aad_build(const char *tenant, const char *name, uint8_t out[SECRET_AAD_MAX])
{
	size_t tl = strnlen(tenant, TENANT_NAME_MAX), nl = strnlen(name, SECRET_NAME_MAX);
	out[0] = SECRET_BLOB_VERSION;
	memcpy(out + 1, tenant, tl);
	out[1 + tl] = '\0';
	memcpy(out + 2 + tl, name, nl);
	return 2 + tl + nl;
}

static void ctx_freep(EVP_CIPHER_CTX **c)
{
	EVP_CIPHER_CTX_free(*c);
}
#define cleanup_cipher __attribute__((cleanup(ctx_freep)))

int secret_encrypt(const uint8_t key[SECRET_KEY_BYTES], const char *tenant, const char *name, const void *plain,
                   size_t len, uint8_t **ret_blob, size_t *ret_len)
{
	if (len > POLICY_SECRET_VALUE_MAX)
		return -E2BIG;
	uint8_t aad[SECRET_AAD_MAX];
	size_t aad_len = aad_build(tenant, name, aad);
	size_t total = 1 + SECRET_NONCE_BYTES + len + SECRET_TAG_BYTES;
	uint8_t *blob = xmalloc(total);
	blob[0] = SECRET_BLOB_VERSION;
	uint8_t *nonce = blob + 1, *ct = nonce + SECRET_NONCE_BYTES, *tag = ct + len;
	random_bytes(nonce, SECRET_NONCE_BYTES);
	cleanup_cipher EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int n = 0, fin = 0;
	if (!c || EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
	    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, SECRET_NONCE_BYTES, NULL) != 1 ||
	    EVP_EncryptInit_ex(c, NULL, NULL, key, nonce) != 1 ||
	    EVP_EncryptUpdate(c, NULL, &n, aad, (int)aad_len) != 1 ||
	    EVP_EncryptUpdate(c, ct, &n, plain, (int)len) != 1 || EVP_EncryptFinal_ex(c, ct + n, &fin) != 1 ||
	    (size_t)(n + fin) != len || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, SECRET_TAG_BYTES, tag) != 1) {
		free(blob);
		return -EIO;
	}
	*ret_blob = blob;
	*ret_len = total;
	return 0;
}

int secret_decrypt(const uint8_t key[SECRET_KEY_BYTES], const char *tenant, const char *name, const uint8_t *blob,
                   size_t blob_len, char **ret_plain, size_t *ret_len)
{
	if (blob_len < 1 + SECRET_NONCE_BYTES + SECRET_TAG_BYTES || blob[0] != SECRET_BLOB_VERSION ||
	    blob_len - (1 + SECRET_NONCE_BYTES + SECRET_TAG_BYTES) > POLICY_SECRET_VALUE_MAX)
		return -EBADMSG;
	size_t len = blob_len - (1 + SECRET_NONCE_BYTES + SECRET_TAG_BYTES);
	uint8_t aad[SECRET_AAD_MAX];
	size_t aad_len = aad_build(tenant, name, aad);
	const uint8_t *nonce = blob + 1, *ct = nonce + SECRET_NONCE_BYTES, *tag = ct + len;
	uint8_t tagcopy[SECRET_TAG_BYTES];
	memcpy(tagcopy, tag, sizeof(tagcopy));
	char *plain = xmalloc(len + 1);
	cleanup_cipher EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int n = 0, fin = 0;
	if (!c || EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
	    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, SECRET_NONCE_BYTES, NULL) != 1 ||
	    EVP_DecryptInit_ex(c, NULL, NULL, key, nonce) != 1 ||
	    EVP_DecryptUpdate(c, NULL, &n, aad, (int)aad_len) != 1 ||
	    EVP_DecryptUpdate(c, (uint8_t *)plain, &n, ct, (int)len) != 1 ||
	    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, SECRET_TAG_BYTES, tagcopy) != 1 ||
	    EVP_DecryptFinal_ex(c, (uint8_t *)plain + n, &fin) != 1 || (size_t)(n + fin) != len) {
		/* SECURITY: nothing of an unauthenticated plaintext leaves. */
		secret_wipe_free(plain, len + 1);
		return -EBADMSG;
	}
	plain[len] = '\0';
	*ret_plain = plain;
	*ret_len = len;
	return 0;
}

/* ------------------------------------------------------------ requests */

void secret_request_release(struct secret_request *r)
{
	secret_wipe_free(r->value, r->value_len);
	free(r->spec_json);
	*r = (struct secret_request){0};
}

/* ------------------------------------------------------------ the store */

/* The state store's connection (store-db.h). Its `life` also guards the host
 * key: both are set by secrets_init() and cleared by secrets_shutdown(). */
static struct db_conn secrets_db = DB_CONN_INIT("secrets");
static uint8_t *host_key; /* SECRET_KEY_BYTES in a locked page, never in a core dump */
static const struct secret_rows sqlite_rows;
static const struct secret_rows *rows = &sqlite_rows; /* or cluster mode's (secrets_use_rows) */
static size_t key_page;

static const char schema[] = "CREATE TABLE IF NOT EXISTS secrets ("
                             " tenant TEXT NOT NULL,"
                             " name TEXT NOT NULL,"
                             " id TEXT NOT NULL UNIQUE,"
                             " spec TEXT NOT NULL,"
                             " value BLOB NOT NULL,"
                             " created_ms INTEGER NOT NULL,"
                             " updated_ms INTEGER NOT NULL,"
                             " PRIMARY KEY (tenant, name));";

int secrets_init(struct store *s, const char *state_dir, struct al_error *err)
{
	sqlite3 *db = store_db(s);
	int r = db_exec(db, schema, "create the secrets table", err);
	if (r < 0)
		return r;
	long page = sysconf(_SC_PAGESIZE);
	size_t size = page > 0 ? (size_t)page : 4096;
	uint8_t *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot map memory for the secrets key: %m");
	/* Best effort: not swapped out, not in a core dump. */
	mlock(mem, size);
	madvise(mem, size, MADV_DONTDUMP);
	cleanup_free char *path = xasprintf("%s/%s", state_dir, SECRET_KEY_FILE);
	r = secret_key_load(path, mem, err);
	if (r < 0) {
		explicit_bzero(mem, size);
		munmap(mem, size);
		return r;
	}
	pthread_rwlock_wrlock(&secrets_db.life);
	secrets_db.db = db;
	host_key = mem;
	key_page = size;
	pthread_rwlock_unlock(&secrets_db.life);
	return 0;
}

int secret_key_mac(const char *purpose, const char *a, const char *b, uint8_t ret[SECRET_MAC_BYTES])
{
	size_t lp = strlen(purpose), la = strlen(a), lb = strlen(b);
	cleanup_free uint8_t *msg = xmalloc(lp + la + lb + 2);
	memcpy(msg, purpose, lp + 1);
	memcpy(msg + lp + 1, a, la + 1);
	memcpy(msg + lp + la + 2, b, lb);
	pthread_rwlock_rdlock(&secrets_db.life);
	int r = -ENOTCONN;
	size_t n = 0;
	if (host_key &&
	    EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, host_key, SECRET_KEY_BYTES, msg, lp + la + lb + 2, ret,
	              SECRET_MAC_BYTES, &n) &&
	    n == SECRET_MAC_BYTES)
		r = 0;
	else if (host_key)
		r = -EIO;
	pthread_rwlock_unlock(&secrets_db.life);
	return r;
}

void secrets_shutdown(void)
{
	pthread_rwlock_wrlock(&secrets_db.life);
	secrets_db.db = NULL;
	if (host_key) {
		explicit_bzero(host_key, key_page);
		munmap(host_key, key_page);
		host_key = NULL;
	}
	pthread_rwlock_unlock(&secrets_db.life);
}

void secret_info_release(struct secret_info *s)
{
	free(s->spec_json);
	s->spec_json = NULL;
}

/* Columns: id, tenant, name, spec, created_ms, updated_ms. */
#define INFO_COLUMNS "id, tenant, name, spec, created_ms, updated_ms"

static void info_from_row(sqlite3_stmt *st, int first, struct secret_info *s)
{
	*s = (struct secret_info){0};
	strlcpy_al(s->id, db_column_text(st, first), sizeof(s->id));
	strlcpy_al(s->tenant, db_column_text(st, first + 1), sizeof(s->tenant));
	strlcpy_al(s->name, db_column_text(st, first + 2), sizeof(s->name));
	s->spec_json = xstrdup(db_column_text(st, first + 3));
	s->created_ms = (uint64_t)sqlite3_column_int64(st, first + 4);
	s->updated_ms = (uint64_t)sqlite3_column_int64(st, first + 5);
}

static int not_found(const char *tenant, const char *name, struct al_error *err)
{
	return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT,
	                    "no secret \"%.64s\" in tenant %s (GET /v1/secrets lists them)", name, tenant);
}

static int check_names(const char *tenant, const char *name, struct al_error *err)
{
	if (!tenant || !name_valid(tenant, TENANT_NAME_MAX))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "tenant: must be a name of 1 to 63 characters from [a-z0-9_-]");
	if (!name || !secret_name_valid(name))
		return al_error_set(
		    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		    "secret names are 1 to %d characters of [a-z0-9_.-] starting with a letter or digit",
		    SECRET_NAME_MAX);
	return 0;
}

/* The one row of a query that returns INFO_COLUMNS of at most one secret (a
 * lookup by the primary key, or RETURNING); -ENOENT (err untouched) if none. */
static int info_step_one(struct db_query *q, struct secret_info *ret, struct al_error *err)
{
	int rc = sqlite3_step(q->stmt);
	if (rc == SQLITE_DONE)
		return -ENOENT;
	if (rc != SQLITE_ROW)
		return db_query_error(q, err);
	info_from_row(q->stmt, 0, ret);
	if (sqlite3_step(q->stmt) != SQLITE_DONE) {
		secret_info_release(ret);
		return db_query_error(q, err);
	}
	return 0;
}

static int sqlite_upsert(const char *tenant, const char *name, const char *new_id, const char *spec_json,
                         const uint8_t *blob, size_t blob_len, uint64_t now_ms, struct secret_info *ret,
                         struct al_error *err)
{
	cleanup_db_query struct db_query query = {0};
	int r = db_query_prepare(&secrets_db,
	                         "INSERT INTO secrets (tenant, name, id, spec, value, created_ms, updated_ms)"
	                         " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) ON CONFLICT(tenant, name) DO UPDATE SET"
	                         " spec = excluded.spec, value = excluded.value, updated_ms = excluded.updated_ms"
	                         " RETURNING " INFO_COLUMNS,
	                         "set secret", &query, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = query.stmt;
	sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, new_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, spec_json, -1, SQLITE_STATIC);
	sqlite3_bind_blob(st, 5, blob, (int)blob_len, SQLITE_STATIC);
	sqlite3_bind_int64(st, 6, (sqlite3_int64)now_ms);
	r = info_step_one(&query, ret, err);
	return r == -ENOENT ? db_query_error(&query, err) : r;
}

int secret_set(const char *tenant, const struct secret_request *req, bool *ret_created, struct secret_info *ret,
               struct al_error *err)
{
	int r = check_names(tenant, req->name, err);
	if (r < 0)
		return r;
	uint8_t raw[8];
	char hex[17], new_id[SECRET_ID_LEN + 1];
	random_bytes(raw, sizeof(raw));
	hex_encode(raw, sizeof(raw), hex);
	snprintf(new_id, sizeof(new_id), "sec-%s", hex);
	cleanup_free uint8_t *blob = NULL;
	size_t blob_len = 0;
	pthread_rwlock_rdlock(&secrets_db.life);
	r = host_key ? secret_encrypt(host_key, tenant, req->name, req->value, req->value_len, &blob, &blob_len)
	             : -ESHUTDOWN;
	pthread_rwlock_unlock(&secrets_db.life);
	if (r == -ESHUTDOWN)
		return db_conn_closed(&secrets_db, err);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot encrypt the secret (libcrypto failed)");
	struct secret_info info;
	if ((r = rows->upsert(tenant, req->name, new_id, req->spec_json, blob, blob_len, now_ms_realtime(), &info,
	                      err)) < 0)
		return r;
	bool created = !strcmp(info.id, new_id);
	events_emit("secret.set", tenant, NULL, json_pack("{s:s, s:b}", "name", req->name, "created", created));
	*ret_created = created;
	*ret = info;
	return 0;
}

/* Runs sql, which names one secret by ?1 = tenant and ?2 = name and returns
 * INFO_COLUMNS of it (a lookup by the primary key, or RETURNING). */
static int row_by_name(const char *sql, const char *what, const char *tenant, const char *name, struct secret_info *ret,
                       struct al_error *err)
{
	cleanup_db_query struct db_query query = {0};
	int r = db_query_prepare(&secrets_db, sql, what, &query, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = query.stmt;
	sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	return info_step_one(&query, ret, err);
}

static int sqlite_get(const char *tenant, const char *name, struct secret_info *ret, struct al_error *err)
{
	return row_by_name("SELECT " INFO_COLUMNS " FROM secrets WHERE tenant = ?1 AND name = ?2", "get secret", tenant,
	                   name, ret, err);
}

static int sqlite_remove(const char *tenant, const char *name, struct secret_info *ret, struct al_error *err)
{
	return row_by_name("DELETE FROM secrets WHERE tenant = ?1 AND name = ?2 RETURNING " INFO_COLUMNS,
	                   "delete secret", tenant, name, ret, err);
}

int secret_get(const char *tenant, const char *name, struct secret_info *ret, struct al_error *err)
{
	int r = check_names(tenant, name, err);
	if (r < 0)
		return r;
	r = rows->get(tenant, name, ret, err);
	return r == -ENOENT ? not_found(tenant, name, err) : r;
}

int secret_list(const char *tenant, struct secret_info **ret, size_t *ret_n, struct al_error *err)
{
	return rows->list(tenant, ret, ret_n, err);
}

static int sqlite_list(const char *tenant, struct secret_info **ret, size_t *ret_n, struct al_error *err)
{
	cleanup_db_query struct db_query query = {0};
	int r = db_query_prepare(&secrets_db,
	                         tenant ? "SELECT " INFO_COLUMNS " FROM secrets WHERE tenant = ?1 ORDER BY tenant, name"
	                                : "SELECT " INFO_COLUMNS " FROM secrets ORDER BY tenant, name",
	                         "list secrets", &query, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = query.stmt;
	if (tenant)
		sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
	size_t n = 0, cap = 0;
	struct secret_info *v = NULL;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			v = xrealloc(v, cap * sizeof(*v));
		}
		info_from_row(st, 0, &v[n++]);
	}
	if (rc != SQLITE_DONE) {
		for (size_t i = 0; i < n; i++)
			secret_info_release(&v[i]);
		free(v);
		return db_query_error(&query, err);
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

int secret_delete(const char *tenant, const char *name, struct secret_info *ret_deleted, struct al_error *err)
{
	int r = check_names(tenant, name, err);
	if (r < 0)
		return r;
	struct secret_info info;
	if ((r = rows->remove(tenant, name, &info, err)) < 0)
		return r == -ENOENT ? not_found(tenant, name, err) : r;
	events_emit("secret.deleted", tenant, NULL, json_pack("{s:s}", "name", name));
	if (ret_deleted)
		*ret_deleted = info;
	else
		secret_info_release(&info);
	return 0;
}

json_t *secret_info_to_json(const struct secret_info *s)
{
	char created[32], updated[32];
	format_time_rfc3339(s->created_ms, created);
	format_time_rfc3339(s->updated_ms, updated);
	cleanup_json json_t *spec = json_loads(s->spec_json ? s->spec_json : "{}", 0, NULL);
	json_t *o = json_pack("{s:s, s:s, s:s}", "id", s->id, "tenant", s->tenant, "name", s->name);
	if (!o)
		abort();
	static const char *const fields[] = {"hosts", "paths", "methods"};
	for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
		json_t *v = json_object_get(spec, fields[i]);
		json_object_set_new(o, fields[i], json_is_array(v) ? json_incref(v) : json_array());
	}
	json_t *h = json_object_get(spec, "header"), *f = json_object_get(spec, "format");
	json_object_set_new(o, "header", json_is_string(h) ? json_incref(h) : json_null());
	json_object_set_new(o, "format", json_is_string(f) ? json_incref(f) : json_null());
	/* Placeholder mode: where it is replaced (a secret stored before
	 * issue 17 has no list: the default). */
	json_t *hs = json_object_get(spec, "headers");
	json_object_set_new(o, "headers",
	                    json_is_string(h)   ? json_null()
	                    : json_is_array(hs) ? json_incref(hs)
	                                        : json_pack("[s]", SECRET_HEADERS_DEFAULT));
	json_object_set_new(o, "created_at", json_string(created));
	json_object_set_new(o, "updated_at", json_string(updated));
	return o;
}

/* ------------------------------------------------------------ bindings */

int secret_bindings_grant(const char *tenant, const struct kv_list *grants, char **ret_json, struct al_error *err)
{
	cleanup_json json_t *arr = json_array();
	for (size_t i = 0; i < grants->n; i++) {
		struct secret_info info;
		int r = secret_get(tenant, grants->values[i], &info, err);
		if (r < 0) {
			if (err->code == AL_ERR_NOT_FOUND)
				r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOENT,
				                 "secrets.%s: tenant %s has no secret \"%s\" (create it with POST "
				                 "/v1/secrets or 'airlock secret set')",
				                 grants->keys[i], tenant, grants->values[i]);
			return r;
		}
		/* SECURITY: placeholders come from the kernel CSPRNG: 256 bits that
		 * the guest cannot guess, new for every sandbox and secret. */
		uint8_t raw[32];
		char placeholder[POLICY_PLACEHOLDER_LEN + 1], hex[65];
		random_bytes(raw, sizeof(raw));
		hex_encode(raw, sizeof(raw), hex);
		snprintf(placeholder, sizeof(placeholder), POLICY_PLACEHOLDER_PREFIX "%s", hex);
		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s}", "env", grants->keys[i], "secret",
		                                     info.name, "secret_id", info.id, "placeholder", placeholder));
		secret_info_release(&info);
	}
	*ret_json = json_dumps(arr, JSON_COMPACT);
	if (!*ret_json)
		abort();
	return 0;
}

static int sqlite_load(const char *tenant, const char *name, char ret_id[SECRET_ID_LEN + 1], char **ret_spec_json,
                       uint8_t **ret_blob, size_t *ret_len, struct al_error *err)
{
	cleanup_db_query struct db_query query = {0};
	int r = db_query_prepare(&secrets_db, "SELECT id, spec, value FROM secrets WHERE tenant = ?1 AND name = ?2",
	                         "read secret", &query, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = query.stmt;
	sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return -ENOENT;
	if (rc != SQLITE_ROW)
		return db_query_error(&query, err);
	strlcpy_al(ret_id, db_column_text(st, 0), SECRET_ID_LEN + 1);
	*ret_spec_json = xstrdup(db_column_text(st, 1));
	size_t n = (size_t)sqlite3_column_bytes(st, 2);
	*ret_blob = xmalloc(n ? n : 1);
	if (n)
		memcpy(*ret_blob, sqlite3_column_blob(st, 2), n);
	*ret_len = n;
	return 0;
}

static const struct secret_rows sqlite_rows = {
    .upsert = sqlite_upsert,
    .get = sqlite_get,
    .list = sqlite_list,
    .remove = sqlite_remove,
    .load = sqlite_load,
};

void secrets_use_rows(const struct secret_rows *r, const uint8_t key[SECRET_KEY_BYTES])
{
	pthread_rwlock_wrlock(&secrets_db.life);
	rows = r;
	if (host_key)
		memcpy(host_key, key, SECRET_KEY_BYTES);
	pthread_rwlock_unlock(&secrets_db.life);
}

/* The id, spec and decrypted value of one secret; -ENOENT if there is none. */
static int load_value(const char *tenant, const char *name, char id[SECRET_ID_LEN + 1], json_t **ret_spec,
                      char **ret_value, size_t *ret_len, struct al_error *err)
{
	cleanup_free uint8_t *blob = NULL;
	cleanup_free char *spec = NULL;
	size_t blob_len = 0;
	int lr = rows->load(tenant, name, id, &spec, &blob, &blob_len, err);
	if (lr < 0)
		return lr;
	*ret_spec = json_loads(spec, 0, NULL);
	pthread_rwlock_rdlock(&secrets_db.life);
	int r = host_key ? secret_decrypt(host_key, tenant, name, blob, blob_len, ret_value, ret_len) : -ESHUTDOWN;
	pthread_rwlock_unlock(&secrets_db.life);
	if (r < 0) {
		json_decref(*ret_spec);
		*ret_spec = NULL;
		if (r == -ESHUTDOWN)
			return db_conn_closed(&secrets_db, err);
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG,
		                    "secret \"%s\" of tenant %s does not decrypt with this host's secrets key (was the "
		                    "key or the database replaced?)",
		                    name, tenant);
	}
	return 0;
}

int secret_bindings_resolve(const char *tenant, const char *bindings_json, json_t **ret_array, struct al_error *err)
{
	cleanup_json json_t *in = json_loads(bindings_json ? bindings_json : "[]", 0, NULL);
	json_t *out = json_array();
	size_t i;
	json_t *b;
	json_array_foreach (in, i, b) {
		const char *name = json_string_value(json_object_get(b, "secret"));
		const char *want = json_string_value(json_object_get(b, "secret_id"));
		const char *ph = json_string_value(json_object_get(b, "placeholder"));
		if (!name || !want || !ph)
			continue;
		char id[SECRET_ID_LEN + 1];
		json_t *spec = NULL;
		char *value = NULL;
		size_t len = 0;
		int r = load_value(tenant, name, id, &spec, &value, &len, err);
		if (r == -ENOENT)
			continue; /* deleted: the binding is gone */
		if (r < 0) {
			secret_json_wipe(out);
			json_decref(out);
			return r;
		}
		if (strcmp(id, want)) {
			/* Another secret of the same name now: not granted. */
			secret_wipe_free(value, len);
			json_decref(spec);
			continue;
		}
		json_t *o = json_pack("{s:s, s:s}", "secret", name, "placeholder", ph);
		json_object_set_new(o, "value", json_stringn_nocheck(value, len));
		secret_wipe_free(value, len);
		static const char *const fields[] = {"hosts", "paths", "methods", "header", "format", "headers"};
		for (size_t k = 0; k < ARRAY_SIZE(fields); k++) {
			json_t *v = json_object_get(spec, fields[k]);
			json_object_set_new(o, fields[k], v ? json_incref(v) : json_null());
		}
		json_decref(spec);
		json_array_append_new(out, o);
	}
	*ret_array = out;
	return 0;
}

bool secret_bindings_use(const char *bindings_json, const char *name)
{
	cleanup_json json_t *in = json_loads(bindings_json ? bindings_json : "[]", 0, NULL);
	size_t i;
	json_t *b;
	json_array_foreach (in, i, b) {
		const char *s = json_string_value(json_object_get(b, "secret"));
		if (s && !strcmp(s, name))
			return true;
	}
	return false;
}

void secret_bindings_env(const char *bindings_json, json_t *obj)
{
	cleanup_json json_t *in = json_loads(bindings_json ? bindings_json : "[]", 0, NULL);
	size_t i;
	json_t *b;
	json_array_foreach (in, i, b) {
		json_t *env = json_object_get(b, "env"), *ph = json_object_get(b, "placeholder");
		if (json_is_string(env) && json_is_string(ph))
			json_object_set(obj, json_string_value(env), ph);
	}
}
