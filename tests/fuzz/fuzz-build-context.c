/* SPDX-License-Identifier: Apache-2.0 */
/* The build context on a client's tar (issue 23): opened, its Dockerfile
 * read, then COPY . /x of all of it into /dev/null. Whatever the input, the
 * reader refuses or indexes within its limits, and the copy ends. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>

#include "build-context.h"
#include "util.h"

static int devnull = -1;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (devnull < 0 && (devnull = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0)
		abort();
	int fd = memfd_create("fuzz-context", MFD_CLOEXEC);
	if (fd < 0 || write_full(fd, data, size) < 0 || lseek(fd, 0, SEEK_SET) != 0)
		abort();
	struct build_context *ctx = NULL;
	struct al_error err = {0};
	int r = build_context_open(fd, &ctx, &err);
	close(fd);
	if (r < 0) {
		if (!err.message[0] || ctx)
			abort();
		return 0;
	}
	char *text;
	size_t len;
	if (build_context_read_file(ctx, "Dockerfile", 4096, &text, &len, &err) == 0)
		free(text);
	const char *all[] = {"."};
	const char *glob[] = {"*", "a/*/c"};
	const char *excl[] = {".airlock-Dockerfile"};
	uint8_t digest[32];
	struct build_copy c = {.sources = all,
	                       .n_sources = 1,
	                       .dest = "/x",
	                       .uid = 1000,
	                       .gid = -1,
	                       .user = "app",
	                       .chmod_mode = -1,
	                       .exclude = excl,
	                       .n_exclude = 1,
	                       .parents = true};
	build_context_copy(ctx, &c, devnull, digest, &err);
	c = (struct build_copy){
	    .sources = glob, .n_sources = 2, .dest = "d", .workdir = "/w", .uid = -1, .gid = -1, .chmod_mode = 0600};
	build_context_copy(ctx, &c, devnull, digest, &err);
	build_context_free(ctx);
	return 0;
}
