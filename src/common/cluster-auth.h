/* SPDX-License-Identifier: Apache-2.0 */
/* Cluster mode's delegation (include/airlock/cluster.h): the front signs the
 * principal of a request it forwards, a node checks it. Pure functions over
 * the cluster key, shared by airlock-api and airlockd. */
#ifndef AIRLOCK_CLUSTER_AUTH_H
#define AIRLOCK_CLUSTER_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "airlock/cluster.h"

#define CLUSTER_TOKEN_LEN (sizeof(CLUSTER_TOKEN_PREFIX) - 1 + 43) /* acl_ + 43 base64url chars */

struct cluster_key {
	uint8_t bytes[CLUSTER_KEY_MAX];
	size_t len;
};

/* Reads the key file: at least CLUSTER_KEY_MIN and at most CLUSTER_KEY_MAX
 * bytes, a regular file not readable by others (0600 or 0640). -errno; the
 * message in err_msg (of err_size bytes) says what is wrong. */
int cluster_key_load(const char *path, struct cluster_key *ret, char *err_msg, size_t err_size);

/* The Bearer token for principal ("tenant:NAME;exp=N" or "operator;exp=N"). */
void cluster_delegation_sign(const struct cluster_key *key, const char *principal, char out[CLUSTER_TOKEN_LEN + 1]);

struct cluster_principal {
	bool operator_;
	char tenant[64]; /* "" for the operator */
	int64_t exp;     /* unix seconds */
};

/*
 * SECURITY: both values come from whoever reaches a node's listener. The
 * principal is parsed strictly (at most CLUSTER_PRINCIPAL_MAX bytes, one of
 * the two forms, a valid tenant name, a decimal exp), the token compared in
 * constant time with the one the key makes, and exp must lie in
 * [now_s, now_s + CLUSTER_DELEGATION_TTL_S]. -EACCES for any failure (the
 * reason in *ret_why, a static string), 0 and *ret on success.
 */
int cluster_delegation_verify(const struct cluster_key *key, const char *principal, const char *bearer_token,
                              int64_t now_s, struct cluster_principal *ret, const char **ret_why);

/* The pure parse of a principal; -EINVAL if malformed. */
int cluster_principal_parse(const char *principal, struct cluster_principal *ret);

#endif
