/* SPDX-License-Identifier: Apache-2.0 */
/* The delegation a front puts on a request it forwards (cluster.h): pure,
 * so that its unit test can check it against the node's verifier. */
#include "front-delegation.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

void front_delegation_make(const struct cluster_key *key, const char *tenant, int64_t now_s,
                           char principal[CLUSTER_PRINCIPAL_MAX + 1], char authorization[FRONT_DELEGATION_AUTH_MAX])
{
	long long exp = (long long)now_s + FRONT_DELEGATION_S;
	if (tenant)
		snprintf(principal, CLUSTER_PRINCIPAL_MAX + 1, "tenant:%s;exp=%lld", tenant, exp);
	else
		snprintf(principal, CLUSTER_PRINCIPAL_MAX + 1, "operator;exp=%lld", exp);
	char token[CLUSTER_TOKEN_LEN + 1];
	cluster_delegation_sign(key, principal, token);
	snprintf(authorization, FRONT_DELEGATION_AUTH_MAX, "Bearer %s", token);
	explicit_bzero(token, sizeof(token));
}
