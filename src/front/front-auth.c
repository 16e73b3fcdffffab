/* SPDX-License-Identifier: Apache-2.0 */
/* Tokens and tenants in the cluster database (airlock_tokens, airlock_tenants):
 * a client's credential checked, and the operator's routes that manage them,
 * with airlockd's request and answer shapes (docs/api.md, "Tenants, tokens
 * and quotas"). */
#include <openssl/evp.h>

#include "front.h"
#include "json-cleanup.h"
#include "util.h"

#define TOKEN_PREFIX "alk_"
#define TOKEN_RANDOM_BYTES 32
#define TOKEN_SECRET_LEN 47 /* "alk_" + 43 base64url characters */
#define TOKEN_ID_LEN 20     /* "tok-" + 16 hex */
#define TOKEN_DESCRIPTION_MAX 256
#define TOKEN_BODY_MAX 4096 /* POST /v1/tokens, PUT /v1/tenants/{name} */
#define QUOTA_MAX 1000000
#define WS_BEARER "airlock.bearer."
#define WS_ROUTE_SUFFIX "/attach" /* GET /v1/sandboxes/{id}/processes/{pid}/attach */
#define TIME_SQL(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

bool front_tenant_name_valid(const char *s)
{
	return name_valid(s, FRONT_TENANT_MAX);
}

static void sha256_hex(const char *s, char out[65])
{
	uint8_t h[32];
	unsigned len = 0;
	if (EVP_Digest(s, strlen(s), h, &len, EVP_sha256(), NULL) != 1 || len != sizeof(h))
		abort(); /* libcrypto cannot hash: nothing sensible to do */
	hex_encode(h, sizeof(h), out);
}

/* ------------------------------------------------------------ authentication */

/* RFC 6750 b64token, as airlockd reads a Bearer value. */
static bool b64token_valid(const char *t)
{
	size_t i = strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~+/");
	if (i == 0)
		return false;
	i += strspn(t + i, "=");
	return t[i] == '\0';
}

static int token_lookup(const char *token, char ret_tenant[FRONT_TENANT_MAX + 1], struct al_error *err)
{
	char hash[65];
	sha256_hex(token, hash);
	const char *params[] = {hash};
	cleanup_pgresult PGresult *res = NULL;
	int r =
	    front_pg_exec("look up a token", "SELECT tenant FROM airlock_tokens WHERE hash = $1 AND revoked_at IS NULL",
	                  1, params, &res, err);
	if (r < 0)
		return r;
	if (PQntuples(res) != 1)
		return -ENOENT;
	strlcpy_al(ret_tenant, PQgetvalue(res, 0, 0), FRONT_TENANT_MAX + 1);
	return 0;
}

/* The "airlock.bearer.<token>" subprotocol of a WebSocket handshake (a
 * browser cannot send Authorization): its token, and the list without it
 * for the node. 1 when there is one. */
static int ws_bearer_take(struct front_conn *c, char *token, size_t size)
{
	char list[FRONT_WS_PROTOCOLS_MAX], upgrade[16];
	size_t pl = strlen(c->path), al = strlen(WS_ROUTE_SUFFIX);
	/* as airlockd: only the PTY attach, a GET WebSocket handshake */
	if (!c->head.upgrade || strcmp(c->method, "GET") || pl < al || strcmp(c->path + pl - al, WS_ROUTE_SUFFIX) ||
	    front_head_value(&c->head, "Upgrade", upgrade, sizeof(upgrade)) != 1 || strcasecmp(upgrade, "websocket") ||
	    front_head_value(&c->head, "Sec-WebSocket-Protocol", list, sizeof(list)) != 1)
		return 0;
	int found = 0;
	size_t o = 0;
	for (char *save = NULL, *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		item += strspn(item, " \t");
		item[strcspn(item, " \t")] = '\0';
		if (!strncmp(item, WS_BEARER, strlen(WS_BEARER))) {
			found = strlcpy_al(token, item + strlen(WS_BEARER), size) < size ? 1 : -E2BIG;
			continue;
		}
		o += (size_t)snprintf(c->ws_protocol + o, sizeof(c->ws_protocol) - o, "%s%s", o ? ", " : "", item);
		o = MIN(o, sizeof(c->ws_protocol) - 1);
	}
	explicit_bzero(list, sizeof(list));
	c->ws_rewrite = found != 0;
	return found;
}

