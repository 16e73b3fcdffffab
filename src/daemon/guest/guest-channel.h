/* SPDX-License-Identifier: Apache-2.0 */
/* Host side of the host <-> guest channel: frames in and out, multiplexed
 * streams with flow control both ways, the agent's hello. One per running
 * sandbox.
 *
 * Threads: the sandbox's monitor thread does all I/O on the fd (reads
 * frames, flushes the outgoing queue); request threads start streams, queue
 * frames and wait on the channel's condition. Nothing blocks on the fd. */
#ifndef AIRLOCK_GUEST_CHANNEL_H
#define AIRLOCK_GUEST_CHANNEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox-model.h"
#include "error.h"
#include "frame.h"

/* Queued frames that make no progress for this long mean the agent stopped
 * reading: the channel is declared dead. */
#define GUEST_WRITE_TIMEOUT_MS 30000
/* Concurrent streams per sandbox (processes, file transfers...). */
#define GUEST_STREAMS_MAX 256
/* Extra time past an exec's own timeout before the host gives up on the agent. */
#define GUEST_EXEC_GRACE_MS 15000
/* Bulk senders (stdin, uploads) wait while this much is queued for the guest. */
#define GUEST_OUTQ_MAX (512u * 1024u)
/* Output kept per logged stream for readers that come later. */
#define GUEST_LOG_CAPACITY (1u << 20)
/* SECURITY: and in all the logs of one sandbox together: past this, a
 * stream's oldest output that every reader has read goes first (what its
 * readers have not read is bounded by the window they withhold). */
#define GUEST_CHANNEL_KEPT_MAX (64u << 20)
/* Output is credited back to the agent in batches of this size. */
#define GUEST_CREDIT_BATCH (64u * 1024u)
#define GUEST_FOLLOWERS_MAX 16

/* SECURITY: how much a guest may get wrong (docs/guest.md, "Protocol
 * violations"). Each violation ends the stream it concerns with an error
 * (code "guest_protocol"); the GUEST_STRIKES_MAX-th closes the channel, and
 * the sandbox goes to state error. A frame that cannot be parsed at all
 * (bad header, oversize) closes it at once: the byte stream cannot be
 * resynchronised. */
#define GUEST_STRIKES_MAX 3
/* EXIT, ERROR and OK payloads: larger ones are a violation. What is kept of
 * one is a flat object of at most GUEST_RESULT_MEMBERS_MAX scalar members,
 * strings cut at GUEST_RESULT_STRING_MAX bytes. */
#define GUEST_RESULT_MAX (16u * 1024u)
#define GUEST_RESULT_MEMBERS_MAX 32
#define GUEST_RESULT_STRING_MAX 1024u
/* Frames for streams that ended or were never opened are dropped (they cost
 * no memory); a connection may send this many bytes of them (each frame
 * counts at least GUEST_STRAY_FRAME_COST), plus a window for every stream
 * the host gave up on before its end; past that, each is a violation. */
#define GUEST_STRAY_BUDGET (64u << 20)
#define GUEST_STRAY_BUDGET_MAX (256u << 20)
#define GUEST_STRAY_FRAME_COST 1024u
/* HELLOs and stream-0 ERRORs a connection may send unasked (the agent says
 * hello once when it opens the port); past that, each is a violation. */
#define GUEST_UNASKED_MAX 8
/* The longest name in a watch event (a path below the watched directory). */
#define GUEST_WATCH_NAME_MAX 4095u

struct guest_channel;
struct guest_stream;

struct guest_hello {
	unsigned proto;
	char agent_version[32];
	char boot_id[64];
	char kernel[64];
	uint64_t generation;
};

struct exec_output {
	uint8_t *data;
	size_t len, cap, limit;
	uint64_t total; /* bytes the process wrote, including dropped ones */
	bool truncated;
};

/* How a process ended. */
struct exec_exit {
	bool exited; /* exit_code valid; else signal valid */
	int exit_code;
	int signal;
	bool timed_out;
};

struct exec_result {
	struct exec_exit status;
	struct exec_output out[2]; /* stdout, stderr */
	uint64_t duration_ms;
};
void guest_exec_result_release(struct exec_result *r);

/* Takes ownership of fd (made non-blocking). */
struct guest_channel *guest_channel_new(int fd);
void guest_channel_free(struct guest_channel *ch);

/* For the monitor thread's poll: the channel fd (POLLIN, plus POLLOUT when
 * guest_channel_want_write) and an eventfd that is readable when frames were
 * queued from another thread. */
int guest_channel_fd(struct guest_channel *ch);
int guest_channel_wake_fd(struct guest_channel *ch);
bool guest_channel_want_write(struct guest_channel *ch);
/* Writes queued frames without blocking; kills the channel when the guest has
 * not taken any for GUEST_WRITE_TIMEOUT_MS. */
