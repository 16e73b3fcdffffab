/* SPDX-License-Identifier: Apache-2.0 */
/* The CLI's tar extractor on hostile archives (they come from the guest):
 * whatever the input, nothing may be created outside the destination. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>

#include "cli-tar.h"
#include "util.h"

static char base[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!base[0]) {
		snprintf(base, sizeof(base), "/tmp/airlock-fuzz-tar-%d", (int)getpid());
		rm_rf(base);
		if (mkdir(base, 0700) < 0)
			abort();
	}
	/* dest/ is the extraction root; outside/ must stay empty. */
	char dest[96], outside[96];
	snprintf(dest, sizeof(dest), "%s/dest", base);
	snprintf(outside, sizeof(outside), "%s/outside", base);
	rm_rf(dest);
	rm_rf(outside);
	if (mkdir(dest, 0700) < 0 || mkdir(outside, 0700) < 0)
		abort();
	int dfd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		abort();
	struct tar_reader *t = cli_tar_reader_new(dfd, NULL);
	struct al_error err = {0};
	/* Feed in uneven pieces, as a network stream would arrive. */
	size_t off = 0, step = 1;
	int r = 0;
	while (off < size && r == 0) {
		size_t n = MIN(step, size - off);
		r = cli_tar_reader_feed(t, data + off, n, &err);
		off += n;
		step = step * 3 + 1;
	}
	if (r == 0)
		cli_tar_reader_finish(t, &err);
	cli_tar_reader_free(t);
	close(dfd);
	/* SECURITY: the extractor must never write next to the destination. */
	int ofd = open(outside, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ofd < 0)
		abort();
	DIR *d = fdopendir(ofd);
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			abort();
	closedir(d);
	return 0;
}
