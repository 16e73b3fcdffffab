/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/daemon/build/build-context.c: a client's context tar
 * and COPY's tar for the guest (issue 23). The tars are written and read
 * back with libarchive here. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cmocka.h>

#include "build-context.h"
#include "util.h"

/* One entry of a tar to write: type f(ile) d(ir) l(symlink) h(ardlink)
 * c(haracter device); data is a file's contents or a link's target. */
struct tentry {
	const char *path;
	char type;
	unsigned mode;
	const char *data;
};

static int tar_make(const struct tentry *e, size_t n, bool gzip)
{
	int fd = memfd_create("ctx", MFD_CLOEXEC);
	assert_true(fd >= 0);
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	if (gzip)
		archive_write_add_filter_gzip(a);
	assert_int_equal(archive_write_open_fd(a, fd), ARCHIVE_OK);
	for (size_t i = 0; i < n; i++) {
		struct archive_entry *ae = archive_entry_new();
		archive_entry_set_pathname(ae, e[i].path);
		archive_entry_set_perm(ae, e[i].mode);
		archive_entry_set_mtime(ae, 1700000000 + (time_t)i, 0);
		size_t size = 0;
		switch (e[i].type) {
		case 'f':
			archive_entry_set_filetype(ae, AE_IFREG);
			size = strlen(e[i].data);
			break;
		case 'd':
			archive_entry_set_filetype(ae, AE_IFDIR);
			break;
		case 'l':
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_symlink(ae, e[i].data);
			break;
		case 'h':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_hardlink(ae, e[i].data);
			break;
		case 'c':
			archive_entry_set_filetype(ae, AE_IFCHR);
			archive_entry_set_rdev(ae, makedev(1, 3));
			break;
		}
		archive_entry_set_size(ae, (la_int64_t)size);
		assert_int_equal(archive_write_header(a, ae), ARCHIVE_OK);
		if (size)
			assert_int_equal(archive_write_data(a, e[i].data, size), (la_ssize_t)size);
		archive_entry_free(ae);
	}
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

static struct build_context *ctx_make(const struct tentry *e, size_t n)
{
	int fd = tar_make(e, n, false);
	struct build_context *ctx = NULL;
	struct al_error err = {0};
	int r = build_context_open(fd, &ctx, &err);
	close(fd);
	if (r < 0)
		fail_msg("open: %s", err.message);
	return ctx;
}

static void expect_open_error(const struct tentry *e, size_t n, const char *want)
{
	int fd = tar_make(e, n, false);
	struct build_context *ctx = (struct build_context *)0x1;
	struct al_error err = {0};
	int r = build_context_open(fd, &ctx, &err);
	close(fd);
	if (r >= 0)
		fail_msg("accepted a context with %s", e[n - 1].path);
	assert_ptr_equal(ctx, (struct build_context *)0x1);
	if (!strstr(err.message, want))
		fail_msg("message \"%s\" lacks \"%s\"", err.message, want);
}

/* An entry of COPY's output, read back. */
struct oentry {
	char path[512];
	char type; /* f d l */
	unsigned mode;
	long uid, gid;
	char uname[64], gname[64], link[256], data[256];
};

struct output {
	size_t n;
	struct oentry e[64];
	uint8_t digest[32];
};

static void output_read(int fd, struct output *out)
{
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	struct archive *a = archive_read_new();
	archive_read_support_format_tar(a);
	assert_int_equal(archive_read_open_fd(a, fd, 4096), ARCHIVE_OK);
	struct archive_entry *ae;
	out->n = 0;
	while (archive_read_next_header(a, &ae) == ARCHIVE_OK) {
		assert_true(out->n < ARRAY_SIZE(out->e));
		struct oentry *o = &out->e[out->n++];
		*o = (struct oentry){0};
		strlcpy_al(o->path, archive_entry_pathname(ae), sizeof(o->path));
		size_t pl = strlen(o->path);
		if (pl > 1 && o->path[pl - 1] == '/') /* the pax writer's directories */
			o->path[pl - 1] = '\0';
		mode_t t = archive_entry_filetype(ae);
		o->type = t == AE_IFREG ? 'f' : t == AE_IFDIR ? 'd' : t == AE_IFLNK ? 'l' : '?';
		o->mode = archive_entry_perm(ae);
		o->uid = (long)archive_entry_uid(ae);
		o->gid = (long)archive_entry_gid(ae);
		if (archive_entry_uname(ae))
			strlcpy_al(o->uname, archive_entry_uname(ae), sizeof(o->uname));
		if (archive_entry_gname(ae))
			strlcpy_al(o->gname, archive_entry_gname(ae), sizeof(o->gname));
		if (archive_entry_symlink(ae))
			strlcpy_al(o->link, archive_entry_symlink(ae), sizeof(o->link));
		la_ssize_t got = archive_read_data(a, o->data, sizeof(o->data) - 1);
		assert_true(got >= 0);
	}
	archive_read_free(a);
}

static int copy_run(struct build_context *ctx, const struct build_copy *c, struct output *out, struct al_error *err)
{
	int fd = memfd_create("out", MFD_CLOEXEC);
	assert_true(fd >= 0);
	int r = build_context_copy(ctx, c, fd, out->digest, err);
	if (r == 0)
		output_read(fd, out);
	close(fd);
	return r;
}

static void copy_ok(struct build_context *ctx, const struct build_copy *c, struct output *out)
{
	struct al_error err = {0};
	if (copy_run(ctx, c, out, &err) < 0)
		fail_msg("copy: %s", err.message);
}

static const struct oentry *out_find(const struct output *out, const char *path)
{
	for (size_t i = 0; i < out->n; i++)
		if (!strcmp(out->e[i].path, path))
			return &out->e[i];
	fail_msg("no %s in the output", path);
	return NULL;
}

static void expect_paths(const struct output *out, const char *const *want, size_t n)
{
	for (size_t i = 0; i < out->n && i < n; i++)
		if (strcmp(out->e[i].path, want[i]))
			fail_msg("entry %zu: %s, not %s", i, out->e[i].path, want[i]);
	assert_int_equal(out->n, n);
}

static const struct tentry project[] = {
    {"./", 'd', 0755, NULL},
    {"./Dockerfile", 'f', 0644, "FROM base\n"},
    {"./.airlock-Dockerfile", 'f', 0644, "FROM x\n"},
    {"./src/", 'd', 0750, NULL},
    {"./src/a.txt", 'f', 0644, "alpha"},
    {"./src/sub/b.sh", 'f', 0755, "#!/bin/sh\n"},
    {"./src/link", 'l', 0777, "a.txt"},
    {"./src/hard", 'h', 0644, "src/a.txt"},
    {"x.txt", 'f', 0600, "x"},
    {"/y.txt", 'f', 0644, "y"},
};

static void test_open_and_read(void **s)
{
	(void)s;
	struct build_context *ctx = ctx_make(project, ARRAY_SIZE(project));
	struct al_error err = {0};
	char *data;
	size_t len;
	assert_int_equal(build_context_read_file(ctx, "Dockerfile", 1024, &data, &len, &err), 0);
	assert_int_equal(len, 10);
	assert_string_equal(data, "FROM base\n");
	free(data);
	assert_int_equal(build_context_read_file(ctx, "./src//hard", 1024, &data, &len, &err), 0);
	assert_string_equal(data, "alpha");
	free(data);
	assert_int_equal(build_context_read_file(ctx, "y.txt", 1024, &data, &len, &err), 0);
	free(data);
	assert_int_equal(build_context_read_file(ctx, "nope", 1024, &data, &len, &err), -ENOENT);
	assert_int_equal(build_context_read_file(ctx, "src", 1024, &data, &len, &err), -ENOENT);
	assert_int_equal(build_context_read_file(ctx, "src/a.txt", 3, &data, &len, &err), -EFBIG);
	assert_int_equal(build_context_read_file(ctx, "../x", 3, &data, &len, &err), -EINVAL);
	build_context_free(ctx);
}

static void test_gzip(void **s)
{
	(void)s;
	int fd = tar_make(project, ARRAY_SIZE(project), true);
	struct build_context *ctx = NULL;
	struct al_error err = {0};
	assert_int_equal(build_context_open(fd, &ctx, &err), 0);
	close(fd);
	char *data;
	size_t len;
	assert_int_equal(build_context_read_file(ctx, "src/sub/b.sh", 1024, &data, &len, &err), 0);
	assert_string_equal(data, "#!/bin/sh\n");
	free(data);
	build_context_free(ctx);
	/* Not a tar at all. */
	fd = memfd_create("junk", MFD_CLOEXEC);
	assert_int_equal(write_full(fd, "hello, this is no tar\n", 22), 0);
	lseek(fd, 0, SEEK_SET);
	ctx = NULL;
	assert_true(build_context_open(fd, &ctx, &err) < 0);
	assert_null(ctx);
	assert_non_null(strstr(err.message, "build context"));
	close(fd);
}

static void test_refused(void **s)
{
	(void)s;
	struct tentry e[2] = {{"ok", 'f', 0644, "x"}};
	e[1] = (struct tentry){"../etc/passwd", 'f', 0644, "x"};
	expect_open_error(e, 2, "..");
	e[1] = (struct tentry){"a/../../b", 'd', 0755, NULL};
	expect_open_error(e, 2, "..");
	e[1] = (struct tentry){"dev/null", 'c', 0666, NULL};
	expect_open_error(e, 2, "device");
	e[1] = (struct tentry){"ok/inside", 'f', 0644, "y"};
	expect_open_error(e, 2, "not a directory");
	e[1] = (struct tentry){"h", 'h', 0644, "missing"};
	expect_open_error(e, 2, "hard link");
	char longname[300];
	memset(longname, 'n', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	e[1] = (struct tentry){longname, 'f', 0644, "x"};
	expect_open_error(e, 2, "longer");
}

static void test_copy_directory(void **s)
{
	(void)s;
	struct build_context *ctx = ctx_make(project, ARRAY_SIZE(project));
	const char *src[] = {"src"};
	struct build_copy c = {.sources = src,
	                       .n_sources = 1,
	                       .dest = "/app",
	                       .uid = 1000,
	                       .gid = 1000,
	                       .user = "app",
	                       .chmod_mode = -1,
	                       .parents = true};
	struct output out;
	copy_ok(ctx, &c, &out);
	const char *want[] = {"app", "app/a.txt", "app/hard", "app/link", "app/sub", "app/sub/b.sh"};
	expect_paths(&out, want, ARRAY_SIZE(want));
	const struct oentry *o = out_find(&out, "app");
	assert_int_equal(o->type, 'd');
	assert_int_equal(o->mode, 0755);
	assert_int_equal(o->uid, 1000);
	assert_int_equal(o->gid, 1000);
	assert_string_equal(o->uname, "app");
	assert_string_equal(o->gname, "");
	o = out_find(&out, "app/hard");
	assert_int_equal(o->type, 'f');
	assert_string_equal(o->data, "alpha");
	o = out_find(&out, "app/link");
	assert_int_equal(o->type, 'l');
	assert_string_equal(o->link, "a.txt");
	o = out_find(&out, "app/sub/b.sh");
	assert_int_equal(o->mode, 0755);
	assert_string_equal(o->data, "#!/bin/sh\n");
	assert_int_equal(out_find(&out, "app/sub")->mode, 0755); /* implied in the context */
	build_context_free(ctx);
}

static void test_copy_files_and_globs(void **s)
{
	(void)s;
	struct build_context *ctx = ctx_make(project, ARRAY_SIZE(project));
	const char *glob[] = {"*.txt"};
	struct build_copy c = {.sources = glob,
	                       .n_sources = 1,
	                       .dest = "docs",
	                       .workdir = "/home/u",
	                       .uid = -1,
	                       .gid = -1,
	                       .chmod_mode = -1,
	                       .parents = true};
	struct output out;
	/* Two matches: docs is a directory. */
	copy_ok(ctx, &c, &out);
	const char *want[] = {"home", "home/u", "home/u/docs", "home/u/docs/x.txt", "home/u/docs/y.txt"};
	expect_paths(&out, want, ARRAY_SIZE(want));
	assert_int_equal(out_find(&out, "home/u/docs/x.txt")->mode, 0600);
	assert_int_equal(out_find(&out, "home")->uid, 0);
	/* One file to a name. */
	const char *one[] = {"src/a.txt"};
	c = (struct build_copy){.sources = one,
	                        .n_sources = 1,
	                        .dest = "/etc/conf",
	                        .uid = 5,
	                        .gid = 6,
	                        .user = "u",
	                        .group = "g",
	                        .chmod_mode = 0640,
	                        .parents = true};
	copy_ok(ctx, &c, &out);
	const char *want2[] = {"etc", "etc/conf"};
	expect_paths(&out, want2, 2);
	const struct oentry *o = out_find(&out, "etc/conf");
	assert_int_equal(o->mode, 0640);
	assert_int_equal(o->uid, 5);
	assert_int_equal(o->gid, 6);
	assert_string_equal(o->gname, "g");
	assert_string_equal(o->data, "alpha");
	/* Into a directory named with a trailing slash; several sources. */
	c.dest = "/etc/";
	copy_ok(ctx, &c, &out);
	out_find(&out, "etc/a.txt");
	const char *two[] = {"x.txt", "src/sub/b.sh"};
	c = (struct build_copy){
	    .sources = two, .n_sources = 2, .dest = "/opt", .uid = -1, .gid = -1, .chmod_mode = -1, .parents = true};
	copy_ok(ctx, &c, &out);
	const char *want3[] = {"opt", "opt/b.sh", "opt/x.txt"};
	expect_paths(&out, want3, 3);
	build_context_free(ctx);
}

static void test_copy_errors_and_exclude(void **s)
{
	(void)s;
	struct build_context *ctx = ctx_make(project, ARRAY_SIZE(project));
	struct al_error err = {0};
	struct output out;
	const char *missing[] = {"src/a.txt", "nope/*.c"};
	struct build_copy c = {
	    .sources = missing, .n_sources = 2, .dest = "/x/", .uid = -1, .gid = -1, .chmod_mode = -1, .parents = true};
	assert_true(copy_run(ctx, &c, &out, &err) < 0);
	assert_non_null(strstr(err.message, "nope/*.c"));
	const char *up[] = {"../secret"};
	c.sources = up;
	c.n_sources = 1;
	assert_true(copy_run(ctx, &c, &out, &err) < 0);
	assert_non_null(strstr(err.message, "outside the build context"));
	/* COPY . /x without the Dockerfile the CLI added. */
	const char *all[] = {"."};
	const char *excl[] = {".airlock-Dockerfile"};
	c = (struct build_copy){.sources = all,
	                        .n_sources = 1,
	                        .dest = "/x",
	                        .uid = -1,
	                        .gid = -1,
	                        .chmod_mode = -1,
	                        .parents = true,
	                        .exclude = excl,
	                        .n_exclude = 1};
	copy_ok(ctx, &c, &out);
	const char *want[] = {"x",          "x/Dockerfile", "x/src",          "x/src/a.txt", "x/src/hard",
	                      "x/src/link", "x/src/sub",    "x/src/sub/b.sh", "x/x.txt",     "x/y.txt"};
	expect_paths(&out, want, ARRAY_SIZE(want));
	assert_int_equal(out_find(&out, "x/src")->mode, 0750);
	/* Only the excluded file: nothing matches. */
	c.sources = excl;
	assert_true(copy_run(ctx, &c, &out, &err) < 0);
	/* A file where a directory's contents go: src/sub/ then a file sub. */
	build_context_free(ctx);
	const struct tentry e[] = {{"src/sub/f", 'f', 0644, "f"}, {"sub", 'f', 0644, "file"}};
	ctx = ctx_make(e, ARRAY_SIZE(e));
	const char *clash[] = {"src", "sub"};
	c = (struct build_copy){
	    .sources = clash, .n_sources = 2, .dest = "/d/", .uid = -1, .gid = -1, .chmod_mode = -1, .parents = true};
	assert_true(copy_run(ctx, &c, &out, &err) < 0);
	assert_non_null(strstr(err.message, "not a directory"));
	build_context_free(ctx);
}

static void test_digest(void **s)
{
	(void)s;
	const char *all[] = {"."};
	struct build_copy c = {
	    .sources = all, .n_sources = 1, .dest = "/x", .uid = -1, .gid = -1, .chmod_mode = -1, .parents = true};
	struct output a, b;
	struct build_context *ctx = ctx_make(project, ARRAY_SIZE(project));
	copy_ok(ctx, &c, &a);
	copy_ok(ctx, &c, &b);
	assert_memory_equal(a.digest, b.digest, 32);
	build_context_free(ctx);
	/* The same files in the reverse order (other mtimes, the hard link
	 * before its target): the same. */
	struct tentry shuffled[ARRAY_SIZE(project)];
	for (size_t i = 0; i < ARRAY_SIZE(project); i++)
		shuffled[i] = project[ARRAY_SIZE(project) - 1 - i];
	ctx = ctx_make(shuffled, ARRAY_SIZE(shuffled));
	copy_ok(ctx, &c, &b);
	assert_memory_equal(a.digest, b.digest, 32);
	/* Other owners, modes, destination: different. */
	struct build_copy c2 = c;
	c2.uid = 1;
	copy_ok(ctx, &c2, &b);
	assert_memory_not_equal(a.digest, b.digest, 32);
	c2 = c;
	c2.chmod_mode = 0644;
	copy_ok(ctx, &c2, &b);
	assert_memory_not_equal(a.digest, b.digest, 32);
	c2 = c;
	c2.user = "root";
	copy_ok(ctx, &c2, &b);
	assert_memory_not_equal(a.digest, b.digest, 32);
	build_context_free(ctx);
	/* One byte of content changed: different. */
	struct tentry changed[ARRAY_SIZE(project)];
	memcpy(changed, project, sizeof(project));
	changed[4].data = "alphb";
	ctx = ctx_make(changed, ARRAY_SIZE(changed));
	copy_ok(ctx, &c, &b);
	assert_memory_not_equal(a.digest, b.digest, 32);
	build_context_free(ctx);
	/* A symlink's target changed: different. */
	memcpy(changed, project, sizeof(project));
	changed[6].data = "b.txt";
	ctx = ctx_make(changed, ARRAY_SIZE(changed));
	copy_ok(ctx, &c, &b);
	assert_memory_not_equal(a.digest, b.digest, 32);
	build_context_free(ctx);
}

static void test_duplicates_and_implied(void **s)
{
	(void)s;
	const struct tentry e[] = {
	    {"a/b/c.txt", 'f', 0644, "first"},
	    {"a/b/c.txt", 'f', 0600, "second"},
	    {"a-b", 'f', 0644, "sorted between"},
	    {"a/b/d", 'd', 0700, NULL},
	};
	struct build_context *ctx = ctx_make(e, ARRAY_SIZE(e));
	const char *src[] = {"a"};
	struct build_copy c = {
	    .sources = src, .n_sources = 1, .dest = "/", .uid = -1, .gid = -1, .chmod_mode = -1, .parents = true};
	struct output out;
	copy_ok(ctx, &c, &out);
	const char *want[] = {"b", "b/c.txt", "b/d"};
	expect_paths(&out, want, ARRAY_SIZE(want));
	assert_string_equal(out_find(&out, "b/c.txt")->data, "second");
	assert_int_equal(out_find(&out, "b/d")->mode, 0700);
	build_context_free(ctx);
}

static void test_symlink_sources(void **s)
{
	(void)s;
	const struct tentry e[] = {
	    {"real/conf.txt", 'f', 0640, "conf"},
	    {"real/sub/x", 'f', 0644, "x"},
	    {"cfg", 'l', 0777, "real/conf.txt"},
	    {"dirlink", 'l', 0777, "real"},
	    {"abs", 'l', 0777, "/real/../real/conf.txt"},
	    {"loop1", 'l', 0777, "loop2"},
	    {"loop2", 'l', 0777, "loop1"},
	    {"out", 'l', 0777, "../../etc/passwd"},
	};
	struct build_context *ctx = ctx_make(e, ARRAY_SIZE(e));
	struct output out;
	struct al_error err = {0};
	const char *src[] = {"cfg", "abs", "dirlink/conf.txt"};
	struct build_copy c = {
	    .sources = src, .n_sources = 3, .dest = "/d/", .uid = -1, .gid = -1, .chmod_mode = -1, .parents = true};
	copy_ok(ctx, &c, &out);
	const char *want[] = {"d", "d/abs", "d/cfg", "d/conf.txt"};
	expect_paths(&out, want, ARRAY_SIZE(want));
	assert_int_equal(out_find(&out, "d/cfg")->type, 'f');
	assert_string_equal(out_find(&out, "d/abs")->data, "conf");
	assert_int_equal(out_find(&out, "d/abs")->mode, 0640);
	/* A link to a directory: its contents. */
	c.sources = src;
	const char *dir[] = {"dirlink"};
	c.sources = dir;
	c.n_sources = 1;
	copy_ok(ctx, &c, &out);
	const char *want2[] = {"d", "d/conf.txt", "d/sub", "d/sub/x"};
	expect_paths(&out, want2, ARRAY_SIZE(want2));
	/* Loops and links out of the context. */
	const char *loop[] = {"loop1"};
	c.sources = loop;
	assert_true(copy_run(ctx, &c, &out, &err) < 0);
	assert_non_null(strstr(err.message, "loop1"));
	const char *outside[] = {"out"};
	c.sources = outside;
	assert_true(copy_run(ctx, &c, &out, &err) < 0);
	assert_non_null(strstr(err.message, "leads to nothing in the build context"));
	/* Inside a copied directory a link stays a link. */
	const char *all[] = {"."};
	c.sources = all;
	copy_ok(ctx, &c, &out);
	assert_int_equal(out_find(&out, "d/cfg")->type, 'l');
	assert_string_equal(out_find(&out, "d/out")->link, "../../etc/passwd");
	build_context_free(ctx);
}

static void test_no_parents(void **s)
{
	(void)s;
	struct build_context *ctx = ctx_make(project, ARRAY_SIZE(project));
	const char *src[] = {"src"};
	struct build_copy c = {
	    .sources = src, .n_sources = 1, .dest = "/usr/local/app", .uid = 1000, .gid = 1000, .chmod_mode = -1};
	struct output out;
	copy_ok(ctx, &c, &out);
	/* usr/local/app, the directory copied into, is the copy's (owned by
	 * 1000); neither usr nor usr/local: the guest's stay as they are. */
	const char *want[] = {"usr/local/app",      "usr/local/app/a.txt", "usr/local/app/hard",
	                      "usr/local/app/link", "usr/local/app/sub",   "usr/local/app/sub/b.sh"};
	expect_paths(&out, want, ARRAY_SIZE(want));
	struct output with;
	c.parents = true;
	copy_ok(ctx, &c, &with);
	assert_int_equal(with.n, out.n + 2);
	assert_memory_not_equal(with.digest, out.digest, 32);
	const char *one[] = {"x.txt"};
	c = (struct build_copy){
	    .sources = one, .n_sources = 1, .dest = "/bin/", .uid = -1, .gid = -1, .chmod_mode = -1};
	copy_ok(ctx, &c, &out);
	const char *want2[] = {"bin/x.txt"};
	expect_paths(&out, want2, 1);
	build_context_free(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_open_and_read),
	    cmocka_unit_test(test_gzip),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_copy_directory),
	    cmocka_unit_test(test_copy_files_and_globs),
	    cmocka_unit_test(test_copy_errors_and_exclude),
	    cmocka_unit_test(test_digest),
	    cmocka_unit_test(test_duplicates_and_implied),
	    cmocka_unit_test(test_symlink_sources),
	    cmocka_unit_test(test_no_parents),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
