/* SPDX-License-Identifier: Apache-2.0 */
/* What the files of the sandbox registry (sandbox*.c) share, and nothing
 * outside them includes: the struct of a live sandbox, the registry, and
 * the helpers one file gives another. The rest of the daemon uses
 * sandbox.h.
 *
 * Locks: a sandbox's op_lock (one lifecycle operation at a time: boot,
 * delete, pause, snapshot, recover) is taken before its lock (its record
 * and runtime fields); sb_registry_lock (the list and every refs count) before
 * any sandbox's lock, never the other way round, so sandbox_unref is never
 * called with sb->lock held. Each helper's comment says which
 * lock it wants held; *_locked ones want sb->lock. */
#ifndef AIRLOCK_SANDBOX_INTERNAL_H
#define AIRLOCK_SANDBOX_INTERNAL_H

#include <limits.h>
#include <pthread.h>

#include "cpu-wait.h"
#include "crash-point.h"
#include "netns.h"
#include "sandbox.h"
#include "snapshot.h"

struct sandbox {
	struct sandbox *next;    /* registry list, under sb_registry_lock */
	int refs;                /* under sb_registry_lock */
	pthread_mutex_t op_lock; /* one lifecycle operation (boot, delete) at a time */
	pthread_mutex_t lock;    /* rec and the runtime fields below */
	struct sandbox_record rec;
	char *dir;
	int dirfd;
	pid_t pid;
	int pidfd;
	bool our_child;
	/* Its jailer's --orphan-timeout-s (0: no lease); set when it starts or
	 * is re-attached (sb_lease_adopt), read by the lease thread. */
	unsigned lease_timeout_s;
	struct guest_channel *ch;
	struct process_table *procs;
	int console_fd;
	int console_log_fd;
	size_t console_log_size;
	char console_tail[CONSOLE_TAIL_MAX];
	size_t tail_len;
	int wake_fd;
	pthread_t monitor;
	bool has_monitor;
	bool vmm_exited;
	int vmm_status;
	bool vmm_status_known;     /* the VMM was our child: vmm_status is its wait status */
	bool uid_held;             /* rec.jail_uid is reserved for it (jail_uid_take/reserve) */
	bool channel_at_resume;    /* re-attached paused without a channel: connect it when resumed */
	bool reattaching;          /* a restart is re-attaching to its VMM: requests get 503 (sb_find_live) */
	char *root;                /* <dir>/vm: the VMM's jail root and cwd (owned by its uid); dirfd opens it */
	bool stopping;             /* delete or failed boot in progress: exits are expected */
	bool cancel;               /* deleted while booting */
	uint64_t generation;       /* of the guest: 0 at boot, one more than its snapshot's after a restore */
	struct retired *retired;   /* runtimes of earlier lives (recover), freed with the sandbox */
	uint64_t last_activity_ms; /* monotonic; any API request about it (idle timeout) */
	struct netns net;          /* its network namespace (listeners handed to the gateway) */
	bool net_registered;       /* the egress gateway knows it */
	/* Traffic through its ports (sandbox-ports.c), under lock. */
	struct port_stats port_stats[SANDBOX_PORT_STATS_MAX];
	unsigned n_port_stats;
	/* Connections to its guest's ports (sandbox_port_dial), hung up when it
	 * stops; under lock. ports_hung_up: no new ones (the daemon stops). */
	int *port_fds;
	unsigned n_port_fds, cap_port_fds;
	bool ports_hung_up;
	/* What the last `port.traffic` event of each told, and when (monotonic). */
	struct port_traffic port_reported[SANDBOX_PORT_STATS_MAX];
	uint64_t port_reported_ms[SANDBOX_PORT_STATS_MAX];
	/* A warm pool's VM (sandbox-pool.c): no record in the store and not in
	 * the registry until a create takes it; sb_boot restores it (THAW
	 * included) but leaves it unknown to the gateway and not running. */
	bool pooled;
	/* The watchdog's view (its thread only; `armed` also under lock):
	 * when QMP and the agent last answered, and the agent's HELLO count;
	 * how long the VMM's threads had waited for a CPU at the last look at
	 * which both answered (`cpu`, at `cpu_ms`). */
	struct {
		bool armed;
		uint64_t qmp_ok_ms, agent_ok_ms, hellos;
		bool cpu_valid, reprieved;
		uint64_t cpu_ms;
		pid_t vmm_child, child_of; /* the VMM under its jailer (sb->pid) */
		struct cpu_wait cpu;
	} wd;
};

