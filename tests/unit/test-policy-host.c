/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for host canonicalisation and host:port splitting of the policy
 * grammar (src/common/policy-host.c). */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "policy-host.h"
#include "util.h"

struct canon_case {
	const char *in;
	const char *want; /* NULL: refused */
	int err;          /* when refused */
	enum policy_host_kind kind;
};

#define NAME POLICY_HOST_NAME
#define V4 POLICY_HOST_IPV4
#define V6 POLICY_HOST_IPV6

static const struct canon_case canon_cases[] = {
    /* names */
    {"example.com", "example.com", 0, NAME},
    {"EXAMPLE.Com", "example.com", 0, NAME},
    {"example.com.", "example.com", 0, NAME},
    {"example.com..", NULL, -EINVAL, 0},
    {".example.com", NULL, -EINVAL, 0},
    {"a..b", NULL, -EINVAL, 0},
    {".", NULL, -EINVAL, 0},
    {"localhost", "localhost", 0, NAME},
    {"a-b.c-d.example", "a-b.c-d.example", 0, NAME},
    {"-a.example", NULL, -EINVAL, 0},
    {"a-.example", NULL, -EINVAL, 0},
    {"a_b.example", NULL, -EINVAL, 0},
    {"a b.example", NULL, -EINVAL, 0},
    {"a\tb", NULL, -EINVAL, 0},
    {"exa*mple.com", NULL, -EINVAL, 0},
    {"example.com:443", NULL, -EINVAL, 0},
    {"0x7f.example", "0x7f.example", 0, NAME},
    {"1.2.3.example", "1.2.3.example", 0, NAME},
    {"ab--cd.example", "ab--cd.example", 0, NAME},
    {"123.456a", "123.456a", 0, NAME},
    {"", NULL, -EINVAL, 0},
    /* IDN */
    {"bücher.example", "xn--bcher-kva.example", 0, NAME},
    {"BÜCHER.example", "xn--bcher-kva.example", 0, NAME},
    {"xn--bcher-kva.example", "xn--bcher-kva.example", 0, NAME},
    {"XN--BCHER-KVA.EXAMPLE", "xn--bcher-kva.example", 0, NAME},
    {"münchen.de", "xn--mnchen-3ya.de", 0, NAME},
    {"straße.de", "xn--strae-oqa.de", 0, NAME},
    {"日本語.jp", "xn--wgv71a119e.jp", 0, NAME},
    {"日本語jp.jp", "xn--jp-5t7du0ck91h.jp", 0, NAME},
    {"例え.jp", "xn--r8jz45g.jp", 0, NAME},
    {"пример.рф", "xn--e1afmkfd.xn--p1ai", 0, NAME},
    {"ПРИМЕР.example", "xn--e1afmkfd.example", 0, NAME},
    {"ελληνικά.gr", "xn--hxargifdar.gr", 0, NAME},
    {"한국.kr", "xn--3e0b707e.kr", 0, NAME},
    {"Ÿ.example", "xn--wda.example", 0, NAME},
    {"xn--e1afmkfd.example", "xn--e1afmkfd.example", 0, NAME},
    /* Cyrillic "а" + Latin "pple": a homograph, refused. */
    {"\xd0\xb0pple.com", NULL, -EILSEQ, 0},
    {"xn--pple-43d.com", NULL, -EILSEQ, 0},
    /* Greek + Cyrillic */
    {"\xce\xb1\xd0\xb0.example", NULL, -EILSEQ, 0},
    /* combining diaeresis (not NFC), ligature fi, fullwidth A, ideographic full stop,
     * L with middle dot (compatibility), Hebrew (right-to-left) */
    {"bu\xcc\x88"
     "cher.example",
     NULL, -EILSEQ, 0},
    {"\xef\xac\x81.example", NULL, -EILSEQ, 0},
    {"\xef\xbc\xa1.example", NULL, -EILSEQ, 0},
    {"example\xe3\x80\x82"
     "com",
     NULL, -EILSEQ, 0},
    {"\xc5\x80.example", NULL, -EILSEQ, 0},
    {"\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d.example", NULL, -EILSEQ, 0},
    /* invalid UTF-8: lone continuation, overlong, surrogate, truncated */
    {"\x80.example", NULL, -EILSEQ, 0},
    {"\xc0\xae.example", NULL, -EILSEQ, 0},
    {"\xed\xa0\x80.example", NULL, -EILSEQ, 0},
    {"b\xc3", NULL, -EILSEQ, 0},
    /* A-labels that do not decode, or decode to something refused/non-canonical */
    {"xn--.example", NULL, -EINVAL, 0},
    {"xn--abc.example", NULL, -EILSEQ, 0},  /* decodes to U+0082 */
    {"xn--abc-.example", NULL, -EINVAL, 0}, /* ASCII only (and a trailing hyphen) */
    {"xn--ab-c.example", NULL, -EINVAL, 0},
    {"xn--zzzzzzzzzzzzzzz.example", NULL, -EINVAL, 0},
    {"xn--bcher-kva9.example", NULL, -EINVAL, 0},
    {"xn--jm6c.example", NULL, -EILSEQ, 0},          /* U+FB01 */
    {"xn--tda.example", "xn--tda.example", 0, NAME}, /* ü */
    {"xn--wca.example", NULL, -EILSEQ, 0},           /* Ü (upper case): not what we would produce */
    {"xn--0ca.example", "xn--0ca.example", 0, NAME}, /* à */
    {"ü-.example", NULL, -EINVAL, 0},
    {"üb--x.example", NULL, -EINVAL, 0},
    /* IPv4 */
    {"127.0.0.1", "127.0.0.1", 0, V4},
    {"0.0.0.0", "0.0.0.0", 0, V4},
    {"255.255.255.255", "255.255.255.255", 0, V4},
    {"203.0.113.7", "203.0.113.7", 0, V4},
    {"0177.0.0.1", NULL, -EINVAL, 0},
    {"127.000.0.1", NULL, -EINVAL, 0},
    {"127.0.0.01", NULL, -EINVAL, 0},
    {"0x7f.0.0.1", NULL, -EINVAL, 0},
    {"0x7f.1", NULL, -EINVAL, 0},
    {"127.0.0.0x1", NULL, -EINVAL, 0},
    {"127.1", NULL, -EINVAL, 0},
    {"127.0.1", NULL, -EINVAL, 0},
    {"2130706433", NULL, -EINVAL, 0},
    {"0x7f000001", NULL, -EINVAL, 0},
    {"017700000001", NULL, -EINVAL, 0},
    {"256.0.0.1", NULL, -EINVAL, 0},
    {"1.2.3.4.5", NULL, -EINVAL, 0},
    {"1.2.3.4.", NULL, -EINVAL, 0},
    {"example.123", NULL, -EINVAL, 0},
    {"0x", NULL, -EINVAL, 0},
    /* IPv6 */
    {"[::1]", "::1", 0, V6},
    {"[0:0:0:0:0:0:0:1]", "::1", 0, V6},
    {"[::]", "::", 0, V6},
    {"[2001:DB8::0001]", "2001:db8::1", 0, V6},
    {"[2001:db8:0:0:1:0:0:1]", "2001:db8::1:0:0:1", 0, V6},
    {"[2001:db8:0:1:1:1:1:1]", "2001:db8:0:1:1:1:1:1", 0, V6},
    {"[2001:0:0:1:0:0:0:1]", "2001:0:0:1::1", 0, V6},
    {"[::ffff:7f00:1]", "::ffff:127.0.0.1", 0, V6},
    {"[::ffff:127.0.0.1]", "::ffff:127.0.0.1", 0, V6},
    {"[fe80::1%eth0]", NULL, -EINVAL, 0},
    {"[fe80::1%25eth0]", NULL, -EINVAL, 0},
    {"[::1", NULL, -EINVAL, 0},
    {"[]", NULL, -EINVAL, 0},
    {"[1.2.3.4]", NULL, -EINVAL, 0},
    {"[::ffff:127.0.0.01]", NULL, -EINVAL, 0},
    {"::1", NULL, -EINVAL, 0},
    {"[::1]:80", NULL, -EINVAL, 0},
    {"[::1]x", NULL, -EINVAL, 0},
};

