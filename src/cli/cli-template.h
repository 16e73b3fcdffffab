/* SPDX-License-Identifier: Apache-2.0 */
/* 'airlock template build|import': how the daemon's progress stream (ndjson,
 * docs/api.md "Templates") is shown. */
#ifndef AIRLOCK_CLI_TEMPLATE_H
#define AIRLOCK_CLI_TEMPLATE_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

enum tpl_view_mode {
	TPL_VIEW_TTY,   /* stderr a terminal: lines redrawn in place */
	TPL_VIEW_PLAIN, /* one line per event on stderr */
	TPL_VIEW_JSON,  /* the stream's lines as received, on stdout */
	TPL_VIEW_QUIET, /* only the template's name at the end */
};

struct tpl_view {
	const char *verb; /* "build" or "import": in messages */
	enum tpl_view_mode mode;
	const char *upload_what;  /* "build context" or "image" */
	uint64_t upload_total;    /* bytes, when known (a file); 0 else */
	bool line_open;           /* a line redrawn with \r is on stderr */
	bool output_mid_line;     /* a RUN step's output stopped mid-line */
	bool output_after_cr;     /* ... right after a \r */
	bool upload_done;         /* the end of the upload was shown */
	uint64_t upload_shown_ms; /* when the upload line was last drawn */
	bool started;             /* a line of the stream came */
	bool done, failed;        /* a "done" or an "error" line came */
};

/* The sink of the stream (struct cli_req's on_line; ud: the view). */
int tpl_view_line(void *ud, char *line, size_t len, struct al_error *err);
/* The upload's progress (struct cli_upload's on_progress; ud: the view). */
void tpl_view_upload(void *ud, uint64_t bytes, bool finished);
/* The exit status once the request is over: 0 after "done", 1 after "error"
 * or when the stream ended without either (why, if not NULL: the transport's
 * failure). */
int tpl_view_end(struct tpl_view *v, const char *why);

#endif
