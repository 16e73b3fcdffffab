/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the two ways a warm pool is asked for
 * (src/daemon/api/api-pool-request.c): airlockd's --warm-pool
 * TEMPLATE[:VCPUS:MiB]=N and the body of PUT /v1/pools. Every bound on both
 * sides, the forms that must not parse, and what the errors say. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api-request.h"
#include "util.h"

/* ------------------------------------------------------------ --warm-pool */

static struct pool_spec flag_ok(const char *arg, unsigned host_mib)
{
	struct al_error err = {0};
	struct pool_spec p;
	memset(&p, 0xaa, sizeof(p));
	if (pool_flag_parse(arg, host_mib, &p, &err) < 0)
		fail_msg("--warm-pool %s rejected: %s", arg, err.message);
	return p;
}

/* Rejected, with a message that names the flag and contains `says`. */
static void flag_bad(const char *arg, unsigned host_mib, const char *says)
{
	struct al_error err = {0};
	struct pool_spec p;
	memset(&p, 0xaa, sizeof(p));
	struct pool_spec before = p;
	int r = pool_flag_parse(arg, host_mib, &p, &err);
	if (r != -EINVAL)
		fail_msg("--warm-pool \"%s\": expected -EINVAL, got %d (%s)", arg, r, err.message);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	if (!strstr(err.message, "--warm-pool") || !strstr(err.message, says))
		fail_msg("--warm-pool \"%s\": the message \"%s\" should contain \"%s\"", arg, err.message, says);
	/* ret is written only on success */
	assert_memory_equal(&p, &before, sizeof(p));
}

/* p is the pool of that shape, size and owner. */
static void assert_spec(const struct pool_spec *p, const char *template_name, unsigned vcpus, unsigned memory_mib,
                        unsigned size, const char *tenant)
{
	assert_string_equal(p->template_name, template_name);
	assert_int_equal(p->vcpus, vcpus);
	assert_int_equal(p->memory_mib, memory_mib);
	assert_int_equal(p->size, size);
	assert_string_equal(p->tenant, tenant);
}

static void test_flag_good(void **state)
{
	(void)state;
	struct pool_spec p = flag_ok("minimal=4", 0);
	assert_spec(&p, "minimal", 1, 256, 4, ""); /* a flag's pool is shared */
	p = flag_ok("minimal:2:512=0", 0);
	assert_spec(&p, "minimal", 2, 512, 0, "");
	p = flag_ok("base_2-x:16:16384=64", 0);
	assert_spec(&p, "base_2-x", 16, 16384, 64, "");
	p = flag_ok("m:1:128=1", 0);
	assert_int_equal(p.memory_mib, 128);
	p = flag_ok("m=000000007", 0); /* 9 digits: still a number */
	assert_int_equal(p.size, 7);

	char name[80];
	memset(name, 'a', 63);
	snprintf(name + 63, sizeof(name) - 63, "=1");
	p = flag_ok(name, 0);
	assert_int_equal(strlen(p.template_name), 63);
	/* within the host's memory */
	p = flag_ok("m:1:512=1", 512);
	assert_int_equal(p.memory_mib, 512);
}

static void test_flag_form(void **state)
{
	(void)state;
	static const char form[] = "must be TEMPLATE[:VCPUS:MiB]=N";
	static const char shape[] = "the shape must be TEMPLATE:VCPUS:MiB";
	flag_bad("minimal", 0, form);
	flag_bad("=", 0, form);
	flag_bad("", 0, form);
	flag_bad("x=", 0, form);
	flag_bad("x=abc", 0, form);
	flag_bad("x=-1", 0, form);
	flag_bad("x=+1", 0, form);
	flag_bad("x= 1", 0, form);
	flag_bad("x=4x", 0, form);   /* trailing junk */
	flag_bad("x=1 ", 0, form);   /* trailing blank */
	flag_bad("x=1=2x", 0, form); /* the last '=' is the size's */
	flag_bad("x=1234567890", 0, form);
	flag_bad("x=4294967297", 0, form); /* would wrap a 32-bit unsigned */
	flag_bad("x:1=2", 0, shape);
	flag_bad("x:1:2:3=1", 0, shape);
	flag_bad("x::256=1", 0, shape);
	flag_bad("x:1:=1", 0, shape);
	flag_bad("x:a:256=1", 0, shape);
	flag_bad("x:1:256x=1", 0, shape);
	flag_bad("x:1234567890:256=1", 0, shape);
	flag_bad("x:1:1234567890=1", 0, shape);
	flag_bad("x:-1:256=1", 0, shape);
}

