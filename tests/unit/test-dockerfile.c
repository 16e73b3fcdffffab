/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/daemon/build/dockerfile.c: the Dockerfile subset of
 * template builds (issue 23). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dockerfile.h"
#include "util.h"

static struct dockerfile *parse_args(const char *text, const struct kv_list *args)
{
	struct dockerfile *df = NULL;
	struct al_error err = {0};
	int r = dockerfile_parse(text, strlen(text), args, &df, &err);
	if (r < 0)
		fail_msg("parse failed: %s", err.message);
	return df;
}

static struct dockerfile *parse(const char *text)
{
	return parse_args(text, NULL);
}

/* Refused, with a message holding `want`. */
static void expect_error(const char *text, const char *want)
{
	struct dockerfile *df = (struct dockerfile *)0x1;
	struct al_error err = {0};
	int r = dockerfile_parse(text, strlen(text), NULL, &df, &err);
	if (r >= 0)
		fail_msg("accepted: %s", text);
	assert_ptr_equal(df, (struct dockerfile *)0x1); /* ret_ only on success */
	if (!strstr(err.message, want))
		fail_msg("message \"%s\" lacks \"%s\"", err.message, want);
}

static void assert_argv(const struct dockerfile_argv *a, const char *const *want, size_t n)
{
	assert_int_equal(a->argc, n);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(a->argv[i], want[i]);
	assert_null(a->argv[n]);
}

static void test_basic(void **s)
{
	(void)s;
	struct dockerfile *df = parse("# a comment\n"
	                              "FROM base AS build\n"
	                              "\n"
	                              "run apt-get update && \\\n"
	                              "    # a comment inside\n"
	                              "    apt-get install -y curl\n"
	                              "CMD [\"python3\", \"-m\", \"http.server\"]\n"
	                              "ENTRYPOINT exec /start.sh $HOME\n");
	assert_string_equal(df->from, "base");
	assert_string_equal(df->from_alias, "build");
	assert_int_equal(df->from_line, 2);
	assert_int_equal(df->n_steps, 3);
	const struct dockerfile_step *st = &df->steps[0];
	assert_int_equal(st->kind, DOCKERFILE_RUN);
	assert_int_equal(st->line, 4);
	assert_true(st->shell_form);
	const char *run[] = {"/bin/sh", "-c", "apt-get update &&     apt-get install -y curl"};
	assert_argv(&st->argv, run, 3);
	const char *cmd[] = {"python3", "-m", "http.server"};
	assert_int_equal(df->steps[1].kind, DOCKERFILE_CMD);
	assert_false(df->steps[1].shell_form);
	assert_argv(&df->steps[1].argv, cmd, 3);
	const char *ep[] = {"/bin/sh", "-c", "exec /start.sh $HOME"}; /* no substitution */
	assert_argv(&df->steps[2].argv, ep, 3);
	assert_string_equal(dockerfile_kind_name(df->steps[2].kind), "ENTRYPOINT");
	dockerfile_free(df);
}

static void test_copy(void **s)
{
	(void)s;
	struct dockerfile *df = parse("FROM minimal\n"
	                              "ARG U=1000\n"
	                              "COPY --chown=${U}:${U} --chmod=750 a b/c/ /app/\n"
	                              "COPY [\"with space\", \"/dst dir/\"]\n"
	                              "ADD files/x.txt /x\n"
	                              "COPY --chown=app \"q u\" 'lit$U' /y\n");
	const struct dockerfile_step *st = &df->steps[1];
	assert_int_equal(st->kind, DOCKERFILE_COPY);
	assert_int_equal(st->n_sources, 2);
	assert_string_equal(st->sources[0], "a");
	assert_string_equal(st->sources[1], "b/c/");
	assert_string_equal(st->dest, "/app/");
	assert_string_equal(st->chown, "1000:1000");
	assert_int_equal(st->chmod, 0750);
	st = &df->steps[2];
	assert_int_equal(st->n_sources, 1);
	assert_string_equal(st->sources[0], "with space");
	assert_string_equal(st->dest, "/dst dir/");
	assert_null(st->chown);
	assert_int_equal(st->chmod, -1);
	assert_int_equal(df->steps[3].kind, DOCKERFILE_ADD);
	st = &df->steps[4];
	assert_string_equal(st->chown, "app");
	assert_string_equal(st->sources[0], "q u");
	assert_string_equal(st->sources[1], "lit$U");
	dockerfile_free(df);
}

