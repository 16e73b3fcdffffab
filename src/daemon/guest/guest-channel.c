/* SPDX-License-Identifier: Apache-2.0 */
#include "guest-channel.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/eventfd.h>
#include <time.h>

#include "json-cleanup.h"
#include "util.h"

struct gc_chunk {
	struct gc_chunk *next;
	uint64_t offset; /* of data[0] in the stream's output */
	uint32_t len;
	uint8_t type;
	uint8_t data[];
};

struct guest_stream {
	uint32_t id;
	uint8_t type; /* the frame that started it (EXEC, FILE_READ, ...) */
	int refs;
	bool listed; /* still in ch->streams (frames are routed to it) */
	enum guest_stream_mode mode;
	bool done;
	bool hold_on_ok;     /* FREEZE: hold the outgoing queue the moment OK arrives */
	uint8_t result_type; /* EXIT, ERROR or OK once done; 0 if the channel died */
	json_t *result;
	guest_stream_done_fn done_fn;
	void *done_ctx;
	/* COLLECT */
	struct exec_output out[2];
	/* LOG */
	struct gc_chunk *head, *tail;
	uint64_t log_start, log_end;
	size_t log_bytes;
	uint64_t *followers[GUEST_FOLLOWERS_MAX];
	/* flow control */
	uint64_t out_pending; /* output received, not yet credited to the agent */
	uint64_t in_sent, in_credit;
	struct guest_stream *next;
};

struct gc_outframe {
	struct gc_outframe *next;
	size_t len, off;
	uint8_t data[];
};

struct guest_channel {
	pthread_mutex_t lock; /* everything but fd and reader */
	pthread_cond_t cond;
	int fd;
	int wake_fd;
	struct frame_reader *reader; /* monitor thread only */
	struct gc_outframe *out_head, *out_tail;
	size_t out_bytes;
	uint64_t out_progress_ms;
	uint32_t next_stream;
	size_t n_streams;
	/* Of them, those not finished yet: what GUEST_STREAMS_MAX bounds (the
	 * finished ones are kept by their readers or a process's kept output,
	 * each bounded on its own). */
	size_t n_live;
	struct guest_stream *streams;
	bool hello;
	uint64_t hellos;
	/* HELLOs asked for and not answered yet (bounded: a silent agent does
	 * not earn a later flood its excuse), and what came unasked. */
	unsigned hellos_asked, unasked;
	/* SIGNAL/RESIZE frames sent on live streams: the agent answers a misused
	 * one (RESIZE without a PTY) with an ERROR on stream 0 (bounded too). */
	unsigned errors_asked;
	/* SECURITY: protocol violations (GUEST_STRIKES_MAX) and the last one. */
	unsigned strikes;
	char violation[256];
	/* Bytes of frames for streams nobody waits on that may still come. */
	uint64_t stray_budget;
	/* Output kept in the logs of all its streams (GUEST_CHANNEL_KEPT_MAX). */
	size_t kept_bytes;
	struct guest_hello hello_info;
	bool dead;
	char dead_reason[512];
	uint64_t dropped_frames;
	bool paused;
	/* Between FREEZE's OK and the VMM's stop nothing may reach the guest: a
	 * frame cut in half by the snapshot would be in every clone. */
	bool hold;
};

void guest_exec_result_release(struct exec_result *r)
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
	ch->fd = fd;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	ch->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ch->wake_fd < 0)
		abort();
	ch->reader = xmalloc(sizeof(*ch->reader));
	frame_reader_init(ch->reader);
	/* A guest re-attached after a daemon restart, or restored from a
	 * snapshot, may still run streams an earlier channel opened: start at
	 * a random id so that new streams do not collide with them. */
	uint32_t r;
	random_bytes(&r, sizeof(r));
	ch->next_stream = 1 + (r & 0x7fffffffu);
	ch->stray_budget = GUEST_STRAY_BUDGET;
	return ch;
}

static void log_clear(struct guest_stream *s)
{
	while (s->head) {
		struct gc_chunk *c = s->head;
		s->head = c->next;
		free(c);
	}
	s->tail = NULL;
	s->log_bytes = 0;
}

static void stream_free(struct guest_stream *s)
{
	if (s->result)
		json_decref(s->result);
	free(s->out[0].data);
	free(s->out[1].data);
	log_clear(s);
	free(s);
}

void guest_channel_free(struct guest_channel *ch)
{
	if (!ch)
		return;
	while (ch->streams) {
		struct guest_stream *s = ch->streams;
		ch->streams = s->next;
		stream_free(s);
	}
	while (ch->out_head) {
		struct gc_outframe *f = ch->out_head;
		ch->out_head = f->next;
		free(f);
	}
	if (ch->fd >= 0)
		close(ch->fd);
	close(ch->wake_fd);
	free(ch->reader);
	pthread_cond_destroy(&ch->cond);
	pthread_mutex_destroy(&ch->lock);
	free(ch);
}

int guest_channel_fd(struct guest_channel *ch)
{
	return ch->fd;
}

int guest_channel_wake_fd(struct guest_channel *ch)
{
	return ch->wake_fd;
}

/* ---- outgoing queue ---------------------------------------------------------------------------- */

static void wake_monitor(struct guest_channel *ch)
{
	uint64_t one = 1;
	ssize_t r = write(ch->wake_fd, &one, sizeof(one));
	(void)r; /* EAGAIN: already signalled */
}

/* Queues one frame; with ch->lock held. Never blocks. */
static int enqueue_locked(struct guest_channel *ch, uint8_t type, uint32_t stream, const void *payload, size_t len)
{
	if (ch->dead)
		return -ECONNRESET;
	if (len > AIRLOCK_FRAME_MAX_PAYLOAD)
		return -EMSGSIZE;
	struct gc_outframe *f = xmalloc(sizeof(*f) + AIRLOCK_FRAME_HEADER_SIZE + len);
	struct airlock_frame_header h = {
	    .version = AIRLOCK_PROTO_VERSION,
	    .type = type,
	    .stream = stream,
	    .length = (uint32_t)len,
	};
	frame_header_encode(&h, f->data);
	if (len)
		memcpy(f->data + AIRLOCK_FRAME_HEADER_SIZE, payload, len);
	f->len = AIRLOCK_FRAME_HEADER_SIZE + len;
	f->off = 0;
	f->next = NULL;
	if (!ch->out_head) {
		ch->out_head = f;
		ch->out_progress_ms = now_ms_monotonic();
	} else {
		ch->out_tail->next = f;
	}
	ch->out_tail = f;
	ch->out_bytes += f->len;
	wake_monitor(ch);
	return 0;
}

