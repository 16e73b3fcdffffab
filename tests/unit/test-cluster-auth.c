/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/common/cluster-auth.c: the delegation a front signs and
 * a node checks (include/airlock/cluster.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cluster-auth.h"
#include "util.h"

#define NOW 1800000000

static struct cluster_key key_of(char c)
{
	struct cluster_key k = {.len = 32};
	memset(k.bytes, c, k.len);
	return k;
}

static void test_sign_then_verify(void **state)
{
	(void)state;
	struct cluster_key k = key_of('k');
	char tok[CLUSTER_TOKEN_LEN + 1];
	cluster_delegation_sign(&k, "tenant:acme;exp=1800000060", tok);
	assert_int_equal(strlen(tok), CLUSTER_TOKEN_LEN);
	assert_memory_equal(tok, "acl_", 4);
	struct cluster_principal p;
	const char *why = NULL;
	assert_int_equal(cluster_delegation_verify(&k, "tenant:acme;exp=1800000060", tok, NOW, &p, &why), 0);
	assert_false(p.operator_);
	assert_string_equal(p.tenant, "acme");
	cluster_delegation_sign(&k, "operator;exp=1800000001", tok);
	assert_int_equal(cluster_delegation_verify(&k, "operator;exp=1800000001", tok, NOW, &p, &why), 0);
	assert_true(p.operator_);
	assert_string_equal(p.tenant, "");
}

static void test_refusals(void **state)
{
	(void)state;
	struct cluster_key k = key_of('k'), other = key_of('o');
	char tok[CLUSTER_TOKEN_LEN + 1], forged[CLUSTER_TOKEN_LEN + 1];
	const char *pr = "tenant:acme;exp=1800000060";
	cluster_delegation_sign(&k, pr, tok);
	cluster_delegation_sign(&other, pr, forged);
	struct cluster_principal p;
	const char *why = NULL;
	/* Another key, another principal with the same MAC, a changed byte. */
	assert_int_equal(cluster_delegation_verify(&k, pr, forged, NOW, &p, &why), -EACCES);
	assert_int_equal(cluster_delegation_verify(&k, "tenant:evil;exp=1800000060", tok, NOW, &p, &why), -EACCES);
	tok[10] ^= 1;
	assert_int_equal(cluster_delegation_verify(&k, pr, tok, NOW, &p, &why), -EACCES);
	tok[10] ^= 1;
	/* Expired, too far ahead, missing or short token. */
	assert_int_equal(cluster_delegation_verify(&k, pr, tok, 1800000061, &p, &why), -EACCES);
	assert_non_null(strstr(why, "expired"));
	cluster_delegation_sign(&k, "tenant:acme;exp=1800009999", tok);
	assert_int_equal(cluster_delegation_verify(&k, "tenant:acme;exp=1800009999", tok, NOW, &p, &why), -EACCES);
	assert_int_equal(cluster_delegation_verify(&k, pr, NULL, NOW, &p, &why), -EACCES);
	assert_int_equal(cluster_delegation_verify(&k, pr, "acl_short", NOW, &p, &why), -EACCES);
	assert_int_equal(cluster_delegation_verify(&k, NULL, tok, NOW, &p, &why), -EACCES);
}

static void test_principal_parse(void **state)
{
	(void)state;
	struct cluster_principal p;
	assert_int_equal(cluster_principal_parse("tenant:a-b_c9;exp=12", &p), 0);
	assert_string_equal(p.tenant, "a-b_c9");
	assert_int_equal(p.exp, 12);
	const char *bad[] = {"",
	                     "operator",
	                     "operator;exp=",
	                     "operator;exp=1x",
	                     "operator;exp=-1",
	                     "tenant:;exp=1",
	                     "tenant:Acme;exp=1",
	                     "tenant:a b;exp=1",
	                     "tenant:a;exp=1;exp=2",
	                     "admin;exp=1",
	                     "operatorx;exp=1",
	                     "tenant:a;EXP=1",
	                     "tenant:a;exp=1234567890123",
	                     "tenant:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa;exp=1"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		int r = cluster_principal_parse(bad[i], &p);
		if (r != -EINVAL)
			fail_msg("accepted \"%s\"", bad[i]);
	}
	char longer[CLUSTER_PRINCIPAL_MAX + 10];
	memset(longer, 'a', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	assert_int_equal(cluster_principal_parse(longer, &p), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sign_then_verify),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_principal_parse),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
