/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for airlockd's config file (src/daemon/main/daemon-config.c): the
 * argv it makes (file first, command line after it, --config taken out), the
 * syntax (comments, blanks, quotes, `=`), every limit at and past its edge,
 * the characters refused, and the file checks (missing, not regular, writable
 * by others). Files are written to a temporary directory. */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "daemon-config.h"
#include "util.h"

static char dir[PATH_MAX];
static char conf[PATH_MAX + 16];

static int setup(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/airlock-test-config-XXXXXX", base ? base : "/tmp");
	if (!mkdtemp(dir))
		return -1;
	snprintf(conf, sizeof(conf), "%s/airlockd.conf", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return rm_rf(dir);
}

/* conf holds len bytes of data, mode 0644. */
static void write_conf_n(const char *data, size_t len)
{
	unlink(conf);
	cleanup_close int fd = open(conf, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, data, len), 0);
}

static void write_conf(const char *text)
{
	write_conf_n(text, strlen(text));
}

/* Runs daemon_config_argv on the NULL-terminated arguments and checks the
 * result is exactly the NULL-terminated `want` list. */
static void expect_argv(const char *const *args, const char *const *want)
{
	int argc = 0;
	while (args[argc])
		argc++;
	struct al_error err = {0};
	int ret_argc = -1;
	cleanup_config_argv char **ret = NULL;
	int r = daemon_config_argv(NULL, NULL, argc, (char *const *)args, &ret_argc, &ret, &err);
	if (r < 0)
		fail_msg("refused: %s", err.message);
	int n = 0;
	while (want[n])
		n++;
	for (int i = 0; i < n && i < ret_argc; i++)
		if (strcmp(ret[i], want[i]))
			fail_msg("argv[%d] is \"%s\", want \"%s\"", i, ret[i], want[i]);
	assert_int_equal(ret_argc, n);
	assert_null(ret[ret_argc]);
}

/* The file conf with the arguments `--config conf`. */
static void expect_file(const char *text, const char *const *want)
{
	write_conf(text);
	expect_argv((const char *const[]){"airlockd", "--config", conf, NULL}, want);
}

/* conf is refused with a message holding needle (and the line number
 * `conf:LINE`, when line > 0); returns the error. */
static int expect_refused_conf(unsigned line, const char *needle)
{
	char *args[] = {"airlockd", "--config", conf, NULL};
	struct al_error err = {0};
	int ret_argc = -1;
	char **ret = NULL;
	int r = daemon_config_argv(NULL, NULL, 3, args, &ret_argc, &ret, &err);
	if (r >= 0)
		fail_msg("accepted; wanted \"%s\"", needle);
	assert_null(ret);
	assert_int_equal(ret_argc, -1);
	if (!strstr(err.message, needle))
		fail_msg("message \"%s\" lacks \"%s\"", err.message, needle);
	if (line) {
		cleanup_free char *where = xasprintf("%s:%u: ", conf, line);
		if (strncmp(err.message, where, strlen(where)))
			fail_msg("message \"%s\" does not start with \"%s\"", err.message, where);
	}
	assert_null(strchr(err.message, '\n'));
	return r;
}

static int expect_refused_text(const char *text, unsigned line, const char *needle)
{
	write_conf(text);
	return expect_refused_conf(line, needle);
}

/* ------------------------------------------------------------ good files */

static void test_good_file(void **state)
{
	(void)state;
	expect_file("# airlockd's settings\n"
	            "socket /run/airlock/airlockd.sock\n"
	            "state-dir /var/lib/airlock\n"
	            "image-dir /usr/local/share/airlock/images\n"
	            "seccomp-profile /usr/local/share/airlock/seccomp/qemu-x86_64.json\n"
	            "backend auto\n"
	            "egress-public-cidr 10.0.0.0/8\n"
	            "egress-public-cidr 192.168.0.0/16\n"
	            "print-backend\n",
	            (const char *const[]){"airlockd", "--socket", "/run/airlock/airlockd.sock", "--state-dir",
	                                  "/var/lib/airlock", "--image-dir", "/usr/local/share/airlock/images",
	                                  "--seccomp-profile", "/usr/local/share/airlock/seccomp/qemu-x86_64.json",
	                                  "--backend", "auto", "--egress-public-cidr", "10.0.0.0/8",
	                                  "--egress-public-cidr", "192.168.0.0/16", "--print-backend", NULL});
	/* No newline at the end; an empty file; only comments. */
	expect_file("socket /s", (const char *const[]){"airlockd", "--socket", "/s", NULL});
	expect_file("", (const char *const[]){"airlockd", NULL});
	expect_file("# nothing\n\n   \n\t# indented\n", (const char *const[]){"airlockd", NULL});
}

