/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/front/front-delegation.c: what the front signs is what
 * a node accepts (cluster_delegation_verify, src/common/cluster-auth.c), for
 * a tenant and for the operator; another key, another principal or a
 * lapsed exp is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "front-delegation.h"
#include "util.h"

#define NOW 1796000000

static struct cluster_key key_of(uint8_t fill)
{
	struct cluster_key k = {.len = 32};
	memset(k.bytes, fill, k.len);
	return k;
}

/* The token of an Authorization value ("Bearer acl_…"). */
static const char *token_of(const char *authorization)
{
	assert_memory_equal(authorization, "Bearer " CLUSTER_TOKEN_PREFIX, 11);
	return authorization + 7;
}

static void test_tenant_accepted(void **state)
{
	(void)state;
	struct cluster_key k = key_of(7);
	char principal[CLUSTER_PRINCIPAL_MAX + 1], auth[FRONT_DELEGATION_AUTH_MAX];
	front_delegation_make(&k, "team-a", NOW, principal, auth);
	assert_string_equal(principal, "tenant:team-a;exp=1796000060");
	assert_int_equal(strlen(token_of(auth)), CLUSTER_TOKEN_LEN);
	struct cluster_principal p;
	const char *why = NULL;
	assert_int_equal(cluster_delegation_verify(&k, principal, token_of(auth), NOW, &p, &why), 0);
	assert_false(p.operator_);
	assert_string_equal(p.tenant, "team-a");
	assert_int_equal(p.exp, NOW + FRONT_DELEGATION_S);
	/* still good a little later, not once exp passed */
	assert_int_equal(cluster_delegation_verify(&k, principal, token_of(auth), NOW + 59, &p, &why), 0);
	assert_int_equal(cluster_delegation_verify(&k, principal, token_of(auth), NOW + 61, &p, &why), -EACCES);
}

static void test_operator_accepted(void **state)
{
	(void)state;
	struct cluster_key k = key_of(9);
	char principal[CLUSTER_PRINCIPAL_MAX + 1], auth[FRONT_DELEGATION_AUTH_MAX];
	front_delegation_make(&k, NULL, NOW, principal, auth);
	assert_string_equal(principal, "operator;exp=1796000060");
	struct cluster_principal p;
	const char *why = NULL;
	assert_int_equal(cluster_delegation_verify(&k, principal, token_of(auth), NOW, &p, &why), 0);
	assert_true(p.operator_);
}

static void test_refused(void **state)
{
	(void)state;
	struct cluster_key k = key_of(1), other = key_of(2);
	char principal[CLUSTER_PRINCIPAL_MAX + 1], auth[FRONT_DELEGATION_AUTH_MAX];
	front_delegation_make(&k, "team-a", NOW, principal, auth);
	struct cluster_principal p;
	const char *why = NULL;
	/* another key */
	assert_int_equal(cluster_delegation_verify(&other, principal, token_of(auth), NOW, &p, &why), -EACCES);
	assert_non_null(why);
	/* the MAC of one principal does not vouch for another */
	assert_int_equal(cluster_delegation_verify(&k, "tenant:team-b;exp=1796000060", token_of(auth), NOW, &p, &why),
	                 -EACCES);
	assert_int_equal(cluster_delegation_verify(&k, "operator;exp=1796000060", token_of(auth), NOW, &p, &why),
	                 -EACCES);
	/* two fronts with the same key make the same proof */
	char principal2[CLUSTER_PRINCIPAL_MAX + 1], auth2[FRONT_DELEGATION_AUTH_MAX];
	front_delegation_make(&k, "team-a", NOW, principal2, auth2);
	assert_string_equal(auth, auth2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_tenant_accepted),
	    cmocka_unit_test(test_operator_accepted),
	    cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
