/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/cli/cli-ignore.c: .dockerignore patterns as Docker
 * reads them (the subset cli-ignore.h lists). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../src/cli/cli-ignore.h"
#include "util.h"

static struct cli_ignore *parse(const char *text)
{
	return cli_ignore_parse(text, strlen(text));
}

static void test_empty(void **st)
{
	(void)st;
	cleanup_cli_ignore struct cli_ignore *ig = parse("# only a comment\n\n   \n");
	assert_false(cli_ignore_excludes(ig, "Dockerfile"));
	assert_false(cli_ignore_excludes(ig, "a/b"));
	assert_false(cli_ignore_has_exceptions(ig));
}

static void test_plain_and_dirs(void **st)
{
	(void)st;
	cleanup_cli_ignore struct cli_ignore *ig = parse("node_modules\n  .git  \r\n/build/\n./tmp//x\n");
	assert_true(cli_ignore_excludes(ig, "node_modules"));
	assert_true(cli_ignore_excludes(ig, "node_modules/left-pad/index.js")); /* under a matched dir */
	assert_false(cli_ignore_excludes(ig, "src/node_modules"));              /* anchored at the root */
	assert_true(cli_ignore_excludes(ig, ".git/HEAD"));                      /* trimmed */
	assert_true(cli_ignore_excludes(ig, "build/out.o"));                    /* leading and trailing '/' */
	assert_true(cli_ignore_excludes(ig, "tmp/x"));                          /* "./", "//" cleaned */
	assert_false(cli_ignore_excludes(ig, "tmp/y"));
	assert_false(cli_ignore_excludes(ig, "buildx"));
}

static void test_wildcards(void **st)
{
	(void)st;
	cleanup_cli_ignore struct cli_ignore *ig = parse("*.md\n*/temp*\nlog?.txt\n[ab]x\n[^c-z]y\n");
	assert_true(cli_ignore_excludes(ig, "README.md"));
	assert_true(cli_ignore_excludes(ig, ".hidden.md"));      /* '*' matches a leading dot */
	assert_false(cli_ignore_excludes(ig, "docs/README.md")); /* '*' stays in one component */
	assert_true(cli_ignore_excludes(ig, "a/temporary"));
	assert_true(cli_ignore_excludes(ig, "a/temp/x/y"));
	assert_false(cli_ignore_excludes(ig, "a/b/temp"));
	assert_true(cli_ignore_excludes(ig, "log1.txt"));
	assert_false(cli_ignore_excludes(ig, "log10.txt"));
	assert_true(cli_ignore_excludes(ig, "bx"));
	assert_false(cli_ignore_excludes(ig, "cx"));
	assert_true(cli_ignore_excludes(ig, "ay"));
	assert_false(cli_ignore_excludes(ig, "dy"));
}

static void test_double_star(void **st)
{
	(void)st;
	cleanup_cli_ignore struct cli_ignore *ig = parse("**/*.pyc\nsrc/**/gen\n**\n!keep/**\n");
	/* "**" then "!keep" and all under it: everything but keep */
	assert_true(cli_ignore_excludes(ig, "x.pyc"));
	assert_true(cli_ignore_excludes(ig, "anything"));
	assert_false(cli_ignore_excludes(ig, "keep/a/b.txt"));
	assert_false(cli_ignore_excludes(ig, "keep"));
	cleanup_cli_ignore struct cli_ignore *ig2 = parse("**/*.pyc\nsrc/**/gen\n");
	assert_true(cli_ignore_excludes(ig2, "x.pyc"));       /* zero directories */
	assert_true(cli_ignore_excludes(ig2, "a/b/c/x.pyc")); /* several */
	assert_false(cli_ignore_excludes(ig2, "a/b/c/x.py"));
	assert_true(cli_ignore_excludes(ig2, "src/gen"));
	assert_true(cli_ignore_excludes(ig2, "src/a/b/gen/file.c"));
	assert_false(cli_ignore_excludes(ig2, "lib/gen"));
}

static void test_exceptions_last_wins(void **st)
{
	(void)st;
	cleanup_cli_ignore struct cli_ignore *ig = parse("*.md\n!README*.md\nREADME-secret.md\ndata\n! data/keep\n");
	assert_true(cli_ignore_has_exceptions(ig));
	assert_true(cli_ignore_excludes(ig, "CHANGES.md"));
	assert_false(cli_ignore_excludes(ig, "README.md"));
	assert_true(cli_ignore_excludes(ig, "README-secret.md")); /* excluded again later */
	assert_true(cli_ignore_excludes(ig, "data/x"));
	assert_false(cli_ignore_excludes(ig, "data/keep"));
	assert_false(cli_ignore_excludes(ig, "data/keep/deep/file")); /* under the exception */
	assert_true(cli_ignore_excludes(ig, "data"));                 /* the directory itself stays out */
}

static void test_escapes_and_dotdot(void **st)
{
	(void)st;
	cleanup_cli_ignore struct cli_ignore *ig = parse("\\*literal\n../outside\na/../b\n#not-a-pattern\n \\#x\n");
	assert_true(cli_ignore_excludes(ig, "*literal"));
	assert_false(cli_ignore_excludes(ig, "xliteral"));
	assert_false(cli_ignore_excludes(ig, "outside")); /* "../outside" is dropped */
	assert_true(cli_ignore_excludes(ig, "b/c"));      /* "a/../b" is "b" */
	assert_false(cli_ignore_excludes(ig, "#not-a-pattern"));
	assert_true(cli_ignore_excludes(ig, "#x"));
}

static void test_load_missing(void **st)
{
	(void)st;
	struct cli_ignore *ig = NULL;
	struct al_error err = {0};
	assert_int_equal(cli_ignore_load("/nonexistent/.dockerignore", &ig, &err), 0);
	assert_false(cli_ignore_excludes(ig, "x"));
	cli_ignore_free(ig);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_empty),
	    cmocka_unit_test(test_plain_and_dirs),
	    cmocka_unit_test(test_wildcards),
	    cmocka_unit_test(test_double_star),
	    cmocka_unit_test(test_exceptions_last_wins),
	    cmocka_unit_test(test_escapes_and_dotdot),
	    cmocka_unit_test(test_load_missing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
