/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/cli/cli-lines.c: a streamed answer split into lines
 * whatever pieces it arrives in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../src/cli/cli-lines.h"
#include "util.h"

struct seen {
	char lines[8][64];
	int n;
	int fail_at; /* the sink fails on this line (1-based; 0 never) */
};

static int on_line(void *ud, char *line, size_t len, struct al_error *err)
{
	struct seen *s = ud;
	assert_int_equal(strlen(line), len);
	if (s->n + 1 == s->fail_at)
		return al_error_set(err, AL_ERR_INTERNAL, EPROTO, "sink refused");
	assert_true(s->n < 8);
	snprintf(s->lines[s->n++], sizeof(s->lines[0]), "%s", line);
	return 0;
}

static void test_whole_lines(void **st)
{
	(void)st;
	struct cli_lines l = {0};
	struct seen s = {0};
	struct al_error err = {0};
	const char in[] = "{\"a\":1}\n{\"b\":2}\r\n\n{\"c\":3}\n";
	assert_int_equal(cli_lines_feed(&l, in, strlen(in), on_line, &s, &err), 0);
	assert_int_equal(cli_lines_finish(&l, on_line, &s, &err), 0);
	assert_int_equal(s.n, 3); /* the empty line is skipped, the \r dropped */
	assert_string_equal(s.lines[0], "{\"a\":1}");
	assert_string_equal(s.lines[1], "{\"b\":2}");
	assert_string_equal(s.lines[2], "{\"c\":3}");
	cli_lines_release(&l);
}

/* Every split of the input into two pieces, and one byte at a time, gives the same lines. */
static void test_pieces(void **st)
{
	(void)st;
	const char in[] = "first line\nsecond\r\nthird";
	size_t n = strlen(in);
	for (size_t cut = 0; cut <= n; cut++) {
		struct cli_lines l = {0};
		struct seen s = {0};
		struct al_error err = {0};
		assert_int_equal(cli_lines_feed(&l, in, cut, on_line, &s, &err), 0);
		assert_int_equal(cli_lines_feed(&l, in + cut, n - cut, on_line, &s, &err), 0);
		assert_int_equal(s.n, 2); /* the last one has no '\n' yet */
		assert_int_equal(cli_lines_finish(&l, on_line, &s, &err), 0);
		assert_int_equal(s.n, 3);
		assert_string_equal(s.lines[0], "first line");
		assert_string_equal(s.lines[1], "second");
		assert_string_equal(s.lines[2], "third");
		cli_lines_release(&l);
	}
	struct cli_lines l = {0};
	struct seen s = {0};
	struct al_error err = {0};
	for (size_t i = 0; i < n; i++)
		assert_int_equal(cli_lines_feed(&l, in + i, 1, on_line, &s, &err), 0);
	assert_int_equal(cli_lines_finish(&l, on_line, &s, &err), 0);
	assert_int_equal(s.n, 3);
	assert_string_equal(s.lines[1], "second");
	cli_lines_release(&l);
}

static void test_too_long(void **st)
{
	(void)st;
	struct cli_lines l = {.max = 8};
	struct seen s = {0};
	struct al_error err = {0};
	assert_int_equal(cli_lines_feed(&l, "12345678\n", 9, on_line, &s, &err), 0); /* exactly max: kept */
	assert_int_equal(cli_lines_feed(&l, "12345", 5, on_line, &s, &err), 0);
	assert_true(cli_lines_feed(&l, "6789", 4, on_line, &s, &err) < 0); /* 9 bytes, in pieces */
	assert_non_null(strstr(err.message, "longer than 8 bytes"));
	assert_int_equal(s.n, 1);
	cli_lines_release(&l);
}

/* The default bound is CLI_LINE_MAX (1 MiB). */
static void test_default_bound(void **st)
{
	(void)st;
	struct cli_lines l = {0};
	struct seen s = {0};
	struct al_error err = {0};
	size_t big = (1u << 20) + 1;
	char *buf = xmalloc(big);
	memset(buf, 'x', big);
	assert_int_equal(cli_lines_feed(&l, buf, big - 1, on_line, &s, &err), 0);
	assert_true(cli_lines_feed(&l, buf, 1, on_line, &s, &err) < 0);
	free(buf);
	cli_lines_release(&l);
}

static void test_sink_error_stops(void **st)
{
	(void)st;
	struct cli_lines l = {0};
	struct seen s = {.fail_at = 2};
	struct al_error err = {0};
	assert_true(cli_lines_feed(&l, "a\nb\nc\n", 6, on_line, &s, &err) < 0);
	assert_int_equal(s.n, 1);
	assert_string_equal(err.message, "sink refused");
	cli_lines_release(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_whole_lines),      cmocka_unit_test(test_pieces),
	    cmocka_unit_test(test_too_long),         cmocka_unit_test(test_default_bound),
	    cmocka_unit_test(test_sink_error_stops),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
