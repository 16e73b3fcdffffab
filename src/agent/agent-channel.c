/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The channel to the host: finding and opening the virtio-serial port (QEMU)
 * or listening on vsock (Firecracker), a bounded queue of outgoing frames
 * written without blocking, and the decoding and dispatch of incoming frames.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "json-cleanup.h"
#include "util.h"

/* The queue is in send order, but frames held back while frozen (FREEZE:
 * frames of the streams that existed then) are skipped by the writer: other
 * frames (answers to the host, new streams) overtake them. Order within one
 * stream is kept (a stream's frames are all held or none is). */
struct outbuf {
	struct outbuf *next, *prev;
	size_t len, off;
	uint32_t stream;
	bool held;
	uint8_t data[];
};

/* One reader for the one port; too big for the stack. */
static struct frame_reader reader;

static int port_find(char *ret_dev, size_t size)
{
	DIR *d = opendir("/sys/class/virtio-ports");
	if (!d)
		return -errno;
	int r = -ENOENT;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[512];
		if (snprintf_ok(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name) < 0)
			continue;
		cleanup_free char *name = NULL;
		size_t len;
		if (read_file_limited(path, 256, &name, &len) < 0)
			continue;
		while (len > 0 && (name[len - 1] == '\n' || name[len - 1] == ' '))
			name[--len] = '\0';
		if (strcmp(name, AIRLOCK_PORT_NAME) == 0) {
			r = snprintf_ok(ret_dev, size, "/dev/%s", de->d_name);
			break;
		}
	}
	closedir(d);
	return r;
}

/* A vsock device is bound to its transport: /dev/vsock then reports the
 * guest's CID (VMADDR_CID_ANY while there is no device, e.g. under QEMU
 * without vhost-vsock, where the transport module is loaded all the same). */
static bool vsock_present(void)
{
	cleanup_close int fd = open("/dev/vsock", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	unsigned int cid = VMADDR_CID_ANY;
	if (ioctl(fd, IOCTL_VM_SOCKETS_GET_LOCAL_CID, &cid) < 0)
		return false;
	return cid != VMADDR_CID_ANY && cid > VMADDR_CID_HOST;
}

static int listen_on(const struct sockaddr *sa, socklen_t len, int *ret_fd)
{
	cleanup_close int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, sa, len) < 0 || listen(fd, 4) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int agent_channel_listen_vsock(unsigned port, int *ret_fd)
{
	struct sockaddr_vm sa = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = port};
	return listen_on((const struct sockaddr *)&sa, sizeof(sa), ret_fd);
}

int agent_channel_listen_unix(const char *path, int *ret_fd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlcpy_al(sa.sun_path, path, sizeof(sa.sun_path)) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	return listen_on((const struct sockaddr *)&sa, sizeof(sa), ret_fd);
}

