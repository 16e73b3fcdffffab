/* SPDX-License-Identifier: Apache-2.0 */
/* The front's side of the delegation (include/airlock/cluster.h): the
 * principal of a forwarded request and the MAC that proves the front made
 * it; src/common/cluster-auth.c signs, a node verifies. */
#ifndef AIRLOCK_FRONT_DELEGATION_H
#define AIRLOCK_FRONT_DELEGATION_H

#include <stdint.h>

#include "cluster-auth.h"

#define FRONT_DELEGATION_S 60 /* exp = now + this (a node accepts up to CLUSTER_DELEGATION_TTL_S) */
#define FRONT_DELEGATION_AUTH_MAX 128

/* X-Airlock-Principal for tenant (NULL: the operator) at now_s, and the
 * Authorization value ("Bearer acl_…") that proves it. */
void front_delegation_make(const struct cluster_key *key, const char *tenant, int64_t now_s,
                           char principal[CLUSTER_PRINCIPAL_MAX + 1], char authorization[FRONT_DELEGATION_AUTH_MAX]);

#endif
