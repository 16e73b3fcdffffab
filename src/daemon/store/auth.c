/* SPDX-License-Identifier: Apache-2.0 */
#include "auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "events.h"
#include "json-cleanup.h"
#include "store-db.h"
#include "store.h"
#include "util.h"

#define TOKEN_HASH_LEN 32 /* SHA-256 */
#define TOKEN_RANDOM_BYTES 32
#define TOKEN_PREFIX "alk_"
#define TOKEN_ID_PREFIX "tok-"
#define TOKEN_CREATE_ATTEMPTS 4

/* The state store's connection (store-db.h). */
static struct db_conn auth_db = DB_CONN_INIT("tokens and tenants");

static const char schema[] = "CREATE TABLE IF NOT EXISTS tokens ("
                             " id TEXT PRIMARY KEY,"
                             " tenant TEXT NOT NULL,"
                             " description TEXT NOT NULL,"
                             " hash BLOB NOT NULL UNIQUE,"
                             " created_ms INTEGER NOT NULL,"
                             " revoked_ms INTEGER);"
                             "CREATE TABLE IF NOT EXISTS tenants ("
                             " name TEXT PRIMARY KEY,"
                             " max_sandboxes INTEGER,"
                             " max_vcpus INTEGER,"
                             " max_memory_mib INTEGER,"
                             " max_snapshot_mib INTEGER);";

int auth_init(struct store *s, struct al_error *err)
{
	sqlite3 *db = store_db(s);
	int r = db_exec(db, schema, "create the token tables", err);
	if (r < 0)
		return r;
	/* Databases from before snapshot quotas: add the column (an error means it is there). */
	sqlite3_exec(db, "ALTER TABLE tenants ADD COLUMN max_snapshot_mib INTEGER", NULL, NULL, NULL);
	db_conn_set(&auth_db, db);
	return 0;
}

void auth_shutdown(void)
{
	db_conn_set(&auth_db, NULL);
}

/* ------------------------------------------------------------ names and secrets */

static void sha256(const char *s, size_t n, uint8_t out[TOKEN_HASH_LEN])
{
	unsigned int len = 0;
	if (EVP_Digest(s, n, out, &len, EVP_sha256(), NULL) != 1 || len != TOKEN_HASH_LEN)
		abort(); /* libcrypto cannot hash: nothing sensible to do */
}

/* "alk_" + base64url (no padding) of 32 random bytes: 43 characters. */
static void secret_generate(char out[TOKEN_SECRET_LEN + 1])
{
	uint8_t raw[TOKEN_RANDOM_BYTES];
	random_bytes(raw, sizeof(raw));
	size_t len = 0;
	cleanup_free char *b64 = base64_encode(raw, sizeof(raw), &len);
	explicit_bzero(raw, sizeof(raw));
	size_t o = strlcpy_al(out, TOKEN_PREFIX, TOKEN_SECRET_LEN + 1);
	for (size_t i = 0; i < len && b64[i] != '=' && o < TOKEN_SECRET_LEN; i++)
		out[o++] = b64[i] == '+' ? '-' : b64[i] == '/' ? '_' : b64[i];
	out[o] = '\0';
	explicit_bzero(b64, len);
}

static void token_id_generate(char out[TOKEN_ID_LEN + 1])
{
	uint8_t raw[8];
	char hex[2 * sizeof(raw) + 1];
	random_bytes(raw, sizeof(raw));
	hex_encode(raw, sizeof(raw), hex);
	snprintf(out, TOKEN_ID_LEN + 1, TOKEN_ID_PREFIX "%s", hex);
}

/* RFC 6750 b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=" */
static bool b64token_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
	       c == '_' || c == '~' || c == '+' || c == '/';
}

static bool ascii_prefix_caseless(const char *s, const char *prefix)
{
	for (; *prefix; s++, prefix++) {
		char c = *s;
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c != *prefix)
			return false;
	}
	return true;
}

