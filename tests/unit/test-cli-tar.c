/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/cli/cli-tar.c: the writer and extractor of 'airlock cp'. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "../../src/cli/cli-tar.h"
#include "util.h"

static char *make_tmpdir(void)
{
	char tmpl[] = "/tmp/test-cli-tar-XXXXXX";
	assert_non_null(mkdtemp(tmpl));
	return xstrdup(tmpl);
}

static void write_file(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write_full(fd, data, len), 0);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

/* Feeds the whole of fd to a reader in chunks of `chunk` bytes. */
static int extract_fd(int fd, int dest, const char *rename, size_t chunk, struct al_error *err)
{
	struct tar_reader *t = cli_tar_reader_new(dest, rename);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	char buf[4096];
	int r = 0;
	ssize_t n;
	while (r == 0 && (n = read(fd, buf, MIN(chunk, sizeof(buf)))) > 0)
		r = cli_tar_reader_feed(t, buf, (size_t)n, err);
	if (r == 0)
		r = cli_tar_reader_finish(t, err);
	cli_tar_reader_free(t);
	return r;
}

static void assert_same_file(const char *a, const char *b)
{
	char *da, *db;
	size_t la, lb;
	assert_int_equal(read_file_limited(a, 1 << 24, &da, &la), 0);
	assert_int_equal(read_file_limited(b, 1 << 24, &db, &lb), 0);
	assert_int_equal(la, lb);
	assert_memory_equal(da, db, la);
	free(da);
	free(db);
	struct stat sa, sb;
	assert_int_equal(lstat(a, &sa), 0);
	assert_int_equal(lstat(b, &sb), 0);
	assert_int_equal(sa.st_mode, sb.st_mode);
}

