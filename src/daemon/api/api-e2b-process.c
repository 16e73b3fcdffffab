/* SPDX-License-Identifier: Apache-2.0 */
/* E2B compatibility: envd's process service (process.Process, Connect with
 * the JSON codec; docs/e2b.md "Processes (envd)") on Airlock's background
 * processes (process.h).
 *
 * Every Start is a background process: it outlives its request, so a
 * client that goes away (E2B's handle.disconnect()) leaves it running, and
 * Connect follows it again. E2B's pid N is Airlock's process "p-N"; its tag
 * is the process's tag. Start and Connect answer a stream of ProcessEvent:
 * start {pid}, data {stdout|stderr|pty} (base64), keepalive while quiet,
 * and end {exitCode, exited, status, error}, then the end-of-stream. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "airlock/proto.h"
#include "api-e2b-process-request.h"
#include "api-e2b.h"
#include "api-handlers.h"
#include "connect-wire.h"
#include "json-cleanup.h"
#include "process.h"
#include "sandbox.h"
#include "util.h"

#define E2B_INPUT_TIMEOUT_MS 30000
/* A quiet stream carries a keepalive event this often (or at the client's
 * Keepalive-Ping-Interval when that is shorter), so that proxies between
 * the SDK and airlockd keep an idle stream open. */
#define E2B_KEEPALIVE_S 25
#define E2B_STREAM_POLL_MS 500
/* Start's stream outlives its Connect-Timeout-Ms by this much, so that the
 * end of the process the guest killed at that time is told. */
#define E2B_START_END_GRACE_MS 3000

/* ---- request messages ---------------------------------------------------------------------------- */

/* The message of a request: the enveloped one of a server-streaming call,
 * the body of a unary one. Answers the error itself (NULL). */
static json_t *request_message(const struct api_request *req, struct api_response *resp, const char *rpc,
                               bool streaming)
{
	if (req->e2b_stream != streaming) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "process.Process/%s is a %s call: send Content-Type %s (Connect protocol)", rpc,
		                    streaming ? "server-streaming" : "unary",
		                    streaming ? CONNECT_STREAM_CONTENT_TYPE : "application/json");
		return NULL;
	}
	if (!streaming)
		return api_parse_json_object(req, resp);
	struct al_error err = {0};
	json_t *msg = NULL;
	if (connect_request_unwrap((const uint8_t *)req->body, req->body_len, &msg, &err) < 0)
		api_response_error(resp, &err);
	return msg;
}

/* ---- the processes of a sandbox ------------------------------------------------------------------ */

static uint32_t pid_of(const char *id)
{
	return (uint32_t)strtoul(id + 2, NULL, 10);
}

/* The process a selector names: its id, its JSON object (process.h) and a
 * reference to its stream (NULL once its output is forgotten). By tag: the
 * newest running process with that tag, else the newest with it. */
static int selector_find(struct sandbox *sb, const struct e2b_selector *sel, char ret_id[PROCESS_ID_MAX + 1],
                         json_t **ret_json, struct guest_stream **ret_stream, struct al_error *err)
{
	struct process_table *t = sandbox_processes(sb);
	if (!sel->tag) {
		snprintf(ret_id, PROCESS_ID_MAX + 1, "p-%" PRIu32, sel->pid);
		int r = process_get(t, sandbox_channel(sb), ret_id, ret_json, ret_stream, err);
		if (r == -ENOENT)
			al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "process with pid %" PRIu32 " not found", sel->pid);
		return r;
	}
	cleanup_json json_t *all = process_list(t, sandbox_channel(sb));
	const char *found = NULL;
	size_t i;
	json_t *p;
	json_array_foreach (all, i, p) {
		const char *tag = json_string_value(json_object_get(p, "tag"));
		if (!tag || strcmp(tag, sel->tag))
			continue;
		bool running = !strcmp(json_string_value(json_object_get(p, "state")), "running");
		if (!found || running)
			found = json_string_value(json_object_get(p, "id"));
		if (running)
			break;
	}
	if (!found)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "process with tag \"%s\" not found", sel->tag);
	strlcpy_al(ret_id, found, PROCESS_ID_MAX + 1);
	return process_get(t, sandbox_channel(sb), ret_id, ret_json, ret_stream, err);
}

/* A running process for an RPC that acts on one (input, signal, resize):
 * envd knows only running processes, so one that ended is not found (and
 * the SDK's kill() answers false). */
struct running {
	struct sandbox *sb;
	struct guest_stream *s;
	json_t *json;
	char id[PROCESS_ID_MAX + 1];
};

