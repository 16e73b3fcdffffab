/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the rules of the policy grammar (src/common/policy-rule.c):
 * the parser, host patterns, the canonical text, the matchers, and the
 * headers a secret binding may not set. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "policy-rule.h"
#include "util.h"

static const struct {
	const char *rule;
	int err;
} rule_parse_cases[] = {
    {"example.com", 0},
    {"*.example.com", 0},
    {"*.example.com:8443", 0},
    {"example.com:22", 0},
    {"203.0.113.0/24", 0},
    {"203.0.113.0/24:443", 0},
    {"203.0.113.7", 0},
    {"[2001:db8::1]:443", 0},
    {"2001:db8::/32", 0},
    {"2001:db8::/32:443", 0},
    {"[2001:db8::]/32:443", 0},
    {"0.0.0.0/0", 0},
    {"*.bücher.example", 0},
    {"*", -EINVAL},
    {"*.", -EINVAL},
    {"*.com", -EINVAL},
    {"*example.com", -EINVAL},
    {"a.*.example.com", -EINVAL},
    {"*.*.example.com", -EINVAL},
    {"ex*.example.com", -EINVAL},
    {"*.203.0.113.7", -EINVAL},
    {"203.0.113.5/24", -EINVAL},
    {"203.0.113.0/33", -EINVAL},
    {"203.0.113.0/024", -EINVAL},
    {"203.0.113.0/", -EINVAL},
    {"203.0.113.0/24:", -EINVAL},
    {"203.0.113.0/24:0", -EINVAL},
    {"0177.0.113.0/24", -EINVAL},
    {"2001:db8::1/32", -EINVAL},
    {"2001:db8::/129", -EINVAL},
    {"example.com/24", -EINVAL},
    {"2001:db8::1", -EINVAL},
    {"example.com:0", -EINVAL},
    {"", -EINVAL},
};

static void test_rule_parse(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(rule_parse_cases); i++) {
		struct policy_rule r;
		struct al_error err = {0};
		const char *t = rule_parse_cases[i].rule;
		int ret = policy_rule_parse(t, strlen(t), &r, &err);
		if (ret != rule_parse_cases[i].err)
			fail_msg("rule \"%s\": got %d (%s), want %d", t, ret, err.message, rule_parse_cases[i].err);
	}
}

static const struct {
	const char *rule;
	const char *host;
	uint16_t port;
	bool match;
} match_cases[] = {
    {"example.com", "example.com", 443, true},
    {"example.com", "EXAMPLE.com.", 80, true},
    {"example.com", "example.com", 22, false},
    {"example.com", "www.example.com", 443, false},
    {"example.com", "example.com.evil.test", 443, false},
    {"example.com", "evilexample.com", 443, false},
    {"example.com:22", "example.com", 22, true},
    {"example.com:22", "example.com", 443, false},
    {"*.example.com", "www.example.com", 443, true},
    {"*.example.com", "a.b.example.com", 443, true},
    {"*.example.com", "WWW.Example.Com.", 443, true},
    {"*.example.com", "example.com", 443, false},
    {"*.example.com", "evilexample.com", 443, false},
    {"*.example.com", "example.com.evil.test", 443, false},
    {"*.example.com", "www.example.com.evil.test", 443, false},
    {"*.example.com", "xexample.com", 443, false},
    {"*.example.com", "www.example.co", 443, false},
    {"*.example.com", "www.example.com", 8443, false},
    {"*.example.com:8443", "www.example.com", 8443, true},
    {"*.example.com:8443", "www.example.com", 443, false},
    {"*.bücher.example", "shop.xn--bcher-kva.example", 443, true},
    {"xn--bcher-kva.example", "bücher.example", 443, true},
    {"203.0.113.0/24", "203.0.113.7", 443, true},
    {"203.0.113.0/24", "203.0.113.255", 80, true},
    {"203.0.113.0/24", "203.0.114.0", 443, false},
    {"203.0.113.0/24", "203.0.112.255", 443, false},
    {"203.0.113.0/24:5432", "203.0.113.7", 5432, true},
    {"203.0.113.0/24:5432", "203.0.113.7", 443, false},
    {"203.0.113.0/24", "[::ffff:203.0.113.7]", 443, false},
    {"203.0.113.0/24", "example.com", 443, false},
    {"203.0.113.7", "203.0.113.7", 443, true},
    {"203.0.113.7", "203.0.113.8", 443, false},
    {"2001:db8::/32", "[2001:db8:1::5]", 443, true},
    {"2001:db8::/32", "[2001:db9::]", 443, false},
    {"[2001:db8::1]:443", "[2001:DB8:0::1]", 443, true},
    {"0.0.0.0/0:443", "8.8.8.8", 443, true},
    {"example.com", "203.0.113.7", 443, false},
};

