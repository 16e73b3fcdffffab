/* SPDX-License-Identifier: Apache-2.0 */
/* The processes of one sandbox: every exec (streamed, collected or
 * background) gets a process id ("p-N") that stays valid while the sandbox
 * lives. The output lives in the process's guest stream (a log of
 * GUEST_LOG_CAPACITY); the most recent exited processes keep it. */
#ifndef AIRLOCK_PROCESS_H
#define AIRLOCK_PROCESS_H

#include <jansson.h>

#include "guest-channel.h"

#define PROCESS_ID_MAX 23
#define PROCESS_KEEP_EXITED 256 /* records of exited processes */
#define PROCESS_KEEP_OUTPUT 32  /* of which keep their output */
/* The env of its request a process keeps for process_config, at most
 * (bytes of names and values): a larger one is not kept. */
#define PROCESS_CONFIG_ENV_MAX (64u * 1024u)

struct process_table;

struct process_table *process_table_new(const char *sandbox_id, const char *tenant);
/* Releases every stream; the channel must still exist. */
void process_table_free(struct process_table *t, struct guest_channel *ch);

/* Called when a process ends (from the channel's monitor thread). */
typedef void (*process_exit_fn)(const char *sandbox_id, const char *tenant, const char *process_id, uint8_t type,
                                json_t *result, uint64_t duration_ms);
void process_set_exit_hook(process_exit_fn fn);

/* Starts req (with env, the merged KEY=VALUE list) as a new process. Returns
 * its id and a new reference to its stream. */
int process_start(struct process_table *t, struct guest_channel *ch, const struct exec_request *req, char **env,
                  size_t n_env, enum guest_stream_mode mode, char ret_id[PROCESS_ID_MAX + 1],
                  struct guest_stream **ret_stream, struct al_error *err);

/* The process object (docs/api.md) and a new reference to its stream (NULL
 * when its output was forgotten). -ENOENT for an unknown id. */
int process_get(struct process_table *t, struct guest_channel *ch, const char *id, json_t **ret_json,
                struct guest_stream **ret_stream, struct al_error *err);
json_t *process_list(struct process_table *t, struct guest_channel *ch);
/* The cwd and the request's own env ({"NAME": "value"}; {} when it was
 * above PROCESS_CONFIG_ENV_MAX) of a process; kept until it is seen to
 * have ended (the next process_start), -ENOENT after. */
int process_config(struct process_table *t, const char *id, char **ret_cwd, json_t **ret_env, struct al_error *err);

bool process_id_valid(const char *id);

#endif