/* A channel and process table an old VMM left: a request that still holds
 * them may be returning, so they live as long as the sandbox. */
struct retired {
	struct retired *next;
	struct guest_channel *ch;
	struct process_table *procs;
};

/* The guest image files of a template (sb_resolve_images). */
struct images {
	char kernel[PATH_MAX], initrd[PATH_MAX], rootfs[PATH_MAX];
};

/* How long the guest has for THAW (proto.h) after a restore or snapshot. */
#define THAW_TIMEOUT_MS 30000

/* The daemon's configuration, set once by sandboxes_init. */
extern const struct daemon_config *sb_cfg;
/* The live sandboxes: a list, each holding a reference; under sb_registry_lock. */
extern pthread_mutex_t sb_registry_lock;
extern struct sandbox *sb_registry;

/* What the backend's calls on a live sandbox's VMM need: its id, its
 * directory and its VMM's (jail root), open as dirfd. */
static inline struct vmm_config sb_vmm_config(const struct sandbox *sb)
{
	return (struct vmm_config){.sandbox_id = sb->rec.id, .dir = sb->dir, .root = sb->root, .dirfd = sb->dirfd};
}

/* ---- the registry and records (sandbox.c) ---- */

/* A sandbox for rec with one reference (the caller's), not registered yet. */
struct sandbox *sandbox_new(const struct sandbox_record *rec);
/* Drops a reference; the last one frees the sandbox and its runtime. */
void sandbox_unref(struct sandbox *sb);
/* The registry's sandbox `id` with a new reference, or NULL. */
struct sandbox *sb_registry_find(const char *id);
/* Registers sb (the registry takes a reference of its own). */
void sb_registry_add(struct sandbox *sb);
/* Unregisters sb and drops the registry's reference. */
void sb_registry_remove(struct sandbox *sb);
/* A DELETE came while it boots: the boot is cut short (its VMM killed). */
void sb_boot_cut_short(struct sandbox *sb);
/* Persists a state change and emits its event; with sb->lock held. */
int sb_set_state_locked(struct sandbox *sb, enum sandbox_state st, const char *error, struct al_error *err);
/* Persists sb->rec as it is now; with sb->lock held. */
int sb_persist_locked(struct sandbox *sb, struct al_error *err);
/* A copy of the record for the caller (who releases it); takes sb->lock. */
void sb_record_copy_out(struct sandbox *sb, struct sandbox_record *ret);
/* Whether tenant (NULL: the admin) may see rec. */
bool sb_tenant_sees(const char *tenant, const struct sandbox_record *rec);
/* The "not found" answer for id. */
int sb_not_found(const char *id, struct al_error *err);
/* The stored record of `id` if tenant may see it, else "not found". */
int sb_store_get_visible(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err);
/* The live sandbox `id` (a new reference), or "not found", or a conflict naming its state and `needs`. */
int sb_find_live(const char *id, const char *tenant, const char *needs, struct sandbox **ret, struct al_error *err);
/* sb_find_live, then its op_lock taken: one lifecycle operation at a time. */
int sb_op_acquire(const char *id, const char *tenant, const char *needs, struct sandbox **ret, struct al_error *err);
/* Ends an sb_op_acquire: the op_lock is unlocked, the reference dropped. */
void sb_op_release(struct sandbox *sb);

/* ---- the console (sandbox-console.c) ---- */

/* Reads what the console has into its log and tail until it would block; the monitor's thread, or after it stopped. */
void sb_console_drain(struct sandbox *sb);
/* A failure's reason: what, then the telling console lines and the last few; with sb->lock held. */
void sb_describe_exit(struct sandbox *sb, const char *what, char *out, size_t size);