static void test_round_trip(void **state)
{
	(void)state;
	umask(022);
	cleanup_free char *src = make_tmpdir(), *dst = make_tmpdir();
	cleanup_free char *d = xasprintf("%s/tree", src);
	assert_int_equal(mkdir(d, 0755), 0);
	cleanup_free char *sub = xasprintf("%s/sub", d), *deep = xasprintf("%s/sub/deep", d);
	assert_int_equal(mkdir(sub, 0750), 0);
	assert_int_equal(mkdir(deep, 0755), 0);
	cleanup_free char *a = xasprintf("%s/a.txt", d);
	write_file(a, "hello\n", 6, 0644);
	uint8_t big[200000];
	random_bytes(big, sizeof(big));
	cleanup_free char *b = xasprintf("%s/b.bin", deep);
	write_file(b, big, sizeof(big), 0755);
	char longname[201];
	memset(longname, 'n', 200);
	longname[200] = '\0';
	cleanup_free char *l = xasprintf("%s/%s", sub, longname);
	write_file(l, "long", 4, 0600);
	cleanup_free char *link = xasprintf("%s/link", d);
	assert_int_equal(symlink("a.txt", link), 0);

	int fd = memfd_create("tar", MFD_CLOEXEC);
	unsigned skipped = 0;
	struct al_error err = {0};
	assert_int_equal(cli_tar_write_path(fd, d, "tree", &skipped, &err), 0);
	assert_int_equal(cli_tar_write_end(fd, &err), 0);
	assert_int_equal(skipped, 0);

	static const size_t chunks[] = {1, 511, 513, 4096};
	for (size_t i = 0; i < ARRAY_SIZE(chunks); i++) {
		cleanup_free char *out = xasprintf("%s/out%zu", dst, i);
		assert_int_equal(mkdir(out, 0755), 0);
		int dfd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_int_equal(extract_fd(fd, dfd, NULL, chunks[i], &err), 0);
		close(dfd);
		cleanup_free char *oa = xasprintf("%s/tree/a.txt", out), *ob = xasprintf("%s/tree/sub/deep/b.bin", out);
		cleanup_free char *ol = xasprintf("%s/tree/sub/%s", out, longname),
		                  *olink = xasprintf("%s/tree/link", out);
		assert_same_file(a, oa);
		assert_same_file(b, ob);
		assert_same_file(l, ol);
		char target[64];
		ssize_t n = readlink(olink, target, sizeof(target));
		assert_int_equal(n, 5);
		assert_memory_equal(target, "a.txt", 5);
		struct stat st;
		cleanup_free char *osub = xasprintf("%s/tree/sub", out);
		assert_int_equal(stat(osub, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0750);
	}
	/* rename_first: the tree lands under another name. */
	cleanup_free char *out = xasprintf("%s/renamed", dst);
	assert_int_equal(mkdir(out, 0755), 0);
	int dfd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_int_equal(extract_fd(fd, dfd, "copy", 700, &err), 0);
	close(dfd);
	cleanup_free char *ra = xasprintf("%s/copy/a.txt", out);
	assert_same_file(a, ra);
	close(fd);
	assert_int_equal(rm_rf(src), 0);
	assert_int_equal(rm_rf(dst), 0);
}

/* ------------------------------------------------------------ hostile archives */

static void put_header(int fd, const char *name, char type, const char *link, const void *data, size_t size)
{
	unsigned char h[512] = {0};
	snprintf((char *)h, 100, "%s", name);
	snprintf((char *)h + 100, 8, "%07o", 0644);
	snprintf((char *)h + 108, 8, "%07o", 0);
	snprintf((char *)h + 116, 8, "%07o", 0);
	snprintf((char *)h + 124, 12, "%011zo", size);
	snprintf((char *)h + 136, 12, "%011o", 0);
	h[156] = (unsigned char)type;
	if (link)
		snprintf((char *)h + 157, 100, "%s", link);
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	assert_int_equal(write_full(fd, h, 512), 0);
	if (size) {
		static const char zeros[512];
		assert_int_equal(write_full(fd, data, size), 0);
		assert_int_equal(write_full(fd, zeros, (512 - size % 512) % 512), 0);
	}
}

static void end_archive(int fd)
{
	struct al_error err = {0};
	assert_int_equal(cli_tar_write_end(fd, &err), 0);
}

struct hostile {
	char *base; /* base/dest is the destination; base/outside must stay empty */
	char *dest, *outside;
	int dfd;
};

static void hostile_setup(struct hostile *h)
{
	umask(022);
	h->base = make_tmpdir();
	h->dest = xasprintf("%s/dest", h->base);
	h->outside = xasprintf("%s/outside", h->base);
	assert_int_equal(mkdir(h->dest, 0755), 0);
	assert_int_equal(mkdir(h->outside, 0755), 0);
	h->dfd = open(h->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(h->dfd >= 0);
}

static void hostile_check_and_free(struct hostile *h)
{
	cleanup_free char *x1 = xasprintf("%s/x", h->outside), *x2 = xasprintf("%s/x", h->base);
	assert_int_equal(access(x1, F_OK), -1);
	assert_int_equal(access(x2, F_OK), -1);
	close(h->dfd);
	assert_int_equal(rm_rf(h->base), 0);
	free(h->base);
	free(h->dest);
	free(h->outside);
}

static void expect_rejected(void (*build)(int fd, struct hostile *h), const char *needle)
{
	struct hostile h;
	hostile_setup(&h);
	int fd = memfd_create("tar", MFD_CLOEXEC);
	build(fd, &h);
	struct al_error err = {0};
	int r = extract_fd(fd, h.dfd, NULL, 512, &err);
	close(fd);
	assert_true(r < 0);
	if (!strstr(err.message, needle))
		fail_msg("error \"%s\" does not mention \"%s\"", err.message, needle);
	hostile_check_and_free(&h);
}

static void build_dotdot(int fd, struct hostile *h)
{
	(void)h;
	put_header(fd, "../x", '0', NULL, "evil", 4);
	end_archive(fd);
}

static void build_dotdot_inner(int fd, struct hostile *h)
{
	(void)h;
	put_header(fd, "a/../../x", '0', NULL, "evil", 4);
	end_archive(fd);
}

static void build_absolute(int fd, struct hostile *h)
{
	cleanup_free char *abs = xasprintf("%s/x", h->outside);
	put_header(fd, abs, '0', NULL, "evil", 4);
	end_archive(fd);
}

static void build_symlink_escape(int fd, struct hostile *h)
{
	put_header(fd, "l", '2', h->outside, NULL, 0);
	put_header(fd, "l/x", '0', NULL, "evil", 4);
	end_archive(fd);
}

static void build_symlink_dotdot_escape(int fd, struct hostile *h)
{
	(void)h;
	put_header(fd, "up", '2', "..", NULL, 0);
	put_header(fd, "up/x", '0', NULL, "evil", 4);
	end_archive(fd);
}

static void build_pax_path_escape(int fd, struct hostile *h)
{
	(void)h;
	const char rec[] = "13 path=../x\n";
	put_header(fd, "PaxHeaders/x", 'x', NULL, rec, strlen(rec));
	put_header(fd, "innocent", '0', NULL, "evil", 4);
	end_archive(fd);
}

static void build_pax_oversize(int fd, struct hostile *h)
{
	(void)h;
	unsigned char hdr[512] = {0};
	snprintf((char *)hdr, 100, "big");
	snprintf((char *)hdr + 124, 12, "%011o", (unsigned)(TAR_PAX_MAX + 1));
	hdr[156] = 'x';
	memcpy(hdr + 257, "ustar", 6);
	memset(hdr + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += hdr[i];
	snprintf((char *)hdr + 148, 8, "%06o", sum);
	assert_int_equal(write_full(fd, hdr, 512), 0);
	end_archive(fd);
}

static void build_bad_checksum(int fd, struct hostile *h)
{
	(void)h;
	put_header(fd, "ok", '0', NULL, "data", 4);
	unsigned char junk[512];
	memset(junk, 'A', sizeof(junk));
	assert_int_equal(write_full(fd, junk, sizeof(junk)), 0);
	end_archive(fd);
}

static void test_rejects_dotdot(void **s)
{
	(void)s;
	expect_rejected(build_dotdot, "..");
	expect_rejected(build_dotdot_inner, "..");
	expect_rejected(build_pax_path_escape, "..");
}

static void test_rejects_absolute(void **s)
{
	(void)s;
	expect_rejected(build_absolute, "absolute");
}

static void test_rejects_symlink_escape(void **s)
{
	(void)s;
	expect_rejected(build_symlink_escape, "symlink");
	expect_rejected(build_symlink_dotdot_escape, "symlink");
}

static void test_rejects_malformed(void **s)
{
	(void)s;
	expect_rejected(build_pax_oversize, "too large");
	expect_rejected(build_bad_checksum, "checksum");
}

static void test_existing_symlink_in_destination_not_followed(void **s)
{
	(void)s;
	struct hostile h;
	hostile_setup(&h);
	/* The destination already has a symlink named like the archive's file. */
	cleanup_free char *victim = xasprintf("%s/x", h.outside), *lnk = xasprintf("%s/f", h.dest);
	assert_int_equal(symlink(victim, lnk), 0);
	int fd = memfd_create("tar", MFD_CLOEXEC);
	put_header(fd, "f", '0', NULL, "data", 4);
	end_archive(fd);
	struct al_error err = {0};
	assert_int_equal(extract_fd(fd, h.dfd, NULL, 100, &err), 0);
	close(fd);
	struct stat st;
	assert_int_equal(lstat(lnk, &st), 0);
	assert_true(S_ISREG(st.st_mode)); /* replaced, not written through */
	hostile_check_and_free(&h);
}

static void test_truncated_archive(void **s)
{
	(void)s;
	struct hostile h;
	hostile_setup(&h);
	int fd = memfd_create("tar", MFD_CLOEXEC);
	char data[1000];
	memset(data, 'z', sizeof(data));
	put_header(fd, "f", '0', NULL, data, sizeof(data));
	assert_int_equal(ftruncate(fd, 512 + 600), 0);
	struct al_error err = {0};
	assert_true(extract_fd(fd, h.dfd, NULL, 4096, &err) < 0);
	assert_non_null(strstr(err.message, "middle"));
	close(fd);
	hostile_check_and_free(&h);
}

/* Limits: the archive's entries and data bytes are counted as they come. */
static int extract_limited(int fd, int dest, const char *rename, uint64_t max_bytes, uint64_t max_entries,
                           struct al_error *err)
{
	struct tar_reader *t = cli_tar_reader_new(dest, rename);
	cli_tar_reader_set_limits(t, max_bytes, max_entries);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	char buf[4096];
	int r = 0;
	ssize_t n;
	while (r == 0 && (n = read(fd, buf, sizeof(buf))) > 0)
		r = cli_tar_reader_feed(t, buf, (size_t)n, err);
	if (r == 0)
		r = cli_tar_reader_finish(t, err);
	cli_tar_reader_free(t);
	return r;
}

static void test_limits(void **s)
{
	(void)s;
	struct hostile h;
	hostile_setup(&h);
	int fd = memfd_create("tar", MFD_CLOEXEC);
	for (int i = 0; i < 10; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		put_header(fd, name, '0', NULL, "0123456789", 10);
	}
	end_archive(fd);
	struct al_error err = {0};
	/* Exactly at the limits: accepted. */
	assert_int_equal(extract_limited(fd, h.dfd, NULL, 100, 10, &err), 0);
	assert_true(extract_limited(fd, h.dfd, NULL, 100, 9, &err) < 0);
	assert_non_null(strstr(err.message, "--max-entries"));
	memset(&err, 0, sizeof(err));
	assert_true(extract_limited(fd, h.dfd, NULL, 99, 10, &err) < 0);
	assert_non_null(strstr(err.message, "--max-bytes"));
	/* A single entry that announces more than the limit is refused before any byte is written. */
	int big = memfd_create("tar", MFD_CLOEXEC);
	char data[2000];
	memset(data, 'b', sizeof(data));
	put_header(big, "big", '0', NULL, data, sizeof(data));
	end_archive(big);
	memset(&err, 0, sizeof(err));
	assert_true(extract_limited(big, h.dfd, NULL, 1999, 10, &err) < 0);
	cleanup_free char *bigpath = xasprintf("%s/big", h.dest);
	assert_int_equal(access(bigpath, F_OK), -1);
	close(big);
	close(fd);
	hostile_check_and_free(&h);
}

/* The root of a sandbox comes as "./bin/..."; a new name replaces the ".". */
static void test_rename_dot_first(void **s)
{
	(void)s;
	struct hostile h;
	hostile_setup(&h);
	int fd = memfd_create("tar", MFD_CLOEXEC);
	put_header(fd, "./", '5', NULL, NULL, 0);
	put_header(fd, "./bin/ls", '0', NULL, "elf", 3);
	end_archive(fd);
	struct al_error err = {0};
	assert_int_equal(extract_fd(fd, h.dfd, "root", 512, &err), 0);
	cleanup_free char *p = xasprintf("%s/root/bin/ls", h.dest);
	assert_int_equal(access(p, F_OK), 0);
	close(fd);
	/* A ".." first is refused even when renamed. */
	fd = memfd_create("tar", MFD_CLOEXEC);
	put_header(fd, "../x", '0', NULL, "evil", 4);
	end_archive(fd);
	assert_true(extract_fd(fd, h.dfd, "copy", 512, &err) < 0);
	close(fd);
	hostile_check_and_free(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_rejects_dotdot),
	    cmocka_unit_test(test_rejects_absolute),
	    cmocka_unit_test(test_rejects_symlink_escape),
	    cmocka_unit_test(test_rejects_malformed),
	    cmocka_unit_test(test_existing_symlink_in_destination_not_followed),
	    cmocka_unit_test(test_truncated_archive),
	    cmocka_unit_test(test_limits),
	    cmocka_unit_test(test_rename_dot_first),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