static void test_env_and_substitution(void **s)
{
	(void)s;
	struct dockerfile *df = parse("FROM base\n"
	                              "ENV A=1 B=\"two words\" C=$A\n"
	                              "ENV LEGACY some value here\n"
	                              "ENV D=${A}x E=${UNSET:-def} F=${A:+alt} G=${UNSET:+alt} H=\\$A I='$A'\n"
	                              "ENV J=${A:-${UNSET:-deep}} K=\"$A\\\"q\"\n"
	                              "LABEL version=\"1.$A\" other=x\n");
	const struct dockerfile_step *st = &df->steps[0];
	assert_int_equal(st->pairs.n, 3);
	assert_string_equal(st->pairs.values[1], "two words");
	assert_string_equal(st->pairs.values[2], ""); /* A is not set before this line */
	st = &df->steps[1];
	assert_int_equal(st->pairs.n, 1);
	assert_string_equal(st->pairs.keys[0], "LEGACY");
	assert_string_equal(st->pairs.values[0], "some value here");
	st = &df->steps[2];
	const char *want[] = {"1x", "def", "alt", "", "$A", "$A"};
	for (size_t i = 0; i < ARRAY_SIZE(want); i++)
		assert_string_equal(st->pairs.values[i], want[i]);
	assert_string_equal(df->steps[3].pairs.values[0], "1");
	assert_string_equal(df->steps[3].pairs.values[1], "1\"q");
	assert_int_equal(df->steps[4].kind, DOCKERFILE_LABEL);
	assert_string_equal(df->steps[4].pairs.values[0], "1.1");
	dockerfile_free(df);
}

static void test_args(void **s)
{
	(void)s;
	struct kv_list args = {0};
	char *keys[] = {"TAG", "V", "NEVER"};
	char *values[] = {"edge", "9", "x"};
	args.n = 3;
	args.keys = keys;
	args.values = values;
	struct dockerfile *df = parse_args("ARG TAG=stable\n"
	                                   "FROM base-${TAG}\n"
	                                   "ARG TAG\n"
	                                   "ARG V=1 W=2\n"
	                                   "ARG NODEF\n"
	                                   "ENV X=$TAG-$V-$W-$NEVER-${NODEF:-none}\n"
	                                   "RUN echo $V\n",
	                                   &args);
	assert_string_equal(df->from, "base-edge");
	assert_int_equal(df->steps[0].kind, DOCKERFILE_ARG);
	assert_string_equal(df->steps[0].pairs.keys[0], "TAG");
	assert_string_equal(df->steps[0].pairs.values[0], "edge");
	assert_string_equal(df->steps[1].pairs.values[0], "9");
	assert_string_equal(df->steps[1].pairs.values[1], "2");
	assert_null(df->steps[2].pairs.values[0]);
	assert_string_equal(df->steps[3].pairs.values[0], "edge-9-2--none");
	dockerfile_free(df);
	/* Without build args, the default; ARG after FROM without one is unset. */
	df = parse("ARG TAG=stable\nFROM b:$TAG\nENV X=\"$TAG\"\n");
	assert_string_equal(df->from, "b:stable");
	assert_string_equal(df->steps[0].pairs.values[0], "");
	dockerfile_free(df);
}

