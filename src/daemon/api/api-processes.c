/* SPDX-License-Identifier: Apache-2.0 */
/* /v1/sandboxes/{id}/processes: background processes, their output, stdin,
 * signals, PTY resize and attach (HTTP Upgrade). */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include "api-handlers.h"
#include "api-request.h"
#include "api-ws.h"
#include "json-cleanup.h"
#include "process.h"
#include "sandbox.h"
#include "util.h"

#define PTY_MSG_MAX 65536u
#define PTY_PROTOCOL "airlock-pty/1"
#define WAIT_DEFAULT_S 60
#define WAIT_MAX_S 3600
#define ATTACH_WRITE_TIMEOUT_MS 30000
#define WS_READ_BLOCK 16384
#define WS_CLOSE_WAIT_MS 2000 /* after our close frame, for the client's */

enum { PTY_IN_DATA = 0, PTY_IN_RESIZE = 1, PTY_OUT_DATA = 2, PTY_OUT_EXIT = 3 };

/* The process named by the second path parameter: its JSON and a stream reference. */
static int lookup(const struct api_request *req, struct api_response *resp, struct sandbox *sb, json_t **ret_json,
                  struct guest_stream **ret_stream)
{
	struct al_error err = {0};
	if (!process_id_valid(req->params[1])) {
		api_response_errorf(resp, AL_ERR_NOT_FOUND, "no process \"%.32s\" in sandbox %s", req->params[1],
		                    sandbox_id(sb));
		return -ENOENT;
	}
	int r = process_get(sandbox_processes(sb), sandbox_channel(sb), req->params[1], ret_json, ret_stream, &err);
	if (r < 0)
		api_response_error(resp, &err);
	return r;
}

/* The sandbox and the stream of a process that still has one (output
 * forgotten otherwise), both held for the caller to release; NULL (with
 * resp set, nothing held) if there is none. */
static struct guest_stream *stream_acquire(const struct api_request *req, struct api_response *resp,
                                           struct sandbox **ret_sb)
{
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	struct guest_stream *s = NULL;
	if (sb && lookup(req, resp, sb, NULL, &s) == 0 && !s)
		api_response_errorf(resp, AL_ERR_CONFLICT, "process %s ended long ago; its output is no longer kept",
		                    req->params[1]);
	if (!s) {
		sandbox_release(sb);
		return NULL;
	}
	*ret_sb = sb;
	return s;
}

API_HANDLER(api_process_start)
{
	struct al_error err = {0};
	struct exec_request er;
	if (exec_request_parse(req->body, req->body_len, &er, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	if (er.stream) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "stream: a background process is read with GET .../processes/{pid}/output");
		exec_request_release(&er);
		return;
	}
	if (!er.timeout_given)
		er.timeout_s = 0; /* background processes run until they end */
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	char pid[32];
	struct guest_stream *s = NULL;
	if (sb && api_start_process(req, resp, sb, &er, pid, &s) == 0) {
		json_t *obj = NULL;
		guest_stream_unref(sandbox_channel(sb), s);
		if (process_get(sandbox_processes(sb), sandbox_channel(sb), pid, &obj, NULL, &err) < 0) {
			api_response_error(resp, &err);
		} else {
			resp->status = 201;
			resp->body = obj;
		}
	}
	sandbox_release(sb);
	exec_request_release(&er);
}

API_HANDLER(api_process_list)
{
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	if (!sb)
		return;
	resp->body = json_pack("{s:o}", "processes", process_list(sandbox_processes(sb), sandbox_channel(sb)));
	sandbox_release(sb);
}

API_HANDLER(api_process_get)
{
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	json_t *obj = NULL;
	if (sb && lookup(req, resp, sb, &obj, NULL) == 0)
		resp->body = obj;
	sandbox_release(sb);
}

API_HANDLER(api_process_output)
{
	const char *from = api_query(req, "from"), *follow = api_query(req, "follow");
	if ((from && strcmp(from, "start") && strcmp(from, "now")) ||
	    (follow && strcmp(follow, "true") && strcmp(follow, "false"))) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "from must be start or now, follow must be true or false");
		return;
	}
	struct sandbox *sb = NULL;
	struct guest_stream *s = stream_acquire(req, resp, &sb);
	if (!s)
		return;
	bool from_start = !from || !strcmp(from, "start");
	bool follow_on = follow && !strcmp(follow, "true");
	api_stream_output(req, resp, sb, s, from_start, follow_on, false, NULL);
}

/* ---- stdin ---------------------------------------------------------------------------------------- */

