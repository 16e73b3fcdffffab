/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the egress gateway's policy object and its decisions
 * (src/egress/egress-policy.c): table-driven, no sockets. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "egress-policy.h"
#include "json-cleanup.h"
#include "util.h"

static struct egress_policy *policy_from(const char *text)
{
	json_error_t jerr;
	cleanup_json json_t *j = json_loads(text, 0, &jerr);
	assert_non_null(j);
	struct egress_policy *p = NULL;
	struct al_error err = {0};
	int r = egress_policy_parse(j, &p, &err);
	if (r < 0)
		print_error("policy %s: %s\n", text, err.message);
	assert_int_equal(r, 0);
	assert_non_null(p);
	return p;
}

static struct policy_host host_of(const char *text)
{
	struct policy_host h;
	struct al_error err = {0};
	int r = policy_host_canonicalize((const uint8_t *)text, strlen(text), &h, &err);
	if (r < 0)
		print_error("host %s: %s\n", text, err.message);
	assert_int_equal(r, 0);
	return h;
}

static struct policy_addr addr_of(const char *text)
{
	struct policy_addr a = {.family = strchr(text, ':') ? AF_INET6 : AF_INET};
	assert_int_equal(inet_pton(a.family, text, a.family == AF_INET ? (void *)&a.v4 : (void *)&a.v6), 1);
	return a;
}

static void assert_rule(const char *got, const char *want, const char *what)
{
	if (!want && !got)
		return;
	if (!want || !got || strcmp(got, want) != 0) {
		print_error("%s: rule %s, want %s\n", what, got ? got : "(null)", want ? want : "(null)");
		fail();
	}
}

/* The policy most cases run against. */
static const char *const main_policy = "{\"allow\":["
                                       "\"*.example.com\","
                                       "\"api.test:8443\","
                                       "\"203.0.113.0/24:22\","
                                       "\"198.51.100.7\","
                                       "\"2001:db8::/32:443\","
                                       "\"exact.test\","
                                       "\"10.0.0.0/8:5432\","
                                       "\"only80.test\","
                                       "\"ssh.test:22\","
                                       "\"portdeny.test:8443\""
                                       "],\"deny\":["
                                       "\"bad.example.com\","
                                       "\"*.blocked.example.com\","
                                       "\"exact.test:443\","
                                       "\"only80.test:443\","
                                       "\"203.0.113.66\","
                                       "\"203.0.113.99:22\","
                                       "\"portdeny.test\""
                                       "]}";

struct host_case {
	const char *host;
	uint16_t port;
	bool allow;
	const char *rule;
};

static const struct host_case host_cases[] = {
    {"www.example.com", 443, true, "*.example.com"},
    {"www.example.com", 80, true, "*.example.com"},
    {"a.b.c.example.com", 443, true, "*.example.com"},
    {"WWW.Example.COM.", 443, true, "*.example.com"},
    /* a port-less rule opens 80 and 443 only */
    {"www.example.com", 8080, false, NULL},
    {"www.example.com", 22, false, NULL},
    /* whole labels only */
    {"example.com", 443, false, NULL},
    {"example.com.evil.test", 443, false, NULL},
    {"www.example.com.evil.test", 443, false, NULL},
    {"evilexample.com", 443, false, NULL},
    {"www.evilexample.com", 443, false, NULL},
    {"example.co", 443, false, NULL},
    /* deny wins over allow */
    {"bad.example.com", 443, false, "bad.example.com"},
    {"bad.example.com", 80, false, "bad.example.com"},
    {"x.bad.example.com", 443, true, "*.example.com"},
    {"x.blocked.example.com", 80, false, "*.blocked.example.com"},
    {"blocked.example.com", 80, true, "*.example.com"},
    /* host:port: that port only */
    {"api.test", 8443, true, "api.test:8443"},
    {"api.test", 443, false, NULL},
    {"api.test", 80, false, NULL},
    {"api.test", 8444, false, NULL},
    {"ssh.test", 22, true, "ssh.test:22"},
    {"ssh.test", 443, false, NULL},
    {"exact.test", 80, true, "exact.test"},
    {"exact.test", 443, false, "exact.test:443"},
    {"sub.exact.test", 80, false, NULL},
    /* a port-less deny covers 80 and 443 only, like a port-less allow */
    {"portdeny.test", 8443, true, "portdeny.test:8443"},
    {"portdeny.test", 443, false, "portdeny.test"},
    /* IP literals against IP and CIDR rules */
    {"203.0.113.9", 22, true, "203.0.113.0/24:22"},
    {"203.0.113.255", 22, true, "203.0.113.0/24:22"},
    {"203.0.113.9", 443, false, NULL},
    {"203.0.114.9", 22, false, NULL},
    {"203.0.113.99", 22, false, "203.0.113.99:22"},
    {"198.51.100.7", 80, true, "198.51.100.7"},
    {"198.51.100.7", 443, true, "198.51.100.7"},
    {"198.51.100.7", 22, false, NULL},
    {"198.51.100.8", 80, false, NULL},
    /* IPv6 CIDRs */
    {"[2001:db8::5]", 443, true, "2001:db8::/32:443"},
    {"[2001:DB8:ffff::1]", 443, true, "2001:db8::/32:443"},
    {"[2001:db8::5]", 80, false, NULL},
    {"[2001:db9::5]", 443, false, NULL},
    /* names never match IP rules */
    {"example.net", 22, false, NULL},
};