/* ---- VMM supervision (sandbox-monitor.c) ---- */

/* How the VMM ended and its last words, whether the monitor reaped it already or not. */
void sb_vmm_end_describe(struct sandbox *sb, char *out, size_t size);
/* State error with the reason what and the console's telling lines; with sb->lock held. */
void sb_error_locked(struct sandbox *sb, const char *what);
/* The VMM is gone or the guest broke the protocol while nobody expected it: state error. */
void sandbox_fail(struct sandbox *sb, const char *what);
/* Starts the monitor thread (console, channel, the VMM's exit). */
void sb_monitor_start(struct sandbox *sb);
/* Stops the monitor thread, if there is one, and waits for it. */
void sb_monitor_stop(struct sandbox *sb);
/* Stops the VMM and waits until it is gone (SIGKILL). */
void sb_vmm_stop_wait(struct sandbox *sb);
/* Whether the guest channel can only be opened while the guest runs (vsock). */
bool sb_channel_needs_running_guest(void);
/* Opens the guest channel of a started VMM and starts supervising. */
int sb_attach_channel(struct sandbox *sb, uint64_t deadline_ms, struct al_error *err);
/* Opens the console of a started VMM, then (with_channel) its channel. */
int sb_attach(struct sandbox *sb, uint64_t deadline_ms, bool with_channel, struct al_error *err);
/* The channel and its processes retire, kept until the sandbox is freed; under sb->lock. */
void sb_channel_retire_locked(struct sandbox *sb);
/* Stops the monitor and detaches the channel from a connection a save resets; with op_lock held. */
void sb_channel_detach(struct sandbox *sb);
/* A new connection under the channel (or a new channel) after a save reset it; with op_lock held. */
int sb_channel_reconnect(struct sandbox *sb, uint64_t deadline_ms, struct al_error *err);

/* ---- images, the jail, boots and restores (sandbox-boot.c) ---- */

/* The kernel, initramfs and disk of a template, or an error naming the installed ones. */
int sb_resolve_images(const char *template_name, struct images *ret, struct al_error *err);
/* Tells the guest who it is now and makes it unique (proto.h, THAW). */
int sb_thaw(struct sandbox *sb, bool orphan_streams, struct al_error *err);
/* The jailer's refusal in the VMM log, if that is why the VMM ended. */
bool sb_jail_refusal(struct sandbox *sb, char *buf, size_t size);
/* Boots (or restores `from`) the VMM of a sandbox and waits for its agent; with op_lock held. */
int sb_boot(struct sandbox *sb, const struct images *im, const struct snapshot_info *from, bool reuse,
            struct al_error *err);
/* The answer of a boot a DELETE cut short (500 boot_failed, "deleted while it booted"). */
int sb_boot_cancelled(struct sandbox *sb, struct al_error *err);
/* Tears down the runtime of a sandbox: monitor, VMM, network, fds; keeps the dir. */
void sb_teardown(struct sandbox *sb);
/* A boot failed with err: the runtime goes, the record says why. */
void sb_boot_failed(struct sandbox *sb, const struct al_error *err);

/* ---- snapshots (sandbox-snapshot.c) ---- */

/* What the disk of this daemon's snapshots is: its backend's (a snapshot
 * restores only on the backend that took it). */
enum snapshot_disk_kind sb_snapshot_disk(void);

/* ---- the network (sandbox-network.c) ---- */

/* The gateway forgets the sandbox and its namespace goes. */
void sb_network_down(struct sandbox *sb);
/* A namespace (new, or attach_pid's) with its listeners handed to the gateway; fails closed. */
int sb_network_up(struct sandbox *sb, pid_t attach_pid, struct al_error *err);
/* A new namespace, not yet known to the gateway (a warm pool's VM). */
int sb_network_take(struct sandbox *sb, struct al_error *err);
/* The namespace's listeners handed to the gateway with the sandbox's policy and bindings; fails closed. */
int sb_network_register(struct sandbox *sb, struct al_error *err);

/* ---- limits (sandbox-create.c) ---- */