int agent_channel_open(int timeout_ms, int *ret_port_fd, int *ret_listen_fd)
{
	uint64_t deadline = now_ms_monotonic() + (uint64_t)timeout_ms;
	char dev[300];
	for (;;) {
		int r = port_find(dev, sizeof(dev));
		if (r == 0) {
			/* The device node can trail the sysfs entry by a moment. */
			int fd = open(dev, O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
			if (fd >= 0) {
				*ret_port_fd = fd;
				return 0;
			}
			r = -errno;
			if (r != -ENOENT)
				return r;
		} else if (vsock_present()) {
			return agent_channel_listen_vsock(AIRLOCK_VSOCK_PORT, ret_listen_fd);
		}
		if (now_ms_monotonic() >= deadline)
			return r;
		struct timespec ts = {.tv_nsec = 5 * 1000000L};
		nanosleep(&ts, NULL);
	}
}

int agent_channel_accept(struct agent *a, int *ret_fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	cleanup_close int fd = accept4(a->listen_fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return errno == EAGAIN || errno == EINTR || errno == ECONNABORTED ? 0 : -errno;
	/* SECURITY: only the host drives the agent. Through Firecracker's
	 * hybrid vsock every host connection comes from CID 2; with
	 * vhost-vsock nothing but the host can reach a guest either, but the
	 * check does not rely on that. */
	if (ss.ss_family == AF_VSOCK && ((struct sockaddr_vm *)&ss)->svm_cid != VMADDR_CID_HOST) {
		agent_log("refused a vsock connection from CID %u (only the host, CID %u, may connect)",
		          ((struct sockaddr_vm *)&ss)->svm_cid, VMADDR_CID_HOST);
		return 0;
	}
	*ret_fd = TAKE_FD(fd);
	return 1;
}

/* ---- outgoing ---- */

void agent_channel_send(struct agent *a, uint8_t type, uint32_t stream, const void *payload, size_t len)
{
	if (len > AIRLOCK_FRAME_MAX_PAYLOAD)
		abort(); /* every caller bounds its payload */
	struct outbuf *b = xmalloc(sizeof(*b) + AIRLOCK_FRAME_HEADER_SIZE + len);
	struct airlock_frame_header h = {
	    .version = AIRLOCK_PROTO_VERSION,
	    .type = type,
	    .stream = stream,
	    .length = (uint32_t)len,
	};
	frame_header_encode(&h, b->data);
	if (len)
		memcpy(b->data + AIRLOCK_FRAME_HEADER_SIZE, payload, len);
	b->next = NULL;
	b->prev = a->q_tail;
	b->len = AIRLOCK_FRAME_HEADER_SIZE + len;
	b->off = 0;
	b->stream = stream;
	struct stream *s = a->frozen && stream != 0 ? agent_stream_find(a, stream) : NULL;
	b->held = s && s->held;
	if (a->q_tail)
		a->q_tail->next = b;
	else
		a->q_head = b;
	a->q_tail = b;
	a->q_bytes += b->len;
	a->q_count++;
	a->q_held += b->held;
}

void agent_channel_send_json(struct agent *a, uint8_t type, uint32_t stream, json_t *obj)
{
	cleanup_free char *s = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!s)
		abort();
	agent_channel_send(a, type, stream, s, strlen(s));
}

const char *agent_errno_code(int errnum)
{
	static __thread char buf[32];
	const char *name = strerrorname_np(errnum);
	if (!name)
		return "eio";
	size_t i = 0;
	for (; name[i] && i < sizeof(buf) - 1; i++)
		buf[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] - 'A' + 'a' : name[i]);
	buf[i] = '\0';
	return buf;
}

void agent_channel_send_error(struct agent *a, uint32_t stream, int errnum, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (errnum < 0)
		errnum = -errnum;
	if (errnum == 0)
		errnum = EIO;
	json_t *o = json_pack("{s:s, s:i, s:s}", "code", agent_errno_code(errnum), "errno", errnum, "message", msg);
	if (!o) /* msg was not UTF-8 (a path from the guest's disk, say) */
		o = json_pack("{s:s, s:i, s:s}", "code", agent_errno_code(errnum), "errno", errnum, "message",
		              strerror(errnum));
	agent_channel_send_json(a, AIRLOCK_FRAME_ERROR, stream, o);
}

void agent_channel_send_hello(struct agent *a)
{
	json_t *o = json_pack("{s:i, s:s, s:I, s:s, s:s}", "proto", AIRLOCK_PROTO_VERSION, "agent", AGENT_VERSION,
	                      "generation", (json_int_t)a->generation, "boot_id", a->boot_id, "kernel", a->kernel);
	agent_channel_send_json(a, AIRLOCK_FRAME_HELLO, 0, o);
}

void agent_channel_send_credit(struct agent *a, uint32_t stream, size_t n)
{
	while (n > 0) {
		uint32_t c = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
		uint8_t p[4] = {(uint8_t)(c >> 24), (uint8_t)(c >> 16), (uint8_t)(c >> 8), (uint8_t)c};
		agent_channel_send(a, AIRLOCK_FRAME_CREDIT, stream, p, sizeof(p));
		n -= c;
	}
}

