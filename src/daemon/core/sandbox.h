/* SPDX-License-Identifier: Apache-2.0 */
/* Sandboxes: the state machine of each sandbox, the supervision of its VMM,
 * and the registry of live ones. Every transition is persisted in the store
 * before it is acknowledged. */
#ifndef AIRLOCK_SANDBOX_H
#define AIRLOCK_SANDBOX_H

#include "sandbox-model.h"
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
	/* Egress policy of sandboxes whose create request names none
	 * (canonical JSON); NULL: deny everything. */
	const char *default_network_json;
	/* Host-wide maxima of one sandbox (docs/api.md, "Limits"): a create or
	 * restore above one answers 400 naming the flag. */
	unsigned max_vcpus;      /* --max-vcpus */
	unsigned max_memory_mib; /* --max-memory-mib */
	unsigned max_disk_mib;   /* --max-disk-mib */
	/* Boots and restores at once (--max-concurrent-starts); a create waits
	 * for a slot at most start_queue_timeout_s, then answers 503. */
	unsigned max_concurrent_starts;
	unsigned start_queue_timeout_s;
	/* The watchdog (--watchdog-s): a running sandbox whose VMM (QMP) or
	 * agent has not answered for this long is killed; 0 = off. */
	unsigned watchdog_s;
	/* Requests a second and burst per tenant on the TCP listener
	 * (--rate-limit-rps, --rate-limit-burst); rps 0 = no limit. */
	unsigned rate_limit_rps;
	unsigned rate_limit_burst;
	/* Creates restore their template's snapshot (template-snap.h) unless
	 * the request says "boot": "cold" (--template-snapshots off: never). */
	bool template_snapshots;
	/* The API listeners: connections per listener (--api-max-connections),
	 * per client address on TCP (--api-max-connections-per-client; 0 = no
	 * cap), and how long a connection may wait for its next request
	 * (--api-idle-timeout-s). */
	unsigned api_max_connections;
	unsigned api_max_connections_per_client;
	unsigned api_idle_timeout_s;
	/* auth.failure events per client address on TCP: a burst, then so many
	 * a minute (--auth-failure-burst, --auth-failure-per-min; 0 = one event
	 * per failure); all addresses together get ten times that. */
	unsigned auth_failure_burst;
	unsigned auth_failure_per_min;
	/* Network namespaces kept ready for creates (--netns-pool; netns.h). */
	unsigned netns_pool;
	/* How long a start waits for the accelerator's decision while its probe
	 * runs (accel-probe.h); 503 after that. */
	unsigned accel_wait_s;
	/* Warm pools (--warm-pool, sandbox-pool.c) and the host memory in use,
	 * in percent, above which they shed VMs (--pool-memory-high-pct; 0: never). */
	const struct pool_spec *warm_pools;
	size_t n_warm_pools;
	unsigned pool_memory_high_pct;
	/* The ports proxy (api/proxy-*.c; docs/api.md, "Ports"): its listener
	 * (--proxy-listen HOST:PORT; NULL: none) and the domain of its URLs
	 * (--proxy-domain; URLs are http://PORT-ID.DOMAIN/ and, without
	 * wildcard DNS, http://DOMAIN/sandbox/ID/PORT/); NULL without a proxy. */
	const char *proxy_listen;
	const char *proxy_domain;
};

#define DEFAULT_POOL_MEMORY_HIGH_PCT 80

#define DEFAULT_MAX_DISK_MIB 4096
#define DEFAULT_MAX_CONCURRENT_STARTS 4
#define MAX_CONCURRENT_STARTS_MAX 1024
#define DEFAULT_WATCHDOG_S 30
#define WATCHDOG_S_MAX 3600
#define DEFAULT_RATE_LIMIT_RPS 50
#define DEFAULT_RATE_LIMIT_BURST 100
#define RATE_LIMIT_MAX 1000000
#define DEFAULT_API_MAX_CONNECTIONS 1024
#define API_MAX_CONNECTIONS_MAX 65536
#define DEFAULT_API_MAX_CONNECTIONS_PER_CLIENT 64
#define DEFAULT_API_IDLE_TIMEOUT_S 60
#define API_IDLE_TIMEOUT_S_MAX 3600
#define DEFAULT_AUTH_FAILURE_BURST 20
#define DEFAULT_AUTH_FAILURE_PER_MIN 10
#define AUTH_FAILURE_LIMIT_MAX 60000

/* Loads the registry and reconciles the store with the VMMs still running:
 * live ones are re-attached, dead ones end in state error. */
int sandboxes_init(const struct daemon_config *cfg, struct al_error *err);
/* Stops supervising (VMMs keep running; a restarted daemon re-attaches). */
void sandboxes_shutdown(void);
/* How many of the live sandboxes a restart found are still being
 * re-attached (in the background, while the API answers). */