int auth_header_parse(const char *value, char *ret_token, size_t size)
{
	/* SECURITY: value is an untrusted header; only its first
	 * AUTH_HEADER_MAX + 1 bytes are ever looked at. */
	if (!value)
		return -EINVAL;
	size_t n = strnlen(value, AUTH_HEADER_MAX + 1);
	if (n > AUTH_HEADER_MAX)
		return -E2BIG;
	static const size_t scheme_len = sizeof("bearer ") - 1;
	if (n <= scheme_len || !ascii_prefix_caseless(value, "bearer") || value[scheme_len - 1] != ' ')
		return -EINVAL;
	const char *t = value + scheme_len;
	size_t tn = n - scheme_len, i = 0;
	while (i < tn && b64token_char(t[i]))
		i++;
	if (i == 0)
		return -EINVAL;
	while (i < tn && t[i] == '=')
		i++;
	if (i != tn)
		return -EINVAL;
	if (tn >= size)
		return -E2BIG;
	memcpy(ret_token, t, tn);
	ret_token[tn] = '\0';
	return 0;
}

/* ------------------------------------------------------------ tokens */

static void token_from_row(sqlite3_stmt *st, struct token_info *t)
{
	*t = (struct token_info){0};
	strlcpy_al(t->id, (const char *)sqlite3_column_text(st, 0), sizeof(t->id));
	strlcpy_al(t->tenant, (const char *)sqlite3_column_text(st, 1), sizeof(t->tenant));
	strlcpy_al(t->description, (const char *)sqlite3_column_text(st, 2), sizeof(t->description));
	t->created_ms = (uint64_t)sqlite3_column_int64(st, 3);
	t->revoked_ms = sqlite3_column_type(st, 4) == SQLITE_NULL ? 0 : (uint64_t)sqlite3_column_int64(st, 4);
}

/* Inserts t with the hash of secret. -EEXIST if the id or hash is taken. */
static int token_insert(const struct token_info *t, const uint8_t hash[TOKEN_HASH_LEN], struct al_error *err)
{
	cleanup_db_query struct db_query query = {0};
	int r = db_query_prepare(&auth_db,
	                         "INSERT INTO tokens (id, tenant, description, hash, created_ms, revoked_ms)"
	                         " VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
	                         "insert token", &query, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = query.stmt;
	sqlite3_bind_text(st, 1, t->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, t->tenant, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, t->description, -1, SQLITE_STATIC);
	sqlite3_bind_blob(st, 4, hash, TOKEN_HASH_LEN, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, (sqlite3_int64)t->created_ms);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_CONSTRAINT)
		return -EEXIST;
	if (rc != SQLITE_DONE)
		return db_query_error(&query, err);
	return 0;
}

int auth_token_create(const char *tenant, const char *description, struct token_info *ret,
                      char ret_secret[TOKEN_SECRET_LEN + 1], struct al_error *err)
{
	if (!tenant || !tenant_name_valid(tenant))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "tenant: must match [a-z0-9][a-z0-9_-]{0,62}, got \"%.64s\"", tenant ? tenant : "");
	if (!description)
		description = "";
	if (!token_description_valid(description))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "description: must be at most %d bytes of UTF-8 without control characters",
		                    TOKEN_DESCRIPTION_MAX);

	struct token_info t = {.created_ms = now_ms_realtime()};
	strlcpy_al(t.tenant, tenant, sizeof(t.tenant));
	strlcpy_al(t.description, description, sizeof(t.description));
	char secret[TOKEN_SECRET_LEN + 1];
	uint8_t hash[TOKEN_HASH_LEN];
	int r = -EEXIST;
	/* A collision of 64-bit ids (or of SHA-256) is next to impossible; a
	 * few fresh attempts make it a non-event rather than an error. */
	for (int attempt = 0; attempt < TOKEN_CREATE_ATTEMPTS && r == -EEXIST; attempt++) {
		token_id_generate(t.id);
		secret_generate(secret);
		sha256(secret, strlen(secret), hash);
		r = token_insert(&t, hash, err);
	}
	if (r == -EEXIST)
		r = al_error_set(err, AL_ERR_INTERNAL, EEXIST, "cannot create a token: %d id collisions in a row",
		                 TOKEN_CREATE_ATTEMPTS);
	if (r < 0) {
		explicit_bzero(secret, sizeof(secret));
		return r;
	}
	events_emit("token.created", t.tenant, NULL, json_pack("{s:s, s:s}", "id", t.id, "description", t.description));
	*ret = t;
	memcpy(ret_secret, secret, sizeof(secret));
	explicit_bzero(secret, sizeof(secret));
	return 0;
}

