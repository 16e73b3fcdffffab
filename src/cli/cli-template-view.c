/* SPDX-License-Identifier: Apache-2.0 */
/* The progress of 'airlock template build|import' as the daemon streams it
 * (cli-template.h). Everything but the template's name goes to stderr. */
#include "cli-template.h"

#include "cli.h"

#define MIB_F (1024.0 * 1024.0)
#define UPLOAD_REDRAW_MS 100
#define BAR_WIDTH 24

static long long num(json_t *o, const char *key)
{
	return (long long)json_integer_value(json_object_get(o, key));
}

/* Ends what a redrawn line or a RUN step's output left unfinished. */
static void view_close_line(struct tpl_view *v)
{
	if (v->line_open || v->output_mid_line)
		fputc('\n', stderr);
	v->line_open = false;
	v->output_mid_line = false;
	v->output_after_cr = false;
}

/* A line: redrawn in place on a terminal, else one line of its own. */
static void view_status(struct tpl_view *v, const char *text)
{
	if (v->mode == TPL_VIEW_TTY) {
		if (v->output_mid_line)
			view_close_line(v);
		fprintf(stderr, "\r%s\x1b[K", text);
		v->line_open = true;
	} else {
		view_close_line(v);
		fprintf(stderr, "%s\n", text);
	}
	fflush(stderr);
}

/* "12.0 KiB" under a MiB, else "3.4 MiB". */
static void size_text(uint64_t bytes, char buf[32])
{
	if (bytes < (1u << 20))
		snprintf(buf, 32, "%.1f KiB", (double)bytes / 1024.0);
	else
		snprintf(buf, 32, "%.1f MiB", (double)bytes / MIB_F);
}

void tpl_view_upload(void *ud, uint64_t bytes, bool finished)
{
	struct tpl_view *v = ud;
	if (v->upload_done || v->mode == TPL_VIEW_JSON || v->mode == TPL_VIEW_QUIET)
		return;
	uint64_t now = now_ms_monotonic();
	if (!finished && (v->mode != TPL_VIEW_TTY || now - v->upload_shown_ms < UPLOAD_REDRAW_MS))
		return;
	v->upload_shown_ms = now;
	v->upload_done = finished;
	char now_text[32], total_text[32], text[160];
	size_text(bytes, now_text);
	size_text(v->upload_total, total_text);
	snprintf(text, sizeof(text), "%s the %s: %s%s%s", finished ? "Sent" : "Sending", v->upload_what, now_text,
	         v->upload_total && !finished ? " / " : "", v->upload_total && !finished ? total_text : "");
	view_status(v, text);
	if (finished && v->mode == TPL_VIEW_TTY)
		view_close_line(v);
}

static void view_step(struct tpl_view *v, json_t *ev)
{
	view_close_line(v);
	fprintf(stderr, "Step %lld/%lld : %s%s\n", num(ev, "step"), num(ev, "steps"), cli_esc_json(ev, "instruction"),
	        json_is_true(json_object_get(ev, "cached")) ? " (cached)" : "");
}

/* SECURITY: a RUN step's output is the guest's: each piece is escaped for
 * the terminal (cli_esc) and shown indented, a line per line; a \r (a
 * progress bar's redraw) ends a line too. */
static void view_output(struct tpl_view *v, json_t *ev)
{
	const char *data = json_string_value(json_object_get(ev, "data"));
	if (!data)
		return;
	if (v->line_open)
		view_close_line(v);
	while (*data) {
		size_t n = strcspn(data, "\r\n");
		if (n > 0) {
			cleanup_free char *piece = xstrndup(data, n);
			fprintf(stderr, "%s%s", v->output_mid_line ? "" : "    ", cli_esc(piece));
			v->output_mid_line = true;
			v->output_after_cr = false;
		}
		data += n;
		if (*data == '\n' && v->output_after_cr) {
			v->output_after_cr = false; /* the \n of a \r\n */
		} else if (*data) {
			fputc('\n', stderr);
			v->output_mid_line = false;
			v->output_after_cr = *data == '\r';
		}
		data += *data ? 1 : 0;
	}
	fflush(stderr);
}

static void progress_bar(char *buf, size_t size, double fraction)
{
	int full = (int)(fraction * BAR_WIDTH + 0.5);
	full = full < 0 ? 0 : full > BAR_WIDTH ? BAR_WIDTH : full;
	snprintf(buf, size, "  [%.*s%*s] %3d%%", full, "########################", BAR_WIDTH - full, "",
	         (int)(fraction * 100 + 0.5));
}