static void test_decide_host(void **state)
{
	(void)state;
	struct egress_policy *p = policy_from(main_policy);
	assert_int_equal(egress_policy_allow_count(p), 10);
	assert_int_equal(egress_policy_deny_count(p), 7);
	for (size_t i = 0; i < ARRAY_SIZE(host_cases); i++) {
		const struct host_case *c = &host_cases[i];
		struct policy_host h = host_of(c->host);
		const char *rule = "unset";
		bool got = egress_policy_decide_host(p, &h, c->port, &rule);
		if (got != c->allow) {
			print_error("%s:%u: got %s\n", c->host, c->port, got ? "allow" : "deny");
			fail();
		}
		assert_rule(rule, c->rule, c->host);
		assert_int_equal(egress_policy_decide_host(p, &h, c->port, NULL), c->allow);
	}
	egress_policy_unref(p);
}

struct addr_case {
	const char *addr;
	uint16_t port;
	bool allow;
	const char *rule;
	bool explicit_port; /* egress_policy_addr_explicit(addr, port) */
	bool explicit_any;  /* egress_policy_addr_explicit(addr, 0) */
};

static const struct addr_case addr_cases[] = {
    {"203.0.113.200", 22, true, "203.0.113.0/24:22", true, true},
    {"203.0.113.0", 22, true, "203.0.113.0/24:22", true, true},
    {"203.0.113.200", 2222, false, NULL, false, true},
    {"203.0.114.1", 22, false, NULL, false, false},
    {"203.0.113.66", 22, true, "203.0.113.0/24:22", true, true},
    {"203.0.113.66", 80, false, "203.0.113.66", false, true},
    {"203.0.113.99", 22, false, "203.0.113.99:22", true, true},
    {"10.1.2.3", 5432, true, "10.0.0.0/8:5432", true, true},
    {"10.1.2.3", 80, false, NULL, false, true},
    {"11.1.2.3", 5432, false, NULL, false, false},
    {"198.51.100.7", 80, true, "198.51.100.7", true, true},
    {"198.51.100.7", 443, true, "198.51.100.7", true, true},
    {"198.51.100.7", 53, false, NULL, false, true},
    {"192.168.1.1", 80, false, NULL, false, false},
    {"2001:db8:1::1", 443, true, "2001:db8::/32:443", true, true},
    {"2001:db8:1::1", 22, false, NULL, false, true},
    {"2001:db9::1", 443, false, NULL, false, false},
    {"::ffff:203.0.113.200", 22, false, NULL, false, false},
};

