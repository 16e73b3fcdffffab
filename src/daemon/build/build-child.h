/* SPDX-License-Identifier: Apache-2.0 */
/* The tools a template build or import runs on the host (airlock-oci,
 * qemu-img): a child with no stdin, its stdout read as lines, the last
 * line of its stderr kept for the error, killed when the job is cancelled. */
#ifndef AIRLOCK_BUILD_CHILD_H
#define AIRLOCK_BUILD_CHILD_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define BUILD_CHILD_LINE_MAX 4096

struct build_child_io {
	/* Each line of stdout, without its newline (may be NULL). */
	void (*line)(void *ctx, const char *line);
	/* true: kill the child (checked twice a second). */
	bool (*cancelled)(void *ctx);
	void *ctx;
};

/* Runs argv (argv[0] a path) to its end: 0 when it exited 0; -ECANCELED;
 * else an error naming what ("import the image") with its last stderr line. */
int build_child_run(char *const argv[], const struct build_child_io *io, const char *what, struct al_error *err);

#endif