static void running_release(struct running *r)
{
	if (r->s)
		guest_stream_unref(sandbox_channel(r->sb), r->s);
	if (r->json)
		json_decref(r->json);
	sandbox_release(r->sb);
	*r = (struct running){0};
}

/* Parses the selector of msg and finds its process; answers errors itself. */
static int running_find(const struct api_request *req, struct api_response *resp, const json_t *msg,
                        struct running *ret)
{
	struct al_error err = {0};
	struct e2b_selector sel;
	*ret = (struct running){0};
	if (e2b_selector_parse(msg, &sel, &err) < 0) {
		api_response_error(resp, &err);
		return -EINVAL;
	}
	ret->sb = api_sandbox_acquire(req, resp);
	if (!ret->sb)
		return -ENOENT;
	int r = selector_find(ret->sb, &sel, ret->id, &ret->json, &ret->s, &err);
	if (r == 0 && (!ret->s || strcmp(json_string_value(json_object_get(ret->json, "state")), "running"))) {
		r = al_error_set(&err, AL_ERR_NOT_FOUND, ENOENT, "process with pid %" PRIu32 " has ended",
		                 pid_of(ret->id));
	}
	if (r < 0) {
		api_response_error(resp, &err);
		running_release(ret);
	}
	return r;
}

/* ---- the event stream of Start and Connect ------------------------------------------------------- */

struct proc_stream {
	struct sandbox *sb;
	struct guest_channel *ch;
	struct guest_stream *s; /* our reference */
	struct guest_cursor cur;
	int conn_fd;
	const char *data_kind; /* "pty" for a PTY process, else by the frame */
	uint64_t deadline_ms;  /* monotonic; 0: none */
	uint64_t timeout_ms;   /* the client's Connect-Timeout-Ms, for the message */
	uint64_t keepalive_ms; /* interval */
	uint64_t last_sent_ms; /* monotonic */
	uint8_t *buf;          /* envelopes not yet handed to the server */
	size_t len, off;
	bool ended; /* the end-of-stream is queued */
};

static void ps_append(struct proc_stream *ps, const uint8_t *env, size_t n)
{
	if (ps->off == ps->len)
		ps->off = ps->len = 0;
	ps->buf = xrealloc(ps->buf, ps->len + n);
	memcpy(ps->buf + ps->len, env, n);
	ps->len += n;
	ps->last_sent_ms = now_ms_monotonic();
}

/* Queues {"event": {kind: value}} (value stolen). */
static void ps_queue_event(struct proc_stream *ps, const char *kind, json_t *value)
{
	cleanup_json json_t *msg = json_pack("{s:{s:o}}", "event", kind, value);
	size_t n = 0;
	cleanup_free uint8_t *env = connect_envelope(0, msg, &n);
	ps_append(ps, env, n);
}

static void ps_end(struct proc_stream *ps, const struct al_error *err)
{
	size_t n = 0;
	cleanup_free uint8_t *env = connect_end_stream(err, &n);
	ps_append(ps, env, n);
	ps->ended = true;
}

/* The end of the process: an end event and the end-of-stream, or (it never
 * ran, or the guest went away) an end-of-stream with the error. */
static void ps_finish(struct proc_stream *ps)
{
	uint8_t type = 0;
	cleanup_json json_t *result = NULL;
	guest_stream_done(ps->ch, ps->s, &type, &result);
	struct exec_exit ex;
	struct al_error err = {0};
	if (guest_result_to_exit(type, result, &ex, &err) < 0) {
		ps_end(ps, &err);
		return;
	}
	json_t *end = e2b_end_event(ex.exited, ex.exit_code, ex.signal, ex.timed_out);
	ps_queue_event(ps, "end", end);
	ps_end(ps, NULL);
}

/* One step: waits for output (until the next keepalive, the deadline or a
 * poll to notice a client that went away) and queues what came. -1 when
 * the client is gone. */
