/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's model: what a request asks of a sandbox, as every layer sees
 * it once the API has parsed it (api-request.h), with the limits that bound
 * each field. Types and predicates only: nothing here does I/O, and nothing
 * here includes a header of any other folder of src/daemon (CONTRIBUTING.md,
 * "Layers"), so the core, the guest channel and the store take requests
 * without including the API's headers. */
#ifndef AIRLOCK_SANDBOX_MODEL_H
#define AIRLOCK_SANDBOX_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SANDBOX_VCPUS_MAX 16
#define SANDBOX_MEMORY_MIB_MIN 128
#define SANDBOX_MEMORY_MIB_MAX 16384
#define SANDBOX_DISK_MIB_MAX (1024u * 1024u) /* 1 TiB: the largest disk_mib (and --max-disk-mib) */
#define SANDBOX_TEMPLATE_NAME_MAX 63
#define ENV_ENTRIES_MAX 256
#define ENV_NAME_MAX 128
#define ENV_VALUE_MAX (32u * 1024u)
#define METADATA_ENTRIES_MAX 64
#define METADATA_KEY_MAX 64
#define METADATA_VALUE_MAX 1024
#define EXEC_ARGV_MAX 1024
#define EXEC_ARG_MAX (128u * 1024u)
#define EXEC_ARGV_TOTAL_MAX (1u << 20)
#define EXEC_CWD_MAX 4096
#define EXEC_STDIN_MAX (8u << 20)
#define EXEC_TIMEOUT_S_DEFAULT 300
#define EXEC_TIMEOUT_S_MAX 86400
#define EXEC_OUTPUT_DEFAULT (16u << 20)
#define EXEC_OUTPUT_MAX (64u << 20)
#define EXEC_ID_MAX 65534
#define EXEC_TAG_MAX 64
#define PTY_ROWS_MAX 1000
#define PTY_COLS_MAX 1000
#define SECRET_NAME_MAX 63     /* [a-z0-9][a-z0-9_.-]{0,62} */
#define SANDBOX_SECRETS_MAX 32 /* grants of one create (or fork) request */

/* A list of "KEY=VALUE" strings (env) or of key/value pairs (metadata). */
struct kv_list {
	size_t n;
	char **keys;
	char **values;
};
void kv_list_release(struct kv_list *l);
/* Appends a copy of key and value (the caller checked the list's limit). */
void kv_list_add(struct kv_list *l, const char *key, const char *value);

#define SANDBOX_TIMEOUT_S_MAX (30u * 24u * 3600u)

/* timeout_s, on_timeout, idle_timeout_s: at create and on their own. */
struct timeout_request {
	bool has_timeout, has_on_timeout, has_idle, has_auto_resume;
	bool auto_resume; /* traffic to its ports resumes it when paused */
	unsigned timeout_s;
	char on_timeout[8]; /* "kill" or "pause" */
	unsigned idle_timeout_s;
};

struct sandbox_record;
struct create_request {
	char template_name[SANDBOX_TEMPLATE_NAME_MAX + 1];
	char tenant[64];   /* "" when not given */
	char snapshot[32]; /* restore this snapshot; "" to boot the template */
	struct timeout_request timeouts;
	unsigned vcpus;
	unsigned memory_mib;
	unsigned disk_mib; /* 0: the template's size */
	bool cold_boot;    /* "boot": "cold": never from the template's snapshot */
	bool build_layer;  /* a template build's own sandbox: may start a layer of the build cache */
	struct kv_list env;
	struct kv_list metadata;
	/* The egress policy, canonical JSON (network-policy.h); NULL when the
	 * request names none (the operator's default applies). */
	char *network_json;
	/* "secrets": env name -> secret name (secrets.h): the sandbox gets a
	 * placeholder in that variable, the gateway the binding. */
	struct kv_list secrets;
	/* Cluster mode's adopt (cluster-move.c): the restore keeps this
	 * record's id, creation time and exposed ports; NULL otherwise. */
	const struct sandbox_record *adopt;
};

struct exec_request {
	size_t argc;
	char **argv;
	struct kv_list env;
	char *cwd;
	uint8_t *stdin_data; /* NULL: no stdin (/dev/null) */
	size_t stdin_len;
	unsigned uid, gid;
	/* The request named no cwd / no uid: its template's WORKDIR / USER
	 * apply (templates.h), else "/" and root. */
	bool cwd_default, user_default;
	unsigned timeout_s;
	bool timeout_given;
	size_t max_output_bytes;
	bool stream;                 /* exec: answer with JSON lines as the process writes */
	bool stdin_stream;           /* keep stdin open for POST .../stdin */
	unsigned pty_rows, pty_cols; /* 0: no PTY */
	char tag[EXEC_TAG_MAX + 1];
};

/* A warm pool (docs/api.md, "Warm pools"): VMs of one shape restored from
 * their template's snapshot and paused ahead of the creates that take them.
 * tenant "" is a shared pool (the operator's: any tenant's create takes
 * from it); a tenant's own pool serves only its creates and is filled only
 * while its live sandboxes and pooled VMs fit in its quotas. */
#define POOL_SIZE_MAX 64 /* VMs of one pool */
#define POOLS_MAX 32     /* pools of a daemon: shapes and tenants */
struct pool_spec {
	char tenant[64];
	char template_name[SANDBOX_TEMPLATE_NAME_MAX + 1];
	unsigned vcpus;
	unsigned memory_mib;
	unsigned size; /* 0: the pool goes */
};

void create_request_release(struct create_request *r);
void exec_request_release(struct exec_request *r);

/* Sandbox ids are "sb-" + 16 lowercase hex digits. */
bool sandbox_id_valid(const char *id);
bool template_name_valid(const char *name);
/* Names of the template build cache's layers (templates.h): never one a
 * client gives. */
#define TEMPLATE_CACHE_PREFIX "airlock-build-"
bool template_name_reserved(const char *name);
bool env_name_valid(const char *name);
bool secret_name_valid(const char *name);

#endif