int auth_token_list(const char *tenant, struct token_info **ret, size_t *ret_n, struct al_error *err)
{
	cleanup_db_query struct db_query query = {0};
	int r = db_query_prepare(&auth_db,
	                         "SELECT id, tenant, description, created_ms, revoked_ms FROM tokens"
	                         " WHERE ?1 IS NULL OR tenant = ?1 ORDER BY created_ms, id",
	                         "list tokens", &query, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = query.stmt;
	if (tenant)
		sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
	cleanup_free struct token_info *v = NULL;
	size_t n = 0, cap = 0;
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			v = xrealloc(v, cap * sizeof(*v));
		}
		token_from_row(st, &v[n++]);
	}
	if (rc != SQLITE_DONE)
		return db_query_error(&query, err);
	*ret = TAKE_PTR(v);
	*ret_n = n;
	return 0;
}

/* Marks the token revoked; writes its tenant. -ENOENT if unknown or revoked. */
static int token_mark_revoked(const char *id, char tenant[TENANT_NAME_MAX + 1], struct al_error *err)
{
	cleanup_db_query struct db_query query = {0};
	int r = db_query_prepare(
	    &auth_db, "UPDATE tokens SET revoked_ms = ?1 WHERE id = ?2 AND revoked_ms IS NULL RETURNING tenant",
	    "revoke token", &query, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = query.stmt;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)now_ms_realtime());
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT,
		                    "no valid token %.32s (unknown or already revoked); GET /v1/tokens lists them", id);
	if (rc != SQLITE_ROW)
		return db_query_error(&query, err);
	strlcpy_al(tenant, (const char *)sqlite3_column_text(st, 0), TENANT_NAME_MAX + 1);
	if (sqlite3_step(st) != SQLITE_DONE)
		return db_query_error(&query, err);
	return 0;
}

int auth_token_revoke(const char *id, struct al_error *err)
{
	char tenant[TENANT_NAME_MAX + 1];
	int r = token_mark_revoked(id, tenant, err);
	if (r < 0)
		return r;
	events_emit("token.revoked", tenant, NULL, json_pack("{s:s}", "id", id));
	return 0;
}

enum lookup_result { LOOKUP_VALID, LOOKUP_UNKNOWN, LOOKUP_REVOKED };