static void test_canonicalize_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(canon_cases); i++) {
		const struct canon_case *c = &canon_cases[i];
		struct policy_host h;
		struct al_error err = {0};
		int r = policy_host_canonicalize((const uint8_t *)c->in, strlen(c->in), &h, &err);
		if (c->want) {
			if (r != 0)
				fail_msg("\"%s\": refused (%d: %s), want \"%s\"", c->in, r, err.message, c->want);
			if (strcmp(h.name, c->want) != 0 || h.len != strlen(c->want) || h.kind != c->kind)
				fail_msg("\"%s\": got \"%s\" kind %d, want \"%s\" kind %d", c->in, h.name, h.kind,
				         c->want, c->kind);
			/* canonical is a fixed point */
			struct policy_host again;
			if (c->kind == POLICY_HOST_IPV6)
				continue;
			assert_int_equal(policy_host_canonicalize((const uint8_t *)h.name, h.len, &again, NULL), 0);
			assert_string_equal(again.name, h.name);
		} else {
			if (r != c->err)
				fail_msg("\"%s\": got %d (%s), want %d", c->in, r, r ? err.message : h.name, c->err);
			if (err.message[0] == '\0')
				fail_msg("\"%s\": refused without a message", c->in);
		}
	}
}

static void test_canonicalize_lengths(void **state)
{
	(void)state;
	char buf[POLICY_HOST_INPUT_MAX + 8];
	struct policy_host h;
	/* 63-byte label fine, 64 not */
	memset(buf, 'a', 63);
	assert_int_equal(policy_host_canonicalize((const uint8_t *)buf, 63, &h, NULL), 0);
	memset(buf, 'a', 64);
	assert_int_equal(policy_host_canonicalize((const uint8_t *)buf, 64, &h, NULL), -ENAMETOOLONG);
	/* 253 bytes total fine (with and without the root dot), 254 not */
	size_t n = 0;
	while (n < 253) {
		size_t l = MIN((size_t)63, 253 - n);
		memset(buf + n, 'b', l);
		n += l;
		if (n < 253) {
			buf[n - 1] = '.';
		}
	}
	assert_int_equal(policy_host_canonicalize((const uint8_t *)buf, 253, &h, NULL), 0);
	assert_int_equal(h.len, 253);
	buf[253] = '.';
	assert_int_equal(policy_host_canonicalize((const uint8_t *)buf, 254, &h, NULL), 0);
	buf[253] = 'c';
	assert_int_equal(policy_host_canonicalize((const uint8_t *)buf, 254, &h, NULL), -ENAMETOOLONG);
	/* an IDN label whose A-label is over 63 bytes */
	const char *u = "\xc3\xbc"; /* ü */
	size_t o = 0;
	for (int i = 0; i < 60; i++) {
		memcpy(buf + o, u, 2);
		o += 2;
	}
	assert_int_equal(policy_host_canonicalize((const uint8_t *)buf, o, &h, NULL), -ENAMETOOLONG);
	memset(buf, 'a', sizeof(buf));
	assert_int_equal(policy_host_canonicalize((const uint8_t *)buf, POLICY_HOST_INPUT_MAX + 1, &h, NULL),
	                 -ENAMETOOLONG);
	/* NUL inside */
	assert_int_equal(policy_host_canonicalize((const uint8_t *)"a\0b.example", 11, &h, NULL), -EINVAL);
}

