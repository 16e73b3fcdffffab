/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/common/util.c. */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "util.h"

/* ------------------------------------------------------------ base64 */

static void expect_b64(const char *plain, const char *encoded)
{
	size_t len = 0;
	cleanup_free char *enc = base64_encode((const uint8_t *)plain, strlen(plain), &len);
	assert_string_equal(enc, encoded);
	assert_int_equal(len, strlen(encoded));
	cleanup_free uint8_t *dec = NULL;
	size_t dlen = 99;
	assert_int_equal(base64_decode(encoded, strlen(encoded), &dec, &dlen), 0);
	assert_int_equal(dlen, strlen(plain));
	assert_memory_equal(dec, plain, dlen);
}

static void test_base64_rfc4648_vectors(void **state)
{
	(void)state;
	expect_b64("", "");
	expect_b64("f", "Zg==");
	expect_b64("fo", "Zm8=");
	expect_b64("foo", "Zm9v");
	expect_b64("foob", "Zm9vYg==");
	expect_b64("fooba", "Zm9vYmE=");
	expect_b64("foobar", "Zm9vYmFy");
}

static void test_base64_roundtrip_binary(void **state)
{
	(void)state;
	uint8_t in[515];
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 167u + 13u);
	for (size_t n = 0; n <= sizeof(in); n += (n < 16 ? 1 : 37)) {
		size_t elen;
		cleanup_free char *enc = base64_encode(in, n, &elen);
		assert_int_equal(elen, 4 * ((n + 2) / 3));
		assert_int_equal(strlen(enc), elen);
		cleanup_free uint8_t *dec = NULL;
		size_t dlen;
		assert_int_equal(base64_decode(enc, elen, &dec, &dlen), 0);
		assert_int_equal(dlen, n);
		if (n)
			assert_memory_equal(dec, in, n);
	}
	/* Every byte value, including NUL and 0xff. */
	uint8_t all[256];
	for (int i = 0; i < 256; i++)
		all[i] = (uint8_t)i;
	size_t elen;
	cleanup_free char *enc = base64_encode(all, sizeof(all), &elen);
	cleanup_free uint8_t *dec = NULL;
	size_t dlen;
	assert_int_equal(base64_decode(enc, elen, &dec, &dlen), 0);
	assert_int_equal(dlen, 256);
	assert_memory_equal(dec, all, 256);
}

static void expect_b64_invalid(const char *in, size_t n)
{
	uint8_t *out = (uint8_t *)0x1;
	size_t len = 12345;
	assert_int_equal(base64_decode(in, n, &out, &len), -EINVAL);
	/* Outputs are written only on success. */
	assert_ptr_equal(out, (uint8_t *)0x1);
	assert_int_equal(len, 12345);
}