static int token_lookup(const uint8_t hash[TOKEN_HASH_LEN], enum lookup_result *ret,
                        char ret_tenant[TENANT_NAME_MAX + 1], struct al_error *err)
{
	cleanup_db_query struct db_query query = {0};
	int r = db_query_prepare(&auth_db, "SELECT tenant, hash, revoked_ms FROM tokens WHERE hash = ?1",
	                         "look up token", &query, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = query.stmt;
	sqlite3_bind_blob(st, 1, hash, TOKEN_HASH_LEN, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE) {
		*ret = LOOKUP_UNKNOWN;
		return 0;
	}
	if (rc != SQLITE_ROW)
		return db_query_error(&query, err);
	/* SECURITY: the index lookup is not constant-time; compare the stored
	 * hash again with CRYPTO_memcmp so that the decision itself is. */
	const void *stored = sqlite3_column_blob(st, 1);
	if (sqlite3_column_bytes(st, 1) != TOKEN_HASH_LEN || !stored ||
	    CRYPTO_memcmp(stored, hash, TOKEN_HASH_LEN) != 0) {
		*ret = LOOKUP_UNKNOWN;
		return 0;
	}
	if (sqlite3_column_type(st, 2) != SQLITE_NULL) {
		*ret = LOOKUP_REVOKED;
		return 0;
	}
	strlcpy_al(ret_tenant, (const char *)sqlite3_column_text(st, 0), TENANT_NAME_MAX + 1);
	*ret = LOOKUP_VALID;
	return 0;
}

const char *auth_failure_name(enum auth_failure f)
{
	static const char *const names[AUTH_FAILURE__COUNT] = {
	    [AUTH_FAILURE_MISSING] = "missing",
	    [AUTH_FAILURE_MALFORMED] = "malformed",
	    [AUTH_FAILURE_UNKNOWN] = "unknown",
	    [AUTH_FAILURE_REVOKED] = "revoked",
	};
	return (unsigned)f < AUTH_FAILURE__COUNT ? names[f] : "unknown";
}

int auth_token_verify(const char *authorization, char ret_tenant[TENANT_NAME_MAX + 1], enum auth_failure *ret_failure,
                      struct al_error *err)
{
	char token[AUTH_HEADER_MAX + 1];
	char tenant[TENANT_NAME_MAX + 1];
	enum auth_failure failure;
	const char *msg;
	enum lookup_result found = LOOKUP_UNKNOWN;

	if (!authorization || !*authorization) {
		failure = AUTH_FAILURE_MISSING;
		msg = "this endpoint needs a token: send \"Authorization: Bearer <token>\" with a token from POST "
		      "/v1/tokens";
	} else if (auth_header_parse(authorization, token, sizeof(token)) < 0) {
		failure = AUTH_FAILURE_MALFORMED;
		msg = "the Authorization header must be \"Bearer <token>\" (one space, at most 256 characters)";
	} else {
		uint8_t hash[TOKEN_HASH_LEN];
		sha256(token, strlen(token), hash);
		explicit_bzero(token, sizeof(token));
		int r = token_lookup(hash, &found, tenant, err);
		if (r < 0)
			return r;
		if (found == LOOKUP_VALID) {
			strlcpy_al(ret_tenant, tenant, TENANT_NAME_MAX + 1);
			return 0;
		}
		/* The client sees one message for both; the event says which. */
		failure = found == LOOKUP_REVOKED ? AUTH_FAILURE_REVOKED : AUTH_FAILURE_UNKNOWN;
		msg = "the token is not valid (unknown or revoked); ask an administrator for a new one";
	}
	if (ret_failure)
		*ret_failure = failure;
	return al_error_set(err, AL_ERR_UNAUTHORIZED, EACCES, "%s", msg);
}

static void format_time_or_null(uint64_t ms, json_t **ret)
{
	char buf[32];
	if (!ms) {
		*ret = json_null();
		return;
	}
	format_time_rfc3339(ms, buf);
	*ret = json_string(buf);
}

json_t *token_info_to_json(const struct token_info *t)
{
	json_t *created, *revoked;
	format_time_or_null(t->created_ms, &created);
	format_time_or_null(t->revoked_ms, &revoked);
	json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:o}", "id", t->id, "tenant", t->tenant, "description",
	                      t->description, "created_at", created, "revoked_at", revoked);
	if (!j)
		abort(); /* only allocation (or a bug) can fail here */
	return j;
}

/* ------------------------------------------------------------ tenants and quotas */

static int quota_validate(const struct tenant_quota *q, struct al_error *err)
{
	const struct {
		const char *name;
		unsigned v;
	} f[] = {{"max_sandboxes", q->max_sandboxes},
	         {"max_vcpus", q->max_vcpus},
	         {"max_memory_mib", q->max_memory_mib},
	         {"max_snapshot_mib", q->max_snapshot_mib}};
	for (size_t i = 0; i < ARRAY_SIZE(f); i++)
		if (f[i].v > QUOTA_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "%s: must be an integer from 0 (unlimited) to %u, got %u", f[i].name,
			                    QUOTA_MAX, f[i].v);
	return 0;
}

static int tenant_check(const char *name, struct al_error *err)
{
	if (!name || !tenant_name_valid(name))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "tenant name must match [a-z0-9][a-z0-9_-]{0,62}, got \"%.64s\"", name ? name : "");
	return 0;
}

int auth_quota_set(const char *tenant, const struct tenant_quota *q, struct al_error *err)
{
	int r = tenant_check(tenant, err);
	if (r < 0)
		return r;
	r = quota_validate(q, err);
	if (r < 0)
		return r;
	cleanup_db_query struct db_query query = {0};
	r = db_query_prepare(&auth_db,
	                     "INSERT INTO tenants (name, max_sandboxes, max_vcpus, max_memory_mib, max_snapshot_mib)"
	                     " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(name) DO UPDATE SET"
	                     " max_sandboxes = ?2, max_vcpus = ?3, max_memory_mib = ?4, max_snapshot_mib = ?5",
	                     "set quotas", &query, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = query.stmt;
	sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, q->max_sandboxes);
	sqlite3_bind_int64(st, 3, q->max_vcpus);
	sqlite3_bind_int64(st, 4, q->max_memory_mib);
	sqlite3_bind_int64(st, 5, q->max_snapshot_mib);
	if (sqlite3_step(st) != SQLITE_DONE)
		return db_query_error(&query, err);
	return 0;
}

