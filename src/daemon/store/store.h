/* SPDX-License-Identifier: Apache-2.0 */
/* The state store: one SQLite database (WAL) in the state dir holding every
 * sandbox record. Every state transition is written here before it is
 * acknowledged to a client. Thread-safe (one serialized connection). */
#ifndef AIRLOCK_STORE_H
#define AIRLOCK_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

#define SANDBOX_ID_MAX 31
#define SANDBOX_RECORD_PORTS_MAX 16 /* exposed ports of one sandbox */

enum sandbox_state {
	SANDBOX_CREATING,
	SANDBOX_RUNNING,
	SANDBOX_STOPPING,
	SANDBOX_STOPPED,
	SANDBOX_ERROR,
	SANDBOX_DELETED,
	SANDBOX_PAUSED,
	SANDBOX_SNAPSHOTTING,
	SANDBOX_STATE_COUNT,
};

const char *sandbox_state_name(enum sandbox_state s);
int sandbox_state_from_name(const char *name, enum sandbox_state *ret);

struct sandbox_record {
	char id[SANDBOX_ID_MAX + 1];
	char tenant[64];
	enum sandbox_state state;
	char template_name[64];
	unsigned vcpus;
	unsigned memory_mib;
	char *env_json;      /* JSON object text, never NULL after load */
	char *metadata_json; /* JSON object text, never NULL after load */
	char backend[16];
	char accel[8];
	uint64_t created_ms; /* epoch ms */
	uint64_t updated_ms;
	int64_t boot_ms; /* -1 until booted */
	char *error;     /* NULL unless state is error */
	int64_t vmm_pid; /* 0 when no VMM */
	/* Timeouts: running time (paused time does not count) after which
	 * on_timeout ("kill" or "pause") happens; idle: no API activity. 0 = none. */
	unsigned timeout_s;
	char on_timeout[8];
	unsigned idle_timeout_s;
	uint64_t run_ms;           /* running time accumulated before running_since_ms */
	uint64_t running_since_ms; /* epoch ms when it last became running; 0 when not running */
	/* The egress policy, canonical JSON {"allow":[...],"deny":[...]}
	 * (network-policy.h); never NULL after load. */
	char *network_json;
	/* The sandbox's secret bindings (secrets.h): JSON array text of
	 * {"env","secret","secret_id","placeholder"}; never NULL after load. */
	char *secrets_json;
	/* The guest's CA bundle that trusts the Airlock CA (SSL_CERT_FILE etc.);
	 * "" until the CA was installed. */
	char ca_bundle[64];
	/* Size of the sandbox's disk as the guest sees it; 0: not known (a
	 * record from before disk sizes). */
	unsigned disk_mib;
	/* The uid (= gid) of its VMM's jail (jail.h) while it has one; 0: none. */
	uint32_t jail_uid;
	/* How its VM last started: "template" (a restore of its template's
	 * snapshot), "cold" (a boot) or "snapshot" (a restore of a snapshot);
	 * "" before that. At create: "cold" when the request asks for it. */
	char boot_path[12];
	/* The accelerator's CPU model its VMM runs with (QEMU's -cpu), and why
	 * the daemon chose the accelerator (accel.h); "" in records from before. */
	char cpu[64];
	char accel_reason[512];
	/* The internal snapshot of the fork that made it while that fork is
	 * unfinished; "" otherwise. A restart deletes every sandbox that still
	 * names one: a fork is all or nothing (store_fork_finish). */
	char fork_of[32];
	/* The MAC address of the guest's NIC ("02:xx:xx:xx:xx:xx", its VM's
	 * own: drawn with the VM's namespace, netns.h; given by the QEMU
	 * command line on a cold boot and by THAW on a restore); "" in records
	 * from before, whose guests have AIRLOCK_NET_GUEST_MAC. */
	char guest_mac[18];
	/* A paused sandbox is resumed by traffic to its ports (the proxy,
	 * port-forward: sandbox_port_dial); E2B's autoResume. */
	bool auto_resume;
	/* Its exposed ports (PUT /v1/sandboxes/{id}/ports/{port}), in the order
	 * they were exposed; public ones are reached without a token. */
	struct sandbox_port {
		uint16_t port;
		bool public_port;
	} ports[SANDBOX_RECORD_PORTS_MAX];
	unsigned n_ports;
};

#define NETWORK_POLICY_EMPTY "{\"allow\":[],\"deny\":[]}"

void sandbox_record_release(struct sandbox_record *r);
void sandbox_record_copy(struct sandbox_record *dst, const struct sandbox_record *src);

struct store;

int store_open(const char *path, struct store **ret, struct al_error *err);
void store_close(struct store *s);
/* The connection, for modules that keep their own tables in the same database
 * (auth, events). Serialized (SQLITE_OPEN_FULLMUTEX); owned by the store. */
struct sqlite3 *store_db(struct store *s);

/* -EEXIST if the id is taken. */
int store_sandbox_insert(struct store *s, const struct sandbox_record *r, struct al_error *err);
/* Writes every field of r over the stored row; -ENOENT if there is none. */
int store_sandbox_update(struct store *s, const struct sandbox_record *r, struct al_error *err);
/* -ENOENT if there is none. */
int store_sandbox_get(struct store *s, const char *id, struct sandbox_record *ret, struct al_error *err);
/* Newest first. The caller releases each record and frees the array. */
/* The fork of snapshot_id is finished: its sandboxes' fork_of is cleared,
 * all of them in one transaction. */
int store_fork_finish(struct store *s, const char *snapshot_id, struct al_error *err);
/* Removes the record of id if it is deleted (a sandbox that comes back to
 * this host under its id, cluster mode); -EEXIST if it is not deleted. */
int store_sandbox_purge(struct store *s, const char *id, struct al_error *err);
/* Called after every successful insert and update of a record, on the
 * writer's thread (cluster mode's index, cluster-index.c); set once at
 * start-up, before any write. */
void store_set_observer(void (*fn)(const struct sandbox_record *r));
int store_sandbox_list(struct store *s, bool include_deleted, struct sandbox_record **ret, size_t *ret_n,
                       struct al_error *err);

#endif