static int ps_step(struct proc_stream *ps)
{
	uint64_t now = now_ms_monotonic();
	uint64_t until = MIN(now + E2B_STREAM_POLL_MS, ps->last_sent_ms + ps->keepalive_ms);
	if (ps->deadline_ms)
		until = MIN(until, ps->deadline_ms);
	uint8_t type = 0;
	uint8_t *data = NULL;
	size_t len = 0;
	uint64_t dropped = 0;
	int r = guest_cursor_read(ps->ch, &ps->cur, until, &type, &data, &len, &dropped);
	if (r == 1) {
		cleanup_free char *b64 = base64_encode(data, len, NULL);
		free(data);
		const char *kind = ps->data_kind ? ps->data_kind : type == AIRLOCK_FRAME_STDERR ? "stderr" : "stdout";
		ps_queue_event(ps, "data", json_pack("{s:s}", kind, b64));
		return 0;
	}
	if (r == 0) {
		ps_finish(ps);
		return 0;
	}
	if (api_client_gone(ps->conn_fd))
		return -1;
	now = now_ms_monotonic();
	if (ps->deadline_ms && now >= ps->deadline_ms) {
		struct al_error err = {0};
		al_error_set(&err, AL_ERR_TIMEOUT, ETIMEDOUT,
		             "the call's timeout of %" PRIu64 " ms (Connect-Timeout-Ms) passed; the process goes on",
		             ps->timeout_ms);
		ps_end(ps, &err);
	} else if (now >= ps->last_sent_ms + ps->keepalive_ms) {
		ps_queue_event(ps, "keepalive", json_object());
	}
	return 0;
}

static ssize_t ps_read(void *ctx, uint8_t *out, size_t max)
{
	struct proc_stream *ps = ctx;
	for (;;) {
		if (ps->off < ps->len) {
			size_t n = MIN(max, ps->len - ps->off);
			memcpy(out, ps->buf + ps->off, n);
			ps->off += n;
			return (ssize_t)n;
		}
		if (ps->ended)
			return 0;
		if (ps_step(ps) < 0)
			return -1;
	}
}

/* The client went away or the stream ended: the process is left as it is
 * (E2B's processes outlive their streams). */
static void ps_free(void *ctx)
{
	struct proc_stream *ps = ctx;
	guest_cursor_close(ps->ch, &ps->cur);
	guest_stream_unref(ps->ch, ps->s);
	sandbox_release(ps->sb);
	free(ps->buf);
	free(ps);
}

/* What the request's headers ask of a stream. */
struct stream_opts {
	uint64_t timeout_ms; /* Connect-Timeout-Ms; 0: none */
	uint64_t keepalive_ms;
};

/* SECURITY: client headers, each parsed with its bounds. */
static int stream_opts_parse(const struct api_request *req, struct stream_opts *ret, struct al_error *err)
{
	*ret = (struct stream_opts){.keepalive_ms = E2B_KEEPALIVE_S * 1000u};
	const char *t = api_header(req, "Connect-Timeout-Ms");
	if (t && connect_timeout_parse(t, &ret->timeout_ms) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "Connect-Timeout-Ms must be 1 to 10 digits (milliseconds)");
	long k = 0;
	const char *ka = api_header(req, "Keepalive-Ping-Interval");
	if (ka && parse_int_range(ka, 1, 86400, &k) == 0 && (uint64_t)k * 1000u < ret->keepalive_ms)
		ret->keepalive_ms = (uint64_t)k * 1000u;
	return 0;
}

/* Answers with the event stream of process id (its stream s and sb are
 * taken over): a start event, its output from the start (Start) or from
 * now (Connect), its end. */
static void ps_begin(const struct api_request *req, struct api_response *resp, struct sandbox *sb,
                     struct guest_stream *s, const char *id, bool pty, bool from_start, uint64_t deadline_ms,
                     uint64_t timeout_ms, uint64_t keepalive_ms)
{
	struct proc_stream *ps = xcalloc(1, sizeof(*ps));
	ps->sb = sb;
	ps->ch = sandbox_channel(sb);
	ps->s = s;
	ps->conn_fd = req->conn_fd;
	ps->data_kind = pty ? "pty" : NULL;
	ps->deadline_ms = deadline_ms;
	ps->timeout_ms = timeout_ms;
	ps->keepalive_ms = keepalive_ms;
	if (guest_cursor_open(ps->ch, s, from_start, &ps->cur) < 0) {
		guest_stream_unref(ps->ch, s);
		sandbox_release(sb);
		free(ps);
		api_response_errorf(resp, AL_ERR_QUOTA,
		                    "process %s has %d readers already (Start and Connect streams); disconnect one", id,
		                    GUEST_FOLLOWERS_MAX);
		return;
	}
	ps_queue_event(ps, "start", json_pack("{s:I}", "pid", (json_int_t)pid_of(id)));
	resp->status = 200;
	resp->reader = ps_read;
	resp->reader_free = ps_free;
	resp->reader_ctx = ps;
	resp->content_type = CONNECT_STREAM_CONTENT_TYPE;
	resp->content_length = -1;
}

/* ---- Start --------------------------------------------------------------------------------------- */

