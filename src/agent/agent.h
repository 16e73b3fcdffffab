/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-agent: PID 1 of every guest. Boots the guest (agent-init.c), opens
 * the virtio-serial port to the host or listens on vsock (agent-channel.c) and
 * serves the frames
 * of include/airlock/proto.h: exec streams with pipes or a PTY
 * (agent-exec.c), file transfers (agent-files.c), file operations
 * (agent-fileops.c), metrics (agent-metrics.c) and the FREEZE/THAW hooks of
 * snapshots (agent-snapshot.c), all from one poll loop (agent-main.c).
 */
#ifndef AIRLOCK_AGENT_H
#define AIRLOCK_AGENT_H

#include <dirent.h>
#include <jansson.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "airlock/proto.h"
#include "error.h"
#include "frame.h"

#define AGENT_VERSION "0.1.0"

/* Limits on what the host may ask for (SECURITY: the host is trusted to drive
 * the guest, but a buggy or compromised daemon must not crash PID 1). */
#define AGENT_MAX_STREAMS 256 /* processes and transfers at once; more are refused (EMFILE) */
#define AGENT_EXEC_MAX_ARGS 4096
#define AGENT_EXEC_MAX_ENV 4096
#define AGENT_MAX_TIMEOUT_MS (7ull * 24 * 3600 * 1000)

/* Open files of the agent itself: enough for every stream's pipes (at most
 * 4 fds each) with room to spare, so that it never runs out before the
 * stream limit does. */
#define AGENT_NOFILE 8192
/* Resource limits of every process the agent starts (soft, hard): open
 * files, and processes of its uid: AGENT_CHILD_NPROC, or the kernel's
 * default for the guest's memory (half of threads-max) when that is lower.
 * The kernel does not apply RLIMIT_NPROC to root, whose processes are
 * bounded by the guest's memory and pid space; the VM is the wall around
 * them either way. */
#define AGENT_CHILD_NOFILE_SOFT 1024
#define AGENT_CHILD_NOFILE_HARD 4096
#define AGENT_CHILD_NPROC 4096

/* Output queue towards the host: above SOFT the agent stops reading children's
 * pipes and files (they block on their pipes, nothing is lost); above HARD it
 * also stops reading the host, so a host that does not read cannot make the
 * agent grow without bound. */
#define AGENT_OUTQ_SOFT_BYTES (256u * 1024u)
#define AGENT_OUTQ_HARD_BYTES (4u * 1024u * 1024u)

/* After an exec's main process is reaped, its stdout/stderr may still be held
 * open by background processes it left behind. The agent closes them after
 * this long without data, or at most this long after the reap, then sends EXIT. */
#define AGENT_PIPE_GRACE_IDLE_MS 100
#define AGENT_PIPE_GRACE_MAX_MS 1000
/* At the end of the grace, at most this much more is read from each pipe
 * (within the output window) before it is closed: more than a pipe or PTY
 * holds, so everything the main process wrote is sent. */
#define AGENT_PIPE_DRAIN_MAX_BYTES (1024u * 1024u)

/* PTY window sizes the host may ask for; pending end-of-file marks (^D) per
 * PTY beyond which more are dropped (the child is not reading). */
#define AGENT_PTY_MAX_DIM 65535
#define AGENT_PTY_VEOF_MAX 16

/* While the host side of the port is closed, poll(2) reports POLLHUP at once:
 * the agent looks again at this interval instead of spinning. */
#define AGENT_PORT_RECHECK_MS 20

#define AGENT_ROOT_WAIT_MS 10000
#define AGENT_PORT_WAIT_MS 10000

/* FREEZE waits at most this long for the processes it stopped to be seen
 * stopped (state T) before it answers. */
#define AGENT_FREEZE_WAIT_MS 500
/* THAW's state files (PID 1; a test agent takes $AIRLOCK_AGENT_RUN_DIR). */
#define AGENT_RUN_DIR "/run/airlock"

#define AGENT_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