/* The token a request carries (per its kind), or NULL with the message. */
static const char *credential(struct front_conn *c, char *token, size_t size, const char **ret_msg)
{
	char value[FRONT_AUTH_MAX];
	if (c->kind == FRONT_E2B_CONTROL) {
		*ret_msg = "X-API-KEY must be a valid Airlock token of a tenant (airlock token create); E2B keys are "
		           "not Airlock tokens";
		int r = front_head_value(&c->head, "X-API-KEY", token, size);
		return r == 1 && b64token_valid(token) ? token : NULL;
	}
	int w = ws_bearer_take(c, token, size);
	if (w != 0) {
		*ret_msg = "the token of the subprotocol " WS_BEARER "<token> is not valid (unknown, revoked or "
		           "malformed); ask an administrator for a new one";
		return w == 1 && b64token_valid(token) ? token : NULL;
	}
	int r = front_head_value(&c->head, "Authorization", value, sizeof(value));
	if (r == 0) {
		*ret_msg = "this endpoint needs a token: send \"Authorization: Bearer <token>\" with a token from POST "
		           "/v1/tokens";
		return NULL;
	}
	*ret_msg = "the Authorization header must be \"Bearer <token>\" (one space, at most 256 characters)";
	if (r < 0 || strncasecmp(value, "bearer ", 7) || strlen(value) > 256 || !b64token_valid(value + 7))
		return NULL;
	*ret_msg = "the token is not valid (unknown or revoked); ask an administrator for a new one";
	strlcpy_al(token, value + 7, size);
	explicit_bzero(value, sizeof(value));
	return token;
}

int front_authenticate(struct front_conn *c)
{
	/* SECURITY: the credential is any client's bytes: read from one field
	 * (twice is refused), checked for its shape, and only its SHA-256 is
	 * looked up. Unknown and revoked tokens get the same answer. */
	char token[FRONT_AUTH_MAX];
	const char *msg = NULL;
	const char *t = credential(c, token, sizeof(token), &msg);
	struct al_error err = {0};
	int r = t ? token_lookup(t, c->tenant, &err) : -EACCES;
	explicit_bzero(token, sizeof(token));
	if (r == -ENOENT || r == -EACCES) {
		front_reply_errorf(c, AL_ERR_UNAUTHORIZED, "%s", msg);
		return -EACCES;
	}
	if (r < 0) {
		front_reply_error(c, &err);
		return r;
	}
	return 0;
}

/* ------------------------------------------------------------ tokens */

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

static bool description_valid(const char *d)
{
	size_t n = strnlen(d, TOKEN_DESCRIPTION_MAX + 1);
	if (n > TOKEN_DESCRIPTION_MAX || !utf8_valid((const uint8_t *)d, n))
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)d[i] < 0x20 || d[i] == 0x7f)
			return false;
	return true;
}

/* SECURITY: the body is the operator's, still parsed strictly as airlockd does. */
static int token_request_parse(json_t *j, const char **ret_tenant, const char **ret_desc, struct al_error *err)
{
	const char *tenant = NULL, *desc = NULL;
	json_t *t = json_object_get(j, "tenant"), *d = json_object_get(j, "description");
	if (t && !json_is_null(t) && (!json_is_string(t) || strlen(json_string_value(t)) != json_string_length(t)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "tenant: must be a string without NUL bytes");
	tenant = json_string_value(t);
	if (!tenant)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "tenant: required (the tenant the token acts for, e.g. \"default\")");
	if (!front_tenant_name_valid(tenant))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "tenant: must match [a-z0-9][a-z0-9_-]{0,62}, got \"%.64s\"", tenant);
	if (d && !json_is_null(d)) {
		desc = json_string_value(d);
		if (!desc || strlen(desc) != json_string_length(d) || !description_valid(desc))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "description: must be at most %d bytes of UTF-8 without control characters",
			                    TOKEN_DESCRIPTION_MAX);
	}
	*ret_tenant = tenant;
	*ret_desc = desc ? desc : "";
	return 0;
}