static void test_workdir_user_expose(void **s)
{
	(void)s;
	struct dockerfile *df = parse("FROM b\n"
	                              "WORKDIR app\n"
	                              "WORKDIR src/../lib\n"
	                              "ENV BASE=/opt\n"
	                              "WORKDIR $BASE/x\n"
	                              "USER ${U:-1000}:1000\n"
	                              "EXPOSE 80 8080/tcp 9000-9010/udp\n");
	assert_string_equal(df->steps[0].value, "/app");
	assert_string_equal(df->steps[1].value, "/app/lib");
	assert_string_equal(df->steps[3].value, "/opt/x");
	assert_string_equal(df->steps[4].value, "1000:1000");
	assert_int_equal(df->steps[5].n_ports, 3);
	assert_string_equal(df->steps[5].ports[1], "8080/tcp");
	dockerfile_free(df);
}

static void test_escape_directive(void **s)
{
	(void)s;
	struct dockerfile *df = parse("# escape=`\n"
	                              "FROM b\n"
	                              "RUN dir c:\\ `\n"
	                              "  && echo done\n"
	                              "ENV P=c:\\path\n");
	const char *run[] = {"/bin/sh", "-c", "dir c:\\   && echo done"};
	assert_argv(&df->steps[0].argv, run, 3);
	assert_string_equal(df->steps[1].pairs.values[0], "c:\\path");
	dockerfile_free(df);
	/* A directive after anything else is a comment. */
	df = parse("FROM b\n# escape=`\nRUN a \\\n b\n");
	assert_string_equal(df->steps[0].argv.argv[2], "a  b");
	dockerfile_free(df);
	expect_error("# escape=x\nFROM b\n", "line 1: the escape directive");
}

static void test_keys(void **s)
{
	(void)s;
	struct dockerfile *a = parse("FROM b\nARG V=1\nCOPY f /x/$V\nRUN echo hi\n");
	struct dockerfile *b = parse("FROM b\nARG V=2\nCOPY f /x/$V\nRUN  echo hi\n");
	assert_string_not_equal(dockerfile_step_key(&a->steps[0]), dockerfile_step_key(&b->steps[0]));
	assert_string_not_equal(dockerfile_step_key(&a->steps[1]), dockerfile_step_key(&b->steps[1]));
	/* Blanks after the instruction's name do not count. */
	assert_string_equal(dockerfile_step_key(&a->steps[2]), dockerfile_step_key(&b->steps[2]));
	struct dockerfile *c = parse("FROM other\nARG V=1\ncopy  f  /x/1\nRUN echo hi\n");
	for (size_t i = 0; i < 3; i++)
		assert_string_equal(dockerfile_step_key(&a->steps[i]), dockerfile_step_key(&c->steps[i]));
	assert_non_null(strstr(dockerfile_step_key(&a->steps[1]), "COPY"));
	dockerfile_free(a);
	dockerfile_free(b);
	dockerfile_free(c);
}

static void test_refused(void **s)
{
	(void)s;
	expect_error("", "no FROM");
	expect_error("# only a comment\n", "no FROM");
	expect_error("RUN x\nFROM b\n", "line 1: RUN before FROM");
	expect_error("FROM a\nRUN x\nFROM b\n", "line 3: multi-stage builds are not supported");
	expect_error("FROM a\nONBUILD RUN x\n", "line 2: ONBUILD is not supported");
	expect_error("FROM a\nSHELL [\"/bin/bash\"]\n", "SHELL is not supported");
	expect_error("FROM a\nHEALTHCHECK NONE\n", "HEALTHCHECK is not supported");
	expect_error("FROM a\nVOLUME /data\n", "VOLUME is not supported");
	expect_error("FROM a\nSTOPSIGNAL TERM\n", "STOPSIGNAL is not supported");
	expect_error("FROM a\nCOPY --from=build /a /b\n", "--from is not supported");
	expect_error("FROM a\nCOPY --link a /b\n", "--link is not supported");
	expect_error("FROM a\nADD https://example.com/x /x\n", "URL or git");
	expect_error("FROM a\nADD git@github.com:a/b.git /x\n", "URL or git");
	expect_error("FROM a\nADD app.tar.gz /x\n", "RUN tar");
	expect_error("FROM a\nFROB x\n", "line 2: unknown instruction FROB");
	expect_error("FROM a\nRUN --mount=type=cache,target=/x make\n", "not supported");
	expect_error("FROM a\nRUN --network=none make\n", "not supported");
	expect_error("FROM a\nRUN\n", "line 2: RUN needs a command");
	expect_error("FROM a\nRUN <<EOF\necho hi\nEOF\n", "line 2: RUN with a here-document");
	expect_error("FROM a\nCOPY onlyone\n", "needs a source and a destination");
	expect_error("FROM a\nENV\n", "ENV needs");
	expect_error("FROM a\nENV K\n", "needs a value");
	expect_error("FROM a\nWORKDIR\n", "WORKDIR needs a path");
	expect_error("FROM a\nEXPOSE http\n", "EXPOSE http");
	expect_error("FROM a\nCOPY --chmod=999 a b\n", "--chmod=999");
	expect_error("FROM --platform=linux/arm64 a\n", "not supported");
	expect_error("FROM\n", "FROM takes an image");
	expect_error("ARG X\nFROM $X\n", "names no image");
	expect_error("FROM a\nENV X=${Y:?required}\n", "Y is not set: required");
	expect_error("FROM a\nENV X=${Y\n", "bad substitution");
	expect_error("FROM a\nENV X=${Y:-abc\n", "missing }");
	expect_error("FROM a\nENV X=${Y/a/b}\n", "bad substitution");
	expect_error("FROM a\nENV X=\"open\n", "unterminated double quote");
	expect_error("FROM a\nARG 1X\n", "ARG 1X");
}

