/* SPDX-License-Identifier: Apache-2.0 */
/* airlock-oci's layer applier on hostile layers (a tenant's image): whatever
 * the input, nothing may be created, changed or removed outside the tree. The
 * tree starts each run with a small lower layer (files, a directory, symlinks
 * out of it) for whiteouts, opaque markers and links to act on. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>

#include "oci.h"
#include "util.h"

static char base[64];

static void base_remove(void)
{
	rm_rf(base);
}

static void lower_layer(int root)
{
	if (mkdirat(root, "dir", 0755) < 0 || mkdirat(root, "dir/sub", 0755) < 0 ||
	    symlinkat("/", root, "rootlink") < 0 || symlinkat("../outside", root, "dir/up") < 0 ||
	    symlinkat("/nonexistent", root, "dangling") < 0)
		abort();
	static const char *const files[] = {"file", "dir/a", "dir/sub/b"};
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		int fd = openat(root, files[i], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, "lower\n", 6) != 6)
			abort();
		close(fd);
	}
}

/* outside/ must hold exactly its canary, unchanged. */
static void outside_check(const char *outside)
{
	int ofd = open(outside, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ofd < 0)
		abort();
	char buf[16] = "";
	int cfd = openat(ofd, "canary", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (cfd < 0 || read(cfd, buf, sizeof(buf)) != 6 || memcmp(buf, "canary", 6))
		abort();
	close(cfd);
	DIR *d = fdopendir(ofd);
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, "canary"))
			abort();
	closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!base[0]) {
		snprintf(base, sizeof(base), "/tmp/airlock-fuzz-oci-%d", (int)getpid());
		rm_rf(base);
		if (mkdir(base, 0700) < 0)
			abort();
		atexit(base_remove);
	}
	char tree[96], outside[96], canary[128];
	snprintf(tree, sizeof(tree), "%s/tree", base);
	snprintf(outside, sizeof(outside), "%s/outside", base);
	snprintf(canary, sizeof(canary), "%s/canary", outside);
	rm_rf(tree);
	rm_rf(outside);
	if (mkdir(tree, 0755) < 0 || mkdir(outside, 0700) < 0 || write_file_atomic(canary, "canary", 6, 0644) < 0)
		abort();
	int root = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		abort();
	lower_layer(root);
	struct oci_limits lim = {.max_bytes = 4u << 20, .max_entries = 2000, .max_layers = 1};
	struct oci_counts counts = {0};
	struct oci_layer_io io = {.fd = -1, .data = data, .size = size};
	struct al_error err = {0};
	oci_layer_apply(root, &io, &lim, &counts, &err);
	close(root);
	if (counts.bytes > lim.max_bytes || counts.entries > lim.max_entries + 1)
		abort();
	outside_check(outside);
	rm_rf(tree);
	return 0;
}