int guest_channel_flush(struct guest_channel *ch);

/* FREEZE (proto.h): from the moment the agent's OK arrives, nothing more is
 * written to the guest until guest_channel_release_hold, so that the VMM can
 * be stopped with no host frame half-delivered. The hold is released on
 * failure. */
int guest_channel_freeze(struct guest_channel *ch, uint64_t deadline_ms, struct al_error *err);
void guest_channel_release_hold(struct guest_channel *ch);

/* While the guest is paused it cannot read: a queue that does not drain is
 * then no sign of a stuck agent. */
void guest_channel_set_paused(struct guest_channel *ch, bool paused);

/* Reads what is available and handles whole frames. < 0 when the channel is
 * finished: -EPROTO for a protocol violation by the guest, else EOF or an I/O
 * error (the reason is kept). */
int guest_channel_read(struct guest_channel *ch);
/* SECURITY: handles one frame from the guest. Everything in it is hostile:
 * unknown streams and unexpected types are dropped, control payloads are
 * parsed as bounded JSON with type checks, output is capped per stream and
 * credited back only as it is consumed. < 0 only for violations that make
 * the channel unusable. Exposed for fuzzing. */
int guest_channel_handle_frame(struct guest_channel *ch, const struct airlock_frame_header *h, const uint8_t *payload);

/* Marks the channel dead (VMM gone, deleted...) and wakes every waiter. */
void guest_channel_kill(struct guest_channel *ch, const char *reason);
/* The connection under the channel ends and (new_fd >= 0) another takes
 * its place (Firecracker resets its vsock connections at a snapshot): the
 * channel goes on over new_fd (it takes it; -1: detached until the next
 * call, frames wait), keeping its exec streams, their output and the
 * frames queued for the guest, as the agent keeps its own. A frame half
 * read or half written is dropped, every other stream (file transfers,
 * requests) ends with an error, as it does in the agent, and the next HELLO
 * is awaited anew. Only with nobody reading or writing the channel (its
 * monitor stopped). */
void guest_channel_replace_fd(struct guest_channel *ch, int new_fd);
bool guest_channel_dead(struct guest_channel *ch, char *reason, size_t reason_size);
/* Protocol violations so far (GUEST_STRIKES_MAX closes the channel). */
unsigned guest_channel_strikes(struct guest_channel *ch);

/* Asks the agent to say hello again (after a re-attach). */
int guest_channel_request_hello(struct guest_channel *ch);
/* Waits until the agent said hello (0), the channel died (-EPIPE) or the
 * deadline passed (-ETIMEDOUT). */
int guest_channel_wait_hello(struct guest_channel *ch, uint64_t deadline_ms, struct guest_hello *ret);
/* HELLOs the agent sent so far (each answer to guest_channel_request_hello
 * is one): the watchdog's sign of life. */
uint64_t guest_channel_hellos(struct guest_channel *ch);
/* Best effort: asks the agent to power off. */
int guest_channel_shutdown(struct guest_channel *ch);

/* ---- streams -------------------------------------------------------------------------------- */

enum guest_stream_mode {
	/* Output gathered whole, up to a limit per stream (the rest dropped). */
	GUEST_STREAM_COLLECT,
	/* Output kept in a log of GUEST_LOG_CAPACITY for readers (cursors); while
	 * a reader lags, the agent gets no credit and the producer slows down. */
	GUEST_STREAM_LOG,
};

/* Called once, from the monitor thread, when a stream ends (EXIT, ERROR, OK,
 * or the channel died: type 0). Must not call into the channel. */
typedef void (*guest_stream_done_fn)(void *ctx, uint8_t type, json_t *result);

/* Opens a stream and sends its first frame (EXEC, FILE_READ, FILE_WRITE,
 * FILE_OP, METRICS) with msg as payload. The caller owns one reference. */
int guest_stream_start(struct guest_channel *ch, uint8_t type, json_t *msg, enum guest_stream_mode mode,
                       size_t collect_limit, struct guest_stream **ret, struct al_error *err);
void guest_stream_set_done_cb(struct guest_channel *ch, struct guest_stream *s, guest_stream_done_fn fn, void *ctx);
uint32_t guest_stream_id(struct guest_stream *s);
/* Drops a reference; the stream is forgotten by the channel with the last. */
void guest_stream_unref(struct guest_channel *ch, struct guest_stream *s);
void guest_stream_ref(struct guest_channel *ch, struct guest_stream *s);

