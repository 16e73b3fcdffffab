/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for template snapshots kept across restarts
 * (src/daemon/core/template-snap-disk.c): the RAM written sparse and read
 * back into a memfd with the same digest, a changed byte changing it, the
 * manifest read back only when complete and of this format, and which
 * input differs. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "json-cleanup.h"
#include "template-snap-disk.h"
#include "util.h"

#define MIB (1024 * 1024)
#define RAM_SIZE (8 * MIB)

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/airlock-test-tsnap.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return rm_rf(dir);
}

/* A memfd of RAM_SIZE with a few pages written (the rest never touched). */
static int ram_memfd(void)
{
	int fd = memfd_create("test-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, RAM_SIZE), 0);
	const off_t at[] = {0, 4096 * 3, 2 * MIB + 4096, RAM_SIZE - 4096};
	char page[4096];
	for (size_t i = 0; i < ARRAY_SIZE(at); i++) {
		for (size_t k = 0; k < sizeof(page); k++)
			page[k] = (char)(i * 31 + k * 7 + 1);
		assert_int_equal(pwrite(fd, page, sizeof(page), at[i]), (ssize_t)sizeof(page));
	}
	/* A page written with zeros: the same content as one never written. */
	memset(page, 0, sizeof(page));
	assert_int_equal(pwrite(fd, page, sizeof(page), 5 * MIB), (ssize_t)sizeof(page));
	return fd;
}

static void assert_same_fd(int a, int b, size_t size)
{
	cleanup_free char *x = xmalloc(size), *y = xmalloc(size);
	assert_int_equal(pread(a, x, size, 0), (ssize_t)size);
	assert_int_equal(pread(b, y, size, 0), (ssize_t)size);
	assert_memory_equal(x, y, size);
}

static void test_ram_save_load_roundtrip(void **state)
{
	(void)state;
	cleanup_close int mem = ram_memfd();
	cleanup_free char *path = xasprintf("%s/%s", dir, TSNAP_RAM_FILE);
	char saved[65], loaded[65];
	struct al_error err = {0};
	assert_int_equal(tsnap_ram_save(mem, RAM_SIZE, path, saved, &err), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, RAM_SIZE);
	assert_int_equal(st.st_mode & 0777, 0600);
	/* Sparse: 4 pages of data (blocks of 512 bytes; a file system may round up). */
	assert_true((uint64_t)st.st_blocks * 512 < RAM_SIZE / 4);
	/* Not twice: an existing file is never overwritten. */
	char again[65];
	assert_true(tsnap_ram_save(mem, RAM_SIZE, path, again, &err) < 0);

	cleanup_close int back = -1;
	assert_int_equal(tsnap_ram_load(path, RAM_SIZE, &back, loaded, &err), 0);
	assert_string_equal(saved, loaded);
	assert_same_fd(mem, back, RAM_SIZE);
	/* It can be sealed (nothing maps it). */
	assert_int_equal(fcntl(back, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL), 0);
}

static void test_ram_digest_changes_with_any_byte(void **state)
{
	(void)state;
	cleanup_close int mem = ram_memfd();
	cleanup_free char *path = xasprintf("%s/%s", dir, TSNAP_RAM_FILE);
	char saved[65], loaded[65];
	struct al_error err = {0};
	assert_int_equal(tsnap_ram_save(mem, RAM_SIZE, path, saved, &err), 0);
	const off_t where[] = {4096 * 3 + 100, 6 * MIB + 1 /* in a hole */, RAM_SIZE - 1};
	for (size_t i = 0; i < ARRAY_SIZE(where); i++) {
		int fd = open(path, O_RDWR | O_CLOEXEC);
		assert_true(fd >= 0);
		unsigned char b = 0;
		assert_int_equal(pread(fd, &b, 1, where[i]), 1);
		b ^= 0x40;
		assert_int_equal(pwrite(fd, &b, 1, where[i]), 1);
		cleanup_close int back = -1;
		assert_int_equal(tsnap_ram_load(path, RAM_SIZE, &back, loaded, &err), 0);
		assert_string_not_equal(saved, loaded);
		b ^= 0x40; /* back as it was: the same digest again */
		assert_int_equal(pwrite(fd, &b, 1, where[i]), 1);
		close(fd);
		cleanup_close int back2 = -1;
		assert_int_equal(tsnap_ram_load(path, RAM_SIZE, &back2, loaded, &err), 0);
		assert_string_equal(saved, loaded);
	}
	/* Another size is refused, not read. */
	cleanup_close int back = -1;
	assert_true(tsnap_ram_load(path, RAM_SIZE + 4096, &back, loaded, &err) < 0);
	assert_non_null(strstr(err.message, "bytes, not"));
	assert_int_equal(truncate(path, RAM_SIZE - 4096), 0);
	assert_true(tsnap_ram_load(path, RAM_SIZE, &back, loaded, &err) < 0);
}

static void test_file_digest(void **state)
{
	(void)state;
	cleanup_free char *path = xasprintf("%s/state", dir);
	assert_int_equal(write_file_atomic(path, "abc", 3, 0600), 0);
	uint64_t size = 0;
	char sha[65];
	assert_int_equal(tsnap_file_digest(path, true, &size, sha), 0);
	assert_int_equal(size, 3);
	assert_string_equal(sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	cleanup_free char *link = xasprintf("%s/link", dir);
	assert_int_equal(symlink(path, link), 0);
	assert_true(tsnap_file_digest(link, false, &size, sha) < 0); /* never follows a link */
	assert_true(tsnap_file_digest("/nonexistent/x", false, &size, sha) < 0);
}

static void write_manifest_text(const char *text)
{
	cleanup_free char *path = xasprintf("%s/%s", dir, TSNAP_MANIFEST);
	assert_int_equal(write_file_atomic(path, text, strlen(text), 0600), 0);
}

static void test_manifest_complete_or_nothing(void **state)
{
	(void)state;
	/* None yet: a snapshot cut before its manifest. */
	assert_null(tsnap_manifest_read(dir));
	cleanup_json json_t *m = json_pack("{s:i, s:s, s:{s:s}}", "format", TSNAP_FORMAT, "key", "minimal/1/256",
	                                   "inputs", "backend", "qemu");
	struct al_error err = {0};
	assert_int_equal(tsnap_manifest_write(dir, m, &err), 0);
	cleanup_json json_t *back = tsnap_manifest_read(dir);
	assert_non_null(back);
	assert_true(json_equal(m, back));
	/* No tmp file is left beside it. */
	cleanup_free char *tmp = xasprintf("%s/%s.tmp.%d", dir, TSNAP_MANIFEST, (int)getpid());
	assert_int_not_equal(access(tmp, F_OK), 0);

	write_manifest_text("{\"format\": 2, \"key\": \"minimal/1/256\"}"); /* another format */
	assert_null(tsnap_manifest_read(dir));
	write_manifest_text("{\"format\": 1}"); /* no key */
	assert_null(tsnap_manifest_read(dir));
	write_manifest_text("{\"format\": 1, \"key\": \"minimal/1/256\""); /* cut short */
	assert_null(tsnap_manifest_read(dir));
	write_manifest_text("{\"format\": 1, \"key\": \"a\", \"key\": \"b\"}"); /* ambiguous */
	assert_null(tsnap_manifest_read(dir));
	write_manifest_text("");
	assert_null(tsnap_manifest_read(dir));
}

static void test_inputs_differ_names_what(void **state)
{
	(void)state;
	cleanup_json json_t *a = json_pack("{s:s, s:{s:s, s:I, s:s}, s:s}", "backend", "qemu", "kernel", "path", "/k",
	                                   "size", (json_int_t)10, "sha256", "aa", "ca_sha256", "cc");
	cleanup_json json_t *b = json_deep_copy(a);
	char what[128] = "";
	assert_false(tsnap_inputs_differ(a, b, what, sizeof(what)));

	json_object_set_new(json_object_get(b, "kernel"), "sha256", json_string("bb"));
	assert_true(tsnap_inputs_differ(a, b, what, sizeof(what)));
	assert_string_equal(what, "kernel's sha256");

	json_decref(b);
	b = json_deep_copy(a);
	json_object_set_new(b, "ca_sha256", json_string(""));
	assert_true(tsnap_inputs_differ(a, b, what, sizeof(what)));
	assert_string_equal(what, "ca_sha256");

	/* An input the manifest does not name, or one more. */
	json_decref(b);
	b = json_deep_copy(a);
	json_object_set_new(b, "accel", json_string("tcg"));
	assert_true(tsnap_inputs_differ(a, b, what, sizeof(what)));
	json_object_del(b, "accel");
	json_object_del(b, "backend");
	assert_true(tsnap_inputs_differ(a, b, what, sizeof(what)));
	assert_true(tsnap_inputs_differ(NULL, a, what, sizeof(what)));
	cleanup_json json_t *str = json_string("x");
	assert_true(tsnap_inputs_differ(str, a, what, sizeof(what)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_ram_save_load_roundtrip, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_ram_digest_changes_with_any_byte, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_file_digest, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_manifest_complete_or_nothing, setup, teardown),
	    cmocka_unit_test(test_inputs_differ_names_what),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
