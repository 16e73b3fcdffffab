/* SPDX-License-Identifier: Apache-2.0 */
/* What 'airlock template build' and 'import' upload: a directory written as
 * a tar stream by a thread into a pipe (never the whole archive in memory),
 * or a file as it is, read by libcurl's read callback. */
#ifndef AIRLOCK_CLI_CONTEXT_H
#define AIRLOCK_CLI_CONTEXT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cli-ignore.h"
#include "error.h"

#define CONTEXT_SKIPPED_NAMES 16 /* special files named in the warning */

/* A directory as a tar stream: every entry named relative to it. */
struct cli_context {
	const char *dir;
	const struct cli_ignore *ignore; /* NULL: nothing left out */
	const char *keep;                /* a relative path sent even if ignored (the Dockerfile) */
	const char *extra_src;           /* a file added as extra_name (a Dockerfile outside dir) */
	const char *extra_name;
	/* Devices, sockets and fifos, skipped: how many, the first names. */
	unsigned skipped;
	char *skipped_names[CONTEXT_SKIPPED_NAMES];
};

/* Writes the whole archive, the end blocks included. */
int cli_context_write(int out_fd, struct cli_context *c, struct al_error *err);
/* Frees the skipped names. */
void cli_context_release(struct cli_context *c);

/* One upload's body: a file's fd, or the read end of a pipe a thread writes
 * a context into. bytes counts what libcurl took; on_progress (may be NULL)
 * hears of it on each read and once at the end (finished). */
struct cli_upload {
	int fd;
	struct cli_context *ctx; /* NULL: fd is a file, sent as is */
	void (*on_progress)(void *ud, uint64_t bytes, bool finished);
	void *ud;
	uint64_t bytes;
	/* The writer thread's. */
	int write_fd;
	pthread_t thread;
	bool started;
	volatile int failed; /* the errno of its failure */
	struct al_error err;
};

/* Starts the thread that writes ctx into a pipe; u->fd is its read end. */
int cli_upload_start(struct cli_upload *u, struct cli_context *ctx, struct al_error *err);
/* libcurl's read callback (reader_data: the struct cli_upload). A context
 * whose writing failed half-way aborts the request rather than end short. */
size_t cli_upload_read(char *buf, size_t size, size_t nitems, void *ud);
/* Closes the read end and joins the thread; a negative errno with err set if
 * writing the context failed (-EPIPE: the daemon stopped reading; else that
 * error, not the transport's, is the one to show). */
int cli_upload_finish(struct cli_upload *u, struct al_error *err);

#endif