struct stdin_upload {
	struct sandbox *sb;
	struct guest_stream *s;
	bool eof;
	bool ended_early; /* the process stopped reading: the rest is dropped */
};

static int stdin_data(void *ctx, const uint8_t *buf, size_t len, struct al_error *err)
{
	struct stdin_upload *u = ctx;
	if (u->ended_early)
		return 0;
	int r = guest_stream_send_data(sandbox_channel(u->sb), u->s, AIRLOCK_FRAME_STDIN, buf, len,
	                               now_ms_monotonic() + 60000);
	if (r == -EPIPE) {
		u->ended_early = true;
		return 0;
	}
	if (r < 0)
		return al_error_set(err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_GUEST, -r,
		                    "cannot pass stdin to the process: %s", strerror(-r));
	return 0;
}

static void stdin_end(void *ctx, bool failed, const struct al_error *data_err, struct api_response *resp)
{
	struct stdin_upload *u = ctx;
	if (failed) {
		api_response_error(resp, data_err);
		return;
	}
	if (u->eof && !u->ended_early)
		guest_stream_send_data(sandbox_channel(u->sb), u->s, AIRLOCK_FRAME_STDIN, NULL, 0,
		                       now_ms_monotonic() + 60000);
	resp->status = 204;
}

static void stdin_release(void *ctx)
{
	struct stdin_upload *u = ctx;
	guest_stream_unref(sandbox_channel(u->sb), u->s);
	sandbox_release(u->sb);
	free(u);
}

API_UPLOAD(api_process_stdin)
{
	const char *eof = api_query(req, "eof");
	if (eof && strcmp(eof, "true") && strcmp(eof, "false"))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "eof must be true or false");
	struct api_response tmp = {0};
	struct sandbox *sb = api_sandbox_acquire(req, &tmp);
	json_t *obj = NULL;
	struct guest_stream *s = NULL;
	if (sb && lookup(req, &tmp, sb, &obj, &s) == 0) {
		/* Bytes nobody will read are refused, not silently dropped. */
		const char *state = json_string_value(json_object_get(obj, "state"));
		if (!json_is_true(json_object_get(obj, "stdin_stream")))
			api_response_errorf(&tmp, AL_ERR_CONFLICT,
			                    "process %s was started without \"stdin_stream\": true; it takes no stdin",
			                    req->params[1]);
		else if (state && !strcmp(state, "exited"))
			api_response_errorf(&tmp, AL_ERR_CONFLICT, "process %s has ended", req->params[1]);
		if (tmp.body && s) {
			guest_stream_unref(sandbox_channel(sb), s);
			s = NULL;
		}
	}
	if (obj)
		json_decref(obj);
	if (!s && sb && !tmp.body)
		api_response_errorf(&tmp, AL_ERR_CONFLICT, "process %s has ended", req->params[1]);
	if (!s) {
		sandbox_release(sb);
		return api_response_to_error(&tmp, err);
	}
	struct stdin_upload *u = xcalloc(1, sizeof(*u));
	u->sb = sb;
	u->s = s;
	u->eof = eof && !strcmp(eof, "true");
	*ret = (struct api_upload){.data = stdin_data, .end = stdin_end, .release = stdin_release, .ctx = u};
	return 0;
}

/* ---- signal, resize, wait ------------------------------------------------------------------------ */

static int parse_signal(json_t *v)
{
	static const struct {
		const char *name;
		int sig;
	} names[] = {
	    {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},   {"KILL", SIGKILL},
	    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM},   {"STOP", SIGSTOP},
	    {"CONT", SIGCONT}, {"ALRM", SIGALRM}, {"WINCH", SIGWINCH},
	};
	if (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 64)
		return (int)json_integer_value(v);
	if (!json_is_string(v))
		return -EINVAL;
	const char *s = json_string_value(v);
	if (!strncmp(s, "SIG", 3))
		s += 3;
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!strcmp(s, names[i].name))
			return names[i].sig;
	return -EINVAL;
}