unsigned sandboxes_reattaching(void);

/* `tenant` scopes every call: NULL is the admin (every tenant); otherwise a
 * sandbox of another tenant answers "not found", as if it did not exist. */

/* Checks the tenant's quota (NULL: none) atomically with the creation. */
struct tenant_quota;
struct snapshot_info;
/* With `from`, the new sandbox is a restore of that (verified) snapshot. */
int sandbox_create(const struct create_request *req, const char *tenant, const struct tenant_quota *quota,
                   const struct snapshot_info *from, struct sandbox_record *ret, struct al_error *err);
/* Checks that a snapshot can be restored here: tenant, digests, kernel. */
int sandbox_snapshot_usable(const char *snapshot_id, const char *tenant, struct snapshot_info *ret,
                            struct al_error *err);
/* Captures memory, devices and disk of a running (or paused) sandbox. */
int sandbox_snapshot(const char *id, const char *tenant, const char *name, bool internal, struct snapshot_info *ret,
                     struct al_error *err);
/* Changes timeout_s (counted again from now), on_timeout and idle_timeout_s. */
struct timeout_request;
int sandbox_set_timeouts(const char *id, const char *tenant, const struct timeout_request *t,
                         struct sandbox_record *ret, struct al_error *err);

/* Replaces the egress policy (canonical JSON, network-policy.h) of a live
 * sandbox: the gateway applies it atomically to new connections. */
int sandbox_network_set(const char *id, const char *tenant, const char *policy_json, struct sandbox_record *ret,
                        struct al_error *err);
/* Packets and bytes the namespace's rules dropped (everything that is not
 * DNS or TCP to the gateway). */
int sandbox_network_dropped(const char *id, const char *tenant, uint64_t *ret_packets, uint64_t *ret_bytes,
                            struct al_error *err);

/* Brings a sandbox in state error back: from its latest snapshot when memory
 * is true and there is one, else by a cold boot of its disk. */
int sandbox_recover(const char *id, const char *tenant, bool memory, struct sandbox_record *ret, struct al_error *err);
/* count running copies of a running sandbox; *ret is an array of records.
 * The copies get secret bindings only for what grants names (env name ->
 * secret name; NULL: none), with new placeholders. */
int sandbox_fork(const char *id, const char *tenant, const struct tenant_quota *quota, unsigned count,
                 const struct kv_list *grants, struct sandbox_record **ret, struct al_error *err);
int sandbox_get(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err);
int sandbox_delete(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err);
int sandbox_exec(const char *id, const char *tenant, const struct exec_request *req, struct exec_result *ret,
                 char ret_process_id[32], struct al_error *err);

/* Freezes a running sandbox (no CPU; memory stays resident) / thaws it. */
int sandbox_pause(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err);
/* The pause of this host's VM alone, whatever handler is set. */
int sandbox_pause_local(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err);
/* Cluster mode (cluster-node.h): a pause is the handler's (a snapshot in the
 * shared store, the VM gone), and creates and resumes first ask the gate
 * (503 while the node is fenced). Set once at start-up. */
typedef int (*sandbox_pause_fn)(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err);
typedef int (*sandbox_gate_fn)(const char *what, struct al_error *err);
void sandboxes_set_cluster_hooks(sandbox_pause_fn pause, sandbox_gate_fn gate);
int sandbox_resume(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err);

/* A running sandbox, held for an operation (it cannot be freed meanwhile; a
 * delete makes its channel fail). */
struct sandbox;
int sandbox_acquire(const char *id, const char *tenant, struct sandbox **ret, struct al_error *err);
void sandbox_release(struct sandbox *sb);
const char *sandbox_id(const struct sandbox *sb);
const char *sandbox_tenant(const struct sandbox *sb);
struct guest_channel *sandbox_channel(struct sandbox *sb);
struct process_table *sandbox_processes(struct sandbox *sb);
/* The sandbox's env with `over` applied, as KEY=VALUE strings. */
char **sandbox_env_merge(struct sandbox *sb, const struct kv_list *over, size_t *ret_n);
void sandbox_env_free(char **env, size_t n);
/* req with its template's WORKDIR and USER where it asked for the defaults
 * (cwd_default, user_default); cwd: room for the path. */
struct exec_request sandbox_exec_defaults(struct sandbox *sb, const struct exec_request *req, char *cwd,
                                          size_t cwd_size);

/* Warm pools (sandbox-pool.c; docs/api.md, "Warm pools"). */
struct pool_status {
	struct pool_spec spec;
	unsigned ready;     /* VMs restored and paused, ready to be taken */
	bool filling;       /* one is being restored now */
	uint64_t pss_bytes; /* of its ready VMs (VMM and jailer), now */
	uint64_t hits, misses, fills, failures, shed, lost;
	char error[256]; /* why the last fill failed; "" once one succeeds */
};
struct pool_memory {
	uint64_t host_total_bytes, host_available_bytes;
	unsigned high_pct; /* --pool-memory-high-pct */
	bool shedding;     /* above it now: pools shrink, nothing is filled */
};
/* Sets a pool's size (0 removes it; VMs above the size are stopped); a
 * tenant's pool (spec->tenant set) must fit in quota (NULL: not checked). */
