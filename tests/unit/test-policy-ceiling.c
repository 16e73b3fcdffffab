/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the operator's network ceiling (src/common/policy-ceiling.c,
 * issue 17): which allow rules a policy may hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "policy-ceiling.h"
#include "util.h"

struct rule_case {
	const char *rule;
	bool ok;
};

static void check_cases(const struct policy_ceiling *c, const struct rule_case *cases, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct policy_rule rule;
		struct al_error err = {0};
		assert_int_equal(policy_rule_parse(cases[i].rule, strlen(cases[i].rule), &rule, &err), 0);
		memset(&err, 0, sizeof(err));
		int r = policy_ceiling_check_rule(c, &rule, &err);
		if ((r == 0) != cases[i].ok)
			fail_msg("%s: expected %s, got %d (%s)", cases[i].rule, cases[i].ok ? "within" : "outside", r,
			         err.message);
		if (r < 0) {
			assert_int_equal(r, -EPERM);
			assert_int_equal(err.code, AL_ERR_FORBIDDEN);
			assert_true(err.message[0] != '\0');
		}
	}
}

/* The default: public addresses only. */
static void test_default(void **state)
{
	(void)state;
	static const struct rule_case cases[] = {
	    {"example.com", true},
	    {"*.example.com:8443", true},
	    {"8.8.8.8", true},
	    {"8.8.8.8:53", true},
	    {"1.0.0.0/8", true},
	    {"11.0.0.0/8", true},
	    {"[2606:4700::1111]:443", true},
	    {"2600::/12", true},
	    /* every non-public class */
	    {"10.0.0.1", false},
	    {"10.0.0.0/8", false},
	    {"172.16.0.0/12", false},
	    {"192.168.1.1:22", false},
	    {"127.0.0.1", false},
	    {"100.64.0.1", false},
	    {"169.254.1.1", false},
	    {"169.254.169.254", false},
	    {"100.100.100.200", false},
	    {"168.63.129.16", false},
	    {"224.0.0.1", false},
	    {"0.0.0.0/8", false},
	    {"255.255.255.255", false},
	    {"192.0.2.1", false},
	    {"198.18.0.1", false},
	    {"240.0.0.1", false},
	    /* whole spaces and ranges that straddle a boundary */
	    {"0.0.0.0/0", false},
	    {"0.0.0.0/0:22", false},
	    {"::/0", false},
	    {"8.0.0.0/7", true},   /* 8/8 and 9/8, both public */
	    {"10.0.0.0/7", false}, /* 10/8 private, 11/8 public */
	    {"172.0.0.0/8", false},
	    {"168.0.0.0/6", false},
	    {"2000::/3", false}, /* holds Teredo, 6to4, documentation */
	    /* IPv6 */
	    {"[::1]", false},
	    {"fc00::/7", false},
	    {"[fd00:ec2::254]", false},
	    {"[fe80::1]:443", false},
	    {"[::ffff:10.0.0.1]", false},
	    {"[::ffff:8.8.8.8]", false},
	    {"2002::/16", false},
	    {"[2001:db8::1]", false},
	    {"[ff02::1]", false},
	};
	struct policy_ceiling c = {0};
	check_cases(&c, cases, ARRAY_SIZE(cases));
}

/* The metadata names, and what "metadata": true opens. */
static void test_metadata_names(void **state)
{
	(void)state;
	static const struct rule_case closed[] = {
	    {"metadata.google.internal", false}, {"metadata.google.internal:80", false},
	    {"*.google.internal", false},        {"metadata.goog", false},
	    {"metadata.azure.com", false},       {"*.azure.com", false},
	    {"google.internal", true},           {"management.azure.com", true},
	};
	struct policy_ceiling c = {0};
	check_cases(&c, closed, ARRAY_SIZE(closed));
	assert_true(policy_ceiling_is_metadata_name("metadata.goog"));
	assert_false(policy_ceiling_is_metadata_name("example.com"));
	c.metadata = true;
	static const struct rule_case open[] = {
	    {"metadata.google.internal", true}, {"*.google.internal", true}, {"169.254.169.254", true},
	    {"[fd00:ec2::254]", true},          {"169.254.0.0/16", false}, /* metadata is opened, link-local is not */
	};
	check_cases(&c, open, ARRAY_SIZE(open));
}