static void test_punycode_roundtrip(void **state)
{
	(void)state;
	/* RFC 3492 7.1 (A): Arabic (Egyptian) */
	static const uint32_t arabic[] = {0x0644, 0x064A, 0x0647, 0x0645, 0x0627, 0x0628, 0x062A, 0x0643, 0x0644,
	                                  0x0645, 0x0648, 0x0634, 0x0639, 0x0631, 0x0628, 0x064A, 0x061F};
	char out[128];
	size_t len;
	assert_int_equal(policy_punycode_encode(arabic, ARRAY_SIZE(arabic), out, sizeof(out), &len), 0);
	assert_int_equal(len, strlen("egbpdaj6bu4bxfgehfvwxn"));
	assert_memory_equal(out, "egbpdaj6bu4bxfgehfvwxn", len);
	uint32_t back[64];
	size_t n;
	assert_int_equal(policy_punycode_decode(out, len, back, ARRAY_SIZE(back), &n), 0);
	assert_int_equal(n, ARRAY_SIZE(arabic));
	assert_memory_equal(back, arabic, sizeof(arabic));
	/* too small an output */
	assert_int_equal(policy_punycode_encode(arabic, ARRAY_SIZE(arabic), out, 5, &len), -ENAMETOOLONG);
	/* decode refuses overflow and non-digits */
	assert_int_equal(policy_punycode_decode("99999999999", 11, back, ARRAY_SIZE(back), &n), -EINVAL);
	assert_int_equal(policy_punycode_decode("ab!", 3, back, ARRAY_SIZE(back), &n), -EINVAL);
}