static void test_rule_match(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(match_cases); i++) {
		struct policy_rule r;
		struct policy_host h;
		struct al_error err = {0};
		const char *rt = match_cases[i].rule, *ht = match_cases[i].host;
		if (policy_rule_parse(rt, strlen(rt), &r, &err) < 0)
			fail_msg("rule \"%s\": %s", rt, err.message);
		if (policy_host_canonicalize((const uint8_t *)ht, strlen(ht), &h, &err) < 0)
			fail_msg("host \"%s\": %s", ht, err.message);
		if (policy_rule_match(&r, &h, match_cases[i].port) != match_cases[i].match)
			fail_msg("rule \"%s\" host \"%s\" port %u: want %s", rt, ht, match_cases[i].port,
			         match_cases[i].match ? "match" : "no match");
	}
}

static void test_rule_match_addr(void **state)
{
	(void)state;
	struct policy_rule r;
	struct policy_addr a = {.family = AF_INET};
	assert_int_equal(policy_rule_parse("198.51.100.0/24:5432", 20, &r, NULL), 0);
	inet_pton(AF_INET, "198.51.100.20", &a.v4);
	assert_true(policy_rule_match_addr(&r, &a, 5432));
	assert_false(policy_rule_match_addr(&r, &a, 5433));
	inet_pton(AF_INET, "198.51.101.20", &a.v4);
	assert_false(policy_rule_match_addr(&r, &a, 5432));
	assert_int_equal(policy_rule_parse("198.51.101.20", 13, &r, NULL), 0);
	assert_true(policy_rule_match_addr(&r, &a, 443));
	assert_false(policy_rule_match_addr(&r, &a, 22));
	assert_int_equal(policy_rule_parse("*.example.com", 13, &r, NULL), 0);
	assert_false(policy_rule_match_addr(&r, &a, 443));
	struct policy_addr v6 = {.family = AF_INET6};
	inet_pton(AF_INET6, "2001:db8::1", &v6.v6);
	assert_int_equal(policy_rule_parse("2001:db8::/32", 13, &r, NULL), 0);
	assert_true(policy_rule_match_addr(&r, &v6, 443));
	assert_false(policy_rule_match_addr(&r, &a, 443));
}

static const struct {
	const char *rule;
	const char *canonical;
} format_cases[] = {
    {"example.com", "example.com"},
    {"EXAMPLE.Com.", "example.com"},
    {"example.com:22", "example.com:22"},
    {"*.Example.COM:8443", "*.example.com:8443"},
    {"*.bücher.example", "*.xn--bcher-kva.example"},
    {"203.0.113.7", "203.0.113.7"},
    {"203.0.113.7:5432", "203.0.113.7:5432"},
    {"[2001:DB8:0::1]", "[2001:db8::1]"},
    {"[2001:db8::1]:443", "[2001:db8::1]:443"},
    {"203.0.113.0/24", "203.0.113.0/24"},
    {"203.0.113.0/24:443", "203.0.113.0/24:443"},
    {"[2001:db8::]/32:443", "2001:db8::/32:443"},
    {"2001:DB8::/32", "2001:db8::/32"},
    {"0.0.0.0/0", "0.0.0.0/0"},
    {"::ffff:0:0/96", "::ffff:0.0.0.0/96"},
};

