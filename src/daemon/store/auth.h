/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenants, API tokens and quotas (docs/api.md, "Tenants, tokens and quotas").
 *
 * Tokens live in the state store's database (table `tokens`), quotas in table
 * `tenants`. A token's secret ("alk_" + 43 chars of base64url of 32 random
 * bytes) is returned once by auth_token_create() and stored only as its
 * SHA-256 hash. All functions are thread-safe once auth_init() has run.
 *
 * The pure parts (header and request parsers, quota_check, JSON helpers) need
 * no database and are fuzzed by tests/fuzz/fuzz-auth-header.c.
 */
#ifndef AIRLOCK_AUTH_H
#define AIRLOCK_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"
#include "util.h"

struct store;

#define TENANT_NAME_MAX 63 /* [a-z0-9][a-z0-9_-]{0,62} */
#define TENANT_DEFAULT "default"
#define TOKEN_ID_LEN 20     /* "tok-" + 16 hex */
#define TOKEN_SECRET_LEN 47 /* "alk_" + 43 base64url chars */
#define TOKEN_DESCRIPTION_MAX 256
#define AUTH_HEADER_MAX 256 /* longest Authorization value accepted */
#define AUTH_BODY_MAX 4096  /* cap for POST /v1/tokens and PUT /v1/tenants/{name} bodies */
#define QUOTA_MAX 1000000u  /* each quota is 0 (unlimited) .. QUOTA_MAX */

/* ------------------------------------------------------------ tokens */

/* Pure predicates, inline: request parsers (api-request.c) check with them
 * before the store checks again. */
static inline bool tenant_name_valid(const char *name)
{
	return name_valid(name, TENANT_NAME_MAX);
}

/* At most TOKEN_DESCRIPTION_MAX bytes of UTF-8, no control characters (it is
 * shown in terminals). */
static inline bool token_description_valid(const char *d)
{
	size_t n = strnlen(d, TOKEN_DESCRIPTION_MAX + 1);
	if (n > TOKEN_DESCRIPTION_MAX || !utf8_valid((const uint8_t *)d, n))
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)d[i];
		if (c < 0x20 || c == 0x7f)
			return false;
	}
	return true;
}

struct token_info {
	char id[TOKEN_ID_LEN + 1];
	char tenant[TENANT_NAME_MAX + 1];
	char description[TOKEN_DESCRIPTION_MAX + 1];
	uint64_t created_ms; /* epoch ms */
	uint64_t revoked_ms; /* epoch ms; 0 while the token is valid */
};

/* Creates the `tokens` and `tenants` tables if needed and remembers the store
 * (which must outlive every other call here). Call once at start-up, after
 * events_init() if token/auth events should be recorded. */
int auth_init(struct store *s, struct al_error *err);
/* Forgets the store (before store_close()). Calls after it fail with
 * AL_ERR_UNAVAILABLE. */
void auth_shutdown(void);

/* Creates a token for tenant (validated with tenant_name_valid; description at
 * most TOKEN_DESCRIPTION_MAX bytes, no control characters). ret_secret gets the
 * NUL-terminated secret, which is shown to the client once and never stored.
 * Emits a `token.created` event (data: id, description). */
int auth_token_create(const char *tenant, const char *description, struct token_info *ret,
                      char ret_secret[TOKEN_SECRET_LEN + 1], struct al_error *err);
/* Every token, revoked ones included, oldest first; tenant NULL = all
 * tenants. The caller frees *ret (one array, no inner allocations). */
int auth_token_list(const char *tenant, struct token_info **ret, size_t *ret_n, struct al_error *err);
/* Revokes at once. -ENOENT (AL_ERR_NOT_FOUND) if the id is unknown or already
 * revoked. Emits a `token.revoked` event (data: id). */
int auth_token_revoke(const char *id, struct al_error *err);

/* Why an Authorization header was refused, for the caller's `auth.failure`
 * event; auth_failure_name() gives "missing", "malformed", "unknown" or
 * "revoked". */
enum auth_failure {
	AUTH_FAILURE_MISSING,
	AUTH_FAILURE_MALFORMED,
	AUTH_FAILURE_UNKNOWN,
	AUTH_FAILURE_REVOKED,
	AUTH_FAILURE__COUNT,
};
const char *auth_failure_name(enum auth_failure f);

/*
 * Checks an Authorization header value (NULL when the header is absent) and
 * writes the token's tenant to ret_tenant.
 *
 * SECURITY: the value comes from any client that can reach the TCP listener.
 * It is parsed strictly (auth_header_parse), hashed, looked up by hash, and
 * the stored hash is compared again in constant time. Every failure returns
 * -EACCES with AL_ERR_UNAUTHORIZED and the same message, so that a client
 * cannot tell an unknown token from a revoked one; the reason goes only to
 * *ret_failure (written only when -EACCES is returned), for the caller's
 * `auth.failure` event: the API server records it, bounded per client
 * address (auth-failures.h), so that clients without a token cannot flood
 * the event log. A database failure is AL_ERR_INTERNAL (-EIO), not a 401.
 */
int auth_token_verify(const char *authorization, char ret_tenant[TENANT_NAME_MAX + 1], enum auth_failure *ret_failure,
                      struct al_error *err);

/* The pure parse of "Bearer <token>": scheme case-insensitive, exactly one
 * space, value at most AUTH_HEADER_MAX bytes, token of RFC 6750 b64token
 * characters ([A-Za-z0-9._~+/-]+ then '='*). Writes the token (NUL-terminated)
 * to ret_token of size bytes. -EINVAL if malformed, -E2BIG if too long or if
 * the token does not fit in size. */
int auth_header_parse(const char *value, char *ret_token, size_t size);

/* {"id","tenant","description","created_at","revoked_at"} (revoked_at is null
 * while valid). Never contains a secret: the create handler adds "token". */
json_t *token_info_to_json(const struct token_info *t);

/* ------------------------------------------------------------ tenants and quotas */

/* 0 = unlimited. */
struct tenant_quota {
	unsigned max_sandboxes;
	unsigned max_vcpus;
	unsigned max_memory_mib;
	unsigned max_snapshot_mib; /* storage of the tenant's snapshots */
};

/* What a tenant's live sandboxes use now (computed by the caller). */
struct tenant_usage {
	unsigned sandboxes;
	unsigned vcpus;
	unsigned memory_mib;
};

/* Replaces the tenant's quotas (each 0..QUOTA_MAX). */
int auth_quota_set(const char *tenant, const struct tenant_quota *q, struct al_error *err);
/* A tenant without a row has all quotas 0 (unlimited); that is not an error. */
int auth_quota_get(const char *tenant, struct tenant_quota *ret, struct al_error *err);

/* Pure: may tenant, using *used, create one more sandbox of add_vcpus and
 * add_memory_mib? 0 if so; else -EDQUOT with AL_ERR_QUOTA (429) and a message
 * naming the limit, the usage and what to do. */
int tenant_quota_check(const char *tenant, const struct tenant_quota *q, const struct tenant_usage *used,
                       unsigned add_vcpus, unsigned add_memory_mib, struct al_error *err);

/* {"name","quotas":{"max_sandboxes","max_vcpus","max_memory_mib"},
 *  "usage":{"sandboxes","vcpus","memory_mib"}}; usage NULL omits "usage". */
json_t *tenant_to_json(const char *name, const struct tenant_quota *q, const struct tenant_usage *usage);

#endif