static void test_syntax(void **state)
{
	(void)state;
	/* Blanks around everything; `=` with or without blanks. */
	expect_file("  \t socket \t /a b  \t\n"
	            "state-dir=/s\n"
	            "image-dir = /i\n"
	            "listen\t=\t127.0.0.1:7070\n",
	            (const char *const[]){"airlockd", "--socket", "/a b", "--state-dir", "/s", "--image-dir", "/i",
	                                  "--listen", "127.0.0.1:7070", NULL});
	/* Quotes: blanks and # kept inside, stripped off; empty value; a comment after. */
	expect_file("socket \"  /with spaces # and hash  \"\n"
	            "resolver = \"\"\n"
	            "egress-ca \"/x\"   # the CA\n"
	            "network-policy \"/y\"#tight\n",
	            (const char *const[]){"airlockd", "--socket", "  /with spaces # and hash  ", "--resolver", "",
	                                  "--egress-ca", "/x", "--network-policy", "/y", NULL});
	/* A # after a blank starts a comment; one inside a word does not. */
	expect_file(
	    "socket /a#b # the socket\n"
	    "state-dir=#literal\n"
	    "print-routes # a flag\n",
	    (const char *const[]){"airlockd", "--socket", "/a#b", "--state-dir", "#literal", "--print-routes", NULL});
	expect_refused_text("print-backend#not-a-comment\n", 1, "may hold only a-z, 0-9 and -");
	/* UTF-8 in a value; a quote inside an unquoted value. */
	expect_file("socket /run/\xc3\xa9t\xc3\xa9/a\"b\n",
	            (const char *const[]){"airlockd", "--socket", "/run/\xc3\xa9t\xc3\xa9/a\"b", NULL});

	expect_refused_text("socket /a\nstate-dir =\n", 2, "state-dir: no value after =");
	expect_refused_text("state-dir = # nothing\n", 1, "no value after =");
	expect_refused_text("socket \"/a\n", 1, "a quote that is not closed");
	expect_refused_text("socket \"/a\"b\"\n", 1, "text after the closing quote");
	expect_refused_text("socket \"/a\" /b\n", 1, "text after the closing quote");
	expect_refused_text("= /a\n", 1, "a value without an option name");
	expect_refused_text("--socket /a\n", 1, "without its leading --");
}

/* ------------------------------------------------------------ limits */

static void test_limit_file_size(void **state)
{
	(void)state;
	/* Exactly the limit: comment lines of 64 bytes, then one option. */
	size_t max = DAEMON_CONFIG_FILE_MAX;
	cleanup_free char *text = xmalloc(max + 2);
	const char option[] = "socket /s\n";
	size_t body = max - strlen(option);
	for (size_t i = 0; i < body; i++)
		text[i] = (i % 64 == 0) ? '#' : (i % 64 == 63) ? '\n' : 'x';
	text[body - 1] = '\n';
	memcpy(text + body, option, strlen(option));
	write_conf_n(text, max);
	expect_argv((const char *const[]){"airlockd", "--config", conf, NULL},
	            (const char *const[]){"airlockd", "--socket", "/s", NULL});
	/* One byte more. */
	text[max] = '\n';
	write_conf_n(text, max + 1);
	assert_int_equal(expect_refused_conf(0, "65537 bytes, more than 65536"), -EFBIG);
}