static void test_base64_rejects_bad_input(void **state)
{
	(void)state;
	const char *bad[] = {
	    "Z",        "Zg",   "Zg=",      "Zm9vY",    /* length not a multiple of 4 */
	    "Zm9v!A==", "Zm 9", "Zm9v\n",   "Zm-_",     /* characters outside the alphabet */
	    "Zg==Zg==", "Zg=a", "Z===",     "====",     /* padding in the wrong place */
	    "=AAA",     "A=AA", "Zm9=Zm9v", "Zm9vZ===", /* padding not at the very end or too much */
	    "Zm8=\n",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		expect_b64_invalid(bad[i], strlen(bad[i]));
	/* An embedded NUL is not a base64 character either. */
	expect_b64_invalid("Zm\0v", 4);
	/* Only n bytes are looked at: a valid prefix of a longer string decodes. */
	uint8_t *out = NULL;
	size_t len;
	assert_int_equal(base64_decode("Zm9v!!!!", 4, &out, &len), 0);
	assert_int_equal(len, 3);
	assert_memory_equal(out, "foo", 3);
	free(out);
}

/* ------------------------------------------------------------ utf8_valid */

#define U8(...) ((const uint8_t[]){__VA_ARGS__}), sizeof((const uint8_t[]){__VA_ARGS__})

static void test_utf8_valid_accepts(void **state)
{
	(void)state;
	assert_true(utf8_valid((const uint8_t *)"", 0));
	assert_true(utf8_valid((const uint8_t *)"hello, world\n", 13));
	assert_true(utf8_valid(U8(0x00)));                   /* NUL is a valid code point */
	assert_true(utf8_valid(U8(0x7f)));                   /* last 1-byte */
	assert_true(utf8_valid(U8(0xc2, 0x80)));             /* U+0080, first 2-byte */
	assert_true(utf8_valid(U8(0xc3, 0xa9)));             /* é */
	assert_true(utf8_valid(U8(0xdf, 0xbf)));             /* U+07FF, last 2-byte */
	assert_true(utf8_valid(U8(0xe0, 0xa0, 0x80)));       /* U+0800, first 3-byte */
	assert_true(utf8_valid(U8(0xe2, 0x82, 0xac)));       /* € */
	assert_true(utf8_valid(U8(0xed, 0x9f, 0xbf)));       /* U+D7FF, just below the surrogates */
	assert_true(utf8_valid(U8(0xee, 0x80, 0x80)));       /* U+E000, just above them */
	assert_true(utf8_valid(U8(0xef, 0xbf, 0xbf)));       /* U+FFFF */
	assert_true(utf8_valid(U8(0xf0, 0x90, 0x80, 0x80))); /* U+10000, first 4-byte */
	assert_true(utf8_valid(U8(0xf0, 0x9f, 0x98, 0x80))); /* emoji */
	assert_true(utf8_valid(U8(0xf4, 0x8f, 0xbf, 0xbf))); /* U+10FFFF, the last code point */
	assert_true(utf8_valid(U8('a', 0xc3, 0xa9, 'b', 0xf0, 0x9f, 0x98, 0x80, 'c')));
}

static void test_utf8_valid_rejects(void **state)
{
	(void)state;
	/* Lone continuation bytes and impossible lead bytes. */
	assert_false(utf8_valid(U8(0x80)));
	assert_false(utf8_valid(U8(0xbf)));
	assert_false(utf8_valid(U8('a', 0x80, 'b')));
	assert_false(utf8_valid(U8(0xf8, 0x88, 0x80, 0x80, 0x80)));
	assert_false(utf8_valid(U8(0xfc, 0x84, 0x80, 0x80, 0x80, 0x80)));
	assert_false(utf8_valid(U8(0xfe)));
	assert_false(utf8_valid(U8(0xff)));
	/* Overlong encodings. */
	assert_false(utf8_valid(U8(0xc0, 0x80))); /* NUL */
	assert_false(utf8_valid(U8(0xc0, 0xaf))); /* '/' */
	assert_false(utf8_valid(U8(0xc1, 0xbf)));
	assert_false(utf8_valid(U8(0xe0, 0x80, 0x80)));
	assert_false(utf8_valid(U8(0xe0, 0x80, 0xaf)));
	assert_false(utf8_valid(U8(0xe0, 0x9f, 0xbf)));
	assert_false(utf8_valid(U8(0xf0, 0x80, 0x80, 0x80)));
	assert_false(utf8_valid(U8(0xf0, 0x80, 0x80, 0xaf)));
	assert_false(utf8_valid(U8(0xf0, 0x8f, 0xbf, 0xbf)));
	/* UTF-16 surrogates (CESU-8 / WTF-8). */
	assert_false(utf8_valid(U8(0xed, 0xa0, 0x80)));
	assert_false(utf8_valid(U8(0xed, 0xad, 0xbf)));
	assert_false(utf8_valid(U8(0xed, 0xb0, 0x80)));
	assert_false(utf8_valid(U8(0xed, 0xbf, 0xbf)));
	assert_false(utf8_valid(U8(0xed, 0xa0, 0xbd, 0xed, 0xb8, 0x80)));
	/* Above U+10FFFF. */
	assert_false(utf8_valid(U8(0xf4, 0x90, 0x80, 0x80)));
	assert_false(utf8_valid(U8(0xf5, 0x80, 0x80, 0x80)));
	assert_false(utf8_valid(U8(0xf7, 0xbf, 0xbf, 0xbf)));
	/* Truncated sequences, at the end and in the middle. */
	assert_false(utf8_valid(U8(0xc3)));
	assert_false(utf8_valid(U8(0xe2, 0x82)));
	assert_false(utf8_valid(U8(0xf0, 0x9f, 0x98)));
	assert_false(utf8_valid(U8(0xc3, 'a')));
	assert_false(utf8_valid(U8(0xe2, 0x82, 'a')));
	assert_false(utf8_valid(U8(0xf0, 0x9f, 0x98, 'a')));
	/* A valid sequence cut by n. */
	const uint8_t euro[] = {0xe2, 0x82, 0xac};
	assert_false(utf8_valid(euro, 2));
	assert_true(utf8_valid(euro, 0));
}

/* ------------------------------------------------------------ parsing */

static void test_parse_int_range(void **state)
{
	(void)state;
	long v = 777;
	assert_int_equal(parse_int_range("0", 0, 10, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(parse_int_range("10", 0, 10, &v), 0);
	assert_int_equal(v, 10);
	assert_int_equal(parse_int_range("-5", -10, 10, &v), 0);
	assert_int_equal(v, -5);
	assert_int_equal(parse_int_range("16", 1, 16, &v), 0);
	assert_int_equal(v, 16);
	char buf[64];
	snprintf(buf, sizeof(buf), "%ld", LONG_MAX);
	assert_int_equal(parse_int_range(buf, 0, LONG_MAX, &v), 0);
	assert_true(v == LONG_MAX);
	snprintf(buf, sizeof(buf), "%ld", LONG_MIN);
	assert_int_equal(parse_int_range(buf, LONG_MIN, 0, &v), 0);
	assert_true(v == LONG_MIN);

	v = 777;
	const char *bad[] = {
	    "11",
	    "-1",
	    "17",
	    "999999999999999999999999",
	    "-999999999999999999999999", /* out of range */
	    "abc",
	    "1x",
	    "1 ",
	    "0x10",
	    "1.5",
	    "1e3",
	    "--1",
	    "-",
	    "+",
	    "١", /* not decimal */
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		if (parse_int_range(bad[i], 0, 10, &v) >= 0)
			fail_msg("parse_int_range(\"%s\", 0, 10) accepted it", bad[i]);
	}
	assert_true(parse_int_range("", 0, 10, &v) < 0);
	assert_true(parse_int_range(NULL, 0, 10, &v) < 0);
	assert_int_equal(v, 777); /* untouched on failure */
}

/* "Strict decimal parsing: whole string, no sign surprises" (util.h): no
 * leading blanks or '+', which strtol(3) alone would accept. */
static void test_parse_int_range_is_strict(void **state)
{
	(void)state;
	long v = 777;
	const char *bad[] = {" 5", "\t5", "\n5", "+5", " -5"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		if (parse_int_range(bad[i], -10, 10, &v) >= 0)
			fail_msg("parse_int_range(\"%s\") accepted it", bad[i]);
	}
	assert_int_equal(v, 777);
}

static void test_parse_u64(void **state)
{
	(void)state;
	uint64_t v = 7;
	assert_int_equal(parse_u64("0", &v), 0);
	assert_true(v == 0);
	assert_int_equal(parse_u64("18446744073709551615", &v), 0);
	assert_true(v == UINT64_MAX);
	v = 7;
	const char *bad[] = {"", "-1", "+1", " 1", "1 ", "18446744073709551616", "1x", "x"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		if (parse_u64(bad[i], &v) >= 0)
			fail_msg("parse_u64(\"%s\") accepted it", bad[i]);
	}
	assert_true(parse_u64(NULL, &v) < 0);
	assert_true(v == 7);
}

/* ------------------------------------------------------------ strings */

static void test_strlcpy_al(void **state)
{
	(void)state;
	char buf[8];
	memset(buf, 'Z', sizeof(buf));
	assert_int_equal(strlcpy_al(buf, "abc", sizeof(buf)), 3);
	assert_string_equal(buf, "abc");
	/* Exactly fits: 7 chars + NUL. */
	assert_int_equal(strlcpy_al(buf, "abcdefg", sizeof(buf)), 7);
	assert_string_equal(buf, "abcdefg");
	/* Truncated: returns strlen(src), dst holds size-1 chars + NUL. */
	assert_int_equal(strlcpy_al(buf, "abcdefghij", sizeof(buf)), 10);
	assert_string_equal(buf, "abcdefg");
	assert_int_equal(strlcpy_al(buf, "xyz", 1), 3);
	assert_string_equal(buf, "");
	/* size 0: nothing is written. */
	memset(buf, 'Z', sizeof(buf));
	assert_int_equal(strlcpy_al(buf, "xyz", 0), 3);
	assert_int_equal(buf[0], 'Z');
	assert_int_equal(strlcpy_al(buf, "", sizeof(buf)), 0);
	assert_string_equal(buf, "");
}

static void test_snprintf_ok(void **state)
{
	(void)state;
	char buf[8];
	assert_int_equal(snprintf_ok(buf, sizeof(buf), "%s-%d", "ab", 42), 0);
	assert_string_equal(buf, "ab-42");
	assert_int_equal(snprintf_ok(buf, sizeof(buf), "%s", "1234567"), 0);
	assert_string_equal(buf, "1234567");
	assert_int_equal(snprintf_ok(buf, sizeof(buf), "%s", "12345678"), -ENAMETOOLONG);
	assert_int_equal(buf[sizeof(buf) - 1], '\0'); /* still terminated */
	assert_string_equal(buf, "1234567");
	assert_int_equal(snprintf_ok(buf, sizeof(buf), "%s", ""), 0);
	assert_string_equal(buf, "");
	assert_int_equal(snprintf_ok(buf, 1, "x"), -ENAMETOOLONG);
	assert_string_equal(buf, "");
}

static void test_hex_encode(void **state)
{
	(void)state;
	char out[9];
	hex_encode((const uint8_t[]){0x00, 0x7f, 0xa5, 0xff}, 4, out);
	assert_string_equal(out, "007fa5ff");
	hex_encode(NULL, 0, out);
	assert_string_equal(out, "");
}

static void test_hex_digit_value(void **state)
{
	(void)state;
	const char *digits = "0123456789abcdef", *upper = "ABCDEF";
	for (int i = 0; i < 16; i++)
		assert_int_equal(hex_digit_value((unsigned char)digits[i]), i);
	for (int i = 0; i < 6; i++)
		assert_int_equal(hex_digit_value((unsigned char)upper[i]), 10 + i);
	int accepted = 0;
	for (int c = 0; c < 256; c++)
		accepted += hex_digit_value((unsigned char)c) >= 0;
	assert_int_equal(accepted, 22);
	assert_int_equal(hex_digit_value('g'), -1);
	assert_int_equal(hex_digit_value('/'), -1);
	assert_int_equal(hex_digit_value(0xe6), -1);
}

static void test_format_time_rfc3339(void **state)
{
	(void)state;
	char buf[32];
	format_time_rfc3339(0, buf);
	assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
	format_time_rfc3339(1795975262123ull, buf);
	assert_string_equal(buf, "2026-11-29T18:01:02.123Z");
	format_time_rfc3339(951782400999ull, buf); /* leap day */
	assert_string_equal(buf, "2000-02-29T00:00:00.999Z");
}

/* ------------------------------------------------------------ files */

static char tmpdir[PATH_MAX];

static int setup_tmpdir(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(tmpdir, sizeof(tmpdir), "%s/airlock-test-util-XXXXXX", base ? base : "/tmp");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmpdir(void **state)
{
	(void)state;
	return rm_rf(tmpdir);
}

static void test_mkdir_p_and_rm_rf(void **state)
{
	(void)state;
	cleanup_free char *deep = xasprintf("%s/a/b/c", tmpdir);
	assert_int_equal(mkdir_p(deep, 0700), 0);
	assert_int_equal(mkdir_p(deep, 0700), 0); /* existing is fine */
	struct stat st;
	assert_int_equal(stat(deep, &st), 0);
	assert_true(S_ISDIR(st.st_mode));

	/* rm_rf must not follow a symlink out of the tree. */
	cleanup_free char *outside = xasprintf("%s/outside", tmpdir);
	cleanup_free char *keep = xasprintf("%s/outside/keep", tmpdir);
	cleanup_free char *link = xasprintf("%s/a/b/link", tmpdir);
	cleanup_free char *file = xasprintf("%s/a/b/c/file", tmpdir);
	assert_int_equal(mkdir_p(outside, 0700), 0);
	assert_int_equal(write_file_atomic(keep, "k", 1, 0600), 0);
	assert_int_equal(symlink(outside, link), 0);
	assert_int_equal(write_file_atomic(file, "f", 1, 0600), 0);

	cleanup_free char *top = xasprintf("%s/a", tmpdir);
	assert_int_equal(rm_rf(top), 0);
	assert_int_equal(lstat(top, &st), -1);
	assert_int_equal(errno, ENOENT);
	assert_int_equal(stat(keep, &st), 0);
	assert_int_equal(rm_rf(top), 0); /* missing is fine */
}

static void test_write_and_read_file(void **state)
{
	(void)state;
	cleanup_free char *path = xasprintf("%s/data", tmpdir);
	mode_t old_umask = umask(022);
	assert_int_equal(write_file_atomic(path, "hello\0world", 11, 0640), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640);
	umask(old_umask);
	cleanup_free char *buf = NULL;
	size_t len = 0;
	assert_int_equal(read_file_limited(path, 11, &buf, &len), 0);
	assert_int_equal(len, 11);
	assert_memory_equal(buf, "hello\0world", 12); /* NUL-terminated */

	char *none = (char *)0x1;
	assert_int_equal(read_file_limited(path, 10, &none, NULL), -EFBIG);
	assert_ptr_equal(none, (char *)0x1);

	/* Larger than the first buffer, to exercise growth. */
	size_t big = 100000;
	cleanup_free char *data = xmalloc(big);
	for (size_t i = 0; i < big; i++)
		data[i] = (char)('a' + i % 26);
	assert_int_equal(write_file_atomic(path, data, big, 0600), 0);
	cleanup_free char *back = NULL;
	assert_int_equal(read_file_limited(path, big, &back, &len), 0);
	assert_int_equal(len, big);
	assert_memory_equal(back, data, big);
	assert_int_equal(read_file_limited(path, big - 1, &none, NULL), -EFBIG);

	cleanup_free char *missing = xasprintf("%s/missing", tmpdir);
	assert_int_equal(read_file_limited(missing, 10, &none, NULL), -ENOENT);
}

/* ------------------------------------------------------------ MAC addresses */

static void test_mac_parse_and_format(void **state)
{
	(void)state;
	uint8_t mac[6];
	assert_int_equal(mac_parse("02:1a:2b:3c:4d:5e", mac), 0);
	const uint8_t want[6] = {0x02, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e};
	assert_memory_equal(mac, want, 6);
	char text[MAC_TEXT_LEN + 1];
	mac_format(mac, text);
	assert_string_equal(text, "02:1a:2b:3c:4d:5e");
	assert_int_equal(mac_parse("FE:FF:00:AB:cd:Ef", mac), 0);
	mac_format(mac, text);
	assert_string_equal(text, "fe:ff:00:ab:cd:ef");
}

static void test_mac_parse_is_strict(void **state)
{
	(void)state;
	static const char *const bad[] = {
	    "",
	    "02",
	    "02:1a:2b:3c:4d",
	    "02:1a:2b:3c:4d:",
	    "02:1a:2b:3c:4d:5",
	    "02:1a:2b:3c:4d:5e:",
	    "02:1a:2b:3c:4d:5e ",
	    " 02:1a:2b:3c:4d:5e",
	    "02:1a:2b:3c:4d:5e:6f",
	    "02-1a-2b-3c-4d-5e",
	    "021a.2b3c.4d5e",
	    "2:1a:2b:3c:4d:5e",
	    "02:1a:2b:3c:4d:5g",
	    "02:1a:2b:3c:4d:+5",
	    "0x:1a:2b:3c:4d:5e",
	    "02::1a:2b:3c:4d:5e",
	};
	uint8_t mac[6] = {0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa};
	const uint8_t untouched[6] = {0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(mac_parse(bad[i], mac), -EINVAL);
		assert_memory_equal(mac, untouched, 6);
	}
}

static void test_mac_local_unicast(void **state)
{
	(void)state;
	const uint8_t local[6] = {0x02}, local2[6] = {0xfe}, global[6] = {0x00}, multicast[6] = {0x03},
	              broadcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, global_mc[6] = {0x01};
	assert_true(mac_is_local_unicast(local));
	assert_true(mac_is_local_unicast(local2));
	assert_false(mac_is_local_unicast(global));
	assert_false(mac_is_local_unicast(multicast));
	assert_false(mac_is_local_unicast(broadcast));
	assert_false(mac_is_local_unicast(global_mc));
}

static void test_mac_random_local(void **state)
{
	(void)state;
	char a[MAC_TEXT_LEN + 1], b[MAC_TEXT_LEN + 1];
	mac_random_local(a);
	mac_random_local(b);
	assert_int_equal(strlen(a), MAC_TEXT_LEN);
	assert_string_not_equal(a, b); /* 40 random bits */
	uint8_t mac[6];
	assert_int_equal(mac_parse(a, mac), 0);
	assert_int_equal(mac[0], 0x02);
	assert_true(mac_is_local_unicast(mac));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_base64_rfc4648_vectors),
	    cmocka_unit_test(test_base64_roundtrip_binary),
	    cmocka_unit_test(test_base64_rejects_bad_input),
	    cmocka_unit_test(test_utf8_valid_accepts),
	    cmocka_unit_test(test_utf8_valid_rejects),
	    cmocka_unit_test(test_parse_int_range),
	    cmocka_unit_test(test_parse_int_range_is_strict),
	    cmocka_unit_test(test_parse_u64),
	    cmocka_unit_test(test_strlcpy_al),
	    cmocka_unit_test(test_snprintf_ok),
	    cmocka_unit_test(test_hex_encode),
	    cmocka_unit_test(test_hex_digit_value),
	    cmocka_unit_test(test_format_time_rfc3339),
	    cmocka_unit_test(test_mac_parse_and_format),
	    cmocka_unit_test(test_mac_parse_is_strict),
	    cmocka_unit_test(test_mac_local_unicast),
	    cmocka_unit_test(test_mac_random_local),
	    cmocka_unit_test_setup_teardown(test_mkdir_p_and_rm_rf, setup_tmpdir, teardown_tmpdir),
	    cmocka_unit_test_setup_teardown(test_write_and_read_file, setup_tmpdir, teardown_tmpdir),
	};
	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