static void test_decide_addr(void **state)
{
	(void)state;
	struct egress_policy *p = policy_from(main_policy);
	for (size_t i = 0; i < ARRAY_SIZE(addr_cases); i++) {
		const struct addr_case *c = &addr_cases[i];
		struct policy_addr a = addr_of(c->addr);
		const char *rule = "unset";
		bool got = egress_policy_decide_addr(p, &a, c->port, &rule);
		if (got != c->allow) {
			print_error("%s:%u: got %s\n", c->addr, c->port, got ? "allow" : "deny");
			fail();
		}
		assert_rule(rule, c->rule, c->addr);
		if (egress_policy_addr_explicit(p, &a, c->port) != c->explicit_port ||
		    egress_policy_addr_explicit(p, &a, 0) != c->explicit_any) {
			print_error("%s:%u: addr_explicit wrong\n", c->addr, c->port);
			fail();
		}
	}
	egress_policy_unref(p);
}

struct name_case {
	const char *name;
	bool allow;
	const char *rule;
};

static const struct name_case name_cases[] = {
    {"www.example.com", true, "*.example.com"},
    {"x.bad.example.com", true, "*.example.com"},
    {"bad.example.com", false, "bad.example.com"},
    {"x.blocked.example.com", false, "*.blocked.example.com"},
    {"example.com", false, NULL},
    {"example.com.evil.test", false, NULL},
    {"evilexample.com", false, NULL},
    {"api.test", true, "api.test:8443"},
    {"ssh.test", true, "ssh.test:22"},
    /* 443 denied, 80 still open */
    {"exact.test", true, "exact.test"},
    {"only80.test", true, "only80.test"},
    /* a port-less deny takes the name away although 8443 is allowed */
    {"portdeny.test", false, "portdeny.test"},
    {"nothing.test", false, NULL},
};

static void test_name_allowed(void **state)
{
	(void)state;
	struct egress_policy *p = policy_from(main_policy);
	for (size_t i = 0; i < ARRAY_SIZE(name_cases); i++) {
		const struct name_case *c = &name_cases[i];
		struct policy_host h = host_of(c->name);
		const char *rule = "unset";
		bool got = egress_policy_name_allowed(p, &h, &rule);
		if (got != c->allow) {
			print_error("%s: got %s\n", c->name, got ? "allowed" : "refused");
			fail();
		}
		assert_rule(rule, c->rule, c->name);
	}
	/* IP literals are never names in DNS. */
	struct policy_host ip = host_of("198.51.100.7");
	assert_false(egress_policy_name_allowed(p, &ip, NULL));
	egress_policy_unref(p);

	/* deny on both ports a port-less allow opens: refused */
	p = policy_from("{\"allow\":[\"two.test\"],\"deny\":[\"two.test:80\",\"two.test:443\"]}");
	struct policy_host two = host_of("two.test");
	const char *rule = NULL;
	assert_false(egress_policy_name_allowed(p, &two, &rule));
	assert_string_equal(rule, "two.test:80");
	egress_policy_unref(p);
}

static void test_empty_policies(void **state)
{
	(void)state;
	const char *const texts[] = {"{}", "{\"allow\":[]}", "{\"allow\":[],\"deny\":[\"*.example.com\"]}"};
	struct policy_host h = host_of("www.example.com");
	struct policy_addr a = addr_of("203.0.113.7");
	for (size_t i = 0; i < ARRAY_SIZE(texts); i++) {
		struct egress_policy *p = policy_from(texts[i]);
		assert_false(egress_policy_decide_host(p, &h, 443, NULL));
		assert_false(egress_policy_decide_addr(p, &a, 443, NULL));
		assert_false(egress_policy_name_allowed(p, &h, NULL));
		assert_false(egress_policy_addr_explicit(p, &a, 0));
		egress_policy_unref(p);
	}
	/* No policy at all: deny. */
	const char *rule = "unset";
	assert_false(egress_policy_decide_host(NULL, &h, 443, &rule));
	assert_null(rule);
	assert_false(egress_policy_name_allowed(NULL, &h, NULL));
}