static json_t *token_json(PGresult *res, int row)
{
	json_t *revoked = PQgetisnull(res, row, 4) ? json_null() : json_string(PQgetvalue(res, row, 4));
	return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", PQgetvalue(res, row, 0), "tenant", PQgetvalue(res, row, 1),
	                 "description", PQgetvalue(res, row, 2), "created_at", PQgetvalue(res, row, 3), "revoked_at",
	                 revoked);
}

static int token_insert(const char *tenant, const char *desc, char secret[TOKEN_SECRET_LEN + 1], PGresult **ret,
                        struct al_error *err)
{
	uint8_t raw[8];
	char id[TOKEN_ID_LEN + 1] = "tok-", hash[65];
	random_bytes(raw, sizeof(raw));
	hex_encode(raw, sizeof(raw), id + 4);
	secret_generate(secret);
	sha256_hex(secret, hash);
	const char *params[] = {id, tenant, hash, desc};
	return front_pg_exec("create a token",
	                     "INSERT INTO airlock_tokens (id, tenant, hash, description) VALUES ($1, $2, $3, $4)"
	                     " RETURNING id, tenant, description, " TIME_SQL("created_at") ", revoked_at",
	                     4, params, ret, err);
}

static void event_insert(const char *tenant, const char *type, json_t *data)
{
	cleanup_json json_t *d = data;
	cleanup_free char *text = json_dumps(d, JSON_COMPACT);
	const char *params[] = {tenant, type, text};
	struct al_error err = {0};
	cleanup_pgresult PGresult *res = NULL;
	if (front_pg_exec("record an event", "INSERT INTO airlock_events (tenant, type, data) VALUES ($1, $2, $3)", 3,
	                  params, &res, &err) < 0)
		fprintf(stderr, "airlock-api: %s\n", err.message);
}

