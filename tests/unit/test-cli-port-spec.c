/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/cli/cli-port-spec.c: port-forward's operand. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/cli/cli-port-spec.h"

static void expect_ok(const char *s, const char *addr, unsigned local, unsigned remote)
{
	struct port_spec p;
	char why[256] = "";
	assert_int_equal(port_spec_parse(s, &p, why, sizeof(why)), 0);
	assert_string_equal(p.addr, addr);
	assert_int_equal(p.local_port, local);
	assert_int_equal(p.remote_port, remote);
}

static void expect_bad(const char *s, const char *says)
{
	struct port_spec p = {.local_port = 4242};
	char why[512] = "";
	assert_int_equal(port_spec_parse(s, &p, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, says));
	assert_int_equal(p.local_port, 4242); /* ret written only on success */
}

static void test_forms(void **s)
{
	(void)s;
	expect_ok("8080:80", "127.0.0.1", 8080, 80);
	expect_ok("0:80", "127.0.0.1", 0, 80);
	expect_ok("80", "127.0.0.1", 80, 80);
	expect_ok("65535:65535", "127.0.0.1", 65535, 65535);
	expect_ok("0.0.0.0:8080:80", "0.0.0.0", 8080, 80);
	expect_ok("localhost:1:2", "localhost", 1, 2);
	expect_ok("[::1]:8080:80", "::1", 8080, 80);
	expect_ok("[fe80::1%lo]:0:22", "fe80::1%lo", 0, 22);
}

static void test_bad_ports(void **s)
{
	(void)s;
	expect_bad("", "[LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT");
	expect_bad("0", "REMOTE_PORT");
	expect_bad("8080:0", "REMOTE_PORT");
	expect_bad("8080:65536", "REMOTE_PORT");
	expect_bad("8080:", "REMOTE_PORT");
	expect_bad("8080:+80", "REMOTE_PORT");
	expect_bad("8080:080000", "REMOTE_PORT");
	expect_bad("65536:80", "LOCAL_PORT");
	expect_bad(":80", "LOCAL_PORT");
	expect_bad("-1:80", "LOCAL_PORT");
	expect_bad("127.0.0.1::80", "LOCAL_PORT");
}

static void test_bad_addresses(void **s)
{
	(void)s;
	expect_bad(":1:80", "LOCAL_ADDR");
	expect_bad("a b:1:80", "LOCAL_ADDR");
	expect_bad("a/b:1:80", "LOCAL_ADDR");
	expect_bad("::1:8080:80", "LOCAL_ADDR"); /* v6 needs brackets */
	expect_bad("[::1:8080:80", "IPv6");
	expect_bad("[]:8080:80", "IPv6");
	expect_bad("[::1]8080:80", "IPv6");
	expect_bad("[::1]:80", "IPv6");
	char long_addr[PORT_SPEC_ADDR_MAX + 16];
	memset(long_addr, 'a', PORT_SPEC_ADDR_MAX + 1);
	strcpy(long_addr + PORT_SPEC_ADDR_MAX + 1, ":1:80");
	expect_bad(long_addr, "LOCAL_ADDR");
	long_addr[PORT_SPEC_ADDR_MAX + 1 - 1] = '\0';
	strcat(long_addr, ":1:80");
	struct port_spec p;
	char why[256];
	assert_int_equal(port_spec_parse(long_addr, &p, why, sizeof(why)), 0);
	assert_int_equal(strlen(p.addr), PORT_SPEC_ADDR_MAX);
}

static void test_length_limit(void **s)
{
	(void)s;
	char big[PORT_SPEC_MAX + 8];
	memset(big, '1', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	expect_bad(big, "[LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_forms),
	    cmocka_unit_test(test_bad_ports),
	    cmocka_unit_test(test_bad_addresses),
	    cmocka_unit_test(test_length_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