/* Sends a control frame built from the body to the process's stream. */
static void process_control(const struct api_request *req, struct api_response *resp, uint8_t type)
{
	cleanup_json json_t *body = api_parse_json_object(req, resp);
	if (!body)
		return;
	cleanup_json json_t *msg = NULL;
	if (type == AIRLOCK_FRAME_SIGNAL) {
		int sig = json_object_size(body) == 1 ? parse_signal(json_object_get(body, "signal")) : -EINVAL;
		if (sig < 0) {
			api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
			                    "body must be {\"signal\": NAME or NUMBER}, e.g. {\"signal\": \"TERM\"}");
			return;
		}
		msg = json_pack("{s:i}", "signal", sig);
	} else {
		json_t *rows = json_object_get(body, "rows"), *cols = json_object_get(body, "cols");
		if (json_object_size(body) != 2 || !json_is_integer(rows) || !json_is_integer(cols) ||
		    json_integer_value(rows) < 1 || json_integer_value(rows) > PTY_ROWS_MAX ||
		    json_integer_value(cols) < 1 || json_integer_value(cols) > PTY_COLS_MAX) {
			api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
			                    "body must be {\"rows\": 1..%d, \"cols\": 1..%d}", PTY_ROWS_MAX,
			                    PTY_COLS_MAX);
			return;
		}
		msg = json_pack("{s:O, s:O}", "rows", rows, "cols", cols);
	}
	struct sandbox *sb = NULL;
	struct guest_stream *s = stream_acquire(req, resp, &sb);
	if (!s)
		return;
	if (guest_stream_send_control(sandbox_channel(sb), s, type, msg) < 0)
		api_response_errorf(resp, AL_ERR_CONFLICT, "process %s has ended", req->params[1]);
	else
		resp->status = 204;
	guest_stream_unref(sandbox_channel(sb), s);
	sandbox_release(sb);
}

API_HANDLER(api_process_signal)
{
	process_control(req, resp, AIRLOCK_FRAME_SIGNAL);
}

API_HANDLER(api_process_resize)
{
	process_control(req, resp, AIRLOCK_FRAME_RESIZE);
}

API_HANDLER(api_process_wait)
{
	long timeout_s = WAIT_DEFAULT_S;
	const char *t = api_query(req, "timeout_s");
	if (t && parse_int_range(t, 0, WAIT_MAX_S, &timeout_s) < 0) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "timeout_s must be from 0 to %d", WAIT_MAX_S);
		return;
	}
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	struct guest_stream *s = NULL;
	if (!sb || lookup(req, resp, sb, NULL, &s) < 0) {
		sandbox_release(sb);
		return;
	}
	struct guest_channel *ch = sandbox_channel(sb);
	int r = 0;
	if (s) {
		/* Wait in slices so that a client that gave up is noticed. */
		uint64_t deadline = now_ms_monotonic() + (uint64_t)timeout_s * 1000u;
		do {
			uint64_t slice = MIN(deadline, now_ms_monotonic() + 1000);
			r = guest_stream_wait_done(ch, s, slice);
		} while (r == -ETIMEDOUT && now_ms_monotonic() < deadline && !api_client_gone(req->conn_fd));
		guest_stream_unref(ch, s);
	}
	json_t *obj = NULL;
	struct al_error err = {0};
	if (process_get(sandbox_processes(sb), ch, req->params[1], &obj, NULL, &err) < 0) {
		api_response_error(resp, &err);
	} else {
		resp->status = r == -ETIMEDOUT ? 408 : 200;
		resp->body = obj;
	}
	sandbox_release(sb);
}

/* ---- attach: the PTY protocol over an upgraded connection ------------------------------------------ */

struct attach {
	struct sandbox *sb;
	struct guest_stream *s;
	int fd;
	bool client_gone;
	pthread_mutex_t lock; /* writes to fd, close_sent */
	uint8_t *extra;       /* bytes the client sent before it saw our 101 */
	size_t extra_len, extra_off;
	/* The WebSocket variant (Upgrade: websocket) */
	bool ws;
	bool close_sent;
	struct ws_decoder *dec;
	char accept[WS_ACCEPT_LEN + 1];
};

/* Reads exactly n bytes: first what came with the request, then the socket. */
static bool attach_read(struct attach *a, uint8_t *buf, size_t n)
{
	size_t from_extra = MIN(n, a->extra_len - a->extra_off);
	memcpy(buf, a->extra + a->extra_off, from_extra);
	a->extra_off += from_extra;
	if (from_extra == n)
		return true;
	return read_full(a->fd, buf + from_extra, n - from_extra) == (ssize_t)(n - from_extra);
}