struct split_case {
	const char *in;
	const char *host; /* NULL: refused */
	uint16_t port;
};

static const struct split_case split_cases[] = {
    {"example.com", "example.com", 0},
    {"example.com:80", "example.com", 80},
    {"example.com:65535", "example.com", 65535},
    {"example.com:1", "example.com", 1},
    {"example.com:0", NULL, 0},
    {"example.com:65536", NULL, 0},
    {"example.com:080", NULL, 0},
    {"example.com:", NULL, 0},
    {"example.com:+80", NULL, 0},
    {"example.com: 80", NULL, 0},
    {"example.com:8a", NULL, 0},
    {"example.com:123456", NULL, 0},
    {"a:1:2", NULL, 0},
    {"[::1]", "[::1]", 0},
    {"[::1]:443", "[::1]", 443},
    {"[::1]443", NULL, 0},
    {"[::1", NULL, 0},
    {":80", NULL, 0},
    {"", NULL, 0},
};

static void test_split_port(void **state)
{
	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(split_cases); i++) {
		const struct split_case *c = &split_cases[i];
		const uint8_t *host;
		size_t hl;
		uint16_t port;
		int r = policy_host_split_port((const uint8_t *)c->in, strlen(c->in), &host, &hl, &port, NULL);
		if (!c->host) {
			if (r != -EINVAL)
				fail_msg("\"%s\": accepted", c->in);
			continue;
		}
		if (r != 0 || hl != strlen(c->host) || memcmp(host, c->host, hl) != 0 || port != c->port)
			fail_msg("\"%s\": r=%d host \"%.*s\" port %u", c->in, r, (int)hl, host, port);
	}
}

static void test_format(void **state)
{
	(void)state;
	struct policy_host h;
	char buf[300];
	assert_int_equal(policy_host_canonicalize((const uint8_t *)"[2001:db8::1]", 13, &h, NULL), 0);
	assert_int_equal(policy_host_format(&h, 443, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "[2001:db8::1]:443");
	assert_int_equal(policy_host_canonicalize((const uint8_t *)"Example.COM", 11, &h, NULL), 0);
	assert_int_equal(policy_host_format(&h, 0, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "example.com");
	assert_int_equal(policy_host_format(&h, 8080, buf, 5), -ENAMETOOLONG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_canonicalize_table),
	    cmocka_unit_test(test_canonicalize_lengths),
	    cmocka_unit_test(test_punycode_roundtrip),
	    cmocka_unit_test(test_split_port),
	    cmocka_unit_test(test_format),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
