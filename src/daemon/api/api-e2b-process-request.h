/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's envd process messages (process.Process, proto JSON) as Airlock's:
 * pure parsers and the end event, no I/O (api-e2b-process-request.c);
 * tests/unit/test-api-e2b-process-request.c and
 * tests/fuzz/fuzz-e2b-process-request.c feed them directly. The handlers
 * are in api-e2b-process.c (docs/e2b.md, "Processes (envd)").
 *
 * Protobuf's JSON: a field that is absent or null is its default; unknown
 * fields are ignored (as Connect's Go servers do); a uint32 is a number or
 * a decimal string; bytes are base64 (standard or URL-safe). */
#ifndef AIRLOCK_API_E2B_PROCESS_REQUEST_H
#define AIRLOCK_API_E2B_PROCESS_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api-e2b-parse.h"
#include "error.h"
#include "sandbox-model.h"

/* Bytes of one SendInput (decoded). */
#define E2B_INPUT_MAX EXEC_STDIN_MAX

/* A ProcessSelector: {"pid": N} or {"tag": T}. */
struct e2b_selector {
	uint32_t pid;
	const char *tag; /* within the message; NULL: by pid */
};

/* SECURITY: client input. msg.process must be a selector with exactly one
 * of pid (uint32) and tag (a string of at most EXEC_TAG_MAX bytes, no NUL). */
int e2b_selector_parse(const json_t *msg, struct e2b_selector *ret, struct al_error *err);

/* SECURITY: client input. A StartRequest {process: {cmd, args, envs, cwd},
 * pty: {size: {rows, cols}}, tag, stdin} as an exec request run as u: cmd,
 * args and envs within the limits of an Airlock exec (sandbox-model.h; env
 * names as env_name_valid), cwd an envd path (e2b_path_resolve; empty or
 * absent: u's home), HOME and USER of u unless envs sets them, a PTY of
 * 1..PTY_ROWS_MAX x 1..PTY_COLS_MAX (24 x 80 without size), stdin kept
 * open with stdin: true or a PTY, and timeout_ms (the call's
 * Connect-Timeout-Ms; 0: none) as its timeout, rounded up to seconds.
 * -EINVAL with err saying which field. */
int e2b_start_request_parse(const json_t *msg, const struct e2b_user *u, uint64_t timeout_ms, struct exec_request *ret,
                            struct al_error *err);

/* SECURITY: client input. A SendInputRequest's input, {"stdin": B64} or
 * {"pty": B64}, decoded (at most E2B_INPUT_MAX bytes): *ret_pty says which. */
int e2b_input_parse(const json_t *msg, uint8_t **ret, size_t *ret_len, bool *ret_pty, struct al_error *err);

/* SECURITY: client input. A SendSignalRequest's signal: SIGNAL_SIGTERM or
 * SIGNAL_SIGKILL by name or number (15, 9); nothing else. */
int e2b_signal_parse(const json_t *msg, int *ret, struct al_error *err);

/* SECURITY: client input. An UpdateRequest's pty: absent (*ret_has false)
 * or {size: {rows, cols}} within the PTY limits. */
int e2b_update_parse(const json_t *msg, bool *ret_has, unsigned *ret_rows, unsigned *ret_cols, struct al_error *err);

/* envd's EndEvent for a process that exited with exit_code (exited) or was
 * killed by signal, in Go's words ("exit status 3", "signal: killed",
 * exitCode -1): {"exitCode","exited","status"} and "error" unless it
 * exited 0 (timed_out adds why). */
json_t *e2b_end_event(bool exited, int exit_code, int signal, bool timed_out);

#endif
