/* SPDX-License-Identifier: Apache-2.0 */
/* Parsers for API request bodies: one per resource, pure functions (no I/O),
 * fuzzed by tests/fuzz/fuzz-api-request.c. */
#ifndef AIRLOCK_API_REQUEST_H
#define AIRLOCK_API_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"
#include "sandbox-model.h"

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

#endif
