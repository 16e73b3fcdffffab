/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/daemon/api/api-ui-path.c: which request paths name a
 * file of the console, which file, with which Content-Type; and every way
 * out of the ui dir refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api-ui-path.h"
#include "util.h"

static void assert_file(const char *path, const char *rel, const char *type_prefix)
{
	enum ui_target t = UI_TARGET_REDIRECT;
	char out[UI_PATH_MAX + 16];
	const char *type = NULL;
	struct al_error err = {0};
	if (ui_path_parse(path, &t, out, sizeof(out), &type, &err) < 0)
		fail_msg("%s: refused: %s", path, err.message);
	assert_int_equal(t, UI_TARGET_FILE);
	assert_string_equal(out, rel);
	assert_non_null(type);
	assert_memory_equal(type, type_prefix, strlen(type_prefix));
}

static void assert_refused(const char *path)
{
	enum ui_target t;
	char out[UI_PATH_MAX + 16] = "untouched";
	const char *type = NULL;
	struct al_error err = {0};
	if (ui_path_parse(path, &t, out, sizeof(out), &type, &err) == 0)
		fail_msg("%s: accepted as %s", path, out);
	assert_int_equal(err.code, AL_ERR_NOT_FOUND);
	assert_true(err.message[0] != '\0');
	assert_string_equal(out, "untouched");
	assert_null(type);
}

static void test_prefix(void **state)
{
	(void)state;
	assert_true(ui_path_is_ui("/ui"));
	assert_true(ui_path_is_ui("/ui/"));
	assert_true(ui_path_is_ui("/ui/app.js"));
	assert_false(ui_path_is_ui("/uix"));
	assert_false(ui_path_is_ui("/u"));
	assert_false(ui_path_is_ui("/v1/ui"));
	assert_false(ui_path_is_ui("ui/"));
	assert_false(ui_path_is_ui(NULL));
}

static void test_redirect(void **state)
{
	(void)state;
	enum ui_target t = UI_TARGET_FILE;
	char out[64];
	const char *type = NULL;
	struct al_error err = {0};
	assert_int_equal(ui_path_parse("/ui", &t, out, sizeof(out), &type, &err), 0);
	assert_int_equal(t, UI_TARGET_REDIRECT);
}

static void test_files(void **state)
{
	(void)state;
	assert_file("/ui/", "index.html", "text/html");
	assert_file("/ui/index.html", "index.html", "text/html");
	assert_file("/ui/app.js", "app.js", "text/javascript");
	assert_file("/ui/app.css", "app.css", "text/css");
	assert_file("/ui/app.js.map", "app.js.map", "application/json");
	assert_file("/ui/favicon.svg", "favicon.svg", "image/svg+xml");
	assert_file("/ui/app.js.LEGAL.txt", "app.js.LEGAL.txt", "text/plain");
	assert_file("/ui/assets/", "assets/index.html", "text/html");
	assert_file("/ui/a/b-c/d_e.png", "a/b-c/d_e.png", "image/png");
}

static void test_escapes(void **state)
{
	(void)state;
	assert_refused("/ui/..");
	assert_refused("/ui/../airlock.db");
	assert_refused("/ui/a/../../etc/passwd.txt");
	assert_refused("/ui/./index.html");
	assert_refused("/ui/.hidden.html");
	assert_refused("/ui/a/.git/config.txt");
	assert_refused("/ui//etc/passwd.txt");
	assert_refused("/ui/a//b.js");
	assert_refused("/ui/a\\b.js");
	assert_refused("/ui/%2e%2e/x.js");
	assert_refused("/ui/a b.js");
	assert_refused("/ui/\xc3\xa9.js");
	assert_refused("/ui/app.js\n");
	assert_refused("/uix/app.js");
	assert_refused("/v1/sandboxes");
}

static void test_types(void **state)
{
	(void)state;
	assert_refused("/ui/airlock.db");
	assert_refused("/ui/README");
	assert_refused("/ui/app.JS");
	assert_refused("/ui/script.sh");
	assert_refused("/ui/html");
	assert_refused("/ui/a.html/b");
}

static void test_limits(void **state)
{
	(void)state;
	char path[UI_PATH_MAX + 64];
	/* UI_SEGMENT_MAX bytes of name: accepted; one more: refused. */
	size_t o = (size_t)snprintf(path, sizeof(path), "/ui/");
	memset(path + o, 'a', UI_SEGMENT_MAX - 3);
	memcpy(path + o + UI_SEGMENT_MAX - 3, ".js", 4);
	enum ui_target t;
	char out[UI_PATH_MAX + 16];
	const char *type;
	struct al_error err = {0};
	assert_int_equal(ui_path_parse(path, &t, out, sizeof(out), &type, &err), 0);
	memset(path + o, 'a', UI_SEGMENT_MAX - 2);
	memcpy(path + o + UI_SEGMENT_MAX - 2, ".js", 4);
	assert_refused(path);
	/* UI_PATH_DEPTH_MAX directories: accepted; one more: refused. */
	o = (size_t)snprintf(path, sizeof(path), "/ui/");
	for (int i = 0; i < UI_PATH_DEPTH_MAX; i++)
		o += (size_t)snprintf(path + o, sizeof(path) - o, "d/");
	snprintf(path + o, sizeof(path) - o, "x.js");
	assert_int_equal(ui_path_parse(path, &t, out, sizeof(out), &type, &err), 0);
	o = (size_t)snprintf(path, sizeof(path), "/ui/");
	for (int i = 0; i <= UI_PATH_DEPTH_MAX; i++)
		o += (size_t)snprintf(path + o, sizeof(path) - o, "d/");
	snprintf(path + o, sizeof(path) - o, "x.js");
	assert_refused(path);
	/* Longer than UI_PATH_MAX in all. */
	o = (size_t)snprintf(path, sizeof(path), "/ui/");
	while (o + 3 < UI_PATH_MAX + 8)
		o += (size_t)snprintf(path + o, sizeof(path) - o, "ab-");
	snprintf(path + o, sizeof(path) - o, ".js");
	assert_refused(path);
	/* An output buffer too small: refused, not cut. */
	char small[4];
	assert_true(ui_path_parse("/ui/app.js", &t, small, sizeof(small), &type, &err) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_prefix),  cmocka_unit_test(test_redirect), cmocka_unit_test(test_files),
	    cmocka_unit_test(test_escapes), cmocka_unit_test(test_types),    cmocka_unit_test(test_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
