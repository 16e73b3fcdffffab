/* SPDX-License-Identifier: Apache-2.0 */
/* Host side of the host <-> guest channel: frames in and out, multiplexed
 * streams, the agent's hello. One per running sandbox. */
#ifndef AIRLOCK_GUEST_CHANNEL_H
#define AIRLOCK_GUEST_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "api-request.h"
#include "error.h"
#include "frame.h"

/* A write to the guest that makes no progress for this long means the agent
 * stopped reading: the channel is declared dead. */
#define GUEST_WRITE_TIMEOUT_MS 30000
/* Concurrent operations per sandbox. */
#define GUEST_STREAMS_MAX 256
/* Extra time past an exec's own timeout before the host gives up on the agent. */
#define GUEST_EXEC_GRACE_MS 15000

struct guest_channel;

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

struct exec_result {
	bool exited; /* exit_code valid; else signal valid */
	int exit_code;
	int signal;
	bool timed_out;
	struct exec_output out[2]; /* stdout, stderr */
	uint64_t duration_ms;
};
void exec_result_release(struct exec_result *r);

/* Takes ownership of fd (made non-blocking). */
struct guest_channel *guest_channel_new(int fd);
void guest_channel_free(struct guest_channel *ch);
int guest_channel_fd(struct guest_channel *ch);

/* Reads what is available and handles whole frames. < 0 when the channel is
 * finished: -EPROTO for a protocol violation by the guest, else EOF or an I/O
 * error (the reason is kept). */
int guest_channel_read(struct guest_channel *ch);
/* SECURITY: handles one frame from the guest. Everything in it is hostile:
 * unknown streams and unexpected types are dropped, control payloads are
 * parsed as bounded JSON with type checks, output is capped per stream. < 0
 * only for violations that make the channel unusable. Exposed for fuzzing. */
int guest_channel_handle_frame(struct guest_channel *ch, const struct airlock_frame_header *h,
			       const uint8_t *payload);

/* Marks the channel dead (VMM gone, deleted...) and wakes every waiter. */
void guest_channel_kill(struct guest_channel *ch, const char *reason);
bool guest_channel_dead(struct guest_channel *ch, char *reason, size_t reason_size);

/* Asks the agent to say hello again (after a re-attach). */
int guest_channel_request_hello(struct guest_channel *ch);
/* Waits until the agent said hello (0), the channel died (-EPIPE) or the
 * deadline passed (-ETIMEDOUT). */
int guest_channel_wait_hello(struct guest_channel *ch, uint64_t deadline_ms, struct guest_hello *ret);

/* Runs a command to completion. env is the merged list of KEY=VALUE. */
int guest_channel_exec(struct guest_channel *ch, const struct exec_request *req, char **env, size_t n_env,
		       struct exec_result *ret, struct al_error *err);

/* A stream for an operation driven by the caller (and by the fuzzer): output
 * is capped at max_output per stream. */
int guest_channel_stream_open(struct guest_channel *ch, size_t max_output, uint32_t *ret_id, struct al_error *err);
void guest_channel_stream_close(struct guest_channel *ch, uint32_t id);

/* Best effort: asks the agent to power off. */
int guest_channel_shutdown(struct guest_channel *ch);

#endif
