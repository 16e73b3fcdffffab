/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Secrets in cluster mode (docs/cluster.md, "Secrets"): the rows of every
 * node's secrets (store/secrets.c) are in PostgreSQL's airlock_secrets, each
 * value AES-256-GCM under a key every node derives from the cluster key
 * (HMAC-SHA256 of CLUSTER_SECRETS_LABEL): any node binds a secret to a
 * sandbox, and a sandbox that moves keeps its bindings. The database holds
 * ciphertext only; the key is never written anywhere.
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "cluster-internal.h"
#include "secrets.h"
#include "util.h"

#define CLUSTER_SECRETS_LABEL "airlock-cluster-secrets-v1"
#define INFO_COLUMNS "id, tenant, name, spec, created_ms, updated_ms"

static void info_from_row(PGresult *res, int row, struct secret_info *s)
{
	*s = (struct secret_info){0};
	strlcpy_al(s->id, PQgetvalue(res, row, 0), sizeof(s->id));
	strlcpy_al(s->tenant, PQgetvalue(res, row, 1), sizeof(s->tenant));
	strlcpy_al(s->name, PQgetvalue(res, row, 2), sizeof(s->name));
	s->spec_json = xstrdup(PQgetvalue(res, row, 3));
	s->created_ms = strtoull(PQgetvalue(res, row, 4), NULL, 10);
	s->updated_ms = strtoull(PQgetvalue(res, row, 5), NULL, 10);
}

/* One statement on the index connection; *ret_res for the caller. */
static int run(const char *sql, int n, const char *const *p, PGresult **ret_res, struct al_error *err)
{
	pthread_mutex_lock(&cl->index_db.lock);
	int r = cdb_exec(&cl->index_db, sql, n, p, ret_res, err);
	pthread_mutex_unlock(&cl->index_db.lock);
	return r;
}

static int one_info(const char *sql, int n, const char *const *p, struct secret_info *ret, struct al_error *err)
{
	cleanup_pgresult PGresult *res = NULL;
	int r = run(sql, n, p, &res, err);
	if (r < 0)
		return r;
	if (PQntuples(res) != 1)
		return -ENOENT;
	info_from_row(res, 0, ret);
	return 0;
}

static int pg_upsert(const char *tenant, const char *name, const char *new_id, const char *spec_json,
                     const uint8_t *blob, size_t blob_len, uint64_t now_ms, struct secret_info *ret,
                     struct al_error *err)
{
	cleanup_free char *hex = xmalloc(2 * blob_len + 1);
	hex_encode(blob, blob_len, hex);
	char now[24];
	snprintf(now, sizeof(now), "%llu", (unsigned long long)now_ms);
	const char *p[] = {tenant, name, new_id, spec_json, hex, now};
	int r = one_info("INSERT INTO airlock_secrets (tenant, name, id, spec, value, created_ms, updated_ms)"
	                 " VALUES ($1, $2, $3, $4, decode($5, 'hex'), $6::bigint, $6::bigint)"
	                 " ON CONFLICT (tenant, name) DO UPDATE SET spec = EXCLUDED.spec, value = EXCLUDED.value,"
	                 " updated_ms = EXCLUDED.updated_ms RETURNING " INFO_COLUMNS,
	                 6, p, ret, err);
	explicit_bzero(hex, 2 * blob_len);
	return r == -ENOENT ? al_error_set(err, AL_ERR_INTERNAL, EIO, "cluster database: a secret was not set") : r;
}

static int pg_get(const char *tenant, const char *name, struct secret_info *ret, struct al_error *err)
{
	const char *p[] = {tenant, name};
	return one_info("SELECT " INFO_COLUMNS " FROM airlock_secrets WHERE tenant = $1 AND name = $2", 2, p, ret, err);
}

static int pg_remove(const char *tenant, const char *name, struct secret_info *ret, struct al_error *err)
{
	const char *p[] = {tenant, name};
	return one_info("DELETE FROM airlock_secrets WHERE tenant = $1 AND name = $2 RETURNING " INFO_COLUMNS, 2, p,
	                ret, err);
}

static int pg_list(const char *tenant, struct secret_info **ret, size_t *ret_n, struct al_error *err)
{
	const char *p[] = {tenant};
	cleanup_pgresult PGresult *res = NULL;
	int r = run(tenant ? "SELECT " INFO_COLUMNS " FROM airlock_secrets WHERE tenant = $1 ORDER BY tenant, name"
	                   : "SELECT " INFO_COLUMNS " FROM airlock_secrets ORDER BY tenant, name",
	            tenant ? 1 : 0, tenant ? p : NULL, &res, err);
	if (r < 0)
		return r;
	size_t n = (size_t)PQntuples(res);
	struct secret_info *v = xcalloc(n ? n : 1, sizeof(*v));
	for (size_t i = 0; i < n; i++)
		info_from_row(res, (int)i, &v[i]);
	*ret = v;
	*ret_n = n;
	return 0;
}

static int pg_load(const char *tenant, const char *name, char ret_id[SECRET_ID_LEN + 1], char **ret_spec_json,
                   uint8_t **ret_blob, size_t *ret_len, struct al_error *err)
{
	const char *p[] = {tenant, name};
	cleanup_pgresult PGresult *res = NULL;
	int r = run("SELECT id, spec, encode(value, 'hex') FROM airlock_secrets WHERE tenant = $1 AND name = $2", 2, p,
	            &res, err);
	if (r < 0)
		return r;
	if (PQntuples(res) != 1)
		return -ENOENT;
	const char *hex = PQgetvalue(res, 0, 2);
	size_t hl = strlen(hex);
	if (hl % 2)
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG, "cluster database: secret %s: bad value", name);
	uint8_t *blob = xmalloc(hl / 2 + 1);
	for (size_t i = 0; i < hl / 2; i++)
		blob[i] = (uint8_t)(hex_digit_value((unsigned char)hex[2 * i]) << 4 |
		                    hex_digit_value((unsigned char)hex[2 * i + 1]));
	strlcpy_al(ret_id, PQgetvalue(res, 0, 0), SECRET_ID_LEN + 1);
	*ret_spec_json = xstrdup(PQgetvalue(res, 0, 1));
	*ret_blob = blob;
	*ret_len = hl / 2;
	return 0;
}

static const struct secret_rows pg_rows = {
    .upsert = pg_upsert,
    .get = pg_get,
    .list = pg_list,
    .remove = pg_remove,
    .load = pg_load,
};

void cluster_secrets_start(void)
{
	uint8_t key[32];
	size_t n = 0;
	if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, cl->key.bytes, cl->key.len,
	               (const unsigned char *)CLUSTER_SECRETS_LABEL, sizeof(CLUSTER_SECRETS_LABEL) - 1, key,
	               sizeof(key), &n) ||
	    n != sizeof(key))
		abort(); /* no HMAC-SHA256 in libcrypto: nothing works */
	secrets_use_rows(&pg_rows, key);
	explicit_bzero(key, sizeof(key));
}
