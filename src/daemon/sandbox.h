/* SPDX-License-Identifier: Apache-2.0 */
/* Sandboxes: the state machine of each sandbox, the supervision of its VMM,
 * and the registry of live ones. Every transition is persisted in the store
 * before it is acknowledged. */
#ifndef AIRLOCK_SANDBOX_H
#define AIRLOCK_SANDBOX_H

#include "api-request.h"
#include "error.h"
#include "guest-channel.h"
#include "store.h"
#include "vmm.h"

#define CONSOLE_LOG_MAX (1u << 20) /* per file; one rotated file is kept */
#define CONSOLE_TAIL_MAX 4096      /* kept in memory for error reasons */
#define REATTACH_TIMEOUT_MS 10000

struct daemon_config {
	const char *state_dir;
	const char *image_dir;
	unsigned boot_timeout_s;
	unsigned host_memory_mib;
	const struct vmm_ops *vmm;
	struct store *store;
};

/* Loads the registry and reconciles the store with the VMMs still running:
 * live ones are re-attached, dead ones end in state error. */
int sandboxes_init(const struct daemon_config *cfg, struct al_error *err);
/* Stops supervising (VMMs keep running; a restarted daemon re-attaches). */
void sandboxes_shutdown(void);

int sandbox_create(const struct create_request *req, struct sandbox_record *ret, struct al_error *err);
int sandbox_get(const char *id, struct sandbox_record *ret, struct al_error *err);
int sandbox_delete(const char *id, struct sandbox_record *ret, struct al_error *err);
int sandbox_exec(const char *id, const struct exec_request *req, struct exec_result *ret, struct al_error *err);

/* Sandbox ids are "sb-" + 16 lowercase hex digits. */
bool sandbox_id_valid(const char *id);

#endif