static void kill_locked(struct guest_channel *ch, const char *reason);

bool guest_channel_want_write(struct guest_channel *ch)
{
	pthread_mutex_lock(&ch->lock);
	bool want = ch->out_head != NULL && !ch->dead;
	pthread_mutex_unlock(&ch->lock);
	return want;
}

int guest_channel_flush(struct guest_channel *ch)
{
	uint64_t drained;
	while (read(ch->wake_fd, &drained, sizeof(drained)) > 0)
		;
	int r = 0;
	pthread_mutex_lock(&ch->lock);
	bool progressed = false;
	/* ch->fd < 0: detached (guest_channel_replace_fd), frames wait. */
	while (ch->out_head && !ch->dead && !ch->hold && ch->fd >= 0) {
		struct gc_outframe *f = ch->out_head;
		ssize_t n = write(ch->fd, f->data + f->off, f->len - f->off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				kill_locked(ch, "writing to the guest channel failed");
				r = -EPIPE;
			}
			break;
		}
		progressed = true;
		f->off += (size_t)n;
		ch->out_bytes -= (size_t)n;
		if (f->off == f->len) {
			ch->out_head = f->next;
			if (!ch->out_head)
				ch->out_tail = NULL;
			free(f);
		}
	}
	uint64_t now = now_ms_monotonic();
	if (progressed)
		ch->out_progress_ms = now;
	else if (ch->paused || ch->hold || ch->fd < 0)
		ch->out_progress_ms = now;
	else if (ch->out_head && !ch->dead && now - ch->out_progress_ms > GUEST_WRITE_TIMEOUT_MS) {
		kill_locked(ch, "the guest agent stopped reading its channel");
		r = -ETIMEDOUT;
	}
	if (progressed)
		pthread_cond_broadcast(&ch->cond);
	pthread_mutex_unlock(&ch->lock);
	return r;
}

int guest_channel_freeze(struct guest_channel *ch, uint64_t deadline_ms, struct al_error *err)
{
	cleanup_json json_t *msg = json_object();
	struct guest_stream *s = NULL;
	int r = guest_stream_start(ch, AIRLOCK_FRAME_FREEZE, msg, GUEST_STREAM_COLLECT, 0, &s, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&ch->lock);
	s->hold_on_ok = true;
	pthread_mutex_unlock(&ch->lock);
	return guest_stream_finish(ch, s, deadline_ms, "the snapshot hook (FREEZE)", NULL, err);
}

void guest_channel_release_hold(struct guest_channel *ch)
{
	pthread_mutex_lock(&ch->lock);
	ch->hold = false;
	ch->out_progress_ms = now_ms_monotonic();
	pthread_mutex_unlock(&ch->lock);
	wake_monitor(ch);
}

void guest_channel_set_paused(struct guest_channel *ch, bool paused)
{
	pthread_mutex_lock(&ch->lock);
	ch->paused = paused;
	ch->out_progress_ms = now_ms_monotonic();
	pthread_mutex_unlock(&ch->lock);
}

/* ---- life and death ----------------------------------------------------------------------------- */

static void stream_finish_locked(struct guest_channel *ch, struct guest_stream *s, uint8_t type, json_t *result)
{
	if (s->done) {
		if (result)
			json_decref(result);
		return;
	}
	s->done = true;
	if (s->listed)
		ch->n_live--;
	s->result_type = type;
	s->result = result;
	if (s->hold_on_ok && type == AIRLOCK_FRAME_OK)
		ch->hold = true;
	if (s->done_fn)
		s->done_fn(s->done_ctx, type, result);
}

static void kill_locked(struct guest_channel *ch, const char *reason)
{
	if (!ch->dead) {
		ch->dead = true;
		strlcpy_al(ch->dead_reason, reason, sizeof(ch->dead_reason));
		for (struct guest_stream *s = ch->streams; s; s = s->next)
			stream_finish_locked(ch, s, 0,
			                     json_pack("{s:s, s:s}", "code", "guest_gone", "message", reason));
	}
	pthread_cond_broadcast(&ch->cond);
}

/* The host stopped waiting for a stream the agent may still be answering:
 * what it may still send (a window, and the frames that end it) is late,
 * not a violation. */
static void stray_allow_locked(struct guest_channel *ch)
{
	ch->stray_budget = MIN(ch->stray_budget + AIRLOCK_OUTPUT_WINDOW + 16u * GUEST_STRAY_FRAME_COST,
	                       (uint64_t)GUEST_STRAY_BUDGET_MAX);
}

/* SECURITY: one protocol violation by the guest. The stream it concerns (if
 * any) ends with an error; the GUEST_STRIKES_MAX-th violation closes the
 * channel: -EPROTO (guest_channel_read kills it; the monitor stops the VM
 * and puts the sandbox in state error). */