enum stream_kind {
	STREAM_EXEC,
	STREAM_FILE_WRITE,
	STREAM_FILE_READ,
	STREAM_FILE_LIST, /* FILE_OP "list": entries go out as the window allows */
	STREAM_WATCH,     /* WATCH: inotify events go out as the window allows */
};

struct watch;

struct stream {
	uint32_t id; /* 0 once orphaned (THAW orphan_streams): the host may reuse it */
	enum stream_kind kind;
	/* Existed at FREEZE: its frames queued while frozen are held back (not
	 * written) until THAW, so a snapshot never holds a half-written frame. */
	bool held;
	/* THAW orphan_streams: the host forgot this exec. Its output is read
	 * and dropped (no window, no frames), its stdin is closed, it is reaped
	 * without EXIT. */
	bool orphan;
	/* Index of each fd in this iteration's pollfd array, -1 = not polled. */
	int poll_out, poll_err, poll_in;
	/* Output (STDOUT+STDERR, or FILE_DATA of a read or list) the agent may
	 * still send before the host returns CREDIT (AIRLOCK_OUTPUT_WINDOW). */
	uint32_t out_window;

	/* STREAM_EXEC. pid is also the process group (the child calls setsid).
	 * With a PTY, out_fd is the master and in_fd a dup of it; err_fd is -1. */
	pid_t pid;
	int out_fd, err_fd, in_fd;
	bool pty;
	uint8_t *in_buf; /* pending stdin, in_buf[in_off .. in_off + in_len) */
	size_t in_off, in_len;
	uint64_t in_written; /* host bytes written to the child so far */
	/* PTY: a zero-length STDIN queues VEOF after the host bytes before it
	 * (positions in in_written terms); VEOF bytes are not host data and are
	 * not credited. */
	uint64_t veof_at[AGENT_PTY_VEOF_MAX];
	size_t n_veof;
	bool stdin_eof;       /* host sent EOF: close in_fd once drained */
	bool stdin_gone;      /* no pipe, or it is closed: drop data, still credit it */
	uint64_t deadline_ms; /* 0 = no timeout */
	bool timed_out, reaped;
	int wait_status;
	uint64_t reaped_ms, last_output_ms;
	/* Pipe grace after the reap: grace_base_ms starts at the reap and moves
	 * on by the time the stream was blocked by flow control (a slow host is
	 * not a quiet pipe); then the pipes are drained (drain_left) and closed. */
	uint64_t grace_base_ms, blocked_since_ms;
	bool closing;
	size_t drain_left;

	/* STREAM_FILE_WRITE, STREAM_FILE_READ */
	int file_fd;
	char *path, *tmp_path;
	uint64_t size;
	bool failed; /* FILE_WRITE failed: ERROR sent, FILE_DATA dropped until EOF */

	/* STREAM_FILE_LIST: the directory, one entry that did not fit the last
	 * chunk (JSON text), and the entries sent so far. */
	DIR *dir;
	char *pending;
	size_t list_need; /* output room the pending entry needs */
	uint64_t count;

	/* STREAM_WATCH: file_fd is its inotify instance (agent-watch.c). */
	struct watch *watch;
};

struct outbuf;

struct agent {
	int port_fd;                    /* the host's byte stream; -1 on vsock while no host is connected */
	int listen_fd;                  /* vsock (or --listen-unix): where hosts connect; -1 on virtio-serial */
	uint64_t listen_pause_until_ms; /* after a failed accept: not polled until then */
	bool port_hup;                  /* host side closed: recheck at port_recheck_ms */
	uint64_t port_recheck_ms;
	bool port_is_socket; /* --channel-fd test mode: EOF ends the agent */
	int sig_fd;
	bool pid1;
	bool shutdown;
	struct outbuf *q_head, *q_tail;
	size_t q_bytes;
	struct stream *streams[AGENT_MAX_STREAMS];
	size_t n_streams;
	size_t rr;                /* round-robin start, so no stream always reads first */
	size_t q_count, q_held;   /* queued frames; of them held back while frozen */
	struct outbuf *q_partial; /* the frame being written, if its start went out */
	char boot_id[33];
	char kernel[65];
	uint64_t generation;
	bool frozen; /* FREEZE stopped the guest's processes; THAW continues them */
};

