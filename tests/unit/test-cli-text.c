/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/cli/cli-text.c: guest text made safe for a terminal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../src/cli/cli.h"

bool cli_opt_json;

static void test_plain_unchanged(void **s)
{
	(void)s;
	const char *in = "hello world ~!";
	assert_ptr_equal(cli_esc(in), in);                                                    /* no copy */
	assert_string_equal(cli_esc("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac"); /* UTF-8 kept */
	assert_string_equal(cli_esc(NULL), "(null)");
}

static void test_controls_escaped(void **s)
{
	(void)s;
	assert_string_equal(cli_esc("a\x1b]0;pwned\x07z"), "a\\x1b]0;pwned\\x07z");
	assert_string_equal(cli_esc("l1\nl2\r\t"), "l1\\x0al2\\x0d\\x09");
	assert_string_equal(cli_esc("del\x7f"), "del\\x7f");
	assert_string_equal(cli_esc("c1\xc2\x9b"
	                            "31m"),
	                    "c1\\u009b31m"); /* U+009B CSI */
	assert_string_equal(cli_esc("bidi\xe2\x80\xae"
	                            "gpj.exe"),
	                    "bidi\\u202egpj.exe");
}

static void test_invalid_utf8(void **s)
{
	(void)s;
	assert_string_equal(cli_esc("raw\x9b"
	                            "31m"),
	                    "raw\\x9b31m");                                      /* 8-bit CSI */
	assert_string_equal(cli_esc("over\xc0\xaf"), "over\\xc0\\xaf");          /* overlong '/' */
	assert_string_equal(cli_esc("surr\xed\xa0\x80"), "surr\\xed\\xa0\\x80"); /* a surrogate */
	assert_string_equal(cli_esc("cut\xe2\x82"), "cut\\xe2\\x82");            /* truncated */
}

static void test_ring_keeps_results(void **s)
{
	(void)s;
	const char *a = cli_esc("\x1b"
	                        "a"),
	           *b = cli_esc("\x1b"
	                        "b");
	for (int i = 0; i < 14; i++)
		cli_esc("\x1b");
	assert_string_equal(a, "\\x1ba");
	assert_string_equal(b, "\\x1bb");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_plain_unchanged),
	    cmocka_unit_test(test_controls_escaped),
	    cmocka_unit_test(test_invalid_utf8),
	    cmocka_unit_test(test_ring_keeps_results),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