static void add(struct policy_ceiling *c, const char *net)
{
	struct al_error err = {0};
	assert_int_equal(policy_ceiling_add_net(c, net, strlen(net), &err), 0);
}

static void test_operator_nets(void **state)
{
	(void)state;
	struct policy_ceiling c = {0};
	add(&c, "10.20.0.0/16");
	add(&c, "192.0.2.0/24");
	add(&c, "169.254.0.0/16");
	add(&c, "fd12::/16");
	add(&c, "10.20.0.0/16"); /* a repeat is kept once */
	assert_int_equal(c.n_nets, 4);
	static const struct rule_case cases[] = {
	    {"10.20.1.2", true},
	    {"10.20.1.2:5432", true},
	    {"10.20.0.0/16", true},
	    {"10.20.128.0/17", true},
	    {"10.20.0.0/15", false}, /* wider than the ceiling's network */
	    {"10.21.0.1", false},
	    {"10.0.0.0/8", false},
	    {"192.0.2.0/24", true},
	    {"192.0.2.0/23", false},
	    {"[fd12::1]:443", true},
	    {"fd00::/8", false},
	    /* metadata stays closed inside a ceiling network */
	    {"169.254.1.1", true},
	    {"169.254.169.254", false},
	    {"169.254.169.0/24", false},
	    {"0.0.0.0/0", false},
	};
	check_cases(&c, cases, ARRAY_SIZE(cases));

	struct al_error err = {0};
	assert_int_equal(policy_ceiling_add_net(&c, "example.com", 11, &err), -EINVAL);
	assert_int_equal(policy_ceiling_add_net(&c, "10.0.0.0/8:22", 13, &err), -EINVAL);

	char desc[256];
	policy_ceiling_describe(&c, desc, sizeof(desc));
	assert_string_equal(desc, "public addresses, 10.20.0.0/16, 192.0.2.0/24, 169.254.0.0/16, fd12::/16");
	c.metadata = true;
	policy_ceiling_describe(&c, desc, sizeof(desc));
	assert_non_null(strstr(desc, ", metadata"));
}

static struct policy_addr addr_of(const char *text)
{
	struct policy_rule rule;
	struct al_error err = {0};
	assert_int_equal(policy_rule_parse(text, strlen(text), &rule, &err), 0);
	return rule.host.addr;
}

/* The gateway's dial-time check, and the metadata address in IPv6 forms. */
static void test_addrs(void **state)
{
	(void)state;
	struct policy_ceiling c = {0};
	add(&c, "10.20.0.0/16");
	struct policy_addr a;
	a = addr_of("8.8.8.8");
	assert_true(policy_ceiling_allows_addr(&c, &a));
	a = addr_of("10.20.3.4");
	assert_true(policy_ceiling_allows_addr(&c, &a));
	a = addr_of("10.21.3.4");
	assert_false(policy_ceiling_allows_addr(&c, &a));
	a = addr_of("169.254.169.254");
	assert_false(policy_ceiling_allows_addr(&c, &a));
	assert_true(policy_addr_is_metadata(&a));
	static const char *const meta6[] = {
	    "[::ffff:169.254.169.254]",   "[64:ff9b::a9fe:a9fe]", "[2002:a9fe:a9fe::1]",
	    "[2001:0:1:2:3:4:5601:5601]", "[::a9fe:a9fe]",        "[fd00:ec2::254]",
	};
	for (size_t i = 0; i < ARRAY_SIZE(meta6); i++) {
		a = addr_of(meta6[i]);
		if (!policy_addr_is_metadata(&a))
			fail_msg("%s is a metadata address", meta6[i]);
		assert_false(policy_ceiling_allows_addr(&c, &a));
	}
	a = addr_of("[2606:4700::1111]");
	assert_false(policy_addr_is_metadata(&a));
	assert_true(policy_ceiling_allows_addr(&c, &a));
	c.metadata = true;
	a = addr_of("169.254.169.254");
	assert_true(policy_ceiling_allows_addr(&c, &a));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_default),
	    cmocka_unit_test(test_metadata_names),
	    cmocka_unit_test(test_operator_nets),
	    cmocka_unit_test(test_addrs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
