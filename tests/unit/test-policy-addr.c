/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the address classifier (src/common/policy-addr.c):
 * every range, at both of its edges and just outside them. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "policy-addr.h"
#include "util.h"

#define C(x) POLICY_ADDR_##x

struct v4_case {
	const char *addr;
	enum policy_addr_class cls;
};

static const struct v4_case v4_cases[] = {
    {"0.0.0.0", C(UNSPECIFIED)},
    {"0.255.255.255", C(UNSPECIFIED)},
    {"1.0.0.0", C(PUBLIC)},
    {"9.255.255.255", C(PUBLIC)},
    {"10.0.0.0", C(PRIVATE)},
    {"10.255.255.255", C(PRIVATE)},
    {"11.0.0.0", C(PUBLIC)},
    {"100.63.255.255", C(PUBLIC)},
    {"100.64.0.0", C(CGNAT)},
    {"100.127.255.255", C(CGNAT)},
    {"100.128.0.0", C(PUBLIC)},
    {"100.100.100.199", C(CGNAT)},
    {"100.100.100.200", C(METADATA)},
    {"100.100.100.201", C(CGNAT)},
    {"126.255.255.255", C(PUBLIC)},
    {"127.0.0.0", C(LOOPBACK)},
    {"127.0.0.1", C(LOOPBACK)},
    {"127.255.255.255", C(LOOPBACK)},
    {"128.0.0.0", C(PUBLIC)},
    {"168.63.129.16", C(METADATA)},
    {"169.253.255.255", C(PUBLIC)},
    {"169.254.0.0", C(LINK_LOCAL)},
    {"169.254.169.253", C(LINK_LOCAL)},
    {"169.254.169.254", C(METADATA)},
    {"169.254.169.255", C(LINK_LOCAL)},
    {"169.254.255.255", C(LINK_LOCAL)},
    {"169.255.0.0", C(PUBLIC)},
    {"172.15.255.255", C(PUBLIC)},
    {"172.16.0.0", C(PRIVATE)},
    {"172.31.255.255", C(PRIVATE)},
    {"172.32.0.0", C(PUBLIC)},
    {"191.255.255.255", C(PUBLIC)},
    {"192.0.0.0", C(RESERVED)},
    {"192.0.0.191", C(RESERVED)},
    {"192.0.0.192", C(METADATA)},
    {"192.0.0.193", C(RESERVED)},
    {"192.0.0.255", C(RESERVED)},
    {"192.0.1.255", C(PUBLIC)},
    {"192.0.2.0", C(DOCUMENTATION)},
    {"192.0.2.255", C(DOCUMENTATION)},
    {"192.0.3.0", C(PUBLIC)},
    {"192.88.99.0", C(RESERVED)},
    {"192.167.255.255", C(PUBLIC)},
    {"192.168.0.0", C(PRIVATE)},
    {"192.168.255.255", C(PRIVATE)},
    {"192.169.0.0", C(PUBLIC)},
    {"198.17.255.255", C(PUBLIC)},
    {"198.18.0.0", C(BENCHMARKING)},
    {"198.19.255.255", C(BENCHMARKING)},
    {"198.20.0.0", C(PUBLIC)},
    {"198.51.99.255", C(PUBLIC)},
    {"198.51.100.0", C(DOCUMENTATION)},
    {"198.51.100.255", C(DOCUMENTATION)},
    {"198.51.101.0", C(PUBLIC)},
    {"203.0.112.255", C(PUBLIC)},
    {"203.0.113.0", C(DOCUMENTATION)},
    {"203.0.113.255", C(DOCUMENTATION)},
    {"203.0.114.0", C(PUBLIC)},
    {"8.8.8.8", C(PUBLIC)},
    {"223.255.255.255", C(PUBLIC)},
    {"224.0.0.0", C(MULTICAST)},
    {"239.255.255.255", C(MULTICAST)},
    {"240.0.0.0", C(RESERVED)},
    {"255.255.255.254", C(RESERVED)},
    {"255.255.255.255", C(BROADCAST)},
};

static void test_v4_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(v4_cases); i++) {
		struct in_addr a;
		assert_int_equal(inet_pton(AF_INET, v4_cases[i].addr, &a), 1);
		enum policy_addr_class got = policy_addr_classify_v4(&a);
		if (got != v4_cases[i].cls)
			fail_msg("%s: got %s, want %s", v4_cases[i].addr, policy_addr_class_name(got),
			         policy_addr_class_name(v4_cases[i].cls));
	}
}

struct v6_case {
	const char *addr;
	enum policy_addr_class cls;
	enum policy_addr_embed embed;
	const char *embedded; /* when embed != NONE */
	enum policy_addr_class embedded_cls;
};

#define E(x) POLICY_EMBED_##x