static int send_msg(struct attach *a, uint8_t type, const void *data, size_t len)
{
	uint8_t hdr[5] = {type, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
	pthread_mutex_lock(&a->lock);
	int r = write_full_timeout(a->fd, hdr, sizeof(hdr), ATTACH_WRITE_TIMEOUT_MS);
	if (r == 0 && len)
		r = write_full_timeout(a->fd, data, len, ATTACH_WRITE_TIMEOUT_MS);
	pthread_mutex_unlock(&a->lock);
	return r;
}

/* One unmasked WebSocket frame; nothing after our close frame. */
static int ws_send(struct attach *a, enum ws_opcode op, const void *data, size_t len)
{
	uint8_t head[WS_HEAD_MAX];
	size_t hl = ws_frame_head(head, op, len);
	pthread_mutex_lock(&a->lock);
	int r = -EPIPE;
	if (!a->close_sent) {
		a->close_sent = op == WS_OP_CLOSE;
		r = write_full_timeout(a->fd, head, hl, ATTACH_WRITE_TIMEOUT_MS);
		if (r == 0 && len)
			r = write_full_timeout(a->fd, data, len, ATTACH_WRITE_TIMEOUT_MS);
	}
	pthread_mutex_unlock(&a->lock);
	return r;
}

static void ws_send_close(struct attach *a, uint16_t code)
{
	uint8_t payload[2] = {(uint8_t)(code >> 8), (uint8_t)code};
	ws_send(a, WS_OP_CLOSE, payload, sizeof(payload));
}

static int attach_send_data(struct attach *a, const uint8_t *data, size_t len)
{
	return a->ws ? ws_send(a, WS_OP_BINARY, data, len) : send_msg(a, PTY_OUT_DATA, data, len);
}

/* The exit object; a WebSocket then closes (and waits a little for the
 * client's close frame, as RFC 6455 7.1.1 asks of a server). */
static void attach_send_exit(struct attach *a, const char *text)
{
	if (!a->ws) {
		send_msg(a, PTY_OUT_EXIT, text, strlen(text));
		return;
	}
	if (ws_send(a, WS_OP_TEXT, text, strlen(text)) < 0)
		return;
	ws_send_close(a, WS_CLOSE_NORMAL);
	uint64_t deadline = now_ms_monotonic() + WS_CLOSE_WAIT_MS;
	while (!__atomic_load_n(&a->client_gone, __ATOMIC_ACQUIRE) && now_ms_monotonic() < deadline)
		usleep(20000);
}

/* SECURITY: client messages are bounded (PTY_MSG_MAX) and typed; anything
 * else ends the session (the process keeps running). */
static void *attach_input(void *arg)
{
	struct attach *a = arg;
	struct guest_channel *ch = sandbox_channel(a->sb);
	uint8_t *buf = xmalloc(PTY_MSG_MAX);
	for (;;) {
		uint8_t hdr[5];
		if (!attach_read(a, hdr, sizeof(hdr)))
			break;
		uint32_t len = ((uint32_t)hdr[1] << 24) | ((uint32_t)hdr[2] << 16) | ((uint32_t)hdr[3] << 8) | hdr[4];
		if (len > PTY_MSG_MAX || (hdr[0] != PTY_IN_DATA && hdr[0] != PTY_IN_RESIZE))
			break;
		if (!attach_read(a, buf, len))
			break;
		if (hdr[0] == PTY_IN_DATA) {
			if (len && guest_stream_send_data(ch, a->s, AIRLOCK_FRAME_STDIN, buf, len,
			                                  now_ms_monotonic() + ATTACH_WRITE_TIMEOUT_MS) < 0)
				break;
			continue;
		}
		cleanup_json json_t *j = json_loadb((const char *)buf, len, 0, NULL);
		json_t *rows = json_object_get(j, "rows"), *cols = json_object_get(j, "cols");
		if (!json_is_integer(rows) || !json_is_integer(cols) || json_integer_value(rows) < 1 ||
		    json_integer_value(rows) > PTY_ROWS_MAX || json_integer_value(cols) < 1 ||
		    json_integer_value(cols) > PTY_COLS_MAX)
			break;
		cleanup_json json_t *msg = json_pack("{s:O, s:O}", "rows", rows, "cols", cols);
		guest_stream_send_control(ch, a->s, AIRLOCK_FRAME_RESIZE, msg);
	}
	free(buf);
	__atomic_store_n(&a->client_gone, true, __ATOMIC_RELEASE);
	shutdown(a->fd, SHUT_RD);
	return NULL;
}

static void ws_resize(struct attach *a, struct guest_channel *ch, const struct ws_control *ctl)
{
	cleanup_json json_t *msg =
	    json_pack("{s:I, s:I}", "rows", (json_int_t)ctl->rows, "cols", (json_int_t)ctl->cols);
	guest_stream_send_control(ch, a->s, AIRLOCK_FRAME_RESIZE, msg);
}

/* One whole message of the client; < 0 ends the session (after our close frame). */
static int ws_message_handle(struct attach *a, struct guest_channel *ch, const struct ws_message *m)
{
	struct ws_control ctl;
	switch (m->opcode) {
	case WS_OP_BINARY:
		if (m->len && guest_stream_send_data(ch, a->s, AIRLOCK_FRAME_STDIN, m->data, m->len,
		                                     now_ms_monotonic() + ATTACH_WRITE_TIMEOUT_MS) < 0) {
			ws_send_close(a, WS_CLOSE_GOING_AWAY);
			return -EPIPE;
		}
		return 0;
	case WS_OP_TEXT:
		if (ws_control_parse(m->data, m->len, &ctl) < 0) {
			ws_send_close(a, WS_CLOSE_POLICY);
			return -EINVAL;
		}
		ws_resize(a, ch, &ctl);
		return 0;
	case WS_OP_PING:
		return ws_send(a, WS_OP_PONG, m->data, m->len) < 0 ? -EPIPE : 0;
	case WS_OP_CLOSE:
		/* The client's code back (RFC 6455 5.5.1), or none if it sent none. */
		if (m->close_code)
			ws_send_close(a, m->close_code);
		else
			ws_send(a, WS_OP_CLOSE, NULL, 0);
		return -ECONNRESET;
	default:
		return 0; /* a pong */
	}
}

/* SECURITY: the WebSocket variant. Every byte goes through the decoder
 * (api-ws.h: masked frames only, messages at most WS_MESSAGE_MAX, control
 * frames at most 125 bytes, text UTF-8); binary messages become the PTY's
 * input, text ones must be a control message (ws_control_parse). A
 * violation sends its close code and ends the session; the process keeps
 * running (attach again). */
static void *attach_input_ws(void *arg)
{
	struct attach *a = arg;
	struct guest_channel *ch = sandbox_channel(a->sb);
	uint8_t *buf = xmalloc(WS_READ_BLOCK);
	bool over = false;
	while (!over) {
		const uint8_t *in = buf;
		size_t n;
		if (a->extra_off < a->extra_len) {
			in = a->extra + a->extra_off;
			n = a->extra_len - a->extra_off;
			a->extra_off = a->extra_len;
		} else {
			ssize_t r = read(a->fd, buf, WS_READ_BLOCK);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			n = (size_t)r;
		}
		while (n > 0 && !over) {
			size_t used = 0;
			struct ws_message m;
			uint16_t close = 0;
			int r = ws_decoder_feed(a->dec, in, n, &used, &m, &close);
			if (r < 0) {
				ws_send_close(a, close);
				over = true;
				break;
			}
			in += used;
			n -= used;
			if (r == 1 && ws_message_handle(a, ch, &m) < 0)
				over = true;
		}
	}
	free(buf);
	__atomic_store_n(&a->client_gone, true, __ATOMIC_RELEASE);
	shutdown(a->fd, SHUT_RD);
	return NULL;
}

static void attach_run(void *ctx, int fd, const uint8_t *extra, size_t extra_len)
{
	struct attach *a = ctx;
	struct guest_channel *ch = sandbox_channel(a->sb);
	a->fd = fd;
	/* MHD hands the socket over non-blocking; the input thread reads it blocking. */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	/* Bytes the client sent right after its request belong to the session. */
	if (extra_len > 0) {
		a->extra = xmalloc(extra_len);
		memcpy(a->extra, extra, extra_len);
		a->extra_len = extra_len;
	}
	pthread_t input;
	bool have_input = pthread_create(&input, NULL, a->ws ? attach_input_ws : attach_input, a) == 0;
	struct guest_cursor cur;
	if (guest_cursor_open(ch, a->s, true, &cur) == 0) {
		uint64_t start = now_ms_monotonic();
		for (;;) {
			uint8_t type;
			uint8_t *data = NULL;
			size_t len;
			uint64_t dropped;
			int r = guest_cursor_read(ch, &cur, now_ms_monotonic() + 300, &type, &data, &len, &dropped);
			if (r == 1) {
				int w = attach_send_data(a, data, len);
				free(data);
				if (w < 0)
					break;
				continue;
			}
			if (r == 0) {
				uint8_t rtype = 0;
				cleanup_json json_t *result = NULL;
				guest_stream_done(ch, a->s, &rtype, &result);
				cleanup_json json_t *line = api_exit_line(rtype, result, now_ms_monotonic() - start);
				cleanup_free char *text = json_dumps(line, JSON_COMPACT);
				attach_send_exit(a, text);
				break;
			}
			if (__atomic_load_n(&a->client_gone, __ATOMIC_ACQUIRE))
				break;
		}
		guest_cursor_close(ch, &cur);
	}
	shutdown(fd, SHUT_RDWR);
	if (have_input)
		pthread_join(input, NULL);
}

static void attach_free(void *ctx)
{
	struct attach *a = ctx;
	guest_stream_unref(sandbox_channel(a->sb), a->s);
	sandbox_release(a->sb);
	pthread_mutex_destroy(&a->lock);
	ws_decoder_free(a->dec);
	free(a->extra);
	free(a);
}

/* The WebSocket handshake's checks (RFC 6455 4.2.1) and our own; the
 * Sec-WebSocket-Accept into accept. False with resp set if refused. */
static bool ws_handshake_check(const struct api_request *req, struct api_response *resp, char accept[WS_ACCEPT_LEN + 1])
{
	const char *connection = api_header(req, "Connection");
	const char *version = api_header(req, "Sec-WebSocket-Version");
	const char *key = api_header(req, "Sec-WebSocket-Key");
	struct ws_protocols p;
	if (!connection || !strcasestr(connection, "upgrade")) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "a WebSocket attach needs \"Connection: Upgrade\"");
		return false;
	}
	if (!version || strcmp(version, "13")) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "Sec-WebSocket-Version must be 13 (RFC 6455), got \"%.16s\"",
		                    version ? version : "");
		resp->header_name = "Sec-WebSocket-Version";
		resp->header_value = xstrdup("13");
		return false;
	}
	if (!ws_key_valid(key)) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "Sec-WebSocket-Key must be the base64 of 16 random bytes (RFC 6455 4.1)");
		return false;
	}
	int r = ws_protocols_parse(api_header(req, "Sec-WebSocket-Protocol"), &p);
	explicit_bzero(p.token, sizeof(p.token));
	if (r < 0 || !p.pty) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "Sec-WebSocket-Protocol must offer \"" WS_PROTOCOL_PTY "\" (see docs/api.md, the "
		                    "WebSocket variant)");
		return false;
	}
	/* SECURITY: a page of another site may open a WebSocket to us with the
	 * browser's credentials for it; only a page of our own host may. */
	if (!ws_origin_allowed(api_header(req, "Origin"), api_header(req, "Host"))) {
		api_response_errorf(
		    resp, AL_ERR_FORBIDDEN,
		    "Origin %.200s is not this server (Host %.200s): a WebSocket attach is allowed only "
		    "from a page of the same host",
		    api_header(req, "Origin"), api_header(req, "Host") ? api_header(req, "Host") : "(none)");
		return false;
	}
	ws_accept_compute(key, accept);
	return true;
}