static unsigned column_quota(sqlite3_stmt *st, int i)
{
	sqlite3_int64 v = sqlite3_column_int64(st, i); /* NULL reads as 0 */
	return v < 0 ? 0 : v > (sqlite3_int64)QUOTA_MAX ? QUOTA_MAX : (unsigned)v;
}

int auth_quota_get(const char *tenant, struct tenant_quota *ret, struct al_error *err)
{
	int r = tenant_check(tenant, err);
	if (r < 0)
		return r;
	cleanup_db_query struct db_query query = {0};
	r = db_query_prepare(
	    &auth_db, "SELECT max_sandboxes, max_vcpus, max_memory_mib, max_snapshot_mib FROM tenants WHERE name = ?1",
	    "get quotas", &query, err);
	if (r < 0)
		return r;
	sqlite3_stmt *st = query.stmt;
	sqlite3_bind_text(st, 1, tenant, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	struct tenant_quota q = {0};
	if (rc == SQLITE_ROW)
		q = (struct tenant_quota){column_quota(st, 0), column_quota(st, 1), column_quota(st, 2),
		                          column_quota(st, 3)};
	else if (rc != SQLITE_DONE)
		return db_query_error(&query, err);
	*ret = q;
	return 0;
}

int tenant_quota_check(const char *tenant, const struct tenant_quota *q, const struct tenant_usage *used,
                       unsigned add_vcpus, unsigned add_memory_mib, struct al_error *err)
{
	/* 64-bit sums: usage + request cannot wrap. */
	if (q->max_sandboxes && (uint64_t)used->sandboxes + 1 > q->max_sandboxes)
		return al_error_set(err, AL_ERR_QUOTA, EDQUOT,
		                    "tenant %s may run at most %u sandboxes and has %u; delete one or raise the quota "
		                    "with PUT /v1/tenants/%s",
		                    tenant, q->max_sandboxes, used->sandboxes, tenant);
	if (q->max_vcpus && (uint64_t)used->vcpus + add_vcpus > q->max_vcpus)
		return al_error_set(err, AL_ERR_QUOTA, EDQUOT,
		                    "tenant %s may use at most %u vCPUs and uses %u, so %u more do not fit; delete a "
		                    "sandbox, ask for fewer vCPUs or raise the quota with PUT /v1/tenants/%s",
		                    tenant, q->max_vcpus, used->vcpus, add_vcpus, tenant);
	if (q->max_memory_mib && (uint64_t)used->memory_mib + add_memory_mib > q->max_memory_mib)
		return al_error_set(err, AL_ERR_QUOTA, EDQUOT,
		                    "tenant %s may use at most %u MiB of memory and uses %u MiB, so %u MiB more do not "
		                    "fit; delete a sandbox, ask for less memory or raise the quota with PUT "
		                    "/v1/tenants/%s",
		                    tenant, q->max_memory_mib, used->memory_mib, add_memory_mib, tenant);
	return 0;
}

json_t *tenant_to_json(const char *name, const struct tenant_quota *q, const struct tenant_usage *usage)
{
	json_t *j = json_pack("{s:s, s:{s:I, s:I, s:I, s:I}}", "name", name, "quotas", "max_sandboxes",
	                      (json_int_t)q->max_sandboxes, "max_vcpus", (json_int_t)q->max_vcpus, "max_memory_mib",
	                      (json_int_t)q->max_memory_mib, "max_snapshot_mib", (json_int_t)q->max_snapshot_mib);
	if (!j)
		abort();
	if (usage)
		json_object_set_new(j, "usage",
		                    json_pack("{s:I, s:I, s:I}", "sandboxes", (json_int_t)usage->sandboxes, "vcpus",
		                              (json_int_t)usage->vcpus, "memory_mib", (json_int_t)usage->memory_mib));
	return j;
}

/* ------------------------------------------------------------ request bodies */