static const struct v6_case v6_cases[] = {
    {"::", C(UNSPECIFIED), E(NONE), NULL, 0},
    {"::1", C(LOOPBACK), E(NONE), NULL, 0},
    {"::2", C(EMBEDDED_IPV4), E(COMPAT), "0.0.0.2", C(UNSPECIFIED)},
    {"::7f00:1", C(EMBEDDED_IPV4), E(COMPAT), "127.0.0.1", C(LOOPBACK)},
    {"::ffff:ffff", C(EMBEDDED_IPV4), E(COMPAT), "255.255.255.255", C(BROADCAST)},
    {"::1:0:0", C(RESERVED), E(NONE), NULL, 0},
    {"::fffe:ffff:ffff", C(RESERVED), E(NONE), NULL, 0},
    {"::ffff:0.0.0.0", C(EMBEDDED_IPV4), E(MAPPED), "0.0.0.0", C(UNSPECIFIED)},
    {"::ffff:127.0.0.1", C(EMBEDDED_IPV4), E(MAPPED), "127.0.0.1", C(LOOPBACK)},
    {"::ffff:169.254.169.254", C(EMBEDDED_IPV4), E(MAPPED), "169.254.169.254", C(METADATA)},
    {"::ffff:8.8.8.8", C(EMBEDDED_IPV4), E(MAPPED), "8.8.8.8", C(PUBLIC)},
    {"::ffff:255.255.255.255", C(EMBEDDED_IPV4), E(MAPPED), "255.255.255.255", C(BROADCAST)},
    {"::1:0:0:0", C(RESERVED), E(NONE), NULL, 0},
    {"64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", C(RESERVED), E(NONE), NULL, 0},
    {"64:ff9b::", C(EMBEDDED_IPV4), E(NAT64), "0.0.0.0", C(UNSPECIFIED)},
    {"64:ff9b::10.0.0.1", C(EMBEDDED_IPV4), E(NAT64), "10.0.0.1", C(PRIVATE)},
    {"64:ff9b::ffff:ffff", C(EMBEDDED_IPV4), E(NAT64), "255.255.255.255", C(BROADCAST)},
    {"64:ff9b::1:0:0", C(RESERVED), E(NONE), NULL, 0},
    {"64:ff9b:1::", C(RESERVED), E(NONE), NULL, 0},
    {"100::", C(RESERVED), E(NONE), NULL, 0},
    {"100::ffff:ffff:ffff:ffff", C(RESERVED), E(NONE), NULL, 0},
    {"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(RESERVED), E(NONE), NULL, 0},
    {"2000::", C(PUBLIC), E(NONE), NULL, 0},
    {"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(PUBLIC), E(NONE), NULL, 0},
    /* Teredo: server 65.54.227.120, client 192.0.2.45 obfuscated (RFC 4380 example) */
    {"2001::", C(EMBEDDED_IPV4), E(TEREDO), "255.255.255.255", C(BROADCAST)},
    {"2001:0:4136:e378:8000:63bf:3fff:fdd2", C(EMBEDDED_IPV4), E(TEREDO), "192.0.2.45", C(DOCUMENTATION)},
    {"2001:0:ffff:ffff:ffff:ffff:80ff:fffe", C(EMBEDDED_IPV4), E(TEREDO), "127.0.0.1", C(LOOPBACK)},
    {"2001:1::", C(PUBLIC), E(NONE), NULL, 0},
    {"2001:2::", C(BENCHMARKING), E(NONE), NULL, 0},
    {"2001:2:0:ffff:ffff:ffff:ffff:ffff", C(BENCHMARKING), E(NONE), NULL, 0},
    {"2001:2:1::", C(PUBLIC), E(NONE), NULL, 0},
    {"2001:10::", C(RESERVED), E(NONE), NULL, 0},
    {"2001:2f:ffff:ffff:ffff:ffff:ffff:ffff", C(RESERVED), E(NONE), NULL, 0},
    {"2001:30::", C(PUBLIC), E(NONE), NULL, 0},
    {"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", C(PUBLIC), E(NONE), NULL, 0},
    {"2001:db8::", C(DOCUMENTATION), E(NONE), NULL, 0},
    {"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", C(DOCUMENTATION), E(NONE), NULL, 0},
    {"2001:db9::", C(PUBLIC), E(NONE), NULL, 0},
    {"2001:4860:4860::8888", C(PUBLIC), E(NONE), NULL, 0},
    {"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(PUBLIC), E(NONE), NULL, 0},
    {"2002::", C(EMBEDDED_IPV4), E(6TO4), "0.0.0.0", C(UNSPECIFIED)},
    {"2002:c000:22a::", C(EMBEDDED_IPV4), E(6TO4), "192.0.2.42", C(DOCUMENTATION)},
    {"2002:a9fe:a9fe::1", C(EMBEDDED_IPV4), E(6TO4), "169.254.169.254", C(METADATA)},
    {"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(EMBEDDED_IPV4), E(6TO4), "255.255.255.255", C(BROADCAST)},
    {"2003::", C(PUBLIC), E(NONE), NULL, 0},
    {"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(PUBLIC), E(NONE), NULL, 0},
    {"3fff::", C(DOCUMENTATION), E(NONE), NULL, 0},
    {"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", C(DOCUMENTATION), E(NONE), NULL, 0},
    {"3fff:1000::", C(PUBLIC), E(NONE), NULL, 0},
    {"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(PUBLIC), E(NONE), NULL, 0},
    {"4000::", C(RESERVED), E(NONE), NULL, 0},
    {"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(RESERVED), E(NONE), NULL, 0},
    {"fc00::", C(PRIVATE), E(NONE), NULL, 0},
    {"fd00:ec2::253", C(PRIVATE), E(NONE), NULL, 0},
    {"fd00:ec2::254", C(METADATA), E(NONE), NULL, 0},
    {"fd00:ec2::255", C(PRIVATE), E(NONE), NULL, 0},
    {"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(PRIVATE), E(NONE), NULL, 0},
    {"fe00::", C(RESERVED), E(NONE), NULL, 0},
    {"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(RESERVED), E(NONE), NULL, 0},
    {"fe80::", C(LINK_LOCAL), E(NONE), NULL, 0},
    {"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(LINK_LOCAL), E(NONE), NULL, 0},
    {"fec0::", C(PRIVATE), E(NONE), NULL, 0},
    {"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(PRIVATE), E(NONE), NULL, 0},
    {"ff00::", C(MULTICAST), E(NONE), NULL, 0},
    {"ff02::1", C(MULTICAST), E(NONE), NULL, 0},
    {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", C(MULTICAST), E(NONE), NULL, 0},
};

static void test_v6_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(v6_cases); i++) {
		const struct v6_case *c = &v6_cases[i];
		struct in6_addr a;
		if (inet_pton(AF_INET6, c->addr, &a) != 1)
			fail_msg("bad test address %s", c->addr);
		struct policy_addr_info info;
		policy_addr_classify_v6(&a, &info);
		if (info.cls != c->cls || info.embed != c->embed)
			fail_msg("%s: got %s/%s, want %s/%s", c->addr, policy_addr_class_name(info.cls),
			         policy_addr_embed_name(info.embed), policy_addr_class_name(c->cls),
			         policy_addr_embed_name(c->embed));
		if (c->embed == POLICY_EMBED_NONE)
			continue;
		char buf[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &info.embedded, buf, sizeof(buf));
		if (strcmp(buf, c->embedded) != 0 || info.embedded_cls != c->embedded_cls)
			fail_msg("%s: embedded %s (%s), want %s (%s)", c->addr, buf,
			         policy_addr_class_name(info.embedded_cls), c->embedded,
			         policy_addr_class_name(c->embedded_cls));
	}
}

static struct policy_addr addr_of(const char *s)
{
	struct policy_addr a = {0};
	if (strchr(s, ':')) {
		a.family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, s, &a.v6), 1);
	} else {
		a.family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, s, &a.v4), 1);
	}
	return a;
}

static void test_forbidden(void **state)
{
	(void)state;
	static const struct {
		const char *addr;
		bool forbidden, forbidden_if_allowed;
	} cases[] = {
	    {"8.8.8.8", false, false},
	    {"2606:4700::1111", false, false},
	    {"127.0.0.1", true, false},
	    {"10.1.2.3", true, false},
	    {"169.254.169.254", true, false},
	    {"203.0.113.9", true, false},
	    {"::ffff:8.8.8.8", true, false},
	    {"64:ff9b::8.8.8.8", true, false},
	    {"2002:808:808::", true, false},
	    {"fd00:ec2::254", true, false},
	    {"::1", true, false},
	    {"0.0.0.0", true, true},
	    {"0.1.2.3", true, true},
	    {"::", true, true},
	    {"255.255.255.255", true, true},
	    {"224.0.0.1", true, true},
	    {"ff02::1", true, true},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct policy_addr a = addr_of(cases[i].addr);
		if (policy_addr_is_forbidden(&a, false) != cases[i].forbidden ||
		    policy_addr_is_forbidden(&a, true) != cases[i].forbidden_if_allowed)
			fail_msg("%s: forbidden %d/%d", cases[i].addr, policy_addr_is_forbidden(&a, false),
			         policy_addr_is_forbidden(&a, true));
	}
	struct policy_addr bogus = {.family = AF_UNIX};
	assert_true(policy_addr_is_forbidden(&bogus, true));
}

static void test_names(void **state)
{
	(void)state;
	for (int c = 0; c < POLICY_ADDR__COUNT; c++)
		assert_string_not_equal(policy_addr_class_name((enum policy_addr_class)c), "unknown");
	assert_string_equal(policy_addr_class_name(POLICY_ADDR__COUNT), "unknown");
	assert_string_equal(policy_addr_embed_name(POLICY_EMBED_TEREDO), "teredo");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_v4_table),
	    cmocka_unit_test(test_v6_table),
	    cmocka_unit_test(test_forbidden),
	    cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