/* agent-init.c */
void agent_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void agent_init_boot(void);
void agent_init_poweroff(void);

/* agent-channel.c */
/* Whichever channel this VM has: the virtio-serial port (*ret_port_fd) or a
 * vsock device, on which it listens (*ret_listen_fd, AIRLOCK_VSOCK_PORT).
 * Waits up to timeout_ms for either to appear. */
int agent_channel_open(int timeout_ms, int *ret_port_fd, int *ret_listen_fd);
int agent_channel_listen_vsock(unsigned port, int *ret_fd);
/* Test mode (--listen-unix): the vsock code path over a unix socket. */
int agent_channel_listen_unix(const char *path, int *ret_fd);
/* Takes the next host connection from listen_fd: 1 and *ret_fd, 0 when
 * there is none (or it was refused), < 0 on error. */
int agent_channel_accept(struct agent *a, int *ret_fd);
void agent_channel_send(struct agent *a, uint8_t type, uint32_t stream, const void *payload, size_t len);
void agent_channel_send_json(struct agent *a, uint8_t type, uint32_t stream, json_t *obj /* stolen */);
void agent_channel_send_error(struct agent *a, uint32_t stream, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void agent_channel_send_hello(struct agent *a);
void agent_channel_send_credit(struct agent *a, uint32_t stream, size_t n);
int agent_channel_flush(struct agent *a);
/* Whether a frame is queued that may be written now (not held by FREEZE). */
bool agent_channel_want_write(const struct agent *a);
void agent_channel_drop_partial(struct agent *a);
/* THAW: frames held since FREEZE may go out again. */
void agent_channel_release_held(struct agent *a);
/* THAW orphan_streams: drops the queued frames of a stream (not one whose
 * start was already written). */
void agent_channel_drop_stream(struct agent *a, uint32_t stream);
/* ... and every held frame (of streams that existed at FREEZE, including
 * those that ended since). */
void agent_channel_drop_held(struct agent *a);
/* Payload bytes of output frames (STDOUT, STDERR, FILE_DATA) queued for a stream. */
size_t agent_channel_queued_output(const struct agent *a, uint32_t stream);
/* Reads what the port has and handles whole frames. -EPIPE when the host
 * side is closed. */
int agent_channel_read(struct agent *a);
const char *agent_errno_code(int errnum);

/* agent-main.c: the stream table */
struct stream *agent_stream_find(struct agent *a, uint32_t id);
struct stream *agent_stream_new(struct agent *a, uint32_t id, enum stream_kind kind);
void agent_stream_free(struct agent *a, struct stream *s);
/* Output flow control: bytes the stream may send now (0 = wait for CREDIT),
 * and the accounting of what was sent and credited. */
size_t agent_stream_output_room(const struct agent *a, const struct stream *s);
void agent_stream_output_sent(struct stream *s, size_t n);
void agent_stream_output_credit(struct stream *s, uint32_t n);

/* The handlers of the frames that open a stream (EXEC, FILE_WRITE, FILE_READ,
 * FILE_OP, METRICS, FREEZE, THAW) all take (a, id, req, err): req is the
 * frame's JSON object (NULL for an empty METRICS or FREEZE). A handler
 * answers on stream id itself, or returns < 0 with err set, which the
 * dispatcher sends as the stream's ERROR (the errno of the return value,
 * err's message). */

/* agent-exec.c */
int agent_exec_start(struct agent *a, uint32_t id, json_t *req, struct al_error *err);
void agent_exec_stdin(struct agent *a, struct stream *s, const uint8_t *data, size_t len);
/* SIGNAL and RESIZE on an exec: < 0 with err set rejects the frame (the
 * process goes on). */
int agent_exec_signal(struct stream *s, json_t *req, struct al_error *err);
int agent_exec_resize(struct stream *s, json_t *req, struct al_error *err);
void agent_exec_reap(struct agent *a);
void agent_exec_poll_add(struct agent *a, struct stream *s, struct pollfd *pfds, size_t *n);
void agent_exec_poll_handle(struct agent *a, struct stream *s, const struct pollfd *pfds, uint64_t now_ms);
/* Timeouts and pipe grace; lowers *timeout_ms to the next deadline. Sends
 * EXIT and frees the stream when it is done (returns true then). */
bool agent_exec_tick(struct agent *a, struct stream *s, uint64_t now_ms, int *timeout_ms);
void agent_exec_kill_all(struct agent *a);
/* THAW orphan_streams: the exec goes on without a host (see struct stream). */
void agent_exec_orphan(struct agent *a, struct stream *s);

/* agent-files.c */
int agent_file_write_start(struct agent *a, uint32_t id, json_t *req, struct al_error *err);
void agent_file_write_data(struct agent *a, struct stream *s, const uint8_t *data, size_t len);
/* SIGNAL on a FILE_WRITE stream: remove the temp file, answer ERROR ecanceled, end the stream. */
void agent_file_write_cancel(struct agent *a, struct stream *s);
int agent_file_read_start(struct agent *a, uint32_t id, json_t *req, struct al_error *err);
/* Sends one chunk; true when the stream ended (and was freed). */
bool agent_file_read_pump(struct agent *a, struct stream *s);
/* SECURITY: paths from the host: absolute, shorter than PATH_MAX, no NULs.
 * *ret points into o. */
int agent_json_get_path(json_t *o, const char *key, const char **ret, struct al_error *err);

/* agent-fileops.c */
/* The stat object of dir_fd/name (not following a final symlink), "name"
 * being display: {"name","type","size","mode","uid","gid","mtime_ms","target"?}. */
int agent_stat_json(int dir_fd, const char *name, const char *display, json_t **ret);
int agent_fileop_start(struct agent *a, uint32_t id, json_t *req, struct al_error *err);
/* Whether a listing can send its next chunk (it has the credit for it). */
bool agent_fileop_list_ready(const struct agent *a, const struct stream *s);
/* Sends one chunk of a listing; true when the stream ended (and was freed). */
bool agent_fileop_list_pump(struct agent *a, struct stream *s);

/* agent-watch.c */
int agent_watch_start(struct agent *a, uint32_t id, json_t *req, struct al_error *err);
/* Whether its inotify fd should be polled (its queue has room). */
bool agent_watch_want_read(const struct stream *s);
void agent_watch_read(struct stream *s);
/* Whether it has something to send and the credit for it. */
bool agent_watch_ready(const struct agent *a, const struct stream *s);
/* Sends one WATCH_EVENTS frame; true when the stream ended (and was freed). */
bool agent_watch_pump(struct agent *a, struct stream *s);
/* Ends the watch: OK {"reason":reason}, the stream freed. */
void agent_watch_end(struct agent *a, struct stream *s, const char *reason);
/* Part of agent_stream_free: the watch's tables (not its fd). */
void agent_watch_free(struct stream *s);

/* agent-snapshot.c */
int agent_snapshot_freeze(struct agent *a, uint32_t id, json_t *req, struct al_error *err);
int agent_snapshot_thaw(struct agent *a, uint32_t id, json_t *req, struct al_error *err);
/* A new random boot_id (HELLO), e.g. after the RNG was reseeded. */
void agent_new_boot_id(struct agent *a, bool early);

/* agent-metrics.c */
int agent_metrics_send(struct agent *a, uint32_t id, json_t *req, struct al_error *err);

/* JSON helpers shared by the parsers of host requests. */
int agent_json_parse_object(const uint8_t *payload, size_t len, json_t **ret, struct al_error *err);
/* A JSON string of arbitrary bytes: invalid UTF-8 becomes U+FFFD. */
json_t *agent_json_string_lossy(const char *s, size_t n);
/* A JSON string without embedded NUL bytes, or NULL. */
const char *agent_json_get_cstring(json_t *v);

#endif
