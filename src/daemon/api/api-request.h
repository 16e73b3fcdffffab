/* SPDX-License-Identifier: Apache-2.0 */
/* Parsers for API request bodies: one per resource, pure functions (no I/O),
 * fuzzed by tests/fuzz/fuzz-api-request.c. */
#ifndef AIRLOCK_API_REQUEST_H
#define AIRLOCK_API_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "auth.h"
#include "error.h"
#include "sandbox-model.h"

struct secret_request; /* secrets.h */

#define API_CREATE_BODY_MAX (1u << 20)
#define API_NETWORK_BODY_MAX (256u * 1024u) /* PUT /v1/sandboxes/{id}/network */
#define API_EXEC_BODY_MAX (16u << 20)

int timeout_request_parse(const char *body, size_t len, struct timeout_request *ret, struct al_error *err);

/* SECURITY: bodies come from any client allowed on the socket. Each parser
 * takes a body already capped at its *_BODY_MAX, rejects unknown fields,
 * wrong types and out-of-range values with AL_ERR_INVALID_ARGUMENT and a
 * message naming the field, and allocates nothing it does not return. */
int create_request_parse(const char *body, size_t len, unsigned host_memory_mib, struct create_request *ret,
                         struct al_error *err);

int exec_request_parse(const char *body, size_t len, struct exec_request *ret, struct al_error *err);

/* The "secrets" member of obj (create or fork body): an object of at most
 * SANDBOX_SECRETS_MAX env name -> secret name; absent or null is none. An
 * env name that `env` (may be NULL) also sets is refused. */
int secret_grants_parse(const json_t *obj, const struct kv_list *env, struct kv_list *ret, struct al_error *err);

/* Every key of obj is one of allowed (NULL-terminated), else -EINVAL:
 * "unknown field \"KEY\" (allowed: A, B, ...)". For the parsers of other
 * files (api-request-secrets.c). */
int request_fields_check(json_t *obj, const char *const *allowed, struct al_error *err);

/* ------------------------------------------------------------ tokens */

/* The body of POST /v1/tokens. */
struct token_create_request {
	char tenant[TENANT_NAME_MAX + 1];            /* required */
	char description[TOKEN_DESCRIPTION_MAX + 1]; /* optional, default "" */
};

/* SECURITY: bodies come from an admin client but are still parsed strictly:
 * at most AUTH_BODY_MAX bytes (else AL_ERR_TOO_LARGE), a JSON object without
 * duplicate or unknown keys, right types and ranges, else
 * AL_ERR_INVALID_ARGUMENT with a message naming the field. Pure; nothing to
 * release. */
int token_create_request_parse(const char *body, size_t len, struct token_create_request *ret, struct al_error *err);

/* ------------------------------------------------------------ secrets (api-request-secrets.c) */

/* The body of POST /v1/secrets into *ret (release it with
 * secret_request_release(); spec_json is the canonical binding spec:
 * {"format":F|null,"header":H|null,"hosts":[...],"methods":[...],"paths":[...]}).
 * SECURITY: client input, parsed strictly: at most SECRET_BODY_MAX bytes, one
 * JSON object without unknown or duplicate keys; every field checked
 * (AL_ERR_INVALID_ARGUMENT naming the field). Hosts are parsed with the
 * policy grammar the gateway enforces (policy_rule_parse) and must be names
 * (an IP or network cannot be bound: TLS interception needs a name); the
 * header may not be one that frames or routes the request
 * (policy_header_reserved: Host, Content-Length, Transfer-Encoding,
 * Connection, ...). No error message ever contains the value, not even the
 * JSON parser's context. */
int secret_request_parse(const char *body, size_t len, struct secret_request *ret, struct al_error *err);

/* SECURITY: bodies come from an admin client but are still parsed strictly:
 * at most AUTH_BODY_MAX bytes (else AL_ERR_TOO_LARGE), a JSON object without
 * duplicate or unknown keys, right types and ranges, else
 * AL_ERR_INVALID_ARGUMENT with a message naming the field. Pure. PUT
 * /v1/tenants/{name}: {"max_sandboxes","max_vcpus","max_memory_mib"}: each optional integer
 * 0..QUOTA_MAX (absent or null = 0 = unlimited). */
int quota_request_parse(const char *body, size_t len, struct tenant_quota *ret, struct al_error *err);

/* A JSON object (duplicate keys refused) from a body, or AL_ERR_INVALID_ARGUMENT. */
int request_body_parse(const char *body, size_t len, json_t **ret, struct al_error *err);

/* Warm pools (api-pool-request.c), strict like the others. --warm-pool
 * TEMPLATE[:VCPUS:MiB]=N (VCPUS 1, MiB 256 when not given); PUT /v1/pools:
 * {"template", "vcpus", "memory_mib", "size", "tenant"}: template and size
 * required, size 0..POOL_SIZE_MAX (0 removes the pool). */
#define POOL_BODY_MAX 4096
int pool_flag_parse(const char *arg, unsigned host_memory_mib, struct pool_spec *ret, struct al_error *err);
int pool_request_parse(const char *body, size_t len, unsigned host_memory_mib, struct pool_spec *ret,
                       struct al_error *err);

#endif