void front_auth_token_create(struct front_conn *c)
{
	cleanup_json json_t *j = NULL;
	static const char *const allowed[] = {"tenant", "description", NULL};
	const char *tenant = NULL, *desc = NULL;
	struct al_error err = {0};
	if (front_read_json(c, TOKEN_BODY_MAX, allowed, &j) < 0)
		return;
	if (token_request_parse(j, &tenant, &desc, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	char secret[TOKEN_SECRET_LEN + 1];
	cleanup_pgresult PGresult *res = NULL;
	if (token_insert(tenant, desc, secret, &res, &err) < 0) {
		explicit_bzero(secret, sizeof(secret));
		front_reply_error(c, &err);
		return;
	}
	json_t *o = token_json(res, 0);
	event_insert(tenant, "token.created",
	             json_pack("{s:s, s:s}", "id", PQgetvalue(res, 0, 0), "description", desc));
	json_object_set_new(o, "token", json_string(secret));
	explicit_bzero(secret, sizeof(secret));
	front_reply_json(c, 201, o);
}

void front_auth_token_list(struct front_conn *c)
{
	struct al_error err = {0};
	cleanup_pgresult PGresult *res = NULL;
	if (front_pg_exec("list tokens",
	                  "SELECT id, tenant, description, " TIME_SQL("created_at") ", " TIME_SQL(
	                      "revoked_at") " FROM airlock_tokens ORDER BY created_at, id",
	                  0, NULL, &res, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	json_t *arr = json_array();
	for (int i = 0; i < PQntuples(res); i++)
		json_array_append_new(arr, token_json(res, i));
	front_reply_json(c, 200, json_pack("{s:o}", "tokens", arr));
}

void front_auth_token_revoke(struct front_conn *c, const char *id)
{
	struct al_error err = {0};
	cleanup_pgresult PGresult *res = NULL;
	const char *params[] = {id};
	if (front_pg_exec("revoke a token",
	                  "UPDATE airlock_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL"
	                  " RETURNING tenant",
	                  1, params, &res, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	if (PQntuples(res) != 1) {
		front_reply_errorf(c, AL_ERR_NOT_FOUND,
		                   "no valid token %.32s (unknown or already revoked); GET /v1/tokens lists them", id);
		return;
	}
	event_insert(PQgetvalue(res, 0, 0), "token.revoked", json_pack("{s:s}", "id", id));
	front_reply_empty(c, 204);
}

/* ------------------------------------------------------------ tenants */

struct quotas {
	long long v[4];
};
static const char *const quota_names[] = {"max_sandboxes", "max_vcpus", "max_memory_mib", "max_snapshot_mib", NULL};

int front_tenant_usage(const char *tenant, struct front_usage *ret, struct al_error *err)
{
	const char *params[] = {tenant};
	cleanup_pgresult PGresult *res = NULL;
	int r = front_pg_exec("count a tenant's sandboxes",
	                      "SELECT count(*), coalesce(sum(vcpus), 0), coalesce(sum(memory_mib), 0)"
	                      " FROM airlock_sandboxes WHERE tenant = $1 AND state NOT IN ('deleted', 'error', 'lost')",
	                      1, params, &res, err);
	if (r < 0)
		return r;
	*ret = (struct front_usage){strtoll(PQgetvalue(res, 0, 0), NULL, 10), strtoll(PQgetvalue(res, 0, 1), NULL, 10),
	                            strtoll(PQgetvalue(res, 0, 2), NULL, 10)};
	return 0;
}

int front_tenant_quotas(const char *tenant, long long ret[4], struct al_error *err)
{
	const char *params[] = {tenant};
	cleanup_pgresult PGresult *res = NULL;
	int r = front_pg_exec("read a tenant's quotas",
	                      "SELECT max_sandboxes, max_vcpus, max_memory_mib, max_snapshot_mib FROM airlock_tenants"
	                      " WHERE name = $1",
	                      1, params, &res, err);
	if (r < 0)
		return r;
	for (int i = 0; i < 4; i++)
		ret[i] = PQntuples(res) ? strtoll(PQgetvalue(res, 0, i), NULL, 10) : 0;
	return 0;
}

static void tenant_answer(struct front_conn *c, const char *name)
{
	struct al_error err = {0};
	long long q[4];
	struct front_usage u;
	if (front_tenant_quotas(name, q, &err) < 0 || front_tenant_usage(name, &u, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	front_reply_json(c, 200,
	                 json_pack("{s:s, s:{s:I, s:I, s:I, s:I}, s:{s:I, s:I, s:I}}", "name", name, "quotas",
	                           quota_names[0], (json_int_t)q[0], quota_names[1], (json_int_t)q[1], quota_names[2],
	                           (json_int_t)q[2], quota_names[3], (json_int_t)q[3], "usage", "sandboxes",
	                           (json_int_t)u.sandboxes, "vcpus", (json_int_t)u.vcpus, "memory_mib",
	                           (json_int_t)u.memory_mib));
}

static int quotas_parse(json_t *j, char text[4][16], struct al_error *err)
{
	for (int i = 0; i < 4; i++) {
		json_t *v = json_object_get(j, quota_names[i]);
		json_int_t x = 0;
		if (v && !json_is_null(v)) {
			if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > QUOTA_MAX)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
				                    "%s: must be an integer from 0 (unlimited) to %u", quota_names[i],
				                    QUOTA_MAX);
			x = json_integer_value(v);
		}
		snprintf(text[i], 16, "%lld", (long long)x);
	}
	return 0;
}

void front_auth_tenant_put(struct front_conn *c, const char *name)
{
	if (!front_tenant_name_valid(name)) {
		front_reply_errorf(c, AL_ERR_INVALID_ARGUMENT, "tenant names are 1 to 63 characters from [a-z0-9_-]");
		return;
	}
	cleanup_json json_t *j = NULL;
	if (front_read_json(c, TOKEN_BODY_MAX, quota_names, &j) < 0)
		return;
	struct al_error err = {0};
	char text[4][16];
	cleanup_pgresult PGresult *res = NULL;
	if (quotas_parse(j, text, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	const char *params[] = {name, text[0], text[1], text[2], text[3]};
	if (front_pg_exec(
	        "set a tenant's quotas",
	        "INSERT INTO airlock_tenants (name, max_sandboxes, max_vcpus, max_memory_mib, max_snapshot_mib)"
	        " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO UPDATE SET max_sandboxes = $2,"
	        " max_vcpus = $3, max_memory_mib = $4, max_snapshot_mib = $5",
	        5, params, &res, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	tenant_answer(c, name);
}

void front_auth_tenant_get(struct front_conn *c, const char *name)
{
	if (!front_tenant_name_valid(name) || (!c->operator&& strcmp(c->tenant, name))) {
		front_reply_errorf(c, AL_ERR_NOT_FOUND, "no tenant \"%.64s\" for you to see", name);
		return;
	}
	tenant_answer(c, name);
}