static void test_limits(void **s)
{
	(void)s;
	struct al_error err = {0};
	struct dockerfile *df = NULL;
	/* The file's size. */
	size_t big = DOCKERFILE_MAX_BYTES + 1;
	char *text = xmalloc(big + 1);
	memset(text, '#', big);
	text[big] = '\0';
	assert_int_equal(dockerfile_parse(text, big, NULL, &df, &err), -E2BIG);
	assert_int_equal(err.code, AL_ERR_TOO_LARGE);
	/* A NUL byte. */
	assert_int_equal(dockerfile_parse("FROM a\0", 7, NULL, &df, &err), -EINVAL);
	assert_non_null(strstr(err.message, "NUL"));
	/* A logical line. */
	size_t n = 0;
	n += (size_t)snprintf(text, big, "FROM a\nRUN ");
	while (n < 2 * DOCKERFILE_MAX_LINE + 100) {
		memcpy(text + n, "x \\\n", 4);
		n += 4;
	}
	text[n] = '\0';
	assert_int_equal(dockerfile_parse(text, n, NULL, &df, &err), -E2BIG);
	assert_non_null(strstr(err.message, "line 2: the instruction is longer"));
	/* Instructions. */
	n = (size_t)snprintf(text, big, "FROM a\n");
	for (int i = 0; i < DOCKERFILE_MAX_INSTRUCTIONS; i++)
		n += (size_t)snprintf(text + n, big - n, "RUN x\n");
	assert_int_equal(dockerfile_parse(text, n, NULL, &df, &err), -E2BIG);
	assert_non_null(strstr(err.message, "more than 1000 instructions"));
	/* Substitution that doubles. */
	n = (size_t)snprintf(text, big, "FROM a\nENV A=0123456789abcdef\n");
	for (int i = 0; i < 40; i++)
		n += (size_t)snprintf(text + n, big - n, "ENV A=$A$A\n");
	assert_int_equal(dockerfile_parse(text, n, NULL, &df, &err), -E2BIG);
	/* Sources. */
	n = (size_t)snprintf(text, big, "FROM a\nCOPY");
	for (int i = 0; i < DOCKERFILE_MAX_SOURCES + 1; i++)
		n += (size_t)snprintf(text + n, big - n, " s%d", i);
	n += (size_t)snprintf(text + n, big - n, " /d/\n");
	assert_int_equal(dockerfile_parse(text, n, NULL, &df, &err), -E2BIG);
	/* ARGs. */
	n = (size_t)snprintf(text, big, "FROM a\n");
	for (int i = 0; i < DOCKERFILE_MAX_ARGS + 1; i++)
		n += (size_t)snprintf(text + n, big - n, "ARG A%d=1\n", i);
	assert_int_equal(dockerfile_parse(text, n, NULL, &df, &err), -E2BIG);
	assert_non_null(strstr(err.message, "more than 128 ARGs"));
	/* Nesting. */
	n = (size_t)snprintf(text, big, "FROM a\nENV X=");
	for (int i = 0; i < DOCKERFILE_MAX_SUBST_DEPTH + 2; i++)
		n += (size_t)snprintf(text + n, big - n, "${U:-");
	for (int i = 0; i < DOCKERFILE_MAX_SUBST_DEPTH + 2; i++)
		text[n++] = '}';
	text[n] = '\0';
	assert_int_equal(dockerfile_parse(text, n, NULL, &df, &err), -EINVAL);
	assert_non_null(strstr(err.message, "nest"));
	assert_null(df);
	free(text);
}