API_HANDLER(api_e2b_process_start)
{
	struct al_error err = {0};
	struct stream_opts so;
	cleanup_json json_t *msg = request_message(req, resp, "Start", true);
	if (!msg)
		return;
	if (stream_opts_parse(req, &so, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	if (!sb)
		return;
	struct e2b_user u;
	struct exec_request er = {0};
	if (e2b_user_resolve(req, sb, &u, resp) < 0) {
		sandbox_release(sb);
		return;
	}
	if (e2b_start_request_parse(msg, &u, so.timeout_ms, &er, &err) < 0) {
		api_response_error(resp, &err);
		sandbox_release(sb);
		return;
	}
	char id[32];
	struct guest_stream *s = NULL;
	uint64_t now = now_ms_monotonic();
	if (api_start_process(req, resp, sb, &er, id, &s) < 0) {
		sandbox_release(sb);
	} else {
		uint64_t deadline = so.timeout_ms ? now + so.timeout_ms + E2B_START_END_GRACE_MS : 0;
		ps_begin(req, resp, sb, s, id, er.pty_rows > 0, true, deadline, so.timeout_ms, so.keepalive_ms);
	}
	exec_request_release(&er);
}

/* ---- Connect, List ------------------------------------------------------------------------------- */

API_HANDLER(api_e2b_process_connect)
{
	struct al_error err = {0};
	struct stream_opts so;
	struct e2b_selector sel;
	cleanup_json json_t *msg = request_message(req, resp, "Connect", true);
	if (!msg)
		return;
	if (stream_opts_parse(req, &so, &err) < 0 || e2b_selector_parse(msg, &sel, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	if (!sb)
		return;
	char id[PROCESS_ID_MAX + 1];
	cleanup_json json_t *p = NULL;
	struct guest_stream *s = NULL;
	int r = selector_find(sb, &sel, id, &p, &s, &err);
	if (r == 0 && !s)
		r = al_error_set(&err, AL_ERR_NOT_FOUND, ENOENT,
		                 "process with pid %" PRIu32 " ended long ago; its end is no longer kept", pid_of(id));
	if (r < 0) {
		api_response_error(resp, &err);
		sandbox_release(sb);
		return;
	}
	/* A process that ended meanwhile answers its start and its end. */
	uint64_t deadline = so.timeout_ms ? now_ms_monotonic() + so.timeout_ms : 0;
	ps_begin(req, resp, sb, s, id, json_is_true(json_object_get(p, "pty")), false, deadline, so.timeout_ms,
	         so.keepalive_ms);
}

/* A ProcessInfo: what envd tells of a running process. */
static json_t *process_info(struct process_table *t, const json_t *p)
{
	const char *id = json_string_value(json_object_get(p, "id"));
	json_t *cmd = json_object_get(p, "cmd");
	json_t *args = json_array();
	for (size_t i = 1; i < json_array_size(cmd); i++)
		json_array_append(args, json_array_get(cmd, i));
	const char *c = json_string_value(json_array_get(cmd, 0));
	json_t *config = json_pack("{s:s, s:o}", "cmd", c ? c : "", "args", args);
	cleanup_free char *cwd = NULL;
	json_t *env = NULL;
	struct al_error ignored = {0};
	if (process_config(t, id, &cwd, &env, &ignored) == 0) {
		json_object_set_new(config, "envs", env);
		json_object_set_new(config, "cwd", json_string(cwd));
	} else {
		json_object_set_new(config, "envs", json_object()); /* it ended meanwhile */
	}
	json_t *o = json_pack("{s:o, s:I}", "config", config, "pid", (json_int_t)pid_of(id));
	const char *tag = json_string_value(json_object_get(p, "tag"));
	if (tag && tag[0])
		json_object_set_new(o, "tag", json_string(tag));
	return o;
}

API_HANDLER(api_e2b_process_list)
{
	cleanup_json json_t *msg = request_message(req, resp, "List", false);
	if (!msg)
		return;
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	if (!sb)
		return;
	/* Bounded: the running processes of a sandbox are at most its guest streams. */
	cleanup_json json_t *all = process_list(sandbox_processes(sb), sandbox_channel(sb));
	json_t *out = json_array();
	size_t i;
	json_t *p;
	json_array_foreach (all, i, p)
		if (!strcmp(json_string_value(json_object_get(p, "state")), "running"))
			json_array_append_new(out, process_info(sandbox_processes(sb), p));
	sandbox_release(sb);
	resp->body = json_pack("{s:o}", "processes", out);
}

/* ---- SendInput, CloseStdin, SendSignal, Update --------------------------------------------------- */

/* Input for a process: it must take it (stdin: true, or a PTY). */
static bool takes_input(struct api_response *resp, const struct running *run)
{
	if (json_is_true(json_object_get(run->json, "stdin_stream")))
		return true;
	api_response_errorf(resp, AL_ERR_CONFLICT,
	                    "process with pid %" PRIu32 " was started without stdin: true; it takes no input",
	                    pid_of(run->id));
	return false;
}

static void input_answer(struct api_response *resp, const struct running *run, int r)
{
	if (r == 0 || r == -EPIPE) /* -EPIPE: it ended meanwhile; like envd, the input is dropped */
		resp->body = json_object();
	else
		api_response_errorf(resp, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_GUEST,
		                    "cannot pass input to process with pid %" PRIu32 ": %s", pid_of(run->id),
		                    strerror(-r));
}

/* SECURITY: a client's SendInputRequest {process, input: {stdin|pty: base64}},
 * decoded within E2B_INPUT_MAX bytes before anything is sent. */
API_HANDLER(api_e2b_process_send_input)
{
	cleanup_json json_t *msg = request_message(req, resp, "SendInput", false);
	if (!msg)
		return;
	struct al_error err = {0};
	cleanup_free uint8_t *bytes = NULL;
	size_t len = 0;
	bool pty = false;
	if (e2b_input_parse(msg, &bytes, &len, &pty, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct running run;
	if (running_find(req, resp, msg, &run) < 0)
		return;
	if (pty && !json_is_true(json_object_get(run.json, "pty")))
		api_response_errorf(resp, AL_ERR_CONFLICT,
		                    "process with pid %" PRIu32 " has no PTY: send its input as stdin", pid_of(run.id));
	else if (takes_input(resp, &run))
		input_answer(resp, &run,
		             len ? guest_stream_send_data(sandbox_channel(run.sb), run.s, AIRLOCK_FRAME_STDIN, bytes,
		                                          len, now_ms_monotonic() + E2B_INPUT_TIMEOUT_MS)
		                 : 0);
	running_release(&run);
}

API_HANDLER(api_e2b_process_close_stdin)
{
	cleanup_json json_t *msg = request_message(req, resp, "CloseStdin", false);
	if (!msg)
		return;
	struct running run;
	if (running_find(req, resp, msg, &run) < 0)
		return;
	if (takes_input(resp, &run))
		input_answer(resp, &run,
		             guest_stream_send_data(sandbox_channel(run.sb), run.s, AIRLOCK_FRAME_STDIN, NULL, 0,
		                                    now_ms_monotonic() + E2B_INPUT_TIMEOUT_MS));
	running_release(&run);
}

static void control_send(struct api_response *resp, struct running *run, uint8_t type, json_t *ctl)
{
	if (guest_stream_send_control(sandbox_channel(run->sb), run->s, type, ctl) < 0)
		api_response_errorf(resp, AL_ERR_NOT_FOUND, "process with pid %" PRIu32 " has ended", pid_of(run->id));
	else
		resp->body = json_object();
}

API_HANDLER(api_e2b_process_send_signal)
{
	cleanup_json json_t *msg = request_message(req, resp, "SendSignal", false);
	if (!msg)
		return;
	struct al_error err = {0};
	int sig = 0;
	if (e2b_signal_parse(msg, &sig, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct running run;
	if (running_find(req, resp, msg, &run) < 0)
		return;
	cleanup_json json_t *ctl = json_pack("{s:i}", "signal", sig);
	control_send(resp, &run, AIRLOCK_FRAME_SIGNAL, ctl);
	running_release(&run);
}

API_HANDLER(api_e2b_process_update)
{
	cleanup_json json_t *msg = request_message(req, resp, "Update", false);
	if (!msg)
		return;
	struct al_error err = {0};
	bool pty = false;
	unsigned rows = 0, cols = 0;
	if (e2b_update_parse(msg, &pty, &rows, &cols, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	struct running run;
	if (running_find(req, resp, msg, &run) < 0)
		return;
	if (!pty) {
		resp->body = json_object(); /* nothing to change */
	} else if (!json_is_true(json_object_get(run.json, "pty"))) {
		api_response_errorf(resp, AL_ERR_CONFLICT, "process with pid %" PRIu32 " has no PTY to resize",
		                    pid_of(run.id));
	} else {
		cleanup_json json_t *ctl = json_pack("{s:I, s:I}", "rows", (json_int_t)rows, "cols", (json_int_t)cols);
		control_send(resp, &run, AIRLOCK_FRAME_RESIZE, ctl);
	}
	running_release(&run);
}

API_HANDLER(api_e2b_process_stream_input)
{
	api_response_errorf(resp, AL_ERR_METHOD,
	                    "process.Process/StreamInput (a client stream) is not served here: send input with "
	                    "SendInput and end it with CloseStdin, as E2B's SDK does");
}