static void test_flag_bounds(void **state)
{
	(void)state;
	flag_bad("=1", 0, "template: must be 1 to 63 characters");
	flag_bad(":1:256=1", 0, "template: must be 1 to 63 characters");
	flag_bad("UPPER=1", 0, "template: must be 1 to 63 characters");
	flag_bad("a.b=1", 0, "template: must be 1 to 63 characters");
	flag_bad("a/b=1", 0, "template: must be 1 to 63 characters");
	flag_bad("x=1=1", 0, "template: must be 1 to 63 characters"); /* name "x=1" */
	char name[90];
	memset(name, 'a', 64);
	snprintf(name + 64, sizeof(name) - 64, "=1");
	flag_bad(name, 0, "the template name is too long");
	memset(name, 'a', 80);
	snprintf(name + 80, sizeof(name) - 80, ":1:256=1");
	flag_bad(name, 0, "the template name is too long");
	flag_bad("x=65", 0, "size: must be an integer from 0 to 64");
	flag_bad("x=999999999", 0, "size: must be an integer from 0 to 64");
	flag_bad("x:0:256=1", 0, "vcpus: must be an integer from 1 to 16");
	flag_bad("x:17:256=1", 0, "vcpus: must be an integer from 1 to 16");
	flag_bad("x:1:127=1", 0, "memory_mib: must be an integer from 128 to 16384");
	flag_bad("x:1:16385=1", 0, "memory_mib: must be an integer from 128 to 16384");
	flag_bad("x:1:0=1", 0, "memory_mib");
	/* the host's memory caps the shape when it is known */
	flag_bad("x:1:1024=1", 512, "memory_mib: must be an integer from 128 to 512");
	/* a long argument is cut in the message, not overflowing it */
	char *long_arg = xmalloc(5000);
	memset(long_arg, 'z', 4990);
	snprintf(long_arg + 4990, 10, "=1");
	flag_bad(long_arg, 0, "too long");
	free(long_arg);
}

/* ------------------------------------------------------------ PUT /v1/pools */

/* The body is copied to a buffer of exactly its length (no NUL after it), so
 * a parser reading past len trips ASan. */
static int put_parse(const char *body, size_t len, unsigned host_mib, struct pool_spec *p, struct al_error *err)
{
	char *b = xmalloc(len ? len : 1);
	memcpy(b, body, len);
	int r = pool_request_parse(b, len, host_mib, p, err);
	free(b);
	return r;
}

static struct pool_spec put_ok(const char *body)
{
	struct al_error err = {0};
	struct pool_spec p;
	if (put_parse(body, strlen(body), 0, &p, &err) < 0)
		fail_msg("PUT /v1/pools %s rejected: %s", body, err.message);
	return p;
}

static void put_bad_n(const char *body, size_t len, unsigned host_mib, enum al_error_code code, const char *says)
{
	struct al_error err = {0};
	struct pool_spec p;
	memset(&p, 0xaa, sizeof(p));
	struct pool_spec before = p;
	int r = put_parse(body, len, host_mib, &p, &err);
	if (r >= 0)
		fail_msg("PUT /v1/pools %.*s: accepted", (int)MIN(len, 200), body);
	assert_int_equal(err.code, code);
	if (!strstr(err.message, says))
		fail_msg("PUT /v1/pools %.*s: the message \"%s\" should contain \"%s\"", (int)MIN(len, 200), body,
		         err.message, says);
	assert_memory_equal(&p, &before, sizeof(p));
}