static void test_text_shown(void **s)
{
	(void)s;
	char text[1024];
	int n = snprintf(text, sizeof(text), "FROM a\nRUN ");
	memset(text + n, 'y', 500);
	text[n + 500] = '\0';
	struct dockerfile *df = parse(text);
	assert_int_equal(strlen(df->steps[0].text), DOCKERFILE_TEXT_SHOWN + 3);
	assert_int_equal(strlen(df->steps[0].argv.argv[2]), 500);
	dockerfile_free(df);
	df = parse("FROM a\nMAINTAINER Someone <a@b> \"$X\"\n");
	assert_int_equal(df->steps[0].kind, DOCKERFILE_LABEL);
	assert_string_equal(df->steps[0].pairs.keys[0], "maintainer");
	assert_string_equal(df->steps[0].pairs.values[0], "Someone <a@b> \"$X\"");
	assert_string_equal(df->steps[0].text, "MAINTAINER Someone <a@b> \"$X\"");
	dockerfile_free(df);
}

static void test_state(void **s)
{
	(void)s;
	struct dockerfile *df = parse("FROM b\n"
	                              "ARG V=1\n"
	                              "ARG NONE\n"
	                              "ENV A=x\n"
	                              "RUN one\n"
	                              "ENV V=env A=y\n"
	                              "WORKDIR /w\n"
	                              "USER app\n"
	                              "CMD [\"c\"]\n"
	                              "RUN two\n");
	struct dockerfile_state st;
	dockerfile_state_at(df, 0, &st);
	assert_int_equal(st.env.n, 0);
	assert_int_equal(st.run_env.n, 0);
	assert_string_equal(st.workdir, "/");
	assert_null(st.user);
	assert_null(st.cmd);
	dockerfile_state_release(&st);
	dockerfile_state_at(df, 3, &st); /* RUN one */
	assert_int_equal(st.env.n, 1);
	assert_int_equal(st.run_env.n, 2);
	assert_string_equal(st.run_env.keys[0], "A");
	assert_string_equal(st.run_env.keys[1], "V");
	assert_string_equal(st.run_env.values[1], "1");
	dockerfile_state_release(&st);
	dockerfile_state_at(df, df->n_steps, &st);
	assert_int_equal(st.env.n, 2);
	assert_string_equal(st.env.values[0], "y");
	assert_int_equal(st.run_env.n, 2); /* ENV V wins over ARG V */
	assert_string_equal(st.run_env.values[1], "env");
	assert_string_equal(st.workdir, "/w");
	assert_string_equal(st.user, "app");
	assert_string_equal(st.cmd->argv[0], "c");
	assert_null(st.entrypoint);
	dockerfile_state_release(&st);
	dockerfile_free(df);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_basic),
	    cmocka_unit_test(test_copy),
	    cmocka_unit_test(test_env_and_substitution),
	    cmocka_unit_test(test_args),
	    cmocka_unit_test(test_workdir_user_expose),
	    cmocka_unit_test(test_escape_directive),
	    cmocka_unit_test(test_keys),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_text_shown),
	    cmocka_unit_test(test_state),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