int sandbox_pool_set(const struct pool_spec *spec, const struct tenant_quota *quota, struct al_error *err);
/* The pools tenant sees (NULL: every pool; a tenant: the shared ones and
 * its own), with their memory measured now; *ret is the caller's to free. */
int sandbox_pools_list(const char *tenant, struct pool_status **ret, size_t *ret_n);
void sandbox_pools_memory(struct pool_memory *ret);

/* Live sandboxes (creating or running) of a tenant and what they hold. */
void sandbox_usage(const char *tenant, unsigned *ret_sandboxes, unsigned *ret_vcpus, unsigned *ret_memory_mib);

/* Ports of a sandbox reached from outside (sandbox-ports.c; docs/api.md,
 * "Ports"): the proxy (api/proxy-*.c) and `port-forward` dial a guest port
 * from inside the sandbox's namespace; nothing gives the guest a way out. */
#define TRAFFIC_TOKEN_PREFIX "att_"
#define TRAFFIC_TOKEN_LEN (4 + 64) /* "att_" and 32 bytes of HMAC-SHA256 in hex */
/* How the proxy may admit a request to `port` of `id`. */
struct port_target {
	char tenant[64];  /* the sandbox's */
	bool exposed;     /* the port is in its list (PUT .../ports/{port}) */
	bool public_port; /* exposed with public: anyone may reach it */
	bool auto_resume; /* a request to it resumes it when paused */
	enum sandbox_state state;
};
/* The sandbox's view for the proxy; "not found" for an unknown or deleted one. */
int sandbox_port_target(const char *id, unsigned port, struct port_target *ret, struct al_error *err);
/* Its traffic token: HMAC-SHA256 under the host's secret key of (tenant, id);
 * valid while the sandbox lives, on this host. */
int sandbox_traffic_token(const char *tenant, const char *id, char ret[TRAFFIC_TOKEN_LEN + 1]);
/* Whether token is that token (constant time). */
bool sandbox_traffic_token_check(const char *tenant, const char *id, const char *token);
/* A connected TCP socket (blocking, CLOEXEC) to the guest's `port`, made in
 * the sandbox's namespace: a paused sandbox is resumed first when its
 * auto_resume is on (the call waits), else a conflict; ECONNREFUSED: nothing
 * listens there (AL_ERR_GUEST naming the port). Counts as activity. The
 * connection is hung up when the sandbox stops; close it with
 * sandbox_port_close. */
int sandbox_port_dial(const char *id, unsigned port, unsigned timeout_ms, int *ret_fd, struct al_error *err);
/* Ends a connection sandbox_port_dial made: forgotten by its sandbox, closed. */
void sandbox_port_close(const char *id, int fd);
/* Hangs up every connection to every sandbox's ports (the daemon stops). */
void sandbox_ports_hang_up_all(void);
#define SANDBOX_PORT_CONNS_MAX 1024 /* open connections to one sandbox's ports */
/* Traffic through a port (requests answered, bytes each way, failed
 * requests) for its counters (metrics, the ports list); counts as activity. */
struct port_traffic {
	uint64_t requests, bytes_in, bytes_out, errors;
};
void sandbox_port_traffic(const char *id, unsigned port, const struct port_traffic *t);
/* Adds port to the sandbox's exposed ports (or changes whether it is
 * public); at most SANDBOX_RECORD_PORTS_MAX; an event `port.exposed`. */
int sandbox_port_expose(const char *id, const char *tenant, unsigned port, bool public_port, struct sandbox_record *ret,
                        struct al_error *err);
/* Takes it out of the list ("not found" if it is not there); `port.unexposed`. */
int sandbox_port_unexpose(const char *id, const char *tenant, unsigned port, struct sandbox_record *ret,
                          struct al_error *err);
/* The counters of the ports that had traffic since the sandbox was last
 * started by this daemon (at most SANDBOX_PORT_STATS_MAX ports). */
#define SANDBOX_PORT_STATS_MAX 32
struct port_stats {
	uint16_t port;
	struct port_traffic t;
};
int sandbox_ports_stats(const char *id, const char *tenant, struct port_stats ret[SANDBOX_PORT_STATS_MAX],
                        unsigned *ret_n, struct al_error *err);
/* fn for each counted port of every live sandbox (for /metrics; under the registry's lock). */
void sandbox_ports_stats_each(void (*fn)(const char *id, const char *tenant, const struct port_stats *s, void *arg),
                              void *arg);

#endif