/* Sends STDIN or FILE_DATA within the agent's window, waiting for credit and
 * queue space until the deadline. len 0 = EOF. 0, or -EPIPE when the stream
 * already ended (the rest is not wanted), -ETIMEDOUT, -ECONNRESET when the
 * channel died. */
int guest_stream_send_data(struct guest_channel *ch, struct guest_stream *s, uint8_t type, const void *data, size_t len,
                           uint64_t deadline_ms);
/* Queues a control frame (SIGNAL, RESIZE) for a stream. */
int guest_stream_send_control(struct guest_channel *ch, struct guest_stream *s, uint8_t type, json_t *msg);

/* Waits until the stream ended: 0, -ETIMEDOUT, or -ECONNRESET (the channel
 * died first). */
int guest_stream_wait_done(struct guest_channel *ch, struct guest_stream *s, uint64_t deadline_ms);
/* Whether it ended, and how: type EXIT/ERROR/OK (0 if the channel died) and a
 * new reference to the result object. */
bool guest_stream_done(struct guest_channel *ch, struct guest_stream *s, uint8_t *ret_type, json_t **ret_result);
/* Waits for the end of s and drops the caller's reference to it: 0 with the
 * OK payload in *ret_result (dropped when ret_result is NULL), or an error:
 * the agent did not finish in time (or the channel died), or it answered
 * ERROR; "what" names the operation. */
int guest_stream_finish(struct guest_channel *ch, struct guest_stream *s, uint64_t deadline_ms, const char *what,
                        json_t **ret_result, struct al_error *err);
/* Moves the collected output out of a COLLECT stream. */
void guest_stream_take_output(struct guest_channel *ch, struct guest_stream *s, struct exec_output out[2]);
/* Bytes of output received and bytes dropped from the log. */
void guest_stream_stats(struct guest_channel *ch, struct guest_stream *s, uint64_t *ret_bytes, uint64_t *ret_dropped);

/* A reader of a LOG stream. */
struct guest_cursor {
	struct guest_stream *s;
	uint64_t pos;
	int slot;
};
/* Registers a reader from the oldest kept byte or from now; -EBUSY when the
 * stream has GUEST_FOLLOWERS_MAX readers. Holds a stream reference. */
int guest_cursor_open(struct guest_channel *ch, struct guest_stream *s, bool from_start, struct guest_cursor *ret);
void guest_cursor_close(struct guest_channel *ch, struct guest_cursor *c);
/* Next piece of output at the cursor: 1 with a copy (type STDOUT, STDERR or
 * FILE_DATA; *ret_dropped = bytes lost before it), 0 at the end of a finished
 * stream, -ETIMEDOUT when nothing came before the deadline. */
int guest_cursor_read(struct guest_channel *ch, struct guest_cursor *c, uint64_t deadline_ms, uint8_t *ret_type,
                      uint8_t **ret_data, size_t *ret_len, uint64_t *ret_dropped);

/* One request/answer operation (FILE_OP, METRICS, FREEZE, THAW): sends msg
 * on a new stream and waits for OK, whose payload is *ret_result. An ERROR
 * becomes an API error ("what" names the operation). */
int guest_channel_call(struct guest_channel *ch, uint8_t type, json_t *msg, uint64_t deadline_ms, const char *what,
                       json_t **ret_result, struct al_error *err);

/* SECURITY: a WATCH_EVENTS payload from the guest, checked: a JSON object
 * whose "events" (at most AIRLOCK_WATCH_FRAME_EVENTS_MAX) are each
 * {"name": a relative path of 1..GUEST_WATCH_NAME_MAX bytes without NUL,
 * empty, "." or ".." components, "op": create|write|remove|rename|chmod,
 * "entry"?: a FILE_OP stat object, every member typed and bounded},
 * "lost", "unwatched", "watches" counts and "started" a boolean when
 * present. Returns a new object of only those members (what the channel
 * keeps in the stream's log and an API reads), or NULL with why set. */
json_t *guest_watch_events_check(const uint8_t *payload, size_t len, char *why, size_t why_size);

/* Parses an EXIT result. */
int guest_result_to_exit(uint8_t type, json_t *result, struct exec_exit *ret, struct al_error *err);
/* SECURITY: the bounded copy of a guest's EXIT/ERROR/OK object that is
 * kept (GUEST_RESULT_MEMBERS_MAX scalars, strings cut); takes j. */
json_t *guest_result_flatten(json_t *j);
/* Turns an ERROR result into an API error (enoent -> 404 and so on). */
int guest_result_to_error(json_t *result, const char *what, struct al_error *err);

/* The EXEC message for a request; env is the merged list of KEY=VALUE. */
json_t *guest_exec_message(const struct exec_request *req, char **env, size_t n_env);

#endif