static void test_limit_options(void **state)
{
	(void)state;
	size_t size = DAEMON_CONFIG_OPTIONS_MAX * 48 + 64;
	cleanup_free char *text = xmalloc(size);
	size_t len = 0;
	for (int i = 0; i < DAEMON_CONFIG_OPTIONS_MAX; i++)
		len += (size_t)snprintf(text + len, size - len, "egress-public-cidr 10.%d.0.0/16\n", i);
	write_conf_n(text, len);
	char *args[] = {"airlockd", "--config", conf, NULL};
	struct al_error err = {0};
	int ret_argc = 0;
	cleanup_config_argv char **ret = NULL;
	assert_int_equal(daemon_config_argv(NULL, NULL, 3, args, &ret_argc, &ret, &err), 0);
	assert_int_equal(ret_argc, 1 + 2 * DAEMON_CONFIG_OPTIONS_MAX);
	assert_string_equal(ret[ret_argc - 1], "10.255.0.0/16");
	/* Comments and blank lines do not count; the 257th option does. */
	len += (size_t)snprintf(text + len, size - len, "# a comment\n\nprint-routes\n");
	write_conf_n(text, len);
	assert_int_equal(expect_refused_conf(DAEMON_CONFIG_OPTIONS_MAX + 3, "more than 256 options"), -E2BIG);
}

static void test_limit_name_and_value(void **state)
{
	(void)state;
	char name[DAEMON_CONFIG_NAME_MAX + 2];
	memset(name, 'n', sizeof(name));
	name[DAEMON_CONFIG_NAME_MAX] = '\0';
	cleanup_free char *ok = xasprintf("%s\n", name);
	cleanup_free char *flag = xasprintf("--%s", name);
	expect_file(ok, (const char *const[]){"airlockd", flag, NULL});
	name[DAEMON_CONFIG_NAME_MAX] = 'n';
	name[DAEMON_CONFIG_NAME_MAX + 1] = '\0';
	cleanup_free char *long_name = xasprintf("%s 1\n", name);
	expect_refused_text(long_name, 1, "is longer than 48 bytes");

	char value[DAEMON_CONFIG_VALUE_MAX + 2];
	memset(value, 'v', sizeof(value));
	value[DAEMON_CONFIG_VALUE_MAX] = '\0';
	cleanup_free char *v_ok = xasprintf("socket %s\n", value);
	expect_file(v_ok, (const char *const[]){"airlockd", "--socket", value, NULL});
	/* Quoted: the limit is on what is between the quotes. */
	cleanup_free char *v_quoted = xasprintf("socket \"%s\"\n", value);
	expect_file(v_quoted, (const char *const[]){"airlockd", "--socket", value, NULL});
	value[DAEMON_CONFIG_VALUE_MAX] = 'v';
	value[DAEMON_CONFIG_VALUE_MAX + 1] = '\0';
	cleanup_free char *v_long = xasprintf("# first\nsocket %s\n", value);
	expect_refused_text(v_long, 2, "the value is 1025 bytes, more than 1024");
}

/* ------------------------------------------------------------ characters */

static void test_characters(void **state)
{
	(void)state;
	expect_refused_text("Socket /a\n", 1, "may hold only a-z, 0-9 and -");
	expect_refused_text("state_dir /a\n", 1, "may hold only a-z, 0-9 and -");
	expect_refused_text("sock\xc3\xa9t /a\n", 1, "may hold only a-z, 0-9 and -");
	expect_refused_text("socket: /a\n", 1, "may hold only a-z, 0-9 and -");
	expect_refused_text("socket /a\r\n", 1, "carriage return");
	expect_refused_text("socket /a\x1b[31m\n", 1, "control character 0x1b");
	expect_refused_text("socket /a\x7f\n", 1, "control character 0x7f");
	expect_refused_text("\n\nsocket /a\tb\n", 3, "control character U+0009 in the value");
	/* C1 controls (U+0085, NEL) are refused in values. */
	expect_refused_text("socket /a\xc2\x85z\n", 1, "control character U+0085");
	expect_refused_text("socket /\xff\xfe\n", 1, "not valid UTF-8");
	expect_refused_text("socket /\xc0\xaf\n", 1, "not valid UTF-8"); /* overlong '/' */
	write_conf_n("socket /a\n# x\nstate-dir /b\0c\n", 27);
	expect_refused_conf(3, "NUL byte");
}