static int violation_locked(struct guest_channel *ch, struct guest_stream *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int violation_locked(struct guest_channel *ch, struct guest_stream *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(ch->violation, sizeof(ch->violation), fmt, ap);
	va_end(ap);
	ch->strikes++;
	if (s && !s->done) {
		char msg[400];
		snprintf(msg, sizeof(msg),
		         "the guest agent broke the protocol (%s; violation %u, the channel is closed at %d)",
		         ch->violation, ch->strikes, GUEST_STRIKES_MAX);
		stream_finish_locked(ch, s, AIRLOCK_FRAME_ERROR,
		                     json_pack("{s:s, s:s}", "code", "guest_protocol", "message", msg));
		stray_allow_locked(ch);
	}
	return ch->strikes >= GUEST_STRIKES_MAX ? -EPROTO : 0;
}

unsigned guest_channel_strikes(struct guest_channel *ch)
{
	pthread_mutex_lock(&ch->lock);
	unsigned n = ch->strikes;
	pthread_mutex_unlock(&ch->lock);
	return n;
}

void guest_channel_kill(struct guest_channel *ch, const char *reason)
{
	pthread_mutex_lock(&ch->lock);
	kill_locked(ch, reason);
	pthread_mutex_unlock(&ch->lock);
}

void guest_channel_replace_fd(struct guest_channel *ch, int new_fd)
{
	pthread_mutex_lock(&ch->lock);
	if (ch->fd >= 0)
		close(ch->fd);
	ch->fd = new_fd;
	if (new_fd >= 0)
		fcntl(new_fd, F_SETFL, fcntl(new_fd, F_GETFL) | O_NONBLOCK);
	/* What the agent does when its host goes (docs/guest.md, "Channel
	 * behaviour"), mirrored: a frame half-read or half-written is dropped
	 * (the agent drops its half too), whole queued frames go to the next
	 * connection. */
	frame_reader_init(ch->reader);
	if (ch->out_head && ch->out_head->off > 0) {
		struct gc_outframe *f = ch->out_head;
		ch->out_head = f->next;
		if (!ch->out_head)
			ch->out_tail = NULL;
		ch->out_bytes -= f->len - f->off;
		free(f);
	}
	for (struct guest_stream *s = ch->streams; s; s = s->next) {
		if (s->done)
			continue;
		if (s->type != AIRLOCK_FRAME_EXEC) {
			/* The agent drops file transfers (and every other request)
			 * with the connection that started them. */
			stream_finish_locked(
			    ch, s, AIRLOCK_FRAME_ERROR,
			    json_pack("{s:s, s:s}", "code", "guest_gone", "message",
			              "the guest channel was reset (a snapshot of the VM); try again"));
			stray_allow_locked(ch);
			continue;
		}
		/* The agent gives each exec a full window, less what it still
		 * has queued: nothing received before is owed any more. */
		s->out_pending = 0;
	}
	/* The next HELLO is the new connection's, and unasked. */
	ch->hello = false;
	ch->unasked = 0;
	ch->out_progress_ms = now_ms_monotonic();
	pthread_cond_broadcast(&ch->cond);
	pthread_mutex_unlock(&ch->lock);
	wake_monitor(ch);
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

/* ---- incoming frames ---------------------------------------------------------------------------- */

static struct guest_stream *stream_find(struct guest_channel *ch, uint32_t id)
{
	for (struct guest_stream *s = ch->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

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
	int r = 0;
	/* SECURITY: a HELLO answers one the host asked for, or is the one a
	 * connection starts with; a flood of them is a violation. */
	if (ch->hellos_asked > 0)
		ch->hellos_asked--;
	else if (++ch->unasked > GUEST_UNASKED_MAX)
		r = violation_locked(ch, NULL, "more than %d HELLO or stream-0 frames unasked", GUEST_UNASKED_MAX);
	ch->hello = true;
	ch->hellos++;
	ch->hello_info = h;
	pthread_cond_broadcast(&ch->cond);
	pthread_mutex_unlock(&ch->lock);
	return r;
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

/* The position of the slowest reader, or log_end when nobody reads. */
static uint64_t slowest_reader(const struct guest_stream *s)
{
	uint64_t min = s->log_end;
	for (size_t i = 0; i < GUEST_FOLLOWERS_MAX; i++)
		if (s->followers[i] && *s->followers[i] < min)
			min = *s->followers[i];
	return min;
}

/* Returns consumed output to the agent as credit, unless a reader lags (then
 * the producer waits for it); with ch->lock held. */
static void credit_locked(struct guest_channel *ch, struct guest_stream *s, bool force)
{
	if (s->out_pending == 0 || s->done)
		return;
	if (s->mode == GUEST_STREAM_LOG && s->log_end - slowest_reader(s) > GUEST_LOG_CAPACITY / 2)
		return;
	if (!force && s->out_pending < GUEST_CREDIT_BATCH)
		return;
	while (s->out_pending > 0) {
		uint32_t n = (uint32_t)MIN(s->out_pending, (uint64_t)UINT32_MAX);
		uint8_t be[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
		if (enqueue_locked(ch, AIRLOCK_FRAME_CREDIT, s->id, be, sizeof(be)) < 0)
			return;
		s->out_pending -= n;
	}
}

static void log_append(struct guest_channel *ch, struct guest_stream *s, uint8_t type, const uint8_t *data, size_t len)
{
	if (len == 0)
		return;
	struct gc_chunk *c = xmalloc(sizeof(*c) + len);
	c->next = NULL;
	c->offset = s->log_end;
	c->len = (uint32_t)len;
	c->type = type;
	memcpy(c->data, data, len);
	if (s->tail)
		s->tail->next = c;
	else
		s->head = c;
	s->tail = c;
	s->log_end += len;
	s->log_bytes += len;
	ch->kept_bytes += len;
	/* Forget the oldest output beyond the capacity of the stream or of the
	 * sandbox, but never what a reader has not read yet (the withheld credit
	 * bounds that). */
	uint64_t keep_from = slowest_reader(s);
	while (s->head && (s->log_bytes > GUEST_LOG_CAPACITY || ch->kept_bytes > GUEST_CHANNEL_KEPT_MAX) &&
	       s->head->offset + s->head->len <= keep_from) {
		struct gc_chunk *old = s->head;
		s->head = old->next;
		if (!s->head)
			s->tail = NULL;
		s->log_bytes -= old->len;
		ch->kept_bytes -= old->len;
		s->log_start = old->offset + old->len;
		free(old);
	}
}

static void handle_data_locked(struct guest_channel *ch, struct guest_stream *s, uint8_t type, const uint8_t *payload,
                               size_t len)
{
	if (s->mode == GUEST_STREAM_COLLECT)
		output_append(&s->out[type == AIRLOCK_FRAME_STDERR ? 1 : 0], payload, len);
	else
		log_append(ch, s, type, payload, len);
	s->out_pending += len;
	credit_locked(ch, s, false);
}

/* Which frames a guest may send on a stream the host opened with a given
 * frame (proto.h): anything else answers what was not asked. */
static bool frame_fits_stream(const struct guest_stream *s, uint8_t type)
{
	switch (type) {
	case AIRLOCK_FRAME_STDOUT:
	case AIRLOCK_FRAME_STDERR:
	case AIRLOCK_FRAME_EXIT:
		return s->type == AIRLOCK_FRAME_EXEC;
	case AIRLOCK_FRAME_FILE_DATA:
		/* Of FILE_OPs only a list answers with data, and its stream is
		 * the only FILE_OP stream with a log. */
		return s->type == AIRLOCK_FRAME_FILE_READ ||
		       (s->type == AIRLOCK_FRAME_FILE_OP && s->mode == GUEST_STREAM_LOG);
	case AIRLOCK_FRAME_WATCH_EVENTS:
		return s->type == AIRLOCK_FRAME_WATCH;
	case AIRLOCK_FRAME_CREDIT:
		return s->type == AIRLOCK_FRAME_EXEC || s->type == AIRLOCK_FRAME_FILE_WRITE;
	case AIRLOCK_FRAME_OK:
		return s->type != AIRLOCK_FRAME_EXEC;
	case AIRLOCK_FRAME_ERROR:
		return true;
	default:
		return false;
	}
}

/* SECURITY: what is kept of a guest's EXIT/ERROR/OK object: its scalar
 * members only (every answer of the protocol is flat), at most
 * GUEST_RESULT_MEMBERS_MAX of them, strings cut at GUEST_RESULT_STRING_MAX
 * bytes (on a UTF-8 boundary), so that a result costs the daemon a bounded
 * amount of memory however it was built. Takes j. */
json_t *guest_result_flatten(json_t *j)
{
	json_t *out = json_object();
	const char *key;
	json_t *v;
	size_t n = 0;
	json_object_foreach (j, key, v) {
		if (n >= GUEST_RESULT_MEMBERS_MAX || strlen(key) > 64)
			continue;
		json_t *copy = NULL;
		if (json_is_string(v)) {
			size_t len = json_string_length(v);
			const char *str = json_string_value(v);
			if (len > GUEST_RESULT_STRING_MAX) {
				len = GUEST_RESULT_STRING_MAX;
				while (len > 0 && ((unsigned char)str[len] & 0xc0) == 0x80)
					len--;
			}
			copy = json_stringn(str, len);
		} else if (json_is_integer(v) || json_is_real(v) || json_is_boolean(v) || json_is_null(v)) {
			copy = json_copy(v);
		}
		if (copy) {
			json_object_set_new(out, key, copy);
			n++;
		}
	}
	json_decref(j);
	return out;
}

static int handle_result_locked(struct guest_channel *ch, struct guest_stream *s, const struct airlock_frame_header *h,
                                const uint8_t *payload)
{
	if (h->length > GUEST_RESULT_MAX)
		return violation_locked(ch, s, "%s of %u bytes (the limit is %u)", frame_type_name(h->type), h->length,
		                        GUEST_RESULT_MAX);
	json_t *j = json_loadb((const char *)payload, h->length, 0, NULL);
	uint8_t type = h->type;
	if (!json_is_object(j)) {
		if (j)
			json_decref(j);
		j = json_pack("{s:s, s:s}", "code", "bad_reply", "message", "the guest agent sent a malformed reply");
		type = AIRLOCK_FRAME_ERROR;
	} else {
		j = guest_result_flatten(j);
	}
	stream_finish_locked(ch, s, type, j);
	return 0;
}

/* A frame for a stream that ended or was never opened: dropped unread, and
 * charged to the connection's budget of late frames. */
static int handle_stray_locked(struct guest_channel *ch, const struct airlock_frame_header *h)
{
	ch->dropped_frames++;
	uint64_t cost = MAX((uint64_t)h->length, (uint64_t)GUEST_STRAY_FRAME_COST);
	if (ch->stray_budget >= cost) {
		ch->stray_budget -= cost;
		return 0;
	}
	ch->stray_budget = 0;
	return violation_locked(ch, NULL, "%s for stream %u, which is not open, past the budget of late frames",
	                        frame_type_name(h->type), h->stream);
}

static int handle_stream0_locked(struct guest_channel *ch, const struct airlock_frame_header *h)
{
	/* Stream-0 ERRORs report a misused stream; nothing waits on them. */
	ch->dropped_frames++;
	if (h->type != AIRLOCK_FRAME_ERROR)
		return violation_locked(ch, NULL, "%s on stream 0", frame_type_name(h->type));
	if (ch->errors_asked > 0)
		ch->errors_asked--;
	else if (++ch->unasked > GUEST_UNASKED_MAX)
		return violation_locked(ch, NULL, "more than %d HELLO or stream-0 frames unasked", GUEST_UNASKED_MAX);
	return 0;
}

/* SECURITY: a name in a guest's watch event: 1..GUEST_WATCH_NAME_MAX bytes
 * (JSON made it UTF-8), no NUL, relative, without empty, "." or ".."
 * components, so that joined to the watched directory it names something
 * below it. */
static bool watch_name_valid(json_t *v)
{
	if (!json_is_string(v))
		return false;
	const char *name = json_string_value(v);
	size_t len = json_string_length(v);
	if (len == 0 || len > GUEST_WATCH_NAME_MAX || strlen(name) != len)
		return false;
	for (const char *c = name;;) {
		const char *slash = strchr(c, '/');
		size_t n = slash ? (size_t)(slash - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		if (!slash)
			return true;
		c = slash + 1;
	}
}

/* SECURITY: the stat object a watch event may carry (the FILE_OP stat of
 * proto.h): every member typed and bounded, or the frame is refused; the
 * copy has only these members. NULL when it is not valid. */
static json_t *watch_entry_check(json_t *e)
{
	static const char *const types[] = {"file", "dir", "symlink", "other"};
	json_t *name = json_object_get(e, "name"), *target = json_object_get(e, "target");
	const char *type = json_string_value(json_object_get(e, "type"));
	size_t k = 0;
	while (type && k < ARRAY_SIZE(types) && strcmp(type, types[k]))
		k++;
	if (!json_is_object(e) || !json_is_string(name) || json_string_length(name) > GUEST_WATCH_NAME_MAX ||
	    strlen(json_string_value(name)) != json_string_length(name) || !type || k == ARRAY_SIZE(types) ||
	    (target && (!json_is_string(target) || json_string_length(target) > GUEST_WATCH_NAME_MAX ||
	                strlen(json_string_value(target)) != json_string_length(target))))
		return NULL;
	static const struct {
		const char *key;
		json_int_t min, max;
	} ints[] = {
	    {"size", 0, INT64_MAX},
	    {"mode", 0, 07777},
	    {"uid", 0, UINT32_MAX},
	    {"gid", 0, UINT32_MAX},
	    {"mtime_ms", INT64_MIN, INT64_MAX},
	};
	json_t *out = json_pack("{s:O, s:s}", "name", name, "type", types[k]);
	for (size_t i = 0; i < ARRAY_SIZE(ints); i++) {
		json_t *v = json_object_get(e, ints[i].key);
		if (!json_is_integer(v) || json_integer_value(v) < ints[i].min || json_integer_value(v) > ints[i].max) {
			json_decref(out);
			return NULL;
		}
		json_object_set(out, ints[i].key, v);
	}
	if (target)
		json_object_set(out, "target", target);
	return out;
}

static bool watch_count_valid(json_t *v)
{
	return !v || (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= (1ll << 53));
}

json_t *guest_watch_events_check(const uint8_t *payload, size_t len, char *why, size_t why_size)
{
	static const char *const ops[] = {"create", "write", "remove", "rename", "chmod"};
	cleanup_json json_t *j = json_loadb((const char *)payload, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *events = json_object_get(j, "events"), *started = json_object_get(j, "started");
	if (!json_is_object(j) || !json_is_array(events)) {
		snprintf(why, why_size, "not a JSON object with an \"events\" array");
		return NULL;
	}
	if (json_array_size(events) > AIRLOCK_WATCH_FRAME_EVENTS_MAX) {
		snprintf(why, why_size, "%zu events in one frame (the limit is %d)", json_array_size(events),
		         AIRLOCK_WATCH_FRAME_EVENTS_MAX);
		return NULL;
	}
	const char *counts[] = {"lost", "unwatched", "watches"};
	for (size_t i = 0; i < ARRAY_SIZE(counts); i++)
		if (!watch_count_valid(json_object_get(j, counts[i]))) {
			snprintf(why, why_size, "\"%s\" is not a count", counts[i]);
			return NULL;
		}
	if (started && !json_is_boolean(started)) {
		snprintf(why, why_size, "\"started\" is not a boolean");
		return NULL;
	}
	json_t *out_events = json_array();
	json_t *out = json_pack("{s:o}", "events", out_events);
	size_t i;
	json_t *e;
	json_array_foreach (events, i, e) {
		json_t *name = json_object_get(e, "name");
		const char *op = json_string_value(json_object_get(e, "op"));
		size_t k = 0;
		while (op && k < ARRAY_SIZE(ops) && strcmp(op, ops[k]))
			k++;
		json_t *entry = json_object_get(e, "entry"), *entry_copy = NULL;
		if (!json_is_object(e) || !watch_name_valid(name) || !op || k == ARRAY_SIZE(ops) ||
		    (entry && !(entry_copy = watch_entry_check(entry)))) {
			snprintf(why, why_size,
			         "event %zu is not {\"name\": a relative path, \"op\": %s, \"entry\"?: a stat object}",
			         i, "create|write|remove|rename|chmod");
			json_decref(out);
			return NULL;
		}
		json_t *copy = json_pack("{s:O, s:s}", "name", name, "op", ops[k]);
		if (entry_copy)
			json_object_set_new(copy, "entry", entry_copy);
		json_array_append_new(out_events, copy);
	}
	for (size_t c = 0; c < ARRAY_SIZE(counts); c++)
		if (json_object_get(j, counts[c]))
			json_object_set(out, counts[c], json_object_get(j, counts[c]));
	if (started)
		json_object_set(out, "started", started);
	return out;
}

/* A WATCH_EVENTS frame within the window: what is kept (and read by the
 * API) is the checked copy, never the guest's bytes; the credit is for the
 * guest's bytes. */
static int handle_watch_events_locked(struct guest_channel *ch, struct guest_stream *s,
                                      const struct airlock_frame_header *h, const uint8_t *payload)
{
	if (s->out_pending + h->length > AIRLOCK_OUTPUT_WINDOW)
		return violation_locked(ch, s, "%s beyond the output window: %" PRIu64 " bytes not credited yet",
		                        frame_type_name(h->type), s->out_pending + h->length);
	char why[160];
	cleanup_json json_t *checked = guest_watch_events_check(payload, h->length, why, sizeof(why));
	if (!checked)
		return violation_locked(ch, s, "a malformed WATCH_EVENTS: %s", why);
	cleanup_free char *text = json_dumps(checked, JSON_COMPACT);
	if (!text)
		abort();
	log_append(ch, s, h->type, (const uint8_t *)text, strlen(text));
	s->out_pending += h->length;
	credit_locked(ch, s, false);
	return 0;
}

/* Output within the stream's window (AIRLOCK_OUTPUT_WINDOW): the host
 * returns credit as it consumes, so received-but-not-credited bytes are what
 * the agent may have in flight; more is a guest ignoring its window. */
static int handle_output_locked(struct guest_channel *ch, struct guest_stream *s, const struct airlock_frame_header *h,
                                const uint8_t *payload)
{
	if (h->type == AIRLOCK_FRAME_FILE_DATA && h->length == 0) {
		/* A zero-length FILE_DATA ends a read: it carries no bytes. */
		stream_finish_locked(ch, s, AIRLOCK_FRAME_OK, json_object());
		return 0;
	}
	if (s->out_pending + h->length > AIRLOCK_OUTPUT_WINDOW)
		return violation_locked(ch, s, "%s beyond the output window: %" PRIu64 " bytes not credited yet",
		                        frame_type_name(h->type), s->out_pending + h->length);
	handle_data_locked(ch, s, h->type, payload, h->length);
	return 0;
}

int guest_channel_handle_frame(struct guest_channel *ch, const struct airlock_frame_header *h, const uint8_t *payload)
{
	if (h->stream == 0 && h->type == AIRLOCK_FRAME_HELLO)
		return handle_hello(ch, payload, h->length);
	pthread_mutex_lock(&ch->lock);
	int r = 0;
	struct guest_stream *s = h->stream ? stream_find(ch, h->stream) : NULL;
	if (h->stream == 0)
		r = handle_stream0_locked(ch, h);
	else if (!s || s->done)
		r = handle_stray_locked(ch, h);
	else if (!frame_fits_stream(s, h->type))
		r = violation_locked(ch, s, "%s on a stream opened with %s", frame_type_name(h->type),
		                     frame_type_name(s->type));
	else if (h->type == AIRLOCK_FRAME_CREDIT) {
		if (h->length != 4)
			r = violation_locked(ch, s, "a CREDIT of %u bytes", h->length);
		else
			s->in_credit += ((uint32_t)payload[0] << 24) | ((uint32_t)payload[1] << 16) |
			                ((uint32_t)payload[2] << 8) | payload[3];
	} else if (h->type == AIRLOCK_FRAME_EXIT || h->type == AIRLOCK_FRAME_ERROR || h->type == AIRLOCK_FRAME_OK)
		r = handle_result_locked(ch, s, h, payload);
	else if (h->type == AIRLOCK_FRAME_WATCH_EVENTS)
		r = handle_watch_events_locked(ch, s, h, payload);
	else
		r = handle_output_locked(ch, s, h, payload);
	pthread_cond_broadcast(&ch->cond);
	pthread_mutex_unlock(&ch->lock);
	return r;
}

/* SECURITY: the guest broke the protocol beyond what is forgiven (r from
 * the frame reader or the handler): its channel is closed for good. */
static void channel_cut_off(struct guest_channel *ch, int r)
{
	char why[512];
	pthread_mutex_lock(&ch->lock);
	if (r == -EPROTO && ch->strikes >= GUEST_STRIKES_MAX)
		snprintf(why, sizeof(why),
		         "the guest agent broke the protocol %u times (the last: %s); its channel is closed",
		         ch->strikes, ch->violation);
	else
		snprintf(why, sizeof(why),
		         "the guest agent broke the protocol (%s: an unreadable frame); its channel is closed",
		         strerror(-r));
	kill_locked(ch, why);
	pthread_mutex_unlock(&ch->lock);
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
				channel_cut_off(ch, r);
				return -EPROTO;
			}
		}
	}
	return 0;
}

/* ---- hello, shutdown ------------------------------------------------------------------------------ */

static int send_control0(struct guest_channel *ch, uint8_t type)
{
	pthread_mutex_lock(&ch->lock);
	int r = enqueue_locked(ch, type, 0, "{}", 2);
	pthread_mutex_unlock(&ch->lock);
	return r;
}

int guest_channel_request_hello(struct guest_channel *ch)
{
	pthread_mutex_lock(&ch->lock);
	/* Bounded: a silent agent does not earn credit for a later flood. */
	if (ch->hellos_asked < 4)
		ch->hellos_asked++;
	pthread_mutex_unlock(&ch->lock);
	return send_control0(ch, AIRLOCK_FRAME_HELLO);
}

uint64_t guest_channel_hellos(struct guest_channel *ch)
{
	pthread_mutex_lock(&ch->lock);
	uint64_t n = ch->hellos;
	pthread_mutex_unlock(&ch->lock);
	return n;
}

int guest_channel_shutdown(struct guest_channel *ch)
{
	return send_control0(ch, AIRLOCK_FRAME_SHUTDOWN);
}

/* Waits on the channel's condition with ch->lock held; false once the deadline passed. */
static bool wait_locked(struct guest_channel *ch, uint64_t deadline_ms)
{
	if (now_ms_monotonic() >= deadline_ms)
		return false;
	struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000u),
	                      .tv_nsec = (long)(deadline_ms % 1000u) * 1000000L};
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

/* ---- streams ------------------------------------------------------------------------------------ */

int guest_stream_start(struct guest_channel *ch, uint8_t type, json_t *msg, enum guest_stream_mode mode,
                       size_t collect_limit, struct guest_stream **ret, struct al_error *err)
{
	cleanup_free char *text = json_dumps(msg, JSON_COMPACT);
	if (!text)
		abort();
	size_t len = strlen(text);
	if (len > AIRLOCK_FRAME_MAX_PAYLOAD)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG,
		                    "the request takes %zu bytes once encoded for the guest; the limit is %u (pass "
		                    "large inputs through stdin or a file)",
		                    len, AIRLOCK_FRAME_MAX_PAYLOAD);
	pthread_mutex_lock(&ch->lock);
	int r = 0;
	if (ch->dead)
		r = al_error_set(err, AL_ERR_CONFLICT, EPIPE, "the sandbox's guest is gone: %s", ch->dead_reason);
	else if (ch->n_live >= GUEST_STREAMS_MAX)
		r = al_error_set(err, AL_ERR_CONFLICT, EBUSY,
		                 "the sandbox already runs %d processes and transfers, the most it may run at once; "
		                 "wait for one to finish (or signal one)",
		                 GUEST_STREAMS_MAX);
	if (r < 0) {
		pthread_mutex_unlock(&ch->lock);
		return r;
	}
	struct guest_stream *s = xcalloc(1, sizeof(*s));
	do {
		s->id = ch->next_stream++;
		if (ch->next_stream == 0)
			ch->next_stream = 1;
	} while (stream_find(ch, s->id));
	s->refs = 1;
	s->type = type;
	s->listed = true;
	s->mode = mode;
	s->out[0].limit = s->out[1].limit = collect_limit;
	s->next = ch->streams;
	ch->streams = s;
	ch->n_streams++;
	ch->n_live++;
	enqueue_locked(ch, type, s->id, text, len);
	pthread_mutex_unlock(&ch->lock);
	*ret = s;
	return 0;
}

void guest_stream_set_done_cb(struct guest_channel *ch, struct guest_stream *s, guest_stream_done_fn fn, void *ctx)
{
	pthread_mutex_lock(&ch->lock);
	s->done_fn = fn;
	s->done_ctx = ctx;
	bool done = s->done;
	pthread_mutex_unlock(&ch->lock);
	if (done && fn)
		fn(ctx, s->result_type, s->result);
}

uint32_t guest_stream_id(struct guest_stream *s)
{
	return s->id;
}

void guest_stream_ref(struct guest_channel *ch, struct guest_stream *s)
{
	pthread_mutex_lock(&ch->lock);
	s->refs++;
	pthread_mutex_unlock(&ch->lock);
}

void guest_stream_unref(struct guest_channel *ch, struct guest_stream *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&ch->lock);
	bool last = --s->refs == 0;
	if (last)
		ch->kept_bytes -= s->log_bytes;
	if (last && s->listed) {
		for (struct guest_stream **pp = &ch->streams; *pp; pp = &(*pp)->next)
			if (*pp == s) {
				*pp = s->next;
				ch->n_streams--;
				if (!s->done) {
					ch->n_live--;
					stray_allow_locked(ch);
				}
				break;
			}
	}
	pthread_mutex_unlock(&ch->lock);
	if (last)
		stream_free(s);
}

int guest_stream_send_data(struct guest_channel *ch, struct guest_stream *s, uint8_t type, const void *data, size_t len,
                           uint64_t deadline_ms)
{
	const uint8_t *p = data;
	int r = 0;
	pthread_mutex_lock(&ch->lock);
	do {
		size_t n = MIN(len, (size_t)AIRLOCK_FRAME_MAX_PAYLOAD);
		/* Wait for the agent's window and for room in our queue. */
		while (!ch->dead && !s->done &&
		       (s->in_sent + n - s->in_credit > AIRLOCK_STDIN_WINDOW || ch->out_bytes > GUEST_OUTQ_MAX))
			if (!wait_locked(ch, deadline_ms)) {
				r = -ETIMEDOUT;
				break;
			}
		if (r < 0)
			break;
		if (ch->dead) {
			r = -ECONNRESET;
			break;
		}
		if (s->done) {
			r = -EPIPE;
			break;
		}
		if ((r = enqueue_locked(ch, type, s->id, p, n)) < 0)
			break;
		s->in_sent += n;
		p += n;
		len -= n;
	} while (len > 0);
	pthread_mutex_unlock(&ch->lock);
	return r;
}

int guest_stream_send_control(struct guest_channel *ch, struct guest_stream *s, uint8_t type, json_t *msg)
{
	cleanup_free char *text = json_dumps(msg, JSON_COMPACT);
	if (!text)
		abort();
	pthread_mutex_lock(&ch->lock);
	int r = s->done ? -EPIPE : enqueue_locked(ch, type, s->id, text, strlen(text));
	if (r == 0 && ch->errors_asked < 64)
		ch->errors_asked++;
	pthread_mutex_unlock(&ch->lock);
	return r;
}

int guest_stream_wait_done(struct guest_channel *ch, struct guest_stream *s, uint64_t deadline_ms)
{
	int r = 0;
	pthread_mutex_lock(&ch->lock);
	while (!s->done)
		if (!wait_locked(ch, deadline_ms)) {
			r = -ETIMEDOUT;
			break;
		}
	if (r == 0 && s->result_type == 0)
		r = -ECONNRESET;
	pthread_mutex_unlock(&ch->lock);
	return r;
}

int guest_stream_finish(struct guest_channel *ch, struct guest_stream *s, uint64_t deadline_ms, const char *what,
                        json_t **ret_result, struct al_error *err)
{
	bool holds = s->hold_on_ok; /* set by this thread, if at all (FREEZE) */
	int r = guest_stream_wait_done(ch, s, deadline_ms);
	uint8_t type = 0;
	json_t *result = NULL;
	if (r == 0)
		guest_stream_done(ch, s, &type, &result);
	guest_stream_unref(ch, s);
	if (r < 0) {
		/* Given up on: an OK that comes late must not hold the queue for good. */
		if (holds)
			guest_channel_release_hold(ch);
		return al_error_set(err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_GUEST, -r,
		                    "the guest agent did not finish %s", what);
	}
	if (type != AIRLOCK_FRAME_OK) {
		r = guest_result_to_error(result, what, err);
		json_decref(result);
		return r;
	}
	if (ret_result)
		*ret_result = result;
	else
		json_decref(result);
	return 0;
}

bool guest_stream_done(struct guest_channel *ch, struct guest_stream *s, uint8_t *ret_type, json_t **ret_result)
{
	pthread_mutex_lock(&ch->lock);
	bool done = s->done;
	if (done) {
		if (ret_type)
			*ret_type = s->result_type;
		if (ret_result)
			*ret_result = s->result ? json_incref(s->result) : json_object();
	}
	pthread_mutex_unlock(&ch->lock);
	return done;
}

void guest_stream_take_output(struct guest_channel *ch, struct guest_stream *s, struct exec_output out[2])
{
	pthread_mutex_lock(&ch->lock);
	out[0] = s->out[0];
	out[1] = s->out[1];
	s->out[0].data = s->out[1].data = NULL;
	s->out[0].len = s->out[1].len = s->out[0].cap = s->out[1].cap = 0;
	pthread_mutex_unlock(&ch->lock);
}

void guest_stream_stats(struct guest_channel *ch, struct guest_stream *s, uint64_t *ret_bytes, uint64_t *ret_dropped)
{
	pthread_mutex_lock(&ch->lock);
	if (s->mode == GUEST_STREAM_LOG) {
		*ret_bytes = s->log_end;
		*ret_dropped = s->log_start;
	} else {
		*ret_bytes = s->out[0].total + s->out[1].total;
		*ret_dropped = (s->out[0].total - s->out[0].len) + (s->out[1].total - s->out[1].len);
	}
	pthread_mutex_unlock(&ch->lock);
}

/* ---- readers ------------------------------------------------------------------------------------ */

int guest_cursor_open(struct guest_channel *ch, struct guest_stream *s, bool from_start, struct guest_cursor *ret)
{
	pthread_mutex_lock(&ch->lock);
	int slot = -1;
	for (int i = 0; i < GUEST_FOLLOWERS_MAX; i++)
		if (!s->followers[i]) {
			slot = i;
			break;
		}
	if (slot < 0) {
		pthread_mutex_unlock(&ch->lock);
		return -EBUSY;
	}
	*ret = (struct guest_cursor){.s = s, .pos = from_start ? s->log_start : s->log_end, .slot = slot};
	s->followers[slot] = &ret->pos;
	s->refs++;
	pthread_mutex_unlock(&ch->lock);
	return 0;
}

void guest_cursor_close(struct guest_channel *ch, struct guest_cursor *c)
{
	if (!c->s)
		return;
	pthread_mutex_lock(&ch->lock);
	c->s->followers[c->slot] = NULL;
	credit_locked(ch, c->s, true);
	pthread_mutex_unlock(&ch->lock);
	guest_stream_unref(ch, c->s);
	c->s = NULL;
}

int guest_cursor_read(struct guest_channel *ch, struct guest_cursor *c, uint64_t deadline_ms, uint8_t *ret_type,
                      uint8_t **ret_data, size_t *ret_len, uint64_t *ret_dropped)
{
	struct guest_stream *s = c->s;
	int r = 0;
	pthread_mutex_lock(&ch->lock);
	while (c->pos >= s->log_end && !s->done)
		if (!wait_locked(ch, deadline_ms)) {
			r = -ETIMEDOUT;
			break;
		}
	if (r == 0 && c->pos >= s->log_end) {
		r = 0; /* finished and fully read */
	} else if (r == 0) {
		*ret_dropped = c->pos < s->log_start ? s->log_start - c->pos : 0;
		if (c->pos < s->log_start)
			c->pos = s->log_start;
		struct gc_chunk *k = s->head;
		while (k && k->offset + k->len <= c->pos)
			k = k->next;
		/* k exists: log_start <= pos < log_end */
		size_t skip = (size_t)(c->pos - k->offset);
		*ret_type = k->type;
		*ret_len = k->len - skip;
		*ret_data = xmalloc(*ret_len);
		memcpy(*ret_data, k->data + skip, *ret_len);
		c->pos += *ret_len;
		credit_locked(ch, s, false);
		r = 1;
	}
	pthread_mutex_unlock(&ch->lock);
	return r;
}

/* ---- results ------------------------------------------------------------------------------------ */

int guest_result_to_exit(uint8_t type, json_t *result, struct exec_exit *ret, struct al_error *err)
{
	if (type != AIRLOCK_FRAME_EXIT) {
		/* A command that cannot start is a bad request, whatever the errno (docs/api.md). */
		int r = guest_result_to_error(result, "the command", err);
		if (err && err->code != AL_ERR_GUEST)
			err->code = AL_ERR_INVALID_ARGUMENT;
		return r;
	}
	json_t *code = json_object_get(result, "exit_code");
	json_t *sig = json_object_get(result, "signal");
	struct exec_exit e = {.timed_out = json_is_true(json_object_get(result, "timed_out"))};
	if (json_is_integer(code) && json_integer_value(code) >= 0 && json_integer_value(code) <= 255) {
		e.exited = true;
		e.exit_code = (int)json_integer_value(code);
	} else if (json_is_integer(sig) && json_integer_value(sig) > 0 && json_integer_value(sig) < 128) {
		e.signal = (int)json_integer_value(sig);
	} else {
		return al_error_set(err, AL_ERR_GUEST, EBADMSG, "the guest agent sent an invalid exit status");
	}
	*ret = e;
	return 0;
}

int guest_result_to_error(json_t *result, const char *what, struct al_error *err)
{
	char code[64] = "error", msg[512] = "the operation failed";
	copy_json_string(result, "code", code, sizeof(code));
	copy_json_string(result, "message", msg, sizeof(msg));
	static const struct {
		const char *code;
		enum al_error_code al;
	} map[] = {
	    {"enoent", AL_ERR_NOT_FOUND}, {"eexist", AL_ERR_CONFLICT},      {"enotempty", AL_ERR_CONFLICT},
	    {"eisdir", AL_ERR_CONFLICT},  {"enotdir", AL_ERR_CONFLICT},     {"ebusy", AL_ERR_CONFLICT},
	    {"eacces", AL_ERR_FORBIDDEN}, {"eperm", AL_ERR_FORBIDDEN},      {"guest_gone", AL_ERR_GUEST},
	    {"bad_reply", AL_ERR_GUEST},  {"guest_protocol", AL_ERR_GUEST},
	};
	enum al_error_code al = AL_ERR_INVALID_ARGUMENT;
	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (!strcmp(code, map[i].code))
			al = map[i].al;
	return al_error_set(err, al, EINVAL, "the guest could not run %s: %s (%s)", what, msg, code);
}

json_t *guest_exec_message(const struct exec_request *req, char **env, size_t n_env)
{
	json_t *argv = json_array();
	for (size_t i = 0; i < req->argc; i++)
		json_array_append_new(argv, json_string(req->argv[i]));
	json_t *jenv = json_array();
	for (size_t i = 0; i < n_env; i++)
		json_array_append_new(jenv, json_string(env[i]));
	json_t *m = json_pack("{s:o, s:o, s:s, s:I, s:I, s:I, s:b}", "argv", argv, "env", jenv, "cwd", req->cwd, "uid",
	                      (json_int_t)req->uid, "gid", (json_int_t)req->gid, "timeout_ms",
	                      (json_int_t)req->timeout_s * 1000, "stdin", req->stdin_data != NULL || req->stdin_stream);
	if (req->pty_rows)
		json_object_set_new(
		    m, "pty",
		    json_pack("{s:I, s:I}", "rows", (json_int_t)req->pty_rows, "cols", (json_int_t)req->pty_cols));
	return m;
}

int guest_channel_call(struct guest_channel *ch, uint8_t type, json_t *msg, uint64_t deadline_ms, const char *what,
                       json_t **ret_result, struct al_error *err)
{
	struct guest_stream *s = NULL;
	int r = guest_stream_start(ch, type, msg, GUEST_STREAM_COLLECT, 0, &s, err);
	if (r < 0)
		return r;
	return guest_stream_finish(ch, s, deadline_ms, what, ret_result, err);
}