API_HANDLER(api_process_attach)
{
	const char *upgrade = api_header(req, "Upgrade");
	bool ws = upgrade && !strcasecmp(upgrade, "websocket");
	if (!upgrade || (!ws && strcasecmp(upgrade, PTY_PROTOCOL))) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "attach needs the headers \"Connection: Upgrade\" and \"Upgrade: " PTY_PROTOCOL
		                    "\" or \"Upgrade: websocket\" (see docs/api.md, the PTY protocol)");
		return;
	}
	char accept[WS_ACCEPT_LEN + 1] = "";
	if (ws && !ws_handshake_check(req, resp, accept))
		return;
	struct sandbox *sb = NULL;
	struct guest_stream *s = stream_acquire(req, resp, &sb);
	if (!s)
		return;
	struct attach *a = xcalloc(1, sizeof(*a));
	a->sb = sb;
	a->s = s;
	a->fd = -1;
	pthread_mutex_init(&a->lock, NULL);
	resp->status = 101;
	resp->upgrade = attach_run;
	resp->upgrade_free = attach_free;
	resp->upgrade_ctx = a;
	resp->upgrade_protocol = PTY_PROTOCOL;
	if (ws) {
		a->ws = true;
		a->dec = ws_decoder_new();
		memcpy(a->accept, accept, sizeof(a->accept));
		resp->upgrade_protocol = "websocket";
		resp->upgrade_headers[0][0] = "Sec-WebSocket-Accept";
		resp->upgrade_headers[0][1] = a->accept;
		resp->upgrade_headers[1][0] = "Sec-WebSocket-Protocol";
		resp->upgrade_headers[1][1] = WS_PROTOCOL_PTY;
	}
}