struct parse_case {
	const char *json;
	const char *message_part; /* expected in the error message */
};

static const struct parse_case parse_errors[] = {
    {"[]", "must be an object"},
    {"\"example.com\"", "must be an object"},
    {"{\"allow\":[\"example.com\"],\"extra\":1}", "unknown key \"extra\""},
    {"{\"Allow\":[]}", "unknown key \"Allow\""},
    {"{\"allow\":\"example.com\"}", "\"allow\" must be an array"},
    {"{\"deny\":{}}", "\"deny\" must be an array"},
    {"{\"allow\":[1]}", "allow[0] is not a string"},
    {"{\"allow\":[null]}", "allow[0] is not a string"},
    {"{\"allow\":[\"ok.test\",\"*example.com\"]}", "allow[1] \"*example.com\""},
    {"{\"allow\":[\"a.*.example.com\"]}", "allow[0] \"a.*.example.com\""},
    {"{\"allow\":[\"*\"]}", "allow[0] \"*\""},
    {"{\"allow\":[\"*.com\"]}", "allow[0] \"*.com\""},
    {"{\"allow\":[\"*.203.0.113.7\"]}", "allow[0]"},
    {"{\"deny\":[\"10.0.0.1/8\"]}", "deny[0] \"10.0.0.1/8\""},
    {"{\"allow\":[\"example.com:0\"]}", "allow[0]"},
    {"{\"allow\":[\"example.com:65536\"]}", "allow[0]"},
    {"{\"allow\":[\"\"]}", "allow[0] \"\": empty rule"},
    {"{\"allow\":[\"0177.0.0.1\"]}", "allow[0] \"0177.0.0.1\""},
    {"{\"allow\":[\"ex\\u0000ample.com\"]}", "allow[0] \"ex\\x00ample.com\": NUL byte"},
    {"{\"allow\":[\"a b.test\"]}", "allow[0] \"a b.test\""},
    {"{\"allow\":[\"line\\nbreak.test\"]}", "allow[0] \"line\\x0abreak.test\""},
};

static void test_parse_errors(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(parse_errors); i++) {
		const struct parse_case *c = &parse_errors[i];
		json_error_t jerr;
		cleanup_json json_t *j = json_loads(c->json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
		if (!j) {
			print_error("bad test JSON %s: %s\n", c->json, jerr.text);
			fail();
		}
		struct egress_policy *p = (struct egress_policy *)0x1;
		struct al_error err = {0};
		int r = egress_policy_parse(j, &p, &err);
		assert_int_equal(r, -EINVAL);
		assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
		assert_ptr_equal(p, (struct egress_policy *)0x1); /* written only on success */
		if (!strstr(err.message, c->message_part)) {
			print_error("%s: message \"%s\" lacks \"%s\"\n", c->json, err.message, c->message_part);
			fail();
		}
	}
}

static void test_parse_limits(void **state)
{
	(void)state;
	/* POLICY_RULES_MAX rules per list are fine, one more is not. */
	for (int extra = 0; extra <= 1; extra++) {
		cleanup_json json_t *allow = json_array();
		for (int i = 0; i < POLICY_RULES_MAX + extra; i++) {
			char name[64];
			snprintf(name, sizeof(name), "h%d.example.org", i);
			json_array_append_new(allow, json_string(name));
		}
		cleanup_json json_t *j = json_pack("{sO}", "allow", allow);
		struct egress_policy *p = NULL;
		struct al_error err = {0};
		int r = egress_policy_parse(j, &p, &err);
		if (extra == 0) {
			assert_int_equal(r, 0);
			struct policy_host h = host_of("h511.example.org");
			assert_true(egress_policy_decide_host(p, &h, 443, NULL));
			egress_policy_unref(p);
		} else {
			assert_int_equal(r, -EINVAL);
			assert_non_null(strstr(err.message, "at most 512"));
		}
	}
	/* A rule over POLICY_RULE_TEXT_MAX bytes is refused, and the message
	 * shows only the start of it. */
	char *long_rule = xmalloc(POLICY_RULE_TEXT_MAX + 2);
	memset(long_rule, 'a', POLICY_RULE_TEXT_MAX + 1);
	long_rule[POLICY_RULE_TEXT_MAX + 1] = '\0';
	cleanup_json json_t *j = json_pack("{s[s]}", "deny", long_rule);
	free(long_rule);
	struct egress_policy *p = NULL;
	struct al_error err = {0};
	assert_int_equal(egress_policy_parse(j, &p, &err), -EINVAL);
	assert_non_null(strstr(err.message, "deny[0]"));
	assert_non_null(strstr(err.message, "...\""));
	assert_true(strlen(err.message) < 400);
}

