/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's control API requests as Airlock's (docs/e2b.md, "Control API"):
 * pure parsers, no I/O (api-e2b-request.c), fuzzed by
 * tests/fuzz/fuzz-e2b-request.c. The handlers are in api-e2b-control.c. */
#ifndef AIRLOCK_API_E2B_REQUEST_H
#define AIRLOCK_API_E2B_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api-request.h"
#include "error.h"
#include "store.h"

/* What an E2B sandbox gets that E2B's create cannot say (docs/e2b.md). */
#define E2B_VCPUS 1
#define E2B_MEMORY_MIB 512
#define E2B_TIMEOUT_DEFAULT_S 300   /* the SDKs' documented default */
#define E2B_ALL_TRAFFIC "0.0.0.0/0" /* the SDK's ALL_TRAFFIC */
#define E2B_LIST_LIMIT_MAX 100      /* E2B's largest page */
#define E2B_METADATA_FILTERS_MAX 16
#define E2B_NEXT_TOKEN_MAX 64

/*
 * The body of POST /v2/sandboxes (E2B's NewSandboxV2) as an Airlock create
 * request: templateID → template, envVars → env, metadata, timeout →
 * timeout_s (default E2B_TIMEOUT_DEFAULT_S), autoPause → on_timeout, the
 * network options as e2b_network_policy() maps them, E2B_VCPUS and
 * E2B_MEMORY_MIB. Options Airlock has no counterpart for are refused.
 * SECURITY: client input, at most API_CREATE_BODY_MAX bytes: a JSON object
 * without unknown or duplicate fields, every shape checked here, then the
 * mapped request checked by create_request_parse as every create is (names,
 * sizes, limits, the operator's network ceiling). Errors are
 * AL_ERR_INVALID_ARGUMENT (400; a network rule outside the ceiling too)
 * with a message naming the field.
 */
int e2b_create_request_parse(const char *body, size_t len, unsigned host_memory_mib, struct create_request *ret,
                             struct al_error *err);
/* Says in err's message how E2B's fields were mapped (for a refusal of the
 * mapped create, by the parser or by sandbox_create). */
void e2b_create_error_explain(struct al_error *err);

/*
 * The body of PUT /sandboxes/{id}/network (E2B's SandboxNetworkUpdateConfig)
 * as Airlock's canonical policy (network-policy.h). An update replaces the
 * whole policy: one that asks for nothing is the closed, empty policy.
 * SECURITY: client input, as for e2b_create_request_parse.
 */
int e2b_network_request_parse(const char *body, size_t len, char **ret_policy_json, struct al_error *err);

/* The query of GET /v2/sandboxes (v2) or GET /sandboxes (v1: running ones,
 * one page, only metadata), each argument NULL when absent. */
struct e2b_list_args {
	const char *metadata, *state, *limit, *next_token, *order, *started_after, *template_name;
};

struct e2b_list_query {
	size_t n_meta;
	char *meta_text; /* owned; keys and values point into it */
	const char *keys[E2B_METADATA_FILTERS_MAX], *values[E2B_METADATA_FILTERS_MAX];
	bool running, paused;
	const char *template_name; /* the args' (NULL: any) */
	uint64_t started_after_ms;
	bool asc;
	size_t limit;
	bool has_token; /* list only what comes after (token_ms, token_id) */
	uint64_t token_ms;
	char token_id[SANDBOX_ID_MAX + 1];
};

/*
 * SECURITY: query arguments are client input (already URL-decoded once by
 * the server). metadata is "k1=v1&k2=v2" with every key and value
 * URL-encoded and the pairs form-encoded (the SDK's encodeURIComponent, then
 * URLSearchParams): each is decoded twice, at most E2B_METADATA_FILTERS_MAX
 * pairs within the metadata limits. state: running, paused or both
 * comma-separated; limit 1..E2B_LIST_LIMIT_MAX; order asc|desc;
 * startedAfter an ISO time (toISOString()); nextToken only as
 * e2b_next_token_format makes it. AL_ERR_INVALID_ARGUMENT naming the
 * argument. Release *ret with e2b_list_query_release, also after a failure.
 */
int e2b_list_query_parse(const struct e2b_list_args *a, bool v2, struct e2b_list_query *ret, struct al_error *err);
void e2b_list_query_release(struct e2b_list_query *q);

/* The X-Next-Token after an item: "MS.ID", its start time and id. */
void e2b_next_token_format(uint64_t created_ms, const char *id, char buf[E2B_NEXT_TOKEN_MAX + 1]);

#endif
