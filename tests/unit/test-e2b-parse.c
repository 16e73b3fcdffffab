/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the parsers of E2B users and paths
 * (src/daemon/api/api-e2b-parse.c): user names, the Authorization: Basic
 * header (client input), the guest's /etc/passwd (guest input) and envd
 * paths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api-e2b-parse.h"
#include "util.h"

/* ------------------------------------------------------------ names */

static void test_user_name_valid(void **state)
{
	(void)state;
	const char *good[] = {"user", "root", "a", "A.b_c-d", "0", "_x", "x-", "abcdefghijklmnopqrstuvwxyz012345"};
	for (size_t i = 0; i < ARRAY_SIZE(good); i++)
		if (!e2b_user_name_valid(good[i], strlen(good[i])))
			fail_msg("\"%s\" refused", good[i]);
	const char *bad[] = {"",     "-user",  "us er", "us:er", "us/er",
	                     "../x", "us\ter", "ü",     "us$er", "abcdefghijklmnopqrstuvwxyz0123456"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		if (e2b_user_name_valid(bad[i], strlen(bad[i])))
			fail_msg("\"%s\" accepted", bad[i]);
	/* Only n bytes are read, and a NUL within them is refused. */
	assert_true(e2b_user_name_valid("user:", 4));
	assert_false(e2b_user_name_valid("us\0r", 4));
}

/* ------------------------------------------------------------ Basic */

static void basic_is(const char *value, const char *want)
{
	char name[E2B_USER_NAME_MAX + 1];
	struct al_error err = {0};
	int r = e2b_basic_user_name(value, name, &err);
	if (r != 0)
		fail_msg("\"%s\": %d (%s)", value, r, err.message);
	assert_string_equal(name, want);
}

static void basic_fails(const char *value, const char *want)
{
	char name[E2B_USER_NAME_MAX + 1] = "untouched";
	struct al_error err = {0};
	assert_int_equal(e2b_basic_user_name(value, name, &err), -EINVAL);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	if (!strstr(err.message, want))
		fail_msg("\"%s\": \"%s\" does not say \"%s\"", value, err.message, want);
	assert_string_equal(name, "untouched");
}

/* "Basic " + base64(text) */
static char *basic_of(const char *scheme, const char *text)
{
	cleanup_free char *b64 = base64_encode((const uint8_t *)text, strlen(text), NULL);
	return xasprintf("%s%s", scheme, b64);
}

static void test_basic(void **state)
{
	(void)state;
	/* What the SDK sends: base64("user:"). */
	basic_is("Basic dXNlcjo=", "user");
	/* The scheme in any case. */
	basic_is("basic dXNlcjo=", "user");
	basic_is("BASIC dXNlcjo=", "user");
	/* Without ':' the whole is the name; a password is ignored. */
	cleanup_free char *no_colon = basic_of("Basic ", "root");
	basic_is(no_colon, "root");
	cleanup_free char *pw = basic_of("Basic ", "root:secret:with:colons");
	basic_is(pw, "root");
	cleanup_free char *longest = basic_of("Basic ", "abcdefghijklmnopqrstuvwxyz012345:");
	basic_is(longest, "abcdefghijklmnopqrstuvwxyz012345");

	/* Not Basic, or not base64. */
	const char *not_basic[] = {"", "Basic", "Bearer dXNlcjo=", "dXNlcjo=", "Basic\tdXNlcjo=", "Basicc dXNlcjo="};
	for (size_t i = 0; i < ARRAY_SIZE(not_basic); i++)
		basic_fails(not_basic[i], "must be \"Basic base64(USER:)\"");
	const char *not_b64[] = {"Basic dXNlcjo",  "Basic  dXNlcjo=",    "Basic dXNlcjo= ",
	                         "Basic dXN*cjo=", "Basic dXNlcjo=dXNl", "Basic -_-_"};
	for (size_t i = 0; i < ARRAY_SIZE(not_b64); i++)
		basic_fails(not_b64[i], "is not base64");

	/* Names that are no user. */
	const char *bad_names[] = {
	    "", ":", ":user", "-user:", "us er:", "../etc:", "abcdefghijklmnopqrstuvwxyz0123456:"};
	for (size_t i = 0; i < ARRAY_SIZE(bad_names); i++) {
		cleanup_free char *v = basic_of("Basic ", bad_names[i]);
		basic_fails(v, "must name a user");
	}
	/* A NUL in the decoded name (base64 of "us\0er:"). */
	basic_fails("Basic dXMAZXI6", "must name a user");

	/* Too long: the length is checked before decoding. The longest base64
	 * within E2B_BASIC_MAX passes it (and decodes to NULs, no name); a
	 * value one byte over E2B_BASIC_MAX is refused as it is. */
	char v[E2B_BASIC_MAX + 2];
	size_t b64 = (E2B_BASIC_MAX - 6) / 4 * 4;
	memcpy(v, "Basic ", 6);
	memset(v + 6, 'A', b64 - 2);
	memcpy(v + 6 + b64 - 2, "==", 3);
	basic_fails(v, "must name a user");
	memset(v + 6, 'A', E2B_BASIC_MAX + 1 - 6);
	v[E2B_BASIC_MAX + 1] = '\0';
	basic_fails(v, "must be \"Basic base64(USER:)\"");
	cleanup_free char *long_pw = xasprintf("Basic %0*d", E2B_BASIC_MAX, 0);
	basic_fails(long_pw, "must be \"Basic base64(USER:)\"");
}

/* ------------------------------------------------------------ /etc/passwd */

static int find(const char *text, size_t len, const char *name, struct e2b_user *u)
{
	memset(u, 0xee, sizeof(*u));
	return e2b_passwd_find(text, len, name, u);
}

#define FIND(text, name, u) find(text, sizeof(text) - 1, name, u)

static void test_passwd_good(void **state)
{
	(void)state;
	static const char passwd[] = "root:x:0:0:root:/root:/bin/bash\n"
	                             "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
	                             "user:x:1000:1001:E2B user,,,:/home/user:/bin/bash\n";
	struct e2b_user u;
	assert_int_equal(FIND(passwd, "user", &u), 0);
	assert_string_equal(u.name, "user");
	assert_int_equal(u.uid, 1000);
	assert_int_equal(u.gid, 1001);
	assert_string_equal(u.home, "/home/user");
	assert_int_equal(FIND(passwd, "root", &u), 0);
	assert_int_equal(u.uid, 0);
	assert_string_equal(u.home, "/root");
	assert_int_equal(FIND(passwd, "nobody", &u), -ENOENT);
	/* Empty password, GECOS and shell fields are fine. */
	static const char bare[] = "user::1000:1000:::\n";
	assert_int_equal(FIND(bare, "user", &u), -ENOENT); /* no home */
	static const char bare_home[] = "user::1000:1000::/h:\n";
	assert_int_equal(FIND(bare_home, "user", &u), 0);
	assert_string_equal(u.home, "/h");
	/* An empty file. */
	assert_int_equal(find("", 0, "user", &u), -ENOENT);
	/* Colons after the shell's are the shell's (never read). */
	static const char extra[] = "user:x:1:2::/h:/bin/sh:extra:fields\n";
	assert_int_equal(FIND(extra, "user", &u), 0);
	assert_string_equal(u.home, "/h");
}

static void test_passwd_malformed_lines(void **state)
{
	(void)state;
	struct e2b_user u;
	/* Each bad line of "user" is skipped; a good one after it is taken. */
	const char *bad[] = {
	    "user:x:1000:1000:/home/bad\n",                   /* five fields */
	    "user\n",                                         /* one */
	    "user:x:10a0:1000::/home/bad:/bin/sh\n",          /* uid not numeric */
	    "user:x:-1:1000::/home/bad:/bin/sh\n",            /* negative */
	    "user:x: 1000:1000::/home/bad:/bin/sh\n",         /* space */
	    "user:x::1000::/home/bad:/bin/sh\n",              /* empty uid */
	    "user:x:1000:g::/home/bad:/bin/sh\n",             /* gid not numeric */
	    "user:x:4294967295:1000::/home/bad:/bin/sh\n",    /* (uid_t)-1 */
	    "user:x:99999999999:1000::/home/bad:/bin/sh\n",   /* 11 digits */
	    "user:x:1000:18446744073709551617::/h:/bin/sh\n", /* wraps a uint64 */
	    "user:x:1000:1000::home/bad:/bin/sh\n",           /* relative home */
	    "user:x:1000:1000::~/bad:/bin/sh\n",              /* relative home */
	    "user:x:1000:1000:::/bin/sh\n",                   /* empty home */
	    "User:x:1000:1000::/home/bad:/bin/sh\n",          /* another name */
	    " user:x:1000:1000::/home/bad:/bin/sh\n",         /* another name */
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		assert_int_equal(find(bad[i], strlen(bad[i]), "user", &u), -ENOENT);
		cleanup_free char *both = xasprintf("%suser:x:7:8::/home/good:/bin/sh\n", bad[i]);
		if (find(both, strlen(both), "user", &u) != 0)
			fail_msg("the good line after \"%s\" was not found", bad[i]);
		assert_int_equal(u.uid, 7);
		assert_string_equal(u.home, "/home/good");
	}
	/* The largest uid that is no (uid_t)-1, and leading zeros. */
	static const char max[] = "user:x:4294967294:0000000001::/:/bin/sh\n";
	assert_int_equal(FIND(max, "user", &u), 0);
	assert_int_equal(u.uid, 4294967294u);
	assert_int_equal(u.gid, 1);
	assert_string_equal(u.home, "/");
}

static void test_passwd_nul_bytes(void **state)
{
	(void)state;
	struct e2b_user u;
	/* A NUL in the home: refused (the home would be cut there). */
	static const char home[] = "user:x:1000:1000::/home/\0/etc:/bin/sh\n";
	assert_int_equal(FIND(home, "user", &u), -ENOENT);
	/* In the name or an id: another name, not a number. */
	static const char name[] = "user\0:x:1000:1000::/home/user:/bin/sh\n";
	assert_int_equal(FIND(name, "user", &u), -ENOENT);
	static const char uid[] = "user:x:10\0:1000::/home/user:/bin/sh\n";
	assert_int_equal(FIND(uid, "user", &u), -ENOENT);
	/* NULs elsewhere (another line, the shell) do not stop the search. */
	static const char other[] = "\0\0\0\nroot:\0:0:0::/root:\0\nuser:x:1000:1000::/home/user:/bin/\0sh\n";
	assert_int_equal(FIND(other, "user", &u), 0);
	assert_string_equal(u.home, "/home/user");
}

static void test_passwd_prefix_names(void **state)
{
	(void)state;
	struct e2b_user u;
	static const char passwd[] = "username:x:1:1::/home/username:/bin/sh\n"
	                             "use:x:2:2::/home/use:/bin/sh\n"
	                             "user:x:3:3::/home/user:/bin/sh\n";
	assert_int_equal(FIND(passwd, "user", &u), 0);
	assert_int_equal(u.uid, 3);
	assert_int_equal(FIND(passwd, "use", &u), 0);
	assert_int_equal(u.uid, 2);
	assert_int_equal(FIND(passwd, "us", &u), -ENOENT);
	assert_int_equal(FIND(passwd, "username", &u), 0);
	assert_int_equal(u.uid, 1);
	/* The first good line of a name wins. */
	static const char twice[] = "user:x:5:5::/a:/bin/sh\nuser:x:6:6::/b:/bin/sh\n";
	assert_int_equal(FIND(twice, "user", &u), 0);
	assert_int_equal(u.uid, 5);
}

static void test_passwd_line_ends(void **state)
{
	(void)state;
	struct e2b_user u;
	/* The last line without a newline. */
	static const char last[] = "root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh";
	assert_int_equal(FIND(last, "user", &u), 0);
	assert_string_equal(u.home, "/home/user");
	/* Cut inside the last line: too few fields. */
	static const char cut[] = "user:x:1000:1000::/home/us";
	assert_int_equal(FIND(cut, "user", &u), -ENOENT);
	/* CRLF: the \r ends up in the shell, which is not read. */
	static const char crlf[] = "root:x:0:0::/root:/bin/sh\r\nuser:x:1000:1000::/home/user:/bin/sh\r\n";
	assert_int_equal(FIND(crlf, "user", &u), 0);
	assert_string_equal(u.home, "/home/user");
	assert_int_equal(FIND(crlf, "root", &u), 0);
	/* Empty lines and a lone newline. */
	static const char empty[] = "\n\n\nuser:x:1:1::/u:/bin/sh\n\n";
	assert_int_equal(FIND(empty, "user", &u), 0);
	assert_int_equal(find("\n", 1, "user", &u), -ENOENT);
	/* len is honoured: a line after len is not seen. */
	static const char two[] = "root:x:0:0::/root:/bin/sh\nuser:x:1:1::/u:/bin/sh\n";
	assert_int_equal(find(two, strlen("root:x:0:0::/root:/bin/sh\n"), "user", &u), -ENOENT);
}

static void test_passwd_home_limit(void **state)
{
	(void)state;
	struct e2b_user u;
	for (size_t n = E2B_PATH_MAX; n <= E2B_PATH_MAX + 1; n++) {
		char *home = xmalloc(n + 1);
		memset(home, 'h', n);
		home[0] = '/';
		home[n] = '\0';
		cleanup_free char *line = xasprintf("user:x:1:1::%s:/bin/sh\n", home);
		int r = find(line, strlen(line), "user", &u);
		if (n == E2B_PATH_MAX) {
			assert_int_equal(r, 0);
			assert_string_equal(u.home, home);
		} else {
			assert_int_equal(r, -ENOENT);
		}
		free(home);
	}
}

/* ------------------------------------------------------------ paths */

static void resolves(const char *home, const char *path, const char *want)
{
	struct e2b_user u = {.name = "user", .uid = 1000, .gid = 1000};
	strlcpy_al(u.home, home, sizeof(u.home));
	char out[E2B_PATH_MAX + 1];
	struct al_error err = {0};
	int r = e2b_path_resolve(&u, path, out, &err);
	if (r != 0)
		fail_msg("%s + \"%s\": %d (%s)", home, path, r, err.message);
	assert_string_equal(out, want);
}

static void resolve_fails(const char *home, const char *path, int want, const char *msg)
{
	struct e2b_user u = {.name = "user", .uid = 1000, .gid = 1000};
	strlcpy_al(u.home, home, sizeof(u.home));
	char out[E2B_PATH_MAX + 1];
	struct al_error err = {0};
	assert_int_equal(e2b_path_resolve(&u, path, out, &err), want);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	if (!strstr(err.message, msg))
		fail_msg("\"%s\" does not say \"%s\"", err.message, msg);
}

static void test_path_resolve(void **state)
{
	(void)state;
	resolves("/home/user", "/etc/passwd", "/etc/passwd");
	resolves("/home/user", "/", "/");
	resolves("/home/user", "x", "/home/user/x");
	resolves("/home/user", "a/b/../c", "/home/user/a/b/../c");
	resolves("/home/user", ".", "/home/user/.");
	resolves("/home/user", "~", "/home/user");
	resolves("/home/user", "~/", "/home/user");
	resolves("/home/user", "~/x", "/home/user/x");
	resolves("/home/user", "~/x/", "/home/user/x/");
	/* "~x" is not the home (nor x's home): a name relative to it. */
	resolves("/home/user", "~x", "/home/user/~x");
	resolves("/home/user", "x/~", "/home/user/x/~");
	/* The home "/": no doubled slash. */
	resolves("/", "x", "/x");
	resolves("/", "~", "/");
	resolves("/", "~/x", "/x");

	resolve_fails("/home/user", "", -EINVAL, "empty");
	resolve_fails("/home/user", NULL, -EINVAL, "empty");

	/* E2B_PATH_MAX bytes: absolute ones pass, one more does not. */
	char *p = xmalloc(E2B_PATH_MAX + 2);
	memset(p, 'p', E2B_PATH_MAX + 1);
	p[0] = '/';
	p[E2B_PATH_MAX] = '\0';
	resolves("/home/user", p, p);
	p[E2B_PATH_MAX] = 'p';
	p[E2B_PATH_MAX + 1] = '\0';
	resolve_fails("/home/user", p, -ENAMETOOLONG, "longer than");
	/* Relative: too long once joined to the home. */
	size_t room = E2B_PATH_MAX - strlen("/home/user/");
	memset(p, 'r', room);
	p[room] = '\0';
	cleanup_free char *want = xasprintf("/home/user/%s", p);
	resolves("/home/user", p, want);
	p[room] = 'r';
	p[room + 1] = '\0';
	resolve_fails("/home/user", p, -ENAMETOOLONG, "once joined to the home directory /home/user");
	/* With "~/" the two bytes of "~/" do not count. */
	p[0] = '~';
	p[1] = '/';
	p[room + 2] = '\0';
	memset(p + 2, 'r', room);
	resolves("/home/user", p, want);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_user_name_valid),  cmocka_unit_test(test_basic),
	    cmocka_unit_test(test_passwd_good),      cmocka_unit_test(test_passwd_malformed_lines),
	    cmocka_unit_test(test_passwd_nul_bytes), cmocka_unit_test(test_passwd_prefix_names),
	    cmocka_unit_test(test_passwd_line_ends), cmocka_unit_test(test_passwd_home_limit),
	    cmocka_unit_test(test_path_resolve),
	};
	return cmocka_run_group_tests_name("e2b-parse", tests, NULL, NULL);
}
