/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/daemon/api/api-e2b-entry.c: the lexical cleaning of
 * envd paths, owner and group names from hostile account files, Go's
 * FileMode strings and the EntryInfo made from an agent's stat object. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "api-e2b-entry.h"
#include "json-cleanup.h"
#include "util.h"

static void check_clean(const char *in, const char *want)
{
	char out[256];
	e2b_path_clean(in, out);
	assert_string_equal(out, want);
}

static void test_path_clean(void **state)
{
	(void)state;
	check_clean("/", "/");
	check_clean("/home/user/", "/home/user");
	check_clean("//home///user/./a", "/home/user/a");
	check_clean("/home/user/../root", "/home/root");
	check_clean("/..", "/");
	check_clean("/../../etc/passwd", "/etc/passwd");
	check_clean("/a/b/../../..", "/");
	check_clean("/a/...", "/a/...");
	check_clean("/a/.b/..c", "/a/.b/..c");
	check_clean("rel/x", "/rel/x");
}

static void test_accounts_name(void **state)
{
	(void)state;
	const char *passwd = "root:x:0:0:root:/root:/bin/bash\n"
	                     "broken\n"
	                     "::7:\n"
	                     "user:x:1000:1000::/home/user:/bin/bash\n"
	                     "bad:x:1001:1001:\xff\xfe:/home/bad:/bin/sh\n"
	                     "\xff\xfe:x:1002:1002::/:/bin/sh\n"
	                     "last:x:1003:1003::/home/last:/bin/sh";
	char out[64];
	e2b_accounts_name(passwd, 0, out, sizeof(out));
	assert_string_equal(out, "root");
	e2b_accounts_name(passwd, 1000, out, sizeof(out));
	assert_string_equal(out, "user");
	e2b_accounts_name(passwd, 1001, out, sizeof(out));
	assert_string_equal(out, "bad");
	e2b_accounts_name(passwd, 1002, out, sizeof(out)); /* not UTF-8: the number */
	assert_string_equal(out, "1002");
	e2b_accounts_name(passwd, 1003, out, sizeof(out)); /* no final newline */
	assert_string_equal(out, "last");
	e2b_accounts_name(passwd, 7, out, sizeof(out)); /* an empty name: the number */
	assert_string_equal(out, "7");
	e2b_accounts_name(passwd, 4242, out, sizeof(out));
	assert_string_equal(out, "4242");
	e2b_accounts_name(NULL, 5, out, sizeof(out));
	assert_string_equal(out, "5");
	e2b_accounts_name("", 0, out, sizeof(out));
	assert_string_equal(out, "0");
	char small[4];
	e2b_accounts_name("abcdefgh:x:9:9::/:/bin/sh\n", 9, small, sizeof(small));
	assert_string_equal(small, "abc");
}

static void test_permissions(void **state)
{
	(void)state;
	char p[16];
	e2b_permissions_string("file", 0644, p);
	assert_string_equal(p, "-rw-r--r--");
	e2b_permissions_string("dir", 0755, p);
	assert_string_equal(p, "drwxr-xr-x");
	e2b_permissions_string("symlink", 0777, p);
	assert_string_equal(p, "Lrwxrwxrwx");
	e2b_permissions_string("dir", 01777, p);
	assert_string_equal(p, "dtrwxrwxrwx");
	e2b_permissions_string("file", 04755, p);
	assert_string_equal(p, "urwxr-xr-x");
	e2b_permissions_string("other", 0600, p);
	assert_string_equal(p, "?rw-------");
	e2b_permissions_string("other", 07777, p);
	assert_string_equal(p, "?ugtrwxrwxrwx");
}

static void test_entry_info(void **state)
{
	(void)state;
	cleanup_json json_t *st = json_pack("{s:s, s:s, s:I, s:i, s:i, s:i, s:I}", "name", "f.txt", "type", "file",
	                                    "size", (json_int_t)5000000000, "mode", 0644, "uid", 1000, "gid", 1000,
	                                    "mtime_ms", (json_int_t)1700000000123);
	cleanup_json json_t *e =
	    e2b_entry_info(st, "/home/user/f.txt", "user:x:1000:1000::/home/user:/bin/sh\n", "user:x:1000:\n");
	assert_string_equal(json_string_value(json_object_get(e, "name")), "f.txt");
	assert_string_equal(json_string_value(json_object_get(e, "type")), "FILE_TYPE_FILE");
	assert_string_equal(json_string_value(json_object_get(e, "path")), "/home/user/f.txt");
	assert_string_equal(json_string_value(json_object_get(e, "size")), "5000000000");
	assert_int_equal(json_integer_value(json_object_get(e, "mode")), 0644);
	assert_string_equal(json_string_value(json_object_get(e, "permissions")), "-rw-r--r--");
	assert_string_equal(json_string_value(json_object_get(e, "owner")), "user");
	assert_string_equal(json_string_value(json_object_get(e, "group")), "user");
	assert_string_equal(json_string_value(json_object_get(e, "modifiedTime")), "2023-11-14T22:13:20.123Z");
	assert_null(json_object_get(e, "symlinkTarget"));

	cleanup_json json_t *link =
	    json_pack("{s:s, s:s, s:i, s:s}", "name", "l", "type", "symlink", "mode", 0777, "target", "../f.txt");
	cleanup_json json_t *le = e2b_entry_info(link, "/", NULL, NULL);
	assert_string_equal(json_string_value(json_object_get(le, "type")), "FILE_TYPE_SYMLINK");
	assert_string_equal(json_string_value(json_object_get(le, "name")), "/");
	assert_string_equal(json_string_value(json_object_get(le, "symlinkTarget")), "../f.txt");
	assert_string_equal(json_string_value(json_object_get(le, "owner")), "0");

	/* A hostile stat: wrong types, absurd times; still an entry. */
	cleanup_json json_t *bad =
	    json_pack("{s:i, s:i, s:I, s:s}", "type", 3, "mode", -1, "mtime_ms", (json_int_t)INT64_MIN, "target", "x");
	cleanup_json json_t *be = e2b_entry_info(bad, "/x", "", "");
	assert_non_null(be);
	assert_string_equal(json_string_value(json_object_get(be, "type")), "FILE_TYPE_UNSPECIFIED");
	assert_string_equal(json_string_value(json_object_get(be, "modifiedTime")), "1970-01-01T00:00:00.000Z");
	cleanup_json json_t *late = json_pack("{s:s, s:I}", "type", "dir", "mtime_ms", (json_int_t)INT64_MAX);
	cleanup_json json_t *lte = e2b_entry_info(late, "/y", NULL, NULL);
	assert_string_equal(json_string_value(json_object_get(lte, "modifiedTime")), "9999-12-31T23:59:59.999Z");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_path_clean),
	    cmocka_unit_test(test_accounts_name),
	    cmocka_unit_test(test_permissions),
	    cmocka_unit_test(test_entry_info),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
