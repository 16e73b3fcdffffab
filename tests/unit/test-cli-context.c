/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/cli/cli-context.c: a build context written as a tar
 * (what .dockerignore leaves out, the Dockerfile always in, symlinks kept,
 * special files named), and its upload through a pipe and curl's read
 * callback. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "../../src/cli/cli-context.h"
#include "../../src/cli/cli-http.h"
#include "../../src/cli/cli-tar.h"
#include "util.h"

static char *make_tmpdir(void)
{
	char tmpl[] = "/tmp/test-cli-context-XXXXXX";
	assert_non_null(mkdtemp(tmpl));
	return xstrdup(tmpl);
}

static void put(const char *dir, const char *rel, const char *text)
{
	cleanup_free char *path = xasprintf("%s/%s", dir, rel);
	cleanup_free char *parent = xstrdup(path);
	*strrchr(parent, '/') = '\0';
	assert_int_equal(mkdir_p(parent, 0755), 0);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, text, strlen(text)), 0);
	close(fd);
}

static bool exists(const char *dir, const char *rel)
{
	cleanup_free char *path = xasprintf("%s/%s", dir, rel);
	struct stat st;
	return lstat(path, &st) == 0;
}

/* The context's tar, extracted into a new directory. */
static char *write_and_extract(struct cli_context *c)
{
	char tmpl[] = "/tmp/test-cli-context-tar-XXXXXX";
	int fd = mkstemp(tmpl);
	assert_true(fd >= 0);
	unlink(tmpl);
	struct al_error err = {0};
	assert_int_equal(cli_context_write(fd, c, &err), 0);
	char *out = make_tmpdir();
	int dest = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct tar_reader *t = cli_tar_reader_new(dest, NULL);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	char buf[4096];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		assert_int_equal(cli_tar_reader_feed(t, buf, (size_t)n, &err), 0);
	assert_int_equal(cli_tar_reader_finish(t, &err), 0);
	cli_tar_reader_free(t);
	close(dest);
	close(fd);
	return out;
}

static void test_dockerignore_and_kept(void **st)
{
	(void)st;
	cleanup_free char *dir = make_tmpdir();
	put(dir, "Dockerfile", "FROM base\n");
	put(dir, "src/a.c", "a");
	put(dir, "node_modules/x/i.js", "n");
	put(dir, "data/keep/k", "k");
	put(dir, "data/drop/d", "d");
	put(dir, "docker/Dockerfile.dev", "FROM base\n");
	put(dir, "README.md", "m");
	put(dir, ".dockerignore", "node_modules\n*.md\ndata\n!data/keep\ndocker\n");
	cleanup_free char *link = xasprintf("%s/link", dir), *fifo = xasprintf("%s/fifo", dir);
	assert_int_equal(symlink("/etc/passwd", link), 0);
	assert_int_equal(mkfifo(fifo, 0644), 0);
	struct cli_ignore *ig = NULL;
	struct al_error err = {0};
	cleanup_free char *igpath = xasprintf("%s/.dockerignore", dir);
	assert_int_equal(cli_ignore_load(igpath, &ig, &err), 0);
	struct cli_context c = {.dir = dir, .ignore = ig, .keep = "docker/Dockerfile.dev"};
	cleanup_free char *out = write_and_extract(&c);
	assert_true(exists(out, "Dockerfile") && exists(out, "src/a.c") && exists(out, "data/keep/k"));
	assert_true(exists(out, "docker/Dockerfile.dev")); /* kept, though its directory is ignored */
	assert_false(exists(out, "node_modules") || exists(out, "README.md") || exists(out, "data/drop"));
	char target[64] = "";
	cleanup_free char *olink = xasprintf("%s/link", out);
	assert_true(readlink(olink, target, sizeof(target) - 1) > 0); /* a symlink, not its target's copy */
	assert_string_equal(target, "/etc/passwd");
	assert_int_equal(c.skipped, 1);
	assert_string_equal(c.skipped_names[0], "fifo");
	assert_false(exists(out, "fifo"));
	cli_context_release(&c);
	cli_ignore_free(ig);
	assert_int_equal(rm_rf(dir), 0);
	assert_int_equal(rm_rf(out), 0);
}

static void test_extra_dockerfile(void **st)
{
	(void)st;
	cleanup_free char *dir = make_tmpdir(), *other = make_tmpdir();
	put(dir, "app.py", "print(1)\n");
	put(dir, ".airlock-Dockerfile", "not this one");
	put(other, "Dockerfile", "FROM base\nCOPY app.py /\n");
	cleanup_free char *df = xasprintf("%s/Dockerfile", other);
	struct cli_context c = {.dir = dir, .extra_src = df, .extra_name = ".airlock-Dockerfile"};
	cleanup_free char *out = write_and_extract(&c);
	cleanup_free char *got = NULL, *path = xasprintf("%s/.airlock-Dockerfile", out);
	assert_int_equal(read_file_limited(path, 1024, &got, NULL), 0);
	assert_string_equal(got, "FROM base\nCOPY app.py /\n");
	assert_true(exists(out, "app.py"));
	assert_int_equal(rm_rf(dir), 0);
	assert_int_equal(rm_rf(other), 0);
	assert_int_equal(rm_rf(out), 0);
}

/* The upload: the thread's tar comes out of the read callback whole, counted. */
static void test_upload_reads_all(void **st)
{
	(void)st;
	cleanup_free char *dir = make_tmpdir();
	char big[100000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	put(dir, "big", big);
	struct cli_context c = {.dir = dir};
	struct cli_upload u = {.fd = -1};
	struct al_error err = {0};
	assert_int_equal(cli_upload_start(&u, &c, &err), 0);
	char buf[16384];
	size_t n, total = 0;
	while ((n = cli_upload_read(buf, 1, sizeof(buf), &u)) > 0) {
		assert_true(n != CURL_READFUNC_ABORT);
		total += n;
	}
	assert_int_equal(total, u.bytes);
	assert_int_equal(total % 512, 0);
	assert_true(total > sizeof(big));
	assert_int_equal(cli_upload_finish(&u, &err), 0);
	assert_int_equal(rm_rf(dir), 0);
}

/* A context that cannot be read fails the upload (not a short archive). */
static void test_upload_failure_aborts(void **st)
{
	(void)st;
	struct cli_context c = {.dir = "/nonexistent/context"};
	struct cli_upload u = {.fd = -1};
	struct al_error err = {0};
	assert_int_equal(cli_upload_start(&u, &c, &err), 0);
	char buf[4096];
	assert_int_equal(cli_upload_read(buf, 1, sizeof(buf), &u), CURL_READFUNC_ABORT);
	assert_true(cli_upload_finish(&u, &err) < 0);
	assert_non_null(strstr(err.message, "/nonexistent/context"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_dockerignore_and_kept),
	    cmocka_unit_test(test_extra_dockerfile),
	    cmocka_unit_test(test_upload_reads_all),
	    cmocka_unit_test(test_upload_failure_aborts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
