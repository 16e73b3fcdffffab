/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for copy-on-write copies of disk images (src/common/file-copy.c):
 * contents, holes kept, the reflink-or-sparse choice, refusals. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "file-copy.h"
#include "util.h"

#define MIB (1024 * 1024)

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/airlock-test-file-copy.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return rm_rf(dir);
}

static char *path_in(const char *name)
{
	return xasprintf("%s/%s", dir, name);
}

/* A raw-image-like file: size_mib long, with a 4 KiB pattern at each offset
 * of `at` (bytes), holes everywhere else. */
static void make_sparse(const char *path, off_t size, const off_t *at, size_t n_at)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, size), 0);
	char block[4096];
	for (size_t i = 0; i < n_at; i++) {
		for (size_t k = 0; k < sizeof(block); k++)
			block[k] = (char)(i * 13 + k * 7);
		assert_int_equal(pwrite(fd, block, sizeof(block), at[i]), (ssize_t)sizeof(block));
	}
	assert_int_equal(fsync(fd), 0);
	close(fd);
}

static void assert_same_content(const char *a, const char *b)
{
	cleanup_free char *x = NULL, *y = NULL;
	size_t nx = 0, ny = 0;
	assert_int_equal(read_file_limited(a, 64 * MIB, &x, &nx), 0);
	assert_int_equal(read_file_limited(b, 64 * MIB, &y, &ny), 0);
	assert_int_equal(nx, ny);
	assert_memory_equal(x, y, nx);
}

static uint64_t allocated(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_blocks * 512u;
}

static void test_copy_keeps_holes_and_content(void **state)
{
	(void)state;
	cleanup_free char *src = path_in("src.raw"), *dst = path_in("dst.raw");
	const off_t at[] = {0, 3 * MIB + 4096, 8 * MIB - 4096};
	make_sparse(src, 8 * MIB, at, ARRAY_SIZE(at));
	enum file_copy_method how = 0;
	assert_int_equal(file_copy_cow(src, dst, 0600, &how), 0);
	assert_true(how == FILE_COPY_REFLINK || how == FILE_COPY_SPARSE);
	assert_same_content(src, dst);
	struct stat st;
	assert_int_equal(stat(dst, &st), 0);
	assert_int_equal(st.st_size, 8 * MIB);
	assert_int_equal(st.st_mode & 07777, 0600);
	/* Three 4 KiB extents, not 8 MiB (a little slack for metadata blocks). */
	if (how == FILE_COPY_SPARSE)
		assert_true(allocated(dst) <= 256 * 1024);
	print_message("file_copy_cow on this filesystem: %s, %llu bytes allocated for 8 MiB\n",
	              file_copy_method_name(how), (unsigned long long)allocated(dst));
}

static void test_sparse_path_itself(void **state)
{
	(void)state;
	/* Whatever the filesystem, the fallback is exercised here directly. */
	cleanup_free char *src = path_in("s2.raw"), *dst = path_in("d2.raw");
	const off_t at[] = {MIB, 5 * MIB};
	make_sparse(src, 6 * MIB + 100, at, ARRAY_SIZE(at)); /* ends in a hole, not on a block */
	int in = open(src, O_RDONLY | O_CLOEXEC), out = open(dst, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(in >= 0 && out >= 0);
	assert_int_equal(write(out, "old contents", 12), 12); /* truncated first */
	assert_int_equal(file_copy_sparse_fd(in, out), 0);
	close(in);
	close(out);
	assert_same_content(src, dst);
	assert_true(allocated(dst) <= 256 * 1024);
}

static void test_all_hole_and_empty(void **state)
{
	(void)state;
	cleanup_free char *src = path_in("hole.raw"), *dst = path_in("hole.copy");
	make_sparse(src, 16 * MIB, NULL, 0);
	assert_int_equal(file_copy_cow(src, dst, 0644, NULL), 0);
	struct stat st;
	assert_int_equal(stat(dst, &st), 0);
	assert_int_equal(st.st_size, 16 * MIB);
	assert_true(allocated(dst) <= 64 * 1024);

	cleanup_free char *e = path_in("empty"), *ec = path_in("empty.copy");
	make_sparse(e, 0, NULL, 0);
	assert_int_equal(file_copy_cow(e, ec, 0600, NULL), 0);
	assert_int_equal(stat(ec, &st), 0);
	assert_int_equal(st.st_size, 0);
}

static void test_data_file(void **state)
{
	(void)state;
	/* Dense, odd length: a file without holes (a snapshot's state file). */
	cleanup_free char *src = path_in("dense"), *dst = path_in("dense.copy");
	cleanup_free char *buf = xmalloc(1000003);
	for (size_t i = 0; i < 1000003; i++)
		buf[i] = (char)(i * 31 + (i >> 9));
	assert_int_equal(write_file_atomic(src, buf, 1000003, 0600), 0);
	assert_int_equal(file_copy_cow(src, dst, 0600, NULL), 0);
	assert_same_content(src, dst);
}

static void test_refusals(void **state)
{
	(void)state;
	cleanup_free char *src = path_in("r.raw"), *dst = path_in("r.copy"), *link = path_in("r.link");
	const off_t at[] = {0};
	make_sparse(src, MIB, at, 1);
	assert_int_equal(file_copy_cow(src, dst, 0600, NULL), 0);
	/* The destination must not exist (and is left alone). */
	assert_int_equal(file_copy_cow(src, dst, 0600, NULL), -EEXIST);
	assert_same_content(src, dst);
	/* No symlinks, no directories, nothing missing. */
	assert_int_equal(symlink(src, link), 0);
	cleanup_free char *d2 = path_in("r2.copy");
	assert_int_equal(file_copy_cow(link, d2, 0600, NULL), -ELOOP);
	assert_int_equal(file_copy_cow(dir, d2, 0600, NULL), -EINVAL);
	cleanup_free char *missing = path_in("missing");
	assert_int_equal(file_copy_cow(missing, d2, 0600, NULL), -ENOENT);
	assert_int_equal(access(d2, F_OK), -1);
}

static void test_grow(void **state)
{
	(void)state;
	cleanup_free char *p = path_in("grow.raw");
	const off_t at[] = {0};
	make_sparse(p, MIB, at, 1);
	assert_int_equal(file_grow(p, 64 * MIB), 0);
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_size, 64 * MIB);
	assert_true(allocated(p) <= 256 * 1024);
	/* Never shrinks. */
	assert_int_equal(file_grow(p, MIB), 0);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_size, 64 * MIB);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_copy_keeps_holes_and_content),
	    cmocka_unit_test(test_sparse_path_itself),
	    cmocka_unit_test(test_all_hole_and_empty),
	    cmocka_unit_test(test_data_file),
	    cmocka_unit_test(test_refusals),
	    cmocka_unit_test(test_grow),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