static void put_bad(const char *body, const char *says)
{
	put_bad_n(body, strlen(body), 0, AL_ERR_INVALID_ARGUMENT, says);
}

static void test_put_good(void **state)
{
	(void)state;
	struct pool_spec p = put_ok("{\"template\":\"minimal\",\"size\":2}");
	assert_spec(&p, "minimal", 1, 256, 2, "");
	p = put_ok("{\"template\":\"base\",\"vcpus\":4,\"memory_mib\":1024,\"size\":0,\"tenant\":\"acme-1\"}");
	assert_spec(&p, "base", 4, 1024, 0, "acme-1");
	/* null is "not given" for the optional fields */
	p = put_ok("{\"template\":\"m\",\"size\":64,\"vcpus\":null,\"memory_mib\":null,\"tenant\":null}");
	assert_spec(&p, "m", 1, 256, 64, "");

	char body[200];
	char name[64];
	memset(name, 'a', 63);
	name[63] = '\0';
	snprintf(body, sizeof(body), "{\"template\":\"%s\",\"size\":1,\"tenant\":\"%s\"}", name, name);
	p = put_ok(body);
	assert_string_equal(p.template_name, name);
	assert_string_equal(p.tenant, name);
}

static void test_put_missing_and_unknown(void **state)
{
	(void)state;
	put_bad("{\"size\":1}", "template: missing");
	put_bad("{\"template\":null,\"size\":1}", "template: missing");
	put_bad("{\"template\":\"m\"}", "size: missing");
	put_bad("{\"template\":\"m\",\"size\":null}", "size: missing");
	put_bad("{}", "missing");
	put_bad("{\"template\":\"m\",\"size\":1,\"count\":2}", "count");
	put_bad("{\"template\":\"m\",\"size\":1,\"Template\":\"m\"}", "Template");
	put_bad("{\"template\":\"m\",\"size\":1,\"template\":\"n\"}", "not valid JSON");
	put_bad("{\"template\":\"m\",\"size\":1,\"size\":2}", "not valid JSON");
}

static void test_put_types(void **state)
{
	(void)state;
	put_bad("{\"template\":1,\"size\":1}", "template: must be a string");
	put_bad("{\"template\":[\"m\"],\"size\":1}", "template: must be a string");
	put_bad("{\"template\":\"\",\"size\":1}", "template: must be a string of 1 to 63");
	put_bad("{\"template\":\"m\",\"size\":\"1\"}", "size: must be a non-negative integer");
	put_bad("{\"template\":\"m\",\"size\":1.0}", "size: must be a non-negative integer");
	put_bad("{\"template\":\"m\",\"size\":true}", "size: must be a non-negative integer");
	put_bad("{\"template\":\"m\",\"size\":-1}", "size: must be a non-negative integer");
	put_bad("{\"template\":\"m\",\"size\":4294967297}", "size: must be a non-negative integer");
	put_bad("{\"template\":\"m\",\"size\":1,\"vcpus\":\"2\"}", "vcpus: must be a non-negative integer");
	put_bad("{\"template\":\"m\",\"size\":1,\"memory_mib\":{}}", "memory_mib: must be a non-negative integer");
	put_bad("{\"template\":\"m\",\"size\":1,\"tenant\":7}", "tenant: must be a string");
	put_bad("{\"template\":\"m\",\"size\":1,\"tenant\":false}", "tenant: must be a string");
}