/* The daemon's phases in words; another one as it is. */
static const char *phase_words(const char *phase)
{
	static const char *const words[][2] = {{"boot", "starting the build's sandbox"},
	                                       {"export", "saving the layer"},
	                                       {"snapshot", "making the template's snapshot"},
	                                       {"mkfs", "making the ext4 image"},
	                                       {"done", "done"}};
	for (size_t i = 0; phase && i < ARRAY_SIZE(words); i++)
		if (!strcmp(phase, words[i][0]))
			return words[i][1];
	return phase ? phase : "working";
}

/* "layer 2/3  45.1 MiB / 120.0 MiB  [#####     ]  37%", what is known of it. */
static void view_progress(struct tpl_view *v, json_t *ev)
{
	const char *phase = json_string_value(json_object_get(ev, "phase"));
	char text[256];
	size_t n = 0;
	if (phase && !strcmp(phase, "layer") && json_object_get(ev, "layer"))
		n = (size_t)snprintf(text, sizeof(text), "layer %lld/%lld", num(ev, "layer"), num(ev, "layers"));
	else
		n = (size_t)snprintf(text, sizeof(text), "%s", cli_esc(phase_words(phase)));
	n = MIN(n, sizeof(text) - 1);
	json_t *bytes = json_object_get(ev, "bytes"), *total = json_object_get(ev, "total_bytes");
	if (json_is_integer(bytes))
		n += (size_t)snprintf(text + n, sizeof(text) - n, "  %.1f MiB", (double)num(ev, "bytes") / MIB_F);
	n = MIN(n, sizeof(text) - 1);
	if (json_is_integer(total) && num(ev, "total_bytes") > 0) {
		double t = (double)num(ev, "total_bytes");
		n += (size_t)snprintf(text + n, sizeof(text) - n, " / %.1f MiB", t / MIB_F);
		n = MIN(n, sizeof(text) - 1);
		if (v->mode == TPL_VIEW_TTY && json_is_integer(bytes))
			progress_bar(text + n, sizeof(text) - n, (double)num(ev, "bytes") / t);
	}
	view_status(v, text);
}

static void view_done(struct tpl_view *v, json_t *ev)
{
	json_t *t = json_object_get(ev, "template");
	v->done = true;
	if (v->mode == TPL_VIEW_JSON)
		return;
	if (v->mode != TPL_VIEW_QUIET) {
		view_close_line(v);
		fprintf(stderr, "Template %s ready (%lld MiB)\n", cli_esc_json(t, "name"), num(t, "size_mib"));
	}
	printf("%s\n", cli_esc_json(t, "name"));
}

static void view_error(struct tpl_view *v, json_t *ev)
{
	json_t *e = json_object_get(ev, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	v->failed = true;
	if (v->mode != TPL_VIEW_QUIET)
		view_close_line(v);
	/* With --json too: the line is on stdout, the message for a person on stderr. */
	fprintf(stderr, "airlock: template %s: %s\n", v->verb, cli_esc(msg ? msg : "the daemon said it failed"));
}

int tpl_view_line(void *ud, char *line, size_t len, struct al_error *err)
{
	struct tpl_view *v = ud;
	v->started = true;
	if (v->mode == TPL_VIEW_JSON) {
		fwrite(line, 1, len, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	json_error_t jerr;
	cleanup_json json_t *ev = json_loadb(line, len, 0, &jerr);
	if (!json_is_object(ev))
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG, "the daemon sent a progress line that is not JSON");
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!type || v->done || v->failed)
		return 0; /* nothing after the last line counts */
	if (!strcmp(type, "done"))
		view_done(v, ev);
	else if (!strcmp(type, "error"))
		view_error(v, ev);
	else if (v->mode == TPL_VIEW_JSON || v->mode == TPL_VIEW_QUIET)
		return 0;
	else if (!strcmp(type, "step"))
		view_step(v, ev);
	else if (!strcmp(type, "output"))
		view_output(v, ev);
	else if (!strcmp(type, "progress"))
		view_progress(v, ev);
	return 0; /* a type this CLI does not know: newer daemon, skipped */
}

int tpl_view_end(struct tpl_view *v, const char *why)
{
	if (v->done)
		return 0;
	if (v->failed)
		return 1;
	if (v->mode != TPL_VIEW_QUIET && v->mode != TPL_VIEW_JSON)
		view_close_line(v);
	fprintf(stderr, "airlock: template %s: connection closed before the %s finished%s%s%s\n", v->verb, v->verb,
	        why ? " (" : "", why ? cli_esc(why) : "", why ? ")" : "");
	return 1;
}