/* The canonical text says the same rule, and saying it again changes nothing. */
static void test_rule_format(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(format_cases); i++) {
		struct policy_rule r, again;
		struct al_error err = {0};
		char text[POLICY_RULE_TEXT_MAX + 1], text2[POLICY_RULE_TEXT_MAX + 1];
		const char *t = format_cases[i].rule;
		if (policy_rule_parse(t, strlen(t), &r, &err) < 0)
			fail_msg("rule \"%s\": %s", t, err.message);
		assert_int_equal(policy_rule_format(&r, text, sizeof(text)), 0);
		assert_string_equal(text, format_cases[i].canonical);
		if (policy_rule_parse(text, strlen(text), &again, &err) < 0)
			fail_msg("canonical \"%s\": %s", text, err.message);
		assert_int_equal(policy_rule_format(&again, text2, sizeof(text2)), 0);
		assert_string_equal(text2, text);
		assert_int_equal(again.kind, r.kind);
		assert_int_equal(again.port, r.port);
	}
	struct policy_rule r;
	char small[8];
	assert_int_equal(policy_rule_parse("*.example.com", 13, &r, NULL), 0);
	assert_int_equal(policy_rule_format(&r, small, sizeof(small)), -ENAMETOOLONG);
}

static void test_host_pattern(void **state)
{
	(void)state;
	static const char *const ok[] = {"example.com", "*.example.com", "api.example.com:443", "*.bücher.example"};
	static const char *const refused[] = {"203.0.113.7", "203.0.113.0/24", "[2001:db8::1]", "2001:db8::/32:443"};
	struct policy_rule r;
	struct al_error err = {0};
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		assert_int_equal(policy_host_pattern_parse(ok[i], strlen(ok[i]), &r, &err), 0);
		assert_true(policy_rule_is_host_pattern(&r));
	}
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		assert_int_equal(policy_host_pattern_parse(refused[i], strlen(refused[i]), &r, &err), -EINVAL);
		assert_string_equal(err.message,
		                    "a host name or *.name pattern is needed here, not an IP address or network");
		assert_int_equal(policy_rule_parse(refused[i], strlen(refused[i]), &r, NULL), 0);
		assert_false(policy_rule_is_host_pattern(&r));
	}
	/* A rule that does not parse keeps the parser's message. */
	assert_int_equal(policy_host_pattern_parse("*.com", 5, &r, &err), -EINVAL);
	assert_non_null(strstr(err.message, "two labels"));
}

static void test_header_reserved(void **state)
{
	(void)state;
	static const char *const reserved[] = {
	    "Host", "content-length", "Transfer-Encoding", "CONNECTION",       "upgrade",
	    "TE",   "trailer",        "Keep-Alive",        "proxy-connection", "Expect"};
	static const char *const allowed[] = {"Authorization", "X-Api-Key", "Cookie", "hosts", "t", "Content-Type"};
	for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
		assert_true(policy_header_reserved(reserved[i]));
	for (size_t i = 0; i < ARRAY_SIZE(allowed); i++)
		assert_false(policy_header_reserved(allowed[i]));
}

static void test_addr_helpers(void **state)
{
	(void)state;
	struct policy_addr a = {.family = AF_INET}, b = {.family = AF_INET}, net = {.family = AF_INET};
	char text[64];
	inet_pton(AF_INET, "203.0.113.7", &a.v4);
	inet_pton(AF_INET, "203.0.113.7", &b.v4);
	inet_pton(AF_INET, "203.0.112.0", &net.v4);
	assert_true(policy_addr_equal(&a, &b));
	assert_true(policy_addr_in_net(&a, &net, 23));
	assert_false(policy_addr_in_net(&a, &net, 24));
	assert_true(policy_addr_in_net(&a, &net, 0));
	policy_addr_format(&a, 443, text, sizeof(text));
	assert_string_equal(text, "203.0.113.7:443");
	struct policy_addr v6 = {.family = AF_INET6};
	inet_pton(AF_INET6, "2001:db8::1", &v6.v6);
	assert_false(policy_addr_equal(&a, &v6));
	assert_false(policy_addr_in_net(&v6, &net, 0));
	policy_addr_format(&v6, 443, text, sizeof(text));
	assert_string_equal(text, "[2001:db8::1]:443");
	policy_addr_format(&v6, 0, text, sizeof(text));
	assert_string_equal(text, "2001:db8::1");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rule_parse),      cmocka_unit_test(test_rule_match),
	    cmocka_unit_test(test_rule_match_addr), cmocka_unit_test(test_rule_format),
	    cmocka_unit_test(test_host_pattern),    cmocka_unit_test(test_header_reserved),
	    cmocka_unit_test(test_addr_helpers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