static void outbuf_unlink(struct agent *a, struct outbuf *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		a->q_head = b->next;
	if (b->next)
		b->next->prev = b->prev;
	else
		a->q_tail = b->prev;
	if (a->q_partial == b)
		a->q_partial = NULL;
	a->q_bytes -= b->len;
	a->q_count--;
	a->q_held -= b->held;
	free(b);
}

/* The frame to write next: the one already started, else the first that is
 * not held. */
static struct outbuf *outbuf_next(const struct agent *a)
{
	if (a->q_partial)
		return a->q_partial;
	if (a->q_held == 0)
		return a->q_head;
	if (a->q_held == a->q_count)
		return NULL;
	for (struct outbuf *b = a->q_head; b; b = b->next)
		if (!b->held)
			return b;
	return NULL;
}

bool agent_channel_want_write(const struct agent *a)
{
	return a->q_partial || a->q_count > a->q_held;
}

void agent_channel_release_held(struct agent *a)
{
	for (struct outbuf *b = a->q_head; b; b = b->next)
		b->held = false;
	a->q_held = 0;
	for (size_t i = 0; i < a->n_streams; i++)
		a->streams[i]->held = false;
}

void agent_channel_drop_stream(struct agent *a, uint32_t stream)
{
	for (struct outbuf *b = a->q_head, *next; b; b = next) {
		next = b->next;
		if (b->stream == stream && b != a->q_partial)
			outbuf_unlink(a, b);
	}
}

void agent_channel_drop_held(struct agent *a)
{
	for (struct outbuf *b = a->q_head, *next; b && a->q_held > 0; b = next) {
		next = b->next;
		if (b->held)
			outbuf_unlink(a, b);
	}
}

int agent_channel_flush(struct agent *a)
{
	struct outbuf *b;
	while ((b = outbuf_next(a))) {
		ssize_t n = write(a->port_fd, b->data + b->off, b->len - b->off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return 0;
			return -errno;
		}
		b->off += (size_t)n;
		if (b->off == b->len)
			outbuf_unlink(a, b);
		else
			a->q_partial = b;
	}
	return 0;
}

/* The host went away in the middle of a frame: the rest of that frame would
 * only corrupt the stream of the next connection, so drop it. Whole frames
 * stay queued for whoever connects next. */
void agent_channel_drop_partial(struct agent *a)
{
	if (a->q_partial)
		outbuf_unlink(a, a->q_partial);
	frame_reader_init(&reader);
}

size_t agent_channel_queued_output(const struct agent *a, uint32_t stream)
{
	size_t n = 0;
	for (const struct outbuf *b = a->q_head; b; b = b->next) {
		struct airlock_frame_header h;
		if (b->stream != stream || frame_header_decode(b->data, &h) < 0)
			continue;
		if (h.type == AIRLOCK_FRAME_STDOUT || h.type == AIRLOCK_FRAME_STDERR ||
		    h.type == AIRLOCK_FRAME_FILE_DATA)
			n += h.length;
	}
	return n;
}

/* ---- incoming ---- */

int agent_json_parse_object(const uint8_t *payload, size_t len, json_t **ret, struct al_error *err)
{
	json_error_t jerr;
	cleanup_json json_t *o = json_loadb((const char *)payload, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!o)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "invalid JSON: %s", jerr.text);
	if (!json_is_object(o))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "expected a JSON object");
	*ret = TAKE_PTR(o);
	return 0;
}

const char *agent_json_get_cstring(json_t *v)
{
	if (!json_is_string(v))
		return NULL;
	const char *s = json_string_value(v);
	if (strlen(s) != json_string_length(v))
		return NULL;
	return s;
}

/* Rejects a host frame. An ERROR is the last frame of its stream, so one
 * about a frame for a live stream goes to stream 0 (naming the stream) and
 * leaves that stream alone; otherwise it goes to the frame's own stream. */
