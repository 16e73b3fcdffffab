/* SPDX-License-Identifier: Apache-2.0 */
/* Splits a byte stream (a streamed answer: ndjson) into lines, whatever
 * pieces the bytes arrive in. */
#ifndef AIRLOCK_CLI_LINES_H
#define AIRLOCK_CLI_LINES_H

#include <stddef.h>

#include "error.h"

/* One line without its '\n' (nor a '\r' before it), NUL-terminated; the sink
 * may modify it. A sink returning < 0 stops the splitting. */
typedef int (*cli_line_fn)(void *ud, char *line, size_t len, struct al_error *err);

struct cli_lines {
	char *buf; /* the line so far */
	size_t len, cap;
	size_t max; /* longest line accepted; 0: CLI_LINE_MAX */
};

/* Feeds n bytes: each complete non-empty line goes to fn. < 0 with err set
 * when a line grows past max (the stream is broken), or fn's result. */
int cli_lines_feed(struct cli_lines *l, const char *p, size_t n, cli_line_fn fn, void *ud, struct al_error *err);
/* At the end of the stream: a last line without '\n' goes to fn. */
int cli_lines_finish(struct cli_lines *l, cli_line_fn fn, void *ud, struct al_error *err);
void cli_lines_release(struct cli_lines *l);

#endif