static void test_config_inside(void **state)
{
	(void)state;
	expect_refused_text("socket /a\nconfig /etc/other.conf\n", 2, "config cannot be set in a config file");
	expect_refused_text("config=/etc/airlock/airlockd.conf\n", 1, "config cannot be set in a config file");
	expect_refused_text("config\n", 1, "config cannot be set in a config file");
	/* Longer names that start with it are just names (getopt judges them). */
	expect_file("configure x\n", (const char *const[]){"airlockd", "--configure", "x", NULL});
}

/* ------------------------------------------------------------ the file */

static void test_file_checks(void **state)
{
	(void)state;
	/* Missing. */
	unlink(conf);
	assert_int_equal(expect_refused_conf(0, "cannot open the config file: No such file or directory"), -ENOENT);
	/* A directory; a FIFO (refused without waiting for a writer). */
	assert_int_equal(mkdir(conf, 0755), 0);
	expect_refused_conf(0, "not a regular file");
	assert_int_equal(rmdir(conf), 0);
	assert_int_equal(mkfifo(conf, 0644), 0);
	expect_refused_conf(0, "not a regular file");
	/* Writable by group or others. */
	write_conf("socket /a\n");
	assert_int_equal(chmod(conf, 0664), 0);
	assert_int_equal(expect_refused_conf(0, "writable by group or others (mode 0664)"), -EPERM);
	assert_int_equal(chmod(conf, 0646), 0);
	expect_refused_conf(0, "chmod go-w");
	/* Read-only for its owner is fine. */
	assert_int_equal(chmod(conf, 0400), 0);
	expect_argv((const char *const[]){"airlockd", "--config", conf, NULL},
	            (const char *const[]){"airlockd", "--socket", "/a", NULL});
	/* A symlink to a good file is followed. */
	cleanup_free char *link = xasprintf("%s/link.conf", dir);
	assert_int_equal(symlink(conf, link), 0);
	expect_argv((const char *const[]){"airlockd", "--config", link, NULL},
	            (const char *const[]){"airlockd", "--socket", "/a", NULL});
	/* Owned by someone else (only root can make that file). */
	if (geteuid() == 0) {
		assert_int_equal(chmod(conf, 0644), 0);
		assert_int_equal(chown(conf, 4242, 4242), 0);
		expect_refused_conf(0, "owned by uid 4242, not by root");
	}
}

/* ------------------------------------------------------------ argv */

static void test_argv_order(void **state)
{
	(void)state;
	write_conf("socket /from-file\nwatchdog-s 10\nprint-backend\n");
	/* argv[0], the file's, then the rest of the command line without
	 * --config FILE, wherever --config was: later flags win in getopt_long. */
	expect_argv((const char *const[]){"/usr/local/bin/airlockd", "--socket", "/cli", "--config", conf,
	                                  "--watchdog-s", "0", NULL},
	            (const char *const[]){"/usr/local/bin/airlockd", "--socket", "/from-file", "--watchdog-s", "10",
	                                  "--print-backend", "--socket", "/cli", "--watchdog-s", "0", NULL});
	expect_argv(
	    (const char *const[]){"airlockd", "--config", conf, NULL},
	    (const char *const[]){"airlockd", "--socket", "/from-file", "--watchdog-s", "10", "--print-backend", NULL});
	/* --config=FILE, last on the command line. */
	cleanup_free char *eq = xasprintf("--config=%s", conf);
	expect_argv((const char *const[]){"airlockd", "--listen", "127.0.0.1:1", eq, NULL},
	            (const char *const[]){"airlockd", "--socket", "/from-file", "--watchdog-s", "10", "--print-backend",
	                                  "--listen", "127.0.0.1:1", NULL});
	/* Without --config: a copy. After "--" nothing is an option. */
	expect_argv((const char *const[]){"airlockd", "--socket", "/x", NULL},
	            (const char *const[]){"airlockd", "--socket", "/x", NULL});
	expect_argv((const char *const[]){"airlockd", NULL}, (const char *const[]){"airlockd", NULL});
	expect_argv((const char *const[]){"airlockd", "--", "--config", conf, NULL},
	            (const char *const[]){"airlockd", "--", "--config", conf, NULL});
	/* Other names that start with --config are not it. */
	expect_argv((const char *const[]){"airlockd", "--configx", conf, NULL},
	            (const char *const[]){"airlockd", "--configx", conf, NULL});
}