static void test_slot(void **state)
{
	(void)state;
	struct egress_policy_slot slot;
	egress_policy_slot_init(&slot, policy_from("{\"allow\":[\"a.test\"]}"));
	struct policy_host a = host_of("a.test"), b = host_of("b.test");

	/* A decision holds its own reference: a swap does not change it. */
	struct egress_policy *held = egress_policy_slot_get(&slot);
	egress_policy_slot_set(&slot, policy_from("{\"allow\":[\"b.test\"]}"));
	assert_true(egress_policy_decide_host(held, &a, 443, NULL));
	assert_false(egress_policy_decide_host(held, &b, 443, NULL));
	const char *rule = NULL;
	assert_true(egress_policy_decide_host(held, &a, 80, &rule));
	assert_string_equal(rule, "a.test");
	egress_policy_unref(held);

	struct egress_policy *now = egress_policy_slot_get(&slot);
	assert_false(egress_policy_decide_host(now, &a, 443, NULL));
	assert_true(egress_policy_decide_host(now, &b, 443, NULL));
	assert_ptr_equal(egress_policy_ref(now), now);
	egress_policy_unref(now);
	egress_policy_unref(now);

	egress_policy_slot_set(&slot, NULL);
	assert_null(egress_policy_slot_get(&slot));
	egress_policy_slot_release(&slot);
	egress_policy_unref(NULL);
}

struct escape_case {
	const char *in;
	size_t len;
	size_t out_size;
	const char *want;
};

static const struct escape_case escape_cases[] = {
    {"example.com", 11, 64, "example.com"},
    {"a\\b", 3, 64, "a\\x5cb"},
    {"a\r\nb", 4, 64, "a\\x0d\\x0ab"},
    {"\xc3\xbc", 2, 64, "\\xc3\\xbc"},
    {"a\0b", 3, 64, "a\\x00b"},
    {"\x7f", 1, 64, "\\x7f"},
    {"", 0, 64, ""},
    /* exactly fits */
    {"abcdefg", 7, 8, "abcdefg"},
    /* cut, with room for "..." */
    {"abcdefgh", 8, 8, "abcd..."},
    {"abcdefgh", 8, 4, "..."},
    {"\x01\x02\x03", 3, 10, "\\x01..."},
    {"\x01\x02", 2, 9, "\\x01\\x02"},
};

static void test_escape(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(escape_cases); i++) {
		const struct escape_case *c = &escape_cases[i];
		char out[64];
		size_t n = egress_text_escape((const uint8_t *)c->in, c->len, out, c->out_size);
		assert_string_equal(out, c->want);
		assert_int_equal(n, strlen(c->want));
		assert_true(n < c->out_size);
	}
	/* 256 bytes of guest input as "asked_host": bounded. */
	uint8_t big[1024];
	memset(big, 0xff, sizeof(big));
	char out[257];
	size_t n = egress_text_escape(big, sizeof(big), out, sizeof(out));
	assert_true(n <= 256);
	assert_int_equal(strlen(out), n);
	assert_string_equal(out + n - 3, "...");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_decide_host),  cmocka_unit_test(test_decide_addr),
	    cmocka_unit_test(test_name_allowed), cmocka_unit_test(test_empty_policies),
	    cmocka_unit_test(test_parse_errors), cmocka_unit_test(test_parse_limits),
	    cmocka_unit_test(test_slot),         cmocka_unit_test(test_escape),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