/* A start slot (--max-concurrent-starts), waited for at most --start-queue-timeout-s. */
int sb_start_slot_acquire(const char *what, struct al_error *err);
/* Gives a start slot back. */
void sb_start_slot_release(void);
/* Whether the accelerator is decided (a warm pool fills only then). */
bool sb_accel_decided(void);
/* Whether one more sandbox of this shape fits in the tenant's quotas now,
 * with its live sandboxes and `extra` (NULL: nothing) counted (a create
 * checks again, atomically, when it registers). */
struct tenant_usage;
bool sb_quota_fits(const char *tenant, const struct tenant_quota *quota, const struct tenant_usage *extra,
                   unsigned vcpus, unsigned memory_mib);
/* The parts of a new record that do not come from a request: a new id, the
 * shape, the backend and accelerator, the time. */
void sb_record_base(struct sandbox_record *rec, const char *template_name, unsigned vcpus, unsigned memory_mib,
                    unsigned disk_mib);

/* ---- warm pools (sandbox-pool.c) ---- */

/* Starts the pools of --warm-pool and the thread that fills them. */
void sb_pools_start(void);
/* Stops the thread; the pooled VMs are stopped and their directories removed. */
void sb_pools_stop(void);
/* A pooled VM of this shape for a create of tenant (its own pool first,
 * then a shared one), taken out of its pool, or NULL (a miss is counted
 * when there is a pool of the shape). */
struct sandbox *sb_pool_take(const char *tenant, const char *template_name, unsigned vcpus, unsigned memory_mib,
                             unsigned disk_mib);
/* Gives a taken VM its identity (the record's, set by the create): its
 * cgroup's CPU weight, the gateway, a process table of its tenant, resume,
 * THAW; then running. With op_lock held, the record inserted. */
int sb_pool_handout(struct sandbox *sb, struct al_error *err);
/* A taken VM that will not be handed out: stopped, its directory removed. */
void sb_pool_discard(struct sandbox *sb);
/* Renews the jailer leases of the pooled VMs (the leaser's thread). */
void sb_pool_leases_renew(void);

/* ---- ports (sandbox-ports.c) ---- */

/* A `port.traffic` event to emit: a port's counts since its last one. */
struct port_event {
	char id[SANDBOX_ID_MAX + 1];
	char tenant[64];
	uint16_t port;
	struct port_traffic t;
};
/* The events of sb's ports that are due (at most max; takes sb->lock). */
size_t sb_port_events_due(struct sandbox *sb, struct port_event *out, size_t max);
/* Emits them (without any lock held). */
void sb_port_events_emit(const struct port_event *e, size_t n);
/* Hangs up every connection to its guest's ports (sandbox_port_dial; a
 * stop or recover: new ones wait for `stopping` to end); for_good: new
 * ones are refused for the daemon's life (it stops). */
void sb_ports_hang_up(struct sandbox *sb, bool for_good);

/* ---- timeouts (sandbox-timeouts.c) ---- */

enum timeout_action { TIMEOUT_NONE, TIMEOUT_KILL, TIMEOUT_PAUSE };

/* What a timeout asks of sb now, and why ("timeout", "idle_timeout"); takes sb->lock. */
enum timeout_action sb_timeout_due(struct sandbox *sb, const char **ret_why);
/* After a timeout paused a sandbox, its timeout counts again from zero. */
void sb_timeout_rearm(const char *id);

/* ---- the reaper and the watchdog (sandbox-watchdog.c) ---- */

/* Starts the reaper (timeouts, reclaiming) and, with --watchdog-s, the watchdog. */
void sb_reaper_start(void);
/* A re-attached VMM (jailer: its pid): its lease is renewed at once, and
 * from then on in time for the timeout its jailer was started with. */
void sb_lease_adopt(struct sandbox *sb, pid_t jailer);
/* Stops both threads and waits for them. */
void sb_reaper_join(void);

/* Cluster mode's gate (sandboxes_set_cluster_hooks); NULL: none. */
extern sandbox_gate_fn sb_gate;

#endif