static void expect_argv_refused(const char *const *args, const char *needle)
{
	int argc = 0;
	while (args[argc])
		argc++;
	struct al_error err = {0};
	int ret_argc = -1;
	char **ret = NULL;
	assert_true(daemon_config_argv(NULL, NULL, argc, (char *const *)args, &ret_argc, &ret, &err) < 0);
	assert_null(ret);
	if (!strstr(err.message, needle))
		fail_msg("message \"%s\" lacks \"%s\"", err.message, needle);
}

static void test_argv_refused(void **state)
{
	(void)state;
	write_conf("socket /a\n");
	expect_argv_refused((const char *const[]){"airlockd", "--config", NULL}, "--config needs a FILE");
	expect_argv_refused((const char *const[]){"airlockd", "--config=", NULL}, "--config needs a FILE");
	expect_argv_refused((const char *const[]){"airlockd", "--config", conf, "--config", conf, NULL},
	                    "--config given twice");
	cleanup_free char *eq = xasprintf("--config=%s", conf);
	expect_argv_refused((const char *const[]){"airlockd", eq, "--config", "/other", NULL}, "--config given twice");
}

static void test_default_path(void **state)
{
	(void)state;
	write_conf("socket /default\n");
	char *args[] = {"airlockd", "--watchdog-s", "5", NULL};
	struct al_error err = {0};
	int ret_argc = 0;
	cleanup_config_argv char **ret = NULL;
	assert_int_equal(daemon_config_argv(conf, NULL, 3, args, &ret_argc, &ret, &err), 0);
	assert_int_equal(ret_argc, 5);
	assert_string_equal(ret[1], "--socket");
	assert_string_equal(ret[2], "/default");
	assert_string_equal(ret[3], "--watchdog-s");
	/* --config replaces the default. */
	cleanup_free char *other = xasprintf("%s/other.conf", dir);
	cleanup_close int fd = open(other, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, "socket /other\n", 14), 0);
	char *args2[] = {"airlockd", "--config", other, NULL};
	cleanup_config_argv char **ret2 = NULL;
	assert_int_equal(daemon_config_argv(conf, NULL, 3, args2, &ret_argc, &ret2, &err), 0);
	assert_int_equal(ret_argc, 3);
	assert_string_equal(ret2[2], "/other");
	daemon_config_argv_free(NULL);
}

/* With getopt's table: unknown options and a missing or extra value are
 * refused at their line, not taken by getopt as the next option's value. */
static void test_option_table(void **state)
{
	(void)state;
	static const struct option opts[] = {
	    {"socket", required_argument, NULL, 's'},
	    {"check", no_argument, NULL, 'c'},
	    {NULL, 0, NULL, 0},
	};
	struct al_error err = {0};
	int ret_argc = 0;
	char *args[] = {"airlockd", "--config", conf, NULL};
	static const struct {
		const char *text, *message;
	} cases[] = {
	    {"socket\ncheck\n", ":1: socket needs a value"},
	    {"socket /s\ncheck yes\n", ":2: check takes no value"},
	    {"socket /s\nsoket /t\n", ":2: no option soket"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_conf(cases[i].text);
		cleanup_config_argv char **ret = NULL;
		assert_int_equal(daemon_config_argv(NULL, opts, 3, args, &ret_argc, &ret, &err), -EINVAL);
		if (!strstr(err.message, cases[i].message))
			fail_msg("\"%s\": \"%s\" does not say \"%s\"", cases[i].text, err.message, cases[i].message);
		assert_null(ret);
	}
	write_conf("socket /s\ncheck\n");
	cleanup_config_argv char **ret = NULL;
	assert_int_equal(daemon_config_argv(NULL, opts, 3, args, &ret_argc, &ret, &err), 0);
	assert_int_equal(ret_argc, 4);
	assert_string_equal(ret[3], "--check");
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_good_file),     T(test_option_table),         T(test_syntax),       T(test_limit_file_size),
	    T(test_limit_options), T(test_limit_name_and_value), T(test_characters),   T(test_config_inside),
	    T(test_file_checks),   T(test_argv_order),           T(test_argv_refused), T(test_default_path),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
