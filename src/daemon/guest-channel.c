/* SPDX-License-Identifier: Apache-2.0 */
#include "guest-channel.h"

#include <fcntl.h>
#include <pthread.h>
#include <time.h>

#include "json-cleanup.h"
#include "util.h"

struct gc_stream {
	uint32_t id;
	bool done;
	uint8_t result_type; /* EXIT, ERROR or OK once done */
	json_t *result;
	struct exec_output out[2];
	uint64_t stdin_credit;
	struct gc_stream *next;
};

struct guest_channel {
	pthread_mutex_t lock; /* everything below but fd and reader */
	pthread_cond_t cond;
	pthread_mutex_t write_lock; /* one frame at a time on the wire */
	int fd;
	struct frame_reader *reader; /* used by the reading thread only */
	uint32_t next_stream;
	size_t n_streams;
	struct gc_stream *streams;
	bool hello;
	struct guest_hello hello_info;
	bool dead;
	char dead_reason[512];
	uint64_t dropped_frames;
};

void exec_result_release(struct exec_result *r)
{
	free(r->out[0].data);
	free(r->out[1].data);
	r->out[0].data = r->out[1].data = NULL;
}

struct guest_channel *guest_channel_new(int fd)
{
	struct guest_channel *ch = xcalloc(1, sizeof(*ch));
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ch->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&ch->lock, NULL);
	pthread_mutex_init(&ch->write_lock, NULL);
	ch->fd = fd;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	ch->reader = xmalloc(sizeof(*ch->reader));
	frame_reader_init(ch->reader);
	ch->next_stream = 1;
	return ch;
}

static void stream_free(struct gc_stream *s)
{
	if (s->result)
		json_decref(s->result);
	free(s->out[0].data);
	free(s->out[1].data);
	free(s);
}

void guest_channel_free(struct guest_channel *ch)
{
	if (!ch)
		return;
	while (ch->streams) {
		struct gc_stream *s = ch->streams;
		ch->streams = s->next;
		stream_free(s);
	}
	if (ch->fd >= 0)
		close(ch->fd);
	free(ch->reader);
	pthread_cond_destroy(&ch->cond);
	pthread_mutex_destroy(&ch->lock);
	pthread_mutex_destroy(&ch->write_lock);
	free(ch);
}

int guest_channel_fd(struct guest_channel *ch)
{
	return ch->fd;
}

static void kill_locked(struct guest_channel *ch, const char *reason)
{
	if (!ch->dead) {
		ch->dead = true;
		strlcpy_al(ch->dead_reason, reason, sizeof(ch->dead_reason));
	}
	pthread_cond_broadcast(&ch->cond);
}

void guest_channel_kill(struct guest_channel *ch, const char *reason)
{
	pthread_mutex_lock(&ch->lock);
	kill_locked(ch, reason);
	pthread_mutex_unlock(&ch->lock);
}

bool guest_channel_dead(struct guest_channel *ch, char *reason, size_t reason_size)
{
	pthread_mutex_lock(&ch->lock);
	bool dead = ch->dead;
	if (dead && reason)
		strlcpy_al(reason, ch->dead_reason, reason_size);
	pthread_mutex_unlock(&ch->lock);
	return dead;
}