static void __attribute__((format(printf, 4, 5)))
channel_reject(struct agent *a, const struct airlock_frame_header *h, int errnum, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (h->stream != 0 && agent_stream_find(a, h->stream))
		agent_channel_send_error(a, 0, errnum, "%s on stream %u: %s", frame_type_name(h->type), h->stream, msg);
	else
		agent_channel_send_error(a, h->stream, errnum, "%s: %s", frame_type_name(h->type), msg);
}

/* The handlers of the frames that open a stream; METRICS and FREEZE may
 * come without a payload, the others carry a JSON object. */
static const struct {
	int (*open)(struct agent *a, uint32_t id, json_t *req, struct al_error *err);
	bool may_be_empty;
} stream_openers[] = {
    [AIRLOCK_FRAME_EXEC] = {agent_exec_start, false},
    [AIRLOCK_FRAME_FILE_WRITE] = {agent_file_write_start, false},
    [AIRLOCK_FRAME_FILE_READ] = {agent_file_read_start, false},
    [AIRLOCK_FRAME_FILE_OP] = {agent_fileop_start, false},
    [AIRLOCK_FRAME_METRICS] = {agent_metrics_send, true},
    [AIRLOCK_FRAME_FREEZE] = {agent_snapshot_freeze, true},
    [AIRLOCK_FRAME_THAW] = {agent_snapshot_thaw, false},
    [AIRLOCK_FRAME_WATCH] = {agent_watch_start, false},
};

/* A frame that opens a stream: its handler's failure is the stream's ERROR
 * (and its only frame, unless a failed FILE_WRITE keeps the stream to drop
 * its FILE_DATA). */
static void channel_open_stream(struct agent *a, const struct airlock_frame_header *h, const uint8_t *p)
{
	struct al_error err = {0};
	cleanup_json json_t *req = NULL;
	int r = 0;
	if (h->length > 0 || !stream_openers[h->type].may_be_empty) {
		r = agent_json_parse_object(p, h->length, &req, &err);
		if (r < 0)
			al_error_prefix(&err, "%s", frame_type_name(h->type));
	}
	if (r == 0)
		r = stream_openers[h->type].open(a, h->stream, req, &err);
	if (r < 0)
		agent_channel_send_error(a, h->stream, -r, "%s", err.message);
}

/* SIGNAL or RESIZE for an exec: its failure rejects the frame (on stream 0),
 * the process goes on. */
static void channel_exec_control(struct agent *a, const struct airlock_frame_header *h, const uint8_t *p,
                                 struct stream *s)
{
	struct al_error err = {0};
	cleanup_json json_t *req = NULL;
	int r = agent_json_parse_object(p, h->length, &req, &err);
	if (r == 0)
		r = h->type == AIRLOCK_FRAME_SIGNAL ? agent_exec_signal(s, req, &err) : agent_exec_resize(s, req, &err);
	if (r < 0)
		channel_reject(a, h, -r, "%s", err.message);
}

/* SECURITY: every field of a host frame is checked here or in the handler it
 * goes to: the header by frame_reader_next (version, type, flags, length),
 * the stream id against the stream table and the frame type against what
 * that stream accepts. A bad frame gets an ERROR, never a crash. */
