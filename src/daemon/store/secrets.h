/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Secrets (docs/api.md, "Secrets"): credentials registered with the API,
 * write-only, bound to host patterns, and handed only to the egress gateway,
 * which puts them into requests to those hosts. A sandbox that may use one
 * sees only a random placeholder.
 *
 * Storage: table `secrets` of the state store's database, one row per
 * (tenant, name): a random id, the binding spec as canonical JSON (hosts,
 * paths, methods, header, format) and the value encrypted with AES-256-GCM
 * under the host key <state-dir>/secrets.key (32 random bytes, 0600, owned by
 * the daemon's uid): blob = version (1 byte) | nonce (12) | ciphertext | tag
 * (16), a fresh random nonce per write, AAD = tenant NUL name, so a blob
 * moved to another row does not decrypt.
 *
 * SECURITY: a value is decrypted only to build a message to the gateway and
 * wiped (explicit_bzero) as soon as that message is sent. It is never
 * logged, never in an event (events name the secret), never in an error
 * message, never in an answer of the API.
 */
#ifndef AIRLOCK_SECRETS_H
#define AIRLOCK_SECRETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sandbox-model.h"
#include "auth.h"
#include "error.h"
#include "policy-limits.h"

struct store;

#define SECRET_KEY_FILE "secrets.key"
#define SECRET_KEY_BYTES 32
#define SECRET_NONCE_BYTES 12
#define SECRET_TAG_BYTES 16
#define SECRET_BLOB_VERSION 1
#define SECRET_ID_LEN 20 /* "sec-" + 16 hex */

#define SECRET_HOSTS_MAX 64
#define SECRET_PATHS_MAX 32
#define SECRET_PATH_MAX 256
#define SECRET_HEADER_MAX 64
#define SECRET_HEADERS_MAX 8 /* placeholder mode: the header fields it may be replaced in (issue 17) */
#define SECRET_HEADERS_DEFAULT "Authorization"
#define SECRET_FORMAT_MAX 256
#define SECRET_BODY_MAX (256u * 1024u) /* POST /v1/secrets */

/* Placeholders: POLICY_PLACEHOLDER_PREFIX + 64 hex digits of 32 bytes from
 * getrandom (policy-limits.h, the gateway's contract). */

/* ------------------------------------------------------------ crypto (pure) */

/* Loads the host key from path, creating it (32 random bytes, 0600, O_EXCL)
 * when it does not exist. Refused (AL_ERR_INTERNAL, -EPERM) when the file is
 * not a regular file, is not owned by our uid, has any mode bit beyond 0600,
 * or is not exactly SECRET_KEY_BYTES long: the message says what to fix. */
int secret_key_load(const char *path, uint8_t ret_key[SECRET_KEY_BYTES], struct al_error *err);

/* AES-256-GCM of plain under key with AAD tenant NUL name; *ret_blob is a new
 * buffer of *ret_len bytes (layout above). */
int secret_encrypt(const uint8_t key[SECRET_KEY_BYTES], const char *tenant, const char *name, const void *plain,
                   size_t len, uint8_t **ret_blob, size_t *ret_len);
/* The inverse: -EBADMSG when the blob is malformed, was made for another
 * (tenant, name), under another key, or was changed. *ret_plain is a new
 * NUL-terminated buffer of *ret_len bytes: release it with secret_wipe_free(). */
int secret_decrypt(const uint8_t key[SECRET_KEY_BYTES], const char *tenant, const char *name, const uint8_t *blob,
                   size_t blob_len, char **ret_plain, size_t *ret_len);

/* explicit_bzero(p, len) then free(p); NULL is fine. */
void secret_wipe_free(void *p, size_t len);
/* Wipes, in place, every string value of a member named "value" or
 * "key_pem" anywhere in v (before it is released). */
void secret_json_wipe(json_t *v);

/* json_decref after secret_json_wipe, as a cleanup attribute. */
static inline void secret_json_releasep(json_t **v)
{
	if (*v) {
		secret_json_wipe(*v);
		json_decref(*v);
		*v = NULL;
	}
}
#define cleanup_secret_json __attribute__((cleanup(secret_json_releasep)))

/* ------------------------------------------------------------ requests */

/* The body of POST /v1/secrets, as secret_request_parse() (api-request.h)
 * reads it. spec_json is the canonical binding spec:
 * {"format":F|null,"header":H|null,"hosts":[...],"methods":[...],"paths":[...]}. */
struct secret_request {
	char name[SECRET_NAME_MAX + 1];
	char tenant[TENANT_NAME_MAX + 1]; /* "" when not given */
	char *value;                      /* NUL-terminated; wiped by release */
	size_t value_len;
	char *spec_json;
};

/* Wipes the value. */
void secret_request_release(struct secret_request *r);

/* ------------------------------------------------------------ the store */

struct secret_info {
	char id[SECRET_ID_LEN + 1];
	char tenant[TENANT_NAME_MAX + 1];
	char name[SECRET_NAME_MAX + 1];
	char *spec_json;
	uint64_t created_ms, updated_ms;
};
void secret_info_release(struct secret_info *s);

/* Creates the table, loads (or creates) <state_dir>/secrets.key and keeps the
 * key in locked memory. Call once at start-up, after events_init(). */
int secrets_init(struct store *s, const char *state_dir, struct al_error *err);
/* Forgets the key (wiped) and the store. */
void secrets_shutdown(void);

/* Where the secrets' rows are kept: the state store's SQLite table (the
 * default), or in cluster mode PostgreSQL (cluster-secrets.c), with a key
 * every node derives from the cluster key in place of the host's (so that
 * every node decrypts them, and MACs made with secret_key_mac() are the same
 * on every node). Each function does what its SQLite twin does; -ENOENT with
 * err untouched when there is no such row. */
struct secret_rows {
	int (*upsert)(const char *tenant, const char *name, const char *new_id, const char *spec_json,
	              const uint8_t *blob, size_t blob_len, uint64_t now_ms, struct secret_info *ret,
	              struct al_error *err);
	int (*get)(const char *tenant, const char *name, struct secret_info *ret, struct al_error *err);
	int (*list)(const char *tenant, struct secret_info **ret, size_t *ret_n, struct al_error *err);
	int (*remove)(const char *tenant, const char *name, struct secret_info *ret, struct al_error *err);
	int (*load)(const char *tenant, const char *name, char ret_id[SECRET_ID_LEN + 1], char **ret_spec_json,
	            uint8_t **ret_blob, size_t *ret_len, struct al_error *err);
};
/* After secrets_init(), before any request: rows and key from then on. */
void secrets_use_rows(const struct secret_rows *rows, const uint8_t key[SECRET_KEY_BYTES]);

/* HMAC-SHA256 under the host key of purpose \0 a \0 b: a value only this
 * host can make, for tokens derived from a name (E2B's envd access token
 * of a sandbox). purpose separates the uses. -ENOTCONN before
 * secrets_init(). */
#define SECRET_MAC_BYTES 32
int secret_key_mac(const char *purpose, const char *a, const char *b, uint8_t ret[SECRET_MAC_BYTES]);

/* Creates, or replaces by (tenant, name): a replacement (rotation) keeps the
 * id and created_ms and gets a new nonce. *ret_created tells which. Emits
 * `secret.set` (data: name, created). */
int secret_set(const char *tenant, const struct secret_request *req, bool *ret_created, struct secret_info *ret,
               struct al_error *err);
/* AL_ERR_NOT_FOUND when the tenant has no secret of that name. */
int secret_get(const char *tenant, const char *name, struct secret_info *ret, struct al_error *err);
/* tenant NULL: every tenant's. Ordered by tenant, then name. */
int secret_list(const char *tenant, struct secret_info **ret, size_t *ret_n, struct al_error *err);
/* Emits `secret.deleted` (data: name). */
int secret_delete(const char *tenant, const char *name, struct secret_info *ret_deleted, struct al_error *err);

/* {"id","tenant","name","hosts","paths","methods","header","format",
 *  "created_at","updated_at"}: never the value. */
json_t *secret_info_to_json(const struct secret_info *s);

/* ------------------------------------------------------------ sandboxes */

/*
 * A sandbox's bindings, as stored in its record (placeholders are not
 * secret): [{"env":ENV,"secret":NAME,"secret_id":ID,"placeholder":P},...].
 * A binding names the secret's id too: a secret deleted and created again
 * under the same name is a new secret, and old grants do not reach it.
 */

/* The bindings for a create request's grants (env name -> secret name):
 * every secret must exist for tenant (else AL_ERR_INVALID_ARGUMENT naming the
 * env name and the secret); each binding gets a new placeholder. */
int secret_bindings_grant(const char *tenant, const struct kv_list *grants, char **ret_json, struct al_error *err);

/* The "bindings" array of a control message (ctlmsg.h) for a sandbox's
 * bindings: [{"secret","placeholder","value","hosts","paths","methods",
 * "header","format"},...], values decrypted. A binding whose secret no
 * longer exists (or is another secret now) is left out. Wipe the result with
 * secret_json_wipe() before releasing it. */
int secret_bindings_resolve(const char *tenant, const char *bindings_json, json_t **ret_array, struct al_error *err);

/* Does the bindings list name this secret? */
bool secret_bindings_use(const char *bindings_json, const char *name);

/* Env entries (name -> placeholder) of a bindings list, added to obj. */
void secret_bindings_env(const char *bindings_json, json_t *obj);

#endif