static struct gc_stream *stream_find(struct guest_channel *ch, uint32_t id)
{
	for (struct gc_stream *s = ch->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static void stream_close(struct guest_channel *ch, struct gc_stream *s);

static void copy_json_string(json_t *obj, const char *key, char *dst, size_t size)
{
	json_t *v = json_object_get(obj, key);
	if (!json_is_string(v))
		return;
	/* SECURITY: guest text ends up in API responses and logs: keep printable ASCII only. */
	const char *s = json_string_value(v);
	size_t o = 0;
	for (size_t i = 0; s[i] && o + 1 < size; i++)
		dst[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	dst[o] = '\0';
}

static int handle_hello(struct guest_channel *ch, const uint8_t *payload, size_t len)
{
	cleanup_json json_t *j = json_loadb((const char *)payload, len, 0, NULL);
	if (!json_is_object(j) || !json_is_integer(json_object_get(j, "proto")))
		return -EBADMSG;
	struct guest_hello h = {0};
	json_int_t proto = json_integer_value(json_object_get(j, "proto"));
	if (proto != AIRLOCK_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	h.proto = (unsigned)proto;
	copy_json_string(j, "agent", h.agent_version, sizeof(h.agent_version));
	copy_json_string(j, "boot_id", h.boot_id, sizeof(h.boot_id));
	copy_json_string(j, "kernel", h.kernel, sizeof(h.kernel));
	json_t *g = json_object_get(j, "generation");
	if (json_is_integer(g) && json_integer_value(g) >= 0)
		h.generation = (uint64_t)json_integer_value(g);
	pthread_mutex_lock(&ch->lock);
	ch->hello = true;
	ch->hello_info = h;
	pthread_cond_broadcast(&ch->cond);
	pthread_mutex_unlock(&ch->lock);
	return 0;
}

static void output_append(struct exec_output *o, const uint8_t *data, size_t len)
{
	o->total += len;
	size_t room = o->limit > o->len ? o->limit - o->len : 0;
	if (len > room) {
		o->truncated = true;
		len = room;
	}
	if (len == 0)
		return;
	if (o->len + len > o->cap) {
		size_t cap = o->cap ? o->cap : 64 * 1024;
		while (cap < o->len + len)
			cap *= 2;
		o->data = xrealloc(o->data, cap);
		o->cap = cap;
	}
	memcpy(o->data + o->len, data, len);
	o->len += len;
}

int guest_channel_handle_frame(struct guest_channel *ch, const struct airlock_frame_header *h,
			       const uint8_t *payload)
{
	if (h->stream == 0) {
		if (h->type == AIRLOCK_FRAME_HELLO)
			return handle_hello(ch, payload, h->length);
		pthread_mutex_lock(&ch->lock);
		ch->dropped_frames++;
		pthread_mutex_unlock(&ch->lock);
		return 0;
	}
	pthread_mutex_lock(&ch->lock);
	struct gc_stream *s = stream_find(ch, h->stream);
	if (!s || s->done) {
		/* Late output of a stream nobody waits for any more. */
		ch->dropped_frames++;
		pthread_mutex_unlock(&ch->lock);
		return 0;
	}
	switch (h->type) {
	case AIRLOCK_FRAME_STDOUT:
	case AIRLOCK_FRAME_STDERR:
	case AIRLOCK_FRAME_FILE_DATA:
		output_append(&s->out[h->type == AIRLOCK_FRAME_STDERR ? 1 : 0], payload, h->length);
		break;
	case AIRLOCK_FRAME_CREDIT:
		if (h->length == 4)
			s->stdin_credit += ((uint32_t)payload[0] << 24) | ((uint32_t)payload[1] << 16) |
					   ((uint32_t)payload[2] << 8) | payload[3];
		break;
	case AIRLOCK_FRAME_EXIT:
	case AIRLOCK_FRAME_ERROR:
	case AIRLOCK_FRAME_OK: {
		json_t *j = json_loadb((const char *)payload, h->length, 0, NULL);
		if (!json_is_object(j)) {
			if (j)
				json_decref(j);
			j = json_pack("{s:s, s:s}", "code", "bad_reply", "message",
				      "the guest agent sent a malformed reply");
			s->result_type = AIRLOCK_FRAME_ERROR;
		} else {
			s->result_type = h->type;
		}
		s->result = j;
		s->done = true;
		break;
	}
	default:
		ch->dropped_frames++;
		break;
	}
	pthread_cond_broadcast(&ch->cond);
	pthread_mutex_unlock(&ch->lock);
	return 0;
}

int guest_channel_read(struct guest_channel *ch)
{
	for (int rounds = 0; rounds < 64; rounds++) {
		size_t space;
		uint8_t *p = frame_reader_space(ch->reader, &space);
		ssize_t n = read(ch->fd, p, space);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return 0;
			guest_channel_kill(ch, "the guest channel failed");
			return -errno;
		}
		if (n == 0) {
			guest_channel_kill(ch, "the guest channel closed");
			return -EPIPE;
		}
		frame_reader_commit(ch->reader, (size_t)n);
		for (;;) {
			struct airlock_frame_header h;
			const uint8_t *payload;
			int r = frame_reader_next(ch->reader, &h, &payload);
			if (r == 0)
				break;
			if (r < 0 || (r = guest_channel_handle_frame(ch, &h, payload)) < 0) {
				char why[128];
				snprintf(why, sizeof(why), "the guest agent broke the protocol (%s)", strerror(-r));
				guest_channel_kill(ch, why);
				return -EPROTO;
			}
		}
	}
	return 0;
}

static int channel_send(struct guest_channel *ch, uint8_t type, uint32_t stream, const void *payload, size_t len)
{
	pthread_mutex_lock(&ch->write_lock);
	int r = frame_write(ch->fd, type, stream, payload, len, GUEST_WRITE_TIMEOUT_MS);
	pthread_mutex_unlock(&ch->write_lock);
	if (r < 0) {
		/* A partial frame leaves no way to resynchronise. */
		guest_channel_kill(ch, r == -ETIMEDOUT ? "the guest agent stopped reading its channel"
						       : "writing to the guest channel failed");
	}
	return r;
}

int guest_channel_request_hello(struct guest_channel *ch)
{
	return channel_send(ch, AIRLOCK_FRAME_HELLO, 0, "{}", 2);
}

int guest_channel_shutdown(struct guest_channel *ch)
{
	return channel_send(ch, AIRLOCK_FRAME_SHUTDOWN, 0, "{}", 2);
}

static void deadline_to_timespec(uint64_t deadline_ms, struct timespec *ts)
{
	ts->tv_sec = (time_t)(deadline_ms / 1000u);
	ts->tv_nsec = (long)(deadline_ms % 1000u) * 1000000L;
}

/* Waits on the channel's condition with ch->lock held; false once the deadline passed. */
static bool wait_locked(struct guest_channel *ch, uint64_t deadline_ms)
{
	if (now_ms_monotonic() >= deadline_ms)
		return false;
	struct timespec ts;
	deadline_to_timespec(deadline_ms, &ts);
	pthread_cond_timedwait(&ch->cond, &ch->lock, &ts);
	return true;
}

int guest_channel_wait_hello(struct guest_channel *ch, uint64_t deadline_ms, struct guest_hello *ret)
{
	int r = 0;
	pthread_mutex_lock(&ch->lock);
	while (!ch->hello && !ch->dead)
		if (!wait_locked(ch, deadline_ms)) {
			r = -ETIMEDOUT;
			break;
		}
	if (r == 0 && !ch->hello)
		r = -EPIPE;
	if (r == 0 && ret)
		*ret = ch->hello_info;
	pthread_mutex_unlock(&ch->lock);
	return r;
}

static int stream_open(struct guest_channel *ch, struct gc_stream **ret, struct al_error *err)
{
	pthread_mutex_lock(&ch->lock);
	if (ch->dead) {
		int r = al_error_set(err, AL_ERR_CONFLICT, EPIPE, "the sandbox's guest is gone: %s", ch->dead_reason);
		pthread_mutex_unlock(&ch->lock);
		return r;
	}
	if (ch->n_streams >= GUEST_STREAMS_MAX) {
		pthread_mutex_unlock(&ch->lock);
		return al_error_set(err, AL_ERR_CONFLICT, EBUSY,
				    "the sandbox already runs %d operations; wait for one to finish",
				    GUEST_STREAMS_MAX);
	}
	struct gc_stream *s = xcalloc(1, sizeof(*s));
	s->id = ch->next_stream++;
	if (ch->next_stream == 0)
		ch->next_stream = 1;
	s->next = ch->streams;
	ch->streams = s;
	ch->n_streams++;
	pthread_mutex_unlock(&ch->lock);
	*ret = s;
	return 0;
}

int guest_channel_stream_open(struct guest_channel *ch, size_t max_output, uint32_t *ret_id, struct al_error *err)
{
	struct gc_stream *s = NULL;
	int r = stream_open(ch, &s, err);
	if (r < 0)
		return r;
	s->out[0].limit = s->out[1].limit = max_output;
	*ret_id = s->id;
	return 0;
}

void guest_channel_stream_close(struct guest_channel *ch, uint32_t id)
{
	pthread_mutex_lock(&ch->lock);
	struct gc_stream *s = stream_find(ch, id);
	pthread_mutex_unlock(&ch->lock);
	if (s)
		stream_close(ch, s);
}

static void stream_close(struct guest_channel *ch, struct gc_stream *s)
{
	pthread_mutex_lock(&ch->lock);
	for (struct gc_stream **pp = &ch->streams; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			ch->n_streams--;
			break;
		}
	pthread_mutex_unlock(&ch->lock);
	stream_free(s);
}

static json_t *exec_message(const struct exec_request *req, char **env, size_t n_env)
{
	json_t *argv = json_array();
	for (size_t i = 0; i < req->argc; i++)
		json_array_append_new(argv, json_string(req->argv[i]));
	json_t *jenv = json_array();
	for (size_t i = 0; i < n_env; i++)
		json_array_append_new(jenv, json_string(env[i]));
	return json_pack("{s:o, s:o, s:s, s:I, s:I, s:I, s:b}", "argv", argv, "env", jenv, "cwd", req->cwd, "uid",
			 (json_int_t)req->uid, "gid", (json_int_t)req->gid, "timeout_ms",
			 (json_int_t)req->timeout_s * 1000, "stdin", req->stdin_data != NULL);
}

/* Sends stdin within the agent's credit window, then EOF. */
static int exec_send_stdin(struct guest_channel *ch, struct gc_stream *s, const struct exec_request *req,
			   uint64_t deadline_ms)
{
	size_t sent = 0;
	while (sent < req->stdin_len) {
		pthread_mutex_lock(&ch->lock);
		while (!s->done && !ch->dead && sent - s->stdin_credit >= AIRLOCK_STDIN_WINDOW)
			if (!wait_locked(ch, deadline_ms))
				break;
		bool stop = s->done || ch->dead || sent - s->stdin_credit >= AIRLOCK_STDIN_WINDOW;
		size_t room = stop ? 0 : AIRLOCK_STDIN_WINDOW - (size_t)(sent - s->stdin_credit);
		pthread_mutex_unlock(&ch->lock);
		if (stop)
			return 0; /* the process ended or the guest went away: the wait below says which */
		size_t n = MIN(MIN(room, (size_t)AIRLOCK_FRAME_MAX_PAYLOAD), req->stdin_len - sent);
		int r = channel_send(ch, AIRLOCK_FRAME_STDIN, s->id, req->stdin_data + sent, n);
		if (r < 0)
			return r;
		sent += n;
	}
	return channel_send(ch, AIRLOCK_FRAME_STDIN, s->id, NULL, 0);
}

static int exec_collect(struct guest_channel *ch, struct gc_stream *s, uint64_t deadline_ms,
			struct exec_result *ret, struct al_error *err)
{
	pthread_mutex_lock(&ch->lock);
	while (!s->done && !ch->dead)
		if (!wait_locked(ch, deadline_ms))
			break;
	if (!s->done) {
		int r = ch->dead ? al_error_set(err, AL_ERR_GUEST, EPIPE, "the sandbox's guest went away during the "
									   "command: %s",
						ch->dead_reason)
				 : al_error_set(err, AL_ERR_TIMEOUT, ETIMEDOUT,
						"the guest agent did not report the command's end in time");
		pthread_mutex_unlock(&ch->lock);
		return r;
	}
	json_t *res = s->result;
	int r = 0;
	if (s->result_type == AIRLOCK_FRAME_EXIT) {
		json_t *code = json_object_get(res, "exit_code");
		json_t *sig = json_object_get(res, "signal");
		ret->timed_out = json_is_true(json_object_get(res, "timed_out"));
		if (json_is_integer(code) && json_integer_value(code) >= 0 && json_integer_value(code) <= 255) {
			ret->exited = true;
			ret->exit_code = (int)json_integer_value(code);
		} else if (json_is_integer(sig) && json_integer_value(sig) > 0 && json_integer_value(sig) < 128) {
			ret->signal = (int)json_integer_value(sig);
		} else {
			r = al_error_set(err, AL_ERR_GUEST, EBADMSG, "the guest agent sent an invalid exit status");
		}
		ret->out[0] = s->out[0];
		ret->out[1] = s->out[1];
		s->out[0] = s->out[1] = (struct exec_output){0};
	} else {
		char code[64] = "error", msg[512] = "the command could not be started";
		copy_json_string(res, "code", code, sizeof(code));
		copy_json_string(res, "message", msg, sizeof(msg));
		r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "the guest could not run the command: %s (%s)",
				 msg, code);
	}
	pthread_mutex_unlock(&ch->lock);
	return r;
}

int guest_channel_exec(struct guest_channel *ch, const struct exec_request *req, char **env, size_t n_env,
		       struct exec_result *ret, struct al_error *err)
{
	uint64_t start = now_ms_monotonic();
	uint64_t deadline = start + (uint64_t)req->timeout_s * 1000u + GUEST_EXEC_GRACE_MS;
	cleanup_json json_t *msg = exec_message(req, env, n_env);
	cleanup_free char *text = json_dumps(msg, JSON_COMPACT);
	if (!text)
		abort();
	size_t len = strlen(text);
	if (len > AIRLOCK_FRAME_MAX_PAYLOAD)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG,
				    "cmd, env and cwd together take %zu bytes once encoded; the limit is %u: pass "
				    "large scripts through stdin or a file",
				    len, AIRLOCK_FRAME_MAX_PAYLOAD);

	struct gc_stream *s = NULL;
	int r = stream_open(ch, &s, err);
	if (r < 0)
		return r;
	s->out[0].limit = s->out[1].limit = req->max_output_bytes;
	struct exec_result res = {0};
	r = channel_send(ch, AIRLOCK_FRAME_EXEC, s->id, text, len);
	if (r == 0 && req->stdin_data)
		r = exec_send_stdin(ch, s, req, deadline);
	if (r < 0)
		r = al_error_set(err, AL_ERR_GUEST, -r, "cannot send the command to the guest agent: %s",
				 strerror(-r));
	else
		r = exec_collect(ch, s, deadline, &res, err);
	stream_close(ch, s);
	if (r < 0) {
		exec_result_release(&res);
		return r;
	}
	res.duration_ms = now_ms_monotonic() - start;
	*ret = res;
	return 0;
}