static void channel_dispatch(struct agent *a, const struct airlock_frame_header *h, const uint8_t *p)
{
	if (h->stream == 0) {
		if (h->type == AIRLOCK_FRAME_HELLO)
			agent_channel_send_hello(a);
		else if (h->type == AIRLOCK_FRAME_SHUTDOWN)
			a->shutdown = true;
		else
			channel_reject(a, h, EINVAL, "not valid on stream 0 (the control stream)");
		return;
	}

	struct stream *s = agent_stream_find(a, h->stream);
	switch (h->type) {
	case AIRLOCK_FRAME_EXEC:
	case AIRLOCK_FRAME_FILE_WRITE:
	case AIRLOCK_FRAME_FILE_READ:
	case AIRLOCK_FRAME_FILE_OP:
	case AIRLOCK_FRAME_METRICS:
	case AIRLOCK_FRAME_FREEZE:
	case AIRLOCK_FRAME_THAW:
	case AIRLOCK_FRAME_WATCH:
		if (s)
			channel_reject(a, h, EEXIST, "the stream is already in use");
		else if (a->n_streams >= AGENT_MAX_STREAMS)
			channel_reject(a, h, EMFILE,
			               "too many streams: the agent runs at most %d processes and transfers at once; "
			               "wait for one to end",
			               AGENT_MAX_STREAMS);
		else
			channel_open_stream(a, h, p);
		return;
	case AIRLOCK_FRAME_CREDIT:
		/* CREDIT races the end of its stream (the host credits output it
		 * read just before EXIT): for an unknown stream it is ignored,
		 * not answered with an ERROR. */
		if (h->length != 4)
			channel_reject(a, h, EINVAL, "the payload must be a 4-byte count, not %u bytes", h->length);
		else if (s && s->kind == STREAM_FILE_WRITE)
			channel_reject(a, h, EBADF, "the stream sends no output to credit");
		else if (s)
			agent_stream_output_credit(s, ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
			                                  ((uint32_t)p[2] << 8) | p[3]);
		return;
	case AIRLOCK_FRAME_RESIZE:
		if (s && s->kind == STREAM_EXEC)
			channel_exec_control(a, h, p, s);
		else
			channel_reject(a, h, EBADF, s ? "the stream is not an exec" : "no such stream");
		return;
	case AIRLOCK_FRAME_STDIN:
	case AIRLOCK_FRAME_SIGNAL:
		if (s && s->kind == STREAM_FILE_WRITE && h->type == AIRLOCK_FRAME_SIGNAL) {
			/* The host gave up on the upload: nothing of it may stay behind. */
			agent_file_write_cancel(a, s);
		} else if (s && s->kind == STREAM_WATCH && h->type == AIRLOCK_FRAME_SIGNAL) {
			/* The host's reader went away: the watch ends with it. */
			agent_watch_end(a, s, "cancelled");
		} else if (s && s->kind == STREAM_EXEC) {
			if (h->type == AIRLOCK_FRAME_STDIN)
				agent_exec_stdin(a, s, p, h->length);
			else
				channel_exec_control(a, h, p, s);
		} else {
			channel_reject(a, h, EBADF, s ? "the stream is not an exec" : "no such stream");
		}
		return;
	case AIRLOCK_FRAME_FILE_DATA:
		if (s && s->kind == STREAM_FILE_WRITE)
			agent_file_write_data(a, s, p, h->length);
		else
			channel_reject(a, h, EBADF, s ? "the stream is not a file write" : "no such stream");
		return;
	case AIRLOCK_FRAME_HELLO:
	case AIRLOCK_FRAME_SHUTDOWN:
		channel_reject(a, h, EINVAL, "only valid on stream 0");
		return;
	default:
		channel_reject(a, h, EINVAL, "not a host-to-guest frame");
		return;
	}
}

int agent_channel_read(struct agent *a)
{
	size_t space;
	uint8_t *buf = frame_reader_space(&reader, &space);
	ssize_t n = read(a->port_fd, buf, space);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0)
		return -EPIPE;
	frame_reader_commit(&reader, (size_t)n);
	for (;;) {
		struct airlock_frame_header h;
		const uint8_t *payload;
		int r = frame_reader_next(&reader, &h, &payload);
		if (r == 0)
			break;
		if (r < 0) {
			/* No way to find the next frame boundary: drop what is
			 * buffered and tell the host, which must re-attach. */
			agent_log("corrupt frame from the host (%s); dropping %zu buffered bytes", strerror(-r),
			          reader.len);
			agent_channel_send_error(a, 0, -r, "corrupt frame from the host: %s; input discarded",
			                         strerror(-r));
			frame_reader_init(&reader);
			break;
		}
		channel_dispatch(a, &h, payload);
		if (a->shutdown)
			break;
	}
	return 0;
}