static void test_put_bounds(void **state)
{
	(void)state;
	put_bad("{\"template\":\"m\",\"size\":65}", "size: must be an integer from 0 to 64");
	put_bad("{\"template\":\"m\",\"size\":1000001}", "size: must be a non-negative integer");
	put_bad("{\"template\":\"m\",\"size\":1,\"vcpus\":0}", "vcpus: must be an integer from 1 to 16");
	put_bad("{\"template\":\"m\",\"size\":1,\"vcpus\":17}", "vcpus: must be an integer from 1 to 16");
	put_bad("{\"template\":\"m\",\"size\":1,\"memory_mib\":127}", "memory_mib: must be an integer from 128");
	put_bad("{\"template\":\"m\",\"size\":1,\"memory_mib\":16385}", "memory_mib: must be an integer from 128");
	const char *big = "{\"template\":\"m\",\"size\":1,\"memory_mib\":1024}";
	put_bad_n(big, strlen(big), 512, AL_ERR_INVALID_ARGUMENT, "from 128 to 512");
	put_bad("{\"template\":\"Minimal\",\"size\":1}", "template: must be 1 to 63 characters of [a-z0-9_-]");
	put_bad("{\"template\":\"../etc\",\"size\":1}", "template: must be 1 to 63 characters");
	put_bad("{\"template\":\"m\\u0000x\",\"size\":1}", "not valid JSON"); /* no NUL inside a name */
	char body[300], name[80];
	memset(name, 'a', 64);
	name[64] = '\0';
	snprintf(body, sizeof(body), "{\"template\":\"%s\",\"size\":1}", name);
	put_bad(body, "template: must be a string of 1 to 63");
	snprintf(body, sizeof(body), "{\"template\":\"m\",\"size\":1,\"tenant\":\"%s\"}", name);
	put_bad(body, "tenant: must be a string of 1 to 63");
}

static void test_put_tenant(void **state)
{
	(void)state;
	put_bad("{\"template\":\"m\",\"size\":1,\"tenant\":\"\"}", "tenant: must be a string of 1 to 63");
	put_bad("{\"template\":\"m\",\"size\":1,\"tenant\":\"Acme\"}", "tenant: must match");
	put_bad("{\"template\":\"m\",\"size\":1,\"tenant\":\"a b\"}", "tenant: must match");
	put_bad("{\"template\":\"m\",\"size\":1,\"tenant\":\"a/b\"}", "tenant: must match");
	put_bad("{\"template\":\"m\",\"size\":1,\"tenant\":\"\\u00e9\"}", "tenant: must match");
}

static void test_put_malformed_and_oversize(void **state)
{
	(void)state;
	put_bad("", "not valid JSON");
	put_bad("{", "not valid JSON");
	put_bad("[]", "must be a JSON object");
	put_bad("\"minimal\"", "not valid JSON"); /* JSON text, but not an object */
	put_bad("null", "not valid JSON");
	put_bad("{\"template\":\"m\",\"size\":1} x", "not valid JSON");
	/* a NUL inside the body, not at its end */
	static const char nul[] = "{\"template\":\"m\",\"size\":1}\0{}";
	put_bad_n(nul, sizeof(nul) - 1, 0, AL_ERR_INVALID_ARGUMENT, "not valid JSON");

	/* POOL_BODY_MAX: at the limit parsed, one byte over refused before parsing */
	char *b = xmalloc(POOL_BODY_MAX + 2);
	static const char head[] = "{\"template\":\"m\",\"size\":1}";
	memcpy(b, head, sizeof(head) - 1);
	memset(b + sizeof(head) - 1, ' ', POOL_BODY_MAX + 1 - (sizeof(head) - 1));
	struct al_error err = {0};
	struct pool_spec p;
	assert_int_equal(put_parse(b, POOL_BODY_MAX, 0, &p, &err), 0);
	put_bad_n(b, POOL_BODY_MAX + 1, 0, AL_ERR_TOO_LARGE, "the limit is 4096");
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_flag_good),
	    cmocka_unit_test(test_flag_form),
	    cmocka_unit_test(test_flag_bounds),
	    cmocka_unit_test(test_put_good),
	    cmocka_unit_test(test_put_missing_and_unknown),
	    cmocka_unit_test(test_put_types),
	    cmocka_unit_test(test_put_bounds),
	    cmocka_unit_test(test_put_tenant),
	    cmocka_unit_test(test_put_malformed_and_oversize),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
