/* SPDX-License-Identifier: Apache-2.0 */
/* airlockd: the API, the state machine of every sandbox, the supervisor of
 * VMM processes. */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "accel-probe.h"
#include "accel.h"
#include "api.h"
#include "api-request.h"
#include "auth.h"
#include "ca.h"
#include "cluster-node.h"
#include "daemon-config.h"
#include "egress-supervisor.h"
#include "events.h"
#include "json-cleanup.h"
#include "log.h"
#include "netns.h"
#include "network-policy.h"
#include "template-builds.h"
#include "metrics.h"
#include "jail.h"
#include "process.h"
#include "proxy.h"
#include "secrets.h"
#include "snapshot.h"
#include "sandbox.h"
#include "util.h"
#include "version.h"
#include "vmm-select.h"

#define DEFAULT_SOCKET "/run/airlock/airlockd.sock"
#define DEFAULT_STATE_DIR "/var/lib/airlock"
#define DEFAULT_BOOT_TIMEOUT_S 60
#define DEFAULT_SECCOMP_INSTALLED "/usr/share/airlock/seccomp/qemu-x86_64.json"
#define BOOT_TIMEOUT_S_MAX 3600

#define DEFAULT_MAX_FILE_BYTES (1ull << 30)
/* How often the main thread does its rounds (summaries of failed authentications). */
#define HOUSEKEEPING_S 5

/* Long-only flags. The numbers come first: each is checked against its range
 * in number_flags[] and kept in daemon_options.numbers[NUM(OPT_*)]. */
enum {
	OPT_FIRST = 1000,
	/* The limits (docs/api.md, "Limits"). */
	OPT_MAX_VCPUS = OPT_FIRST,
	OPT_MAX_MEMORY,
	OPT_MAX_DISK,
	OPT_MAX_STARTS,
	OPT_START_QUEUE,
	OPT_WATCHDOG,
	OPT_RATE_RPS,
	OPT_RATE_BURST,
	OPT_API_MAX_CONNECTIONS,
	OPT_API_MAX_PER_CLIENT,
	OPT_API_IDLE_TIMEOUT,
	OPT_AUTH_FAILURE_BURST,
	OPT_AUTH_FAILURE_PER_MIN,
	OPT_NETNS_POOL,
	OPT_POOL_MEMORY_HIGH,
	OPT_ACCEL_PROBE_TIMEOUT,
	OPT_PROXY_HEADER_TIMEOUT,
	OPT_PROXY_IDLE_TIMEOUT,
	OPT_PROXY_MAX_BODY,
	OPT_TEMPLATE_UPLOAD,
	OPT_BUILD_STEP_TIMEOUT,
	OPT_BUILD_CACHE,
	/* Numbers that are not limits. */
	OPT_BOOT_TIMEOUT,
	OPT_JAIL_UID_BASE,
	OPT_JAIL_UID_COUNT,
	OPT_NODE_LEASE,
	OPT_EGRESS_UID,
	OPT_ORPHAN_TIMEOUT,
	OPT_END,
	/* Not numbers. */
	OPT_JAILER = 2000,
	OPT_SECCOMP,
	OPT_CGROUP_PARENT,
	OPT_TEMPLATE_SNAPSHOTS,
	OPT_ACCEL,
	OPT_CPU_MODEL,
	OPT_CHECK,
	OPT_EGRESS_NO_SECCOMP,
	OPT_WARM_POOL,
	OPT_PROXY_LISTEN,
	OPT_PROXY_DOMAIN,
	OPT_BUILD_NETWORK_POLICY,
	OPT_CLUSTER_DB,
	OPT_CLUSTER_KEY,
	OPT_NODE_NAME,
	OPT_NODE_URL,
	OPT_SHARED_STORE,
};
#define NUM(opt) ((opt)-OPT_FIRST)

/* Indexed by NUM(OPT_*); `def` -1: computed from other settings. */
static const struct {
	const char *name;
	long min, max, def;
} number_flags[NUM(OPT_END)] = {
    [NUM(OPT_MAX_VCPUS)] = {"max-vcpus", 1, SANDBOX_VCPUS_MAX, SANDBOX_VCPUS_MAX},
    [NUM(OPT_MAX_MEMORY)] = {"max-memory-mib", SANDBOX_MEMORY_MIB_MIN, SANDBOX_MEMORY_MIB_MAX, -1},
    [NUM(OPT_MAX_DISK)] = {"max-disk-mib", 1, SANDBOX_DISK_MIB_MAX, DEFAULT_MAX_DISK_MIB},
    [NUM(OPT_MAX_STARTS)] = {"max-concurrent-starts", 1, MAX_CONCURRENT_STARTS_MAX, DEFAULT_MAX_CONCURRENT_STARTS},
    [NUM(OPT_START_QUEUE)] = {"start-queue-timeout-s", 0, BOOT_TIMEOUT_S_MAX, -1},
    [NUM(OPT_WATCHDOG)] = {"watchdog-s", 0, WATCHDOG_S_MAX, DEFAULT_WATCHDOG_S},
    [NUM(OPT_RATE_RPS)] = {"rate-limit-rps", 0, RATE_LIMIT_MAX, DEFAULT_RATE_LIMIT_RPS},
    [NUM(OPT_RATE_BURST)] = {"rate-limit-burst", 1, RATE_LIMIT_MAX, DEFAULT_RATE_LIMIT_BURST},
    [NUM(OPT_API_MAX_CONNECTIONS)] = {"api-max-connections", 1, API_MAX_CONNECTIONS_MAX, DEFAULT_API_MAX_CONNECTIONS},
    [NUM(OPT_API_MAX_PER_CLIENT)] = {"api-max-connections-per-client", 0, API_MAX_CONNECTIONS_MAX,
                                     DEFAULT_API_MAX_CONNECTIONS_PER_CLIENT},
    [NUM(OPT_API_IDLE_TIMEOUT)] = {"api-idle-timeout-s", 1, API_IDLE_TIMEOUT_S_MAX, DEFAULT_API_IDLE_TIMEOUT_S},
    [NUM(OPT_AUTH_FAILURE_BURST)] = {"auth-failure-burst", 1, AUTH_FAILURE_LIMIT_MAX, DEFAULT_AUTH_FAILURE_BURST},
    [NUM(OPT_AUTH_FAILURE_PER_MIN)] = {"auth-failure-per-min", 0, AUTH_FAILURE_LIMIT_MAX, DEFAULT_AUTH_FAILURE_PER_MIN},
    [NUM(OPT_NETNS_POOL)] = {"netns-pool", 0, NETNS_POOL_MAX, NETNS_POOL_DEFAULT},
    [NUM(OPT_POOL_MEMORY_HIGH)] = {"pool-memory-high-pct", 0, 99, DEFAULT_POOL_MEMORY_HIGH_PCT},
    [NUM(OPT_ACCEL_PROBE_TIMEOUT)] = {"accel-probe-timeout-s", 1, BOOT_TIMEOUT_S_MAX, ACCEL_PROBE_TIMEOUT_S_DEFAULT},
    [NUM(OPT_PROXY_HEADER_TIMEOUT)] = {"proxy-header-timeout-s", 1, PROXY_TIMEOUT_S_MAX,
                                       PROXY_HEADER_TIMEOUT_S_DEFAULT},
    [NUM(OPT_PROXY_IDLE_TIMEOUT)] = {"proxy-idle-timeout-s", 1, PROXY_TIMEOUT_S_MAX, PROXY_IDLE_TIMEOUT_S_DEFAULT},
    [NUM(OPT_PROXY_MAX_BODY)] = {"proxy-max-body-mib", 1, PROXY_MAX_BODY_MIB_MAX, PROXY_MAX_BODY_MIB_DEFAULT},
    [NUM(OPT_TEMPLATE_UPLOAD)] = {"max-template-upload-mib", 1, 1 << 20, TEMPLATE_UPLOAD_MAX_MIB_DEFAULT},
    [NUM(OPT_BUILD_STEP_TIMEOUT)] = {"build-step-timeout-s", 1, EXEC_TIMEOUT_S_MAX, TEMPLATE_STEP_TIMEOUT_S_DEFAULT},
    [NUM(OPT_BUILD_CACHE)] = {"build-cache-mib", 0, 1 << 30, TEMPLATE_CACHE_MIB_DEFAULT},
    [NUM(OPT_BOOT_TIMEOUT)] = {"boot-timeout-s", 1, BOOT_TIMEOUT_S_MAX, DEFAULT_BOOT_TIMEOUT_S},
    [NUM(OPT_JAIL_UID_BASE)] = {"jail-uid-base", 1000, UINT32_MAX - 2, JAIL_DEFAULT_UID_BASE},
    [NUM(OPT_JAIL_UID_COUNT)] = {"jail-uid-count", 1, JAIL_UID_COUNT_MAX, JAIL_DEFAULT_UID_COUNT},
    [NUM(OPT_NODE_LEASE)] = {"node-lease-s", 3, 300, CLUSTER_LEASE_S_DEFAULT},
    [NUM(OPT_EGRESS_UID)] = {"egress-uid", 1, UINT32_MAX - 1, EGRESS_DEFAULT_UID},
    [NUM(OPT_ORPHAN_TIMEOUT)] = {"orphan-timeout-s", 0, JAIL_ORPHAN_TIMEOUT_S_MAX, JAIL_DEFAULT_ORPHAN_TIMEOUT_S},
};

/* getopt_long's table. "config" is not in it: getopt must not take an
 * abbreviation of it (daemon_config_argv() takes --config out of argv). */
static const struct option daemon_opts[] = {
    {"socket", required_argument, NULL, 's'},
    {"state-dir", required_argument, NULL, 'd'},
    {"image-dir", required_argument, NULL, 'i'},
    {"boot-timeout-s", required_argument, NULL, OPT_BOOT_TIMEOUT},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, 'V'},
    {"listen", required_argument, NULL, 'l'},
    {"ui-dir", required_argument, NULL, 'U'},
    {"max-file-bytes", required_argument, NULL, 'm'},
    {"print-routes", no_argument, NULL, 'r'},
    {"egress-bin", required_argument, NULL, 'E'},
    {"resolver", required_argument, NULL, 'R'},
    {"egress-ca", required_argument, NULL, 'C'},
    {"network-policy", required_argument, NULL, 'N'},
    {"egress-public-cidr", required_argument, NULL, 'P'},
    {"network-ceiling", required_argument, NULL, 'G'},
    {"max-vcpus", required_argument, NULL, OPT_MAX_VCPUS},
    {"max-memory-mib", required_argument, NULL, OPT_MAX_MEMORY},
    {"max-disk-mib", required_argument, NULL, OPT_MAX_DISK},
    {"max-concurrent-starts", required_argument, NULL, OPT_MAX_STARTS},
    {"start-queue-timeout-s", required_argument, NULL, OPT_START_QUEUE},
    {"watchdog-s", required_argument, NULL, OPT_WATCHDOG},
    {"rate-limit-rps", required_argument, NULL, OPT_RATE_RPS},
    {"rate-limit-burst", required_argument, NULL, OPT_RATE_BURST},
    {"jailer", required_argument, NULL, OPT_JAILER},
    {"seccomp-profile", required_argument, NULL, OPT_SECCOMP},
    {"jail-uid-base", required_argument, NULL, OPT_JAIL_UID_BASE},
    {"jail-uid-count", required_argument, NULL, OPT_JAIL_UID_COUNT},
    {"egress-uid", required_argument, NULL, OPT_EGRESS_UID},
    {"orphan-timeout-s", required_argument, NULL, OPT_ORPHAN_TIMEOUT},
    {"egress-no-seccomp", no_argument, NULL, OPT_EGRESS_NO_SECCOMP},
    {"cgroup-parent", required_argument, NULL, OPT_CGROUP_PARENT},
    {"template-snapshots", required_argument, NULL, OPT_TEMPLATE_SNAPSHOTS},
    {"api-max-connections", required_argument, NULL, OPT_API_MAX_CONNECTIONS},
    {"api-max-connections-per-client", required_argument, NULL, OPT_API_MAX_PER_CLIENT},
    {"api-idle-timeout-s", required_argument, NULL, OPT_API_IDLE_TIMEOUT},
    {"auth-failure-burst", required_argument, NULL, OPT_AUTH_FAILURE_BURST},
    {"auth-failure-per-min", required_argument, NULL, OPT_AUTH_FAILURE_PER_MIN},
    {"netns-pool", required_argument, NULL, OPT_NETNS_POOL},
    {"warm-pool", required_argument, NULL, OPT_WARM_POOL},
    {"pool-memory-high-pct", required_argument, NULL, OPT_POOL_MEMORY_HIGH},
    {"backend", required_argument, NULL, 'b'},
    {"print-backend", no_argument, NULL, 'B'},
    {"accel", required_argument, NULL, OPT_ACCEL},
    {"cpu-model", required_argument, NULL, OPT_CPU_MODEL},
    {"accel-probe-timeout-s", required_argument, NULL, OPT_ACCEL_PROBE_TIMEOUT},
    {"check", no_argument, NULL, OPT_CHECK},
    {"proxy-listen", required_argument, NULL, OPT_PROXY_LISTEN},
    {"proxy-domain", required_argument, NULL, OPT_PROXY_DOMAIN},
    {"proxy-header-timeout-s", required_argument, NULL, OPT_PROXY_HEADER_TIMEOUT},
    {"proxy-idle-timeout-s", required_argument, NULL, OPT_PROXY_IDLE_TIMEOUT},
    {"proxy-max-body-mib", required_argument, NULL, OPT_PROXY_MAX_BODY},
    {"build-network-policy", required_argument, NULL, OPT_BUILD_NETWORK_POLICY},
    {"max-template-upload-mib", required_argument, NULL, OPT_TEMPLATE_UPLOAD},
    {"build-step-timeout-s", required_argument, NULL, OPT_BUILD_STEP_TIMEOUT},
    {"build-cache-mib", required_argument, NULL, OPT_BUILD_CACHE},
    {"cluster-db", required_argument, NULL, OPT_CLUSTER_DB},
    {"cluster-key-file", required_argument, NULL, OPT_CLUSTER_KEY},
    {"node-name", required_argument, NULL, OPT_NODE_NAME},
    {"node-url", required_argument, NULL, OPT_NODE_URL},
    {"shared-store", required_argument, NULL, OPT_SHARED_STORE},
    {"node-lease-s", required_argument, NULL, OPT_NODE_LEASE},
    {NULL, 0, NULL, 0},
};

/* Not an exit status: the options let the daemon go on. */
#define DAEMON_RUN (-1)

/* The command line, after the flags of a --config file. */
struct daemon_options {
	const char *socket_path, *state_dir, *image_dir, *listen_addr, *ui_dir;
	const char *proxy_listen, *proxy_domain;
	uint64_t max_file_bytes;
	const char *egress_bin, *resolver, *egress_ca, *network_policy_file, *network_ceiling_file;
	const char *build_network_policy_file;
	struct cluster_config cluster; /* --cluster-db and the flags it needs */
	const char *jailer_bin, *seccomp_profile, *cgroup_parent;
	bool template_snapshots;
	const char *public_cidrs[EGRESS_PUBLIC_CIDRS_MAX];
	size_t n_public_cidrs;
	struct pool_spec warm_pools[POOLS_MAX];
	size_t n_warm_pools;
	const struct vmm_backend *want_backend; /* NULL: auto */
	bool print_backend, check, egress_no_seccomp;
	enum accel_mode accel_mode;
	const char *cpu_model;
	long numbers[NUM(OPT_END)];
};

static void usage(FILE *f)
{
	char backends[256];
	vmm_backend_names(backends, sizeof(backends));
	fprintf(f,
	        "usage: airlockd [--socket PATH] [--state-dir DIR] [--image-dir DIR] [--boot-timeout-s N]\n"
	        "                [--listen ADDR:PORT] [--ui-dir DIR] [--max-file-bytes N] [--print-routes]\n"
	        "                [--egress-bin PATH] [--resolver IP:PORT] [--egress-ca FILE]\n"
	        "                [--network-policy FILE] [--network-ceiling FILE]\n"
	        "                [--egress-public-cidr CIDR]... [--egress-uid N] [--egress-no-seccomp]\n"
	        "                [--max-vcpus N] [--max-memory-mib N] [--max-disk-mib N]\n"
	        "                [--max-concurrent-starts N] [--start-queue-timeout-s N] [--watchdog-s N]\n"
	        "                [--rate-limit-rps N] [--rate-limit-burst N]\n"
	        "                [--jailer PATH] [--seccomp-profile FILE] [--jail-uid-base N]\n"
	        "                [--jail-uid-count N] [--cgroup-parent NAME] [--template-snapshots on|off]\n"
	        "                [--api-max-connections N] [--api-max-connections-per-client N]\n"
	        "                [--api-idle-timeout-s N] [--auth-failure-burst N] [--auth-failure-per-min N]\n"
	        "                [--netns-pool N] [--warm-pool TEMPLATE[:VCPUS:MiB]=N]...\n"
	        "                [--pool-memory-high-pct N] [--backend B] [--print-backend]\n"
	        "                [--accel auto|kvm|tcg] [--cpu-model MODEL] [--accel-probe-timeout-s N]\n"
	        "                [--proxy-listen ADDR:PORT] [--proxy-domain DOMAIN]\n"
	        "                [--proxy-header-timeout-s N] [--proxy-idle-timeout-s N] [--proxy-max-body-mib N]\n"
	        "                [--check] [--config FILE]\n"
	        "\n"
	        "  --socket PATH        API socket (default " DEFAULT_SOCKET ")\n"
	        "  --state-dir DIR      database, sandboxes, logs (default " DEFAULT_STATE_DIR ")\n"
	        "  --image-dir DIR      kernels/ and templates/ (default: the state dir)\n"
	        "  --boot-timeout-s N   a guest that has not said hello after N s is an error (default %d)\n"
	        "  --listen ADDR:PORT   also serve the API over TCP; every request needs a bearer token\n"
	        "  --ui-dir DIR         the web console's files, served at /ui on the TCP listener\n"
	        "                       (default: ui/ next to airlockd in a build tree, else\n"
	        "                       ../share/airlock/ui from it, as make install puts it)\n"
	        "  --max-file-bytes N   largest file or archive upload (default 1 GiB)\n"
	        "  --print-routes       print every route of the API and exit\n"
	        "  --egress-bin PATH    the egress gateway (default: airlock-egress next to airlockd)\n"
	        "  --resolver IP:PORT   upstream DNS server of the egress gateway\n"
	        "                       (default: the first nameserver of /etc/resolv.conf)\n"
	        "  --egress-ca FILE     extra CA certificates the gateway trusts upstream\n"
	        "  --network-policy FILE  egress policy of sandboxes created without one,\n"
	        "                       {\"allow\": [...], \"deny\": [...]} (default: deny everything)\n"
	        "  --network-ceiling FILE  what policies may name beyond public addresses,\n"
	        "                       {\"allow\": [CIDR...], \"metadata\": false} (default: public only)\n"
	        "  --egress-public-cidr CIDR  a network the gateway may dial although it is not public\n"
	        "                       (e.g. an internal range; rules still decide); up to 16\n"
	        "  --egress-uid N       the gateway's uid (= gid): its own, not 0, not nobody, outside\n"
	        "                       the jail range (default %u)\n"
	        "  --egress-no-seccomp  run the gateway without its syscall allow-list (debugging only)\n"
	        "  --max-vcpus N        most vCPUs of one sandbox (default %d)\n"
	        "  --max-memory-mib N   most memory of one sandbox (default: the host's, at most %d)\n"
	        "  --max-disk-mib N     largest disk of one sandbox, disk_mib of a create (default %d)\n"
	        "  --max-concurrent-starts N  boots and restores at once; more creates wait (default %d)\n"
	        "  --start-queue-timeout-s N  a create waits this long for a start, then 503\n"
	        "                       (default: the boot timeout)\n"
	        "  --watchdog-s N       kill a running VM whose VMM or agent has not answered for N s\n"
	        "                       (default %d; 0 = off; time its VMM waited for a CPU is not\n"
	        "                       counted, up to 4 x N s)\n"
	        "  --rate-limit-rps N   API requests a second per tenant over TCP (default %d; 0 = off)\n"
	        "  --rate-limit-burst N requests a tenant may make at once (default %d)\n"
	        "  --jailer PATH        airlock-jailer, which jails every VMM (default: next to airlockd)\n"
	        "  --seccomp-profile FILE  the VMM's syscall allow-list (default: security/seccomp/\n"
	        "                       qemu-x86_64.json of the source tree, else " DEFAULT_SECCOMP_INSTALLED ")\n"
	        "  --jail-uid-base N    first uid (= gid) of the VMMs' jails (default %u)\n"
	        "  --jail-uid-count N   uids in the range: one per live sandbox (default %u); give\n"
	        "                       each airlockd of a host a range of its own\n"
	        "  --cgroup-parent NAME the VMMs' cgroups are NAME/<sandbox id> (default " JAIL_DEFAULT_CGROUP_PARENT
	        ")\n"
	        "  --template-snapshots on|off  create = a restore of the template booted once (default on)\n"
	        "  --api-max-connections N  connections each listener (unix socket, TCP) holds; an idle one\n"
	        "                       makes room for a new one (default %d)\n"
	        "  --api-max-connections-per-client N  TCP connections from one client address\n"
	        "                       (default %d; 0 = no cap)\n"
	        "  --api-idle-timeout-s N   close a connection that sent no request for N s; streamed\n"
	        "                       answers are not cut (default %d)\n"
	        "  --auth-failure-burst N   auth.failure events a client address may cause at once\n"
	        "                       (default %d)\n"
	        "  --auth-failure-per-min N then N a minute, the rest summarized (default %d; 0 = one\n"
	        "                       event per failure)\n"
	        "  --netns-pool N       network namespaces made ahead for creates (default %d; 0 = none)\n"
	        "  --warm-pool TEMPLATE[:VCPUS:MiB]=N\n"
	        "                       keep N VMs of that shape (default 1 vCPU, 256 MiB) restored and\n"
	        "                       paused for creates, a shared pool (repeatable; PUT /v1/pools\n"
	        "                       changes it at run time)\n"
	        "  --pool-memory-high-pct N\n"
	        "                       warm pools shed VMs and stop filling while the host's memory in use\n"
	        "                       is at or above N%% (default %d; 0 = never)\n"
	        "  --backend B          the VMM: %s (docs/kvm-host.md); auto (the\n"
	        "                       default) takes the first this host can run, those made for KVM\n"
	        "                       first where /dev/kvm is usable\n"
	        "  --build-network-policy FILE  egress policy of template builds' RUN steps (default:\n"
	        "                       deny everything); a build may name its own within the ceiling\n"
	        "  --max-template-upload-mib N  largest build context or image archive (default %d)\n"
	        "  --build-step-timeout-s N  longest RUN step of a template build (default %d)\n"
	        "  --build-cache-mib N  disk kept for the build cache's layers (default %d)\n"
	        "  --cluster-db CONNINFO  cluster mode (docs/cluster.md): PostgreSQL's libpq conninfo or URL;\n"
	        "                       needs --listen, --cluster-key-file, --node-url and --shared-store\n"
	        "  --cluster-key-file F the cluster key (32+ bytes, mode 600) fronts sign delegations with\n"
	        "  --node-name NAME     this node's name in the cluster (default: the host name)\n"
	        "  --node-url URL       http://HOST:PORT where fronts reach this node's --listen\n"
	        "  --shared-store DIR   the snapshot store every node mounts (pauses, recoveries)\n"
	        "  --node-lease-s N     the node's lease; fenced when not renewed (default %d)\n"
	        "  --print-backend      print the backend --backend selects on this host, and why, and exit\n"
	        "  --accel A            QEMU's accelerator: auto (default: KVM once a guest has booted on it,\n"
	        "                       else TCG), kvm (refuse to start unless a guest boots on KVM) or tcg\n"
	        "  --cpu-model MODEL    QEMU's -cpu for the guests: under KVM the only model the probe\n"
	        "                       tries (default: host, then host,-arch-capabilities); with\n"
	        "                       --accel tcg instead of max\n"
	        "  --accel-probe-timeout-s N  how long the probe's guest may take to say hello on KVM,\n"
	        "                       per CPU model (default %d)\n"
	        "  --check              print whether this host is ready (accelerator, jail, network,\n"
	        "                       images) as key=value lines and exit: 0 when it is\n"
	        "  --config FILE        read flags from FILE first, one per line: NAME [VALUE]\n"
	        "                       (docs/kvm-host.md); flags on the command line win\n",
	        DEFAULT_BOOT_TIMEOUT_S, EGRESS_DEFAULT_UID, SANDBOX_VCPUS_MAX, SANDBOX_MEMORY_MIB_MAX,
	        DEFAULT_MAX_DISK_MIB, DEFAULT_MAX_CONCURRENT_STARTS, DEFAULT_WATCHDOG_S, DEFAULT_RATE_LIMIT_RPS,
	        DEFAULT_RATE_LIMIT_BURST, JAIL_DEFAULT_UID_BASE, JAIL_DEFAULT_UID_COUNT, DEFAULT_API_MAX_CONNECTIONS,
	        DEFAULT_API_MAX_CONNECTIONS_PER_CLIENT, DEFAULT_API_IDLE_TIMEOUT_S, DEFAULT_AUTH_FAILURE_BURST,
	        DEFAULT_AUTH_FAILURE_PER_MIN, NETNS_POOL_DEFAULT, DEFAULT_POOL_MEMORY_HIGH_PCT, backends,
	        TEMPLATE_UPLOAD_MAX_MIB_DEFAULT, TEMPLATE_STEP_TIMEOUT_S_DEFAULT, TEMPLATE_CACHE_MIB_DEFAULT,
	        CLUSTER_LEASE_S_DEFAULT, ACCEL_PROBE_TIMEOUT_S_DEFAULT);
	fprintf(f,
	        "  --orphan-timeout-s N a VM whose lease no airlockd renewed for N s (this one gone and\n"
	        "                       not back, or its state dir removed) is stopped by its jailer\n"
	        "                       (docs/jailer.md; default %u; 0 = never)\n",
	        JAIL_DEFAULT_ORPHAN_TIMEOUT_S);
	fprintf(f,
	        "  --proxy-listen ADDR:PORT  serve sandboxes' ports over HTTP there (docs/api.md, \"Ports\"):\n"
	        "                       http://<port>-<id>.DOMAIN/ and http://ADDR:PORT/sandbox/<id>/<port>/\n"
	        "  --proxy-domain DOMAIN the host form's domain, with :PORT when clients name one\n"
	        "                       (default localhost:<the listener's port>)\n"
	        "  --proxy-header-timeout-s N  a request head must arrive within N s, else 408 (default %d)\n"
	        "  --proxy-idle-timeout-s N    a body or response with no byte either way for N s is cut\n"
	        "                       (default %d)\n"
	        "  --proxy-max-body-mib N      largest request body through the proxy, else 413 (default %d)\n",
	        PROXY_HEADER_TIMEOUT_S_DEFAULT, PROXY_IDLE_TIMEOUT_S_DEFAULT, PROXY_MAX_BODY_MIB_DEFAULT);
}

static void options_init(struct daemon_options *o)
{
	*o = (struct daemon_options){
	    .socket_path = DEFAULT_SOCKET,
	    .state_dir = DEFAULT_STATE_DIR,
	    .max_file_bytes = DEFAULT_MAX_FILE_BYTES,
	    .cgroup_parent = JAIL_DEFAULT_CGROUP_PARENT,
	    .template_snapshots = true,
	    .want_backend = NULL,
	    .accel_mode = ACCEL_MODE_AUTO,
	};
	for (size_t i = 0; i < ARRAY_SIZE(o->numbers); i++)
		o->numbers[i] = number_flags[i].def;
}

/* Where an option whose value is any string keeps it; NULL for the others. */
static const char **option_string(struct daemon_options *o, int c)
{
	switch (c) {
	case 's':
		return &o->socket_path;
	case 'd':
		return &o->state_dir;
	case 'i':
		return &o->image_dir;
	case 'l':
		return &o->listen_addr;
	case 'U':
		return &o->ui_dir;
	case 'E':
		return &o->egress_bin;
	case 'R':
		return &o->resolver;
	case 'C':
		return &o->egress_ca;
	case 'N':
		return &o->network_policy_file;
	case 'G':
		return &o->network_ceiling_file;
	case OPT_JAILER:
		return &o->jailer_bin;
	case OPT_SECCOMP:
		return &o->seccomp_profile;
	case OPT_CGROUP_PARENT:
		return &o->cgroup_parent;
	case OPT_PROXY_LISTEN:
		return &o->proxy_listen;
	case OPT_PROXY_DOMAIN:
		return &o->proxy_domain;
	case OPT_BUILD_NETWORK_POLICY:
		return &o->build_network_policy_file;
	case OPT_CLUSTER_DB:
		return &o->cluster.db_conninfo;
	case OPT_CLUSTER_KEY:
		return &o->cluster.key_file;
	case OPT_NODE_NAME:
		return &o->cluster.node_name;
	case OPT_NODE_URL:
		return &o->cluster.node_url;
	case OPT_SHARED_STORE:
		return &o->cluster.shared_store;
	default:
		return NULL;
	}
}

static int option_number(struct daemon_options *o, int c, const char *arg)
{
	size_t i = (size_t)NUM(c);
	if (parse_int_range(arg, number_flags[i].min, number_flags[i].max, &o->numbers[i]) < 0) {
		fprintf(stderr, "airlockd: --%s must be from %ld to %ld\n", number_flags[i].name, number_flags[i].min,
		        number_flags[i].max);
		return 2;
	}
	return DAEMON_RUN;
}

/* One option, in command-line order: DAEMON_RUN, or the exit status of an
 * option that ends the run here (--help, --print-routes; 2 for a wrong one). */
static int option_apply(struct daemon_options *o, int c, const char *arg)
{
	const char **str = option_string(o, c);
	if (str) {
		*str = arg;
		return DAEMON_RUN;
	}
	if (c >= OPT_FIRST && c < OPT_END)
		return option_number(o, c, arg);
	switch (c) {
	case 'm':
		if (parse_u64(arg, &o->max_file_bytes) < 0 || o->max_file_bytes == 0) {
			fprintf(stderr, "airlockd: --max-file-bytes takes a positive number of bytes\n");
			return 2;
		}
		return DAEMON_RUN;
	case OPT_TEMPLATE_SNAPSHOTS:
		if (strcmp(arg, "on") && strcmp(arg, "off")) {
			fprintf(stderr, "airlockd: --template-snapshots takes on or off\n");
			return 2;
		}
		o->template_snapshots = !strcmp(arg, "on");
		return DAEMON_RUN;
	case OPT_WARM_POOL: {
		struct al_error err = {0};
		if (o->n_warm_pools == POOLS_MAX) {
			fprintf(stderr, "airlockd: at most %d --warm-pool\n", POOLS_MAX);
			return 2;
		}
		if (pool_flag_parse(arg, 0, &o->warm_pools[o->n_warm_pools], &err) < 0) {
			fprintf(stderr, "airlockd: %s\n", err.message);
			return 2;
		}
		o->n_warm_pools++;
		return DAEMON_RUN;
	}
	case 'P':
		if (o->n_public_cidrs == EGRESS_PUBLIC_CIDRS_MAX) {
			fprintf(stderr, "airlockd: at most %d --egress-public-cidr\n", EGRESS_PUBLIC_CIDRS_MAX);
			return 2;
		}
		o->public_cidrs[o->n_public_cidrs++] = arg;
		return DAEMON_RUN;
	case 'b': {
		struct al_error err = {0};
		if (vmm_backend_parse(arg, &o->want_backend, &err) < 0) {
			fprintf(stderr, "airlockd: %s\n", err.message);
			return 2;
		}
		return DAEMON_RUN;
	}
	case OPT_ACCEL:
		if (accel_mode_parse(arg, &o->accel_mode) < 0) {
			fprintf(stderr, "airlockd: --accel is auto, kvm or tcg, not \"%s\"\n", arg);
			return 2;
		}
		return DAEMON_RUN;
	case OPT_CPU_MODEL:
		if (accel_cpu_model_check(arg) < 0) {
			fprintf(stderr,
			        "airlockd: --cpu-model takes a QEMU CPU model and its options "
			        "([A-Za-z0-9_.,=+-], 1-%d bytes, e.g. host,-arch-capabilities)\n",
			        ACCEL_CPU_MAX - 1);
			return 2;
		}
		o->cpu_model = arg;
		return DAEMON_RUN;
	case 'B':
		o->print_backend = true;
		return DAEMON_RUN;
	case OPT_CHECK:
		o->check = true;
		return DAEMON_RUN;
	case OPT_EGRESS_NO_SECCOMP:
		o->egress_no_seccomp = true;
		return DAEMON_RUN;
	case 'r':
		api_print_routes(stdout);
		return 0;
	case 'h':
		usage(stdout);
		return 0;
	case 'V':
		printf("airlockd %s\n", AIRLOCK_VERSION);
		return 0;
	default:
		usage(stderr);
		return 2;
	}
}

/* SECURITY: the gateway holds every tenant's secret values: its uid is its
 * own. Not root, not nobody (shared with other daemons), and not one a VMM
 * may get (a VMM escaped from its jail would own the gateway). */
static int egress_uid_check(const struct daemon_options *o)
{
	uint64_t uid = (uint64_t)o->numbers[NUM(OPT_EGRESS_UID)];
	uint64_t base = (uint64_t)o->numbers[NUM(OPT_JAIL_UID_BASE)];
	uint64_t count = (uint64_t)o->numbers[NUM(OPT_JAIL_UID_COUNT)];
	if (uid == 65534) {
		fprintf(stderr, "airlockd: --egress-uid 65534 is nobody, shared with other programs; give the gateway "
		                "a uid of its own\n");
		return 2;
	}
	if (uid >= base && uid < base + count) {
		fprintf(stderr,
		        "airlockd: --egress-uid %llu is inside the VMMs' jail range %llu-%llu (--jail-uid-base, "
		        "--jail-uid-count); give the gateway a uid outside it\n",
		        (unsigned long long)uid, (unsigned long long)base, (unsigned long long)(base + count - 1));
		return 2;
	}
	return DAEMON_RUN;
}

/* DAEMON_RUN, or the exit status of a run that ends with the options. */
static int options_parse(int argc, char **argv, struct daemon_options *o)
{
	options_init(o);
	/* --config FILE: the file's flags first, the command line's after them
	 * (getopt_long keeps the last, so the command line wins). Never freed:
	 * optarg points into it for as long as the process lives. */
	struct al_error cerr = {0};
	char **config_argv = NULL;
	int config_argc = 0;
	if (daemon_config_argv(NULL, daemon_opts, argc, argv, &config_argc, &config_argv, &cerr) < 0) {
		fprintf(stderr, "airlockd: %s\n", cerr.message);
		return 2;
	}
	int c;
	while ((c = getopt_long(config_argc, config_argv, "", daemon_opts, NULL)) != -1) {
		int status = option_apply(o, c, optarg);
		if (status != DAEMON_RUN)
			return status;
	}
	if (optind != config_argc) {
		usage(stderr);
		return 2;
	}
	return egress_uid_check(o);
}

/* A file next to the daemon's own binary. */
static char *sibling_path(const char *name)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return xstrdup(name);
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	return xasprintf("%s/%s", self, name);
}

/* A binary given by a flag, else the one next to the daemon's own. */
static char *path_or_sibling(const char *given, const char *name)
{
	return given ? xstrdup(given) : sibling_path(name);
}

/* TEST HOOK, for tests/fc/test_fc_daemon.py only (docs/kvm-host.md,
 * "Testing"): AIRLOCK_TEST_HOOK_FIRECRACKER_WITHOUT_KVM=1 with an explicit
 * --backend firecracker lets the backend be chosen on a host without
 * /dev/kvm, so that the daemon's lifecycle can run against the fake
 * firecracker of tests/fc. It changes that choice and nothing else: the
 * jail still asks for /dev/kvm (airlock-jailer refuses to build a jail
 * without it, and a real firecracker cannot run without it), so with the
 * real jailer every sandbox still fails to start: fail closed. */
static void test_hook_firecracker_without_kvm(const struct vmm_backend *want, struct vmm_host *host)
{
	const char *hook = getenv("AIRLOCK_TEST_HOOK_FIRECRACKER_WITHOUT_KVM");
	if (!hook || strcmp(hook, "1") || strcmp(vmm_backend_name(want), "firecracker") || host->kvm)
		return;
	log_error("TEST HOOK AIRLOCK_TEST_HOOK_FIRECRACKER_WITHOUT_KVM=1: choosing firecracker although %s; "
	          "only tests/fc sets this (never set it on a real host)",
	          host->kvm_why);
	host->kvm = true;
}

/* The VMM's seccomp profile: the source tree's (next to the build
 * directory airlockd runs from), else the installed one; canonical (the
 * jailer refuses symlinks). */
static char *default_seccomp_profile(void)
{
	cleanup_free char *tree = sibling_path("../security/seccomp/qemu-x86_64.json");
	char real[PATH_MAX];
	if (realpath(tree, real))
		return xstrdup(real);
	return xstrdup(DEFAULT_SECCOMP_INSTALLED);
}

/* Every process end: an event and the exec latency histogram. */
static void on_process_exit(const char *sandbox_id, const char *tenant, const char *process_id, uint8_t type,
                            json_t *result, uint64_t duration_ms)
{
	json_t *data = json_pack("{s:s, s:I}", "process_id", process_id, "duration_ms", (json_int_t)duration_ms);
	if (type == AIRLOCK_FRAME_EXIT && result) {
		json_object_set(data, "exit_code", json_object_get(result, "exit_code") ?: json_null());
		json_object_set(data, "signal", json_object_get(result, "signal") ?: json_null());
	} else {
		json_object_set_new(data, "error", json_string("the process did not run to its end"));
	}
	events_emit("exec.exit", tenant, sandbox_id, data);
	metrics_observe_exec((double)duration_ms / 1000.0);
}

/* Each API connection holds an fd (and a thread); VMs, their channels and the
 * store hold more. */
static void raise_fd_limit(const struct daemon_config *cfg)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	rlim_t want = (rlim_t)cfg->api_max_connections * 2 * 5 / 4 + 4096;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
		log_info("RLIMIT_NOFILE is %llu; --api-max-connections %u on two listeners, with the VMs, would "
		         "want %llu (raise LimitNOFILE=)",
		         (unsigned long long)rl.rlim_cur, cfg->api_max_connections, (unsigned long long)want);
}

/* Until SIGTERM or SIGINT (SIGHUP is ignored), doing the rounds every
 * HOUSEKEEPING_S. Returns the signal. */
static int wait_for_signal(const sigset_t *sigs)
{
	for (;;) {
		struct timespec tick = {.tv_sec = HOUSEKEEPING_S};
		int sig = sigtimedwait(sigs, NULL, &tick);
		if (sig == SIGHUP) {
			log_info("SIGHUP ignored");
		} else if (sig > 0) {
			return sig;
		} else if (errno != EAGAIN && errno != EINTR) {
			log_error("sigtimedwait: %m");
			return SIGTERM;
		}
		api_auth_failures_flush(false);
	}
}

/* `airlockd --check`: one key=value line per thing a sandbox needs, then
 * ok=yes|no; the exit status says the same. */
static int daemon_check(const struct accel_probe_config *probe, bool need_probe, const char *egress_bin)
{
	printf("jail=ok\n"); /* main() runs it only after jail_start() */
	const char *nft = netns_nft_path();
	cleanup_free char *egress = path_or_sibling(egress_bin, "airlock-egress");
	char net[PATH_MAX + 64] = "";
	if (!nft)
		snprintf(net, sizeof(net), "nft not found ('make deps')");
	else if (access("/dev/net/tun", R_OK | W_OK) < 0)
		snprintf(net, sizeof(net), "/dev/net/tun: %s", strerror(errno));
	else if (access(egress, X_OK) < 0)
		(void)snprintf_ok(net, sizeof(net), "the egress gateway %s: %s", egress, strerror(errno));
	printf("network=%s%s\n", net[0] ? "no: " : "ok", net);
	bool ok = !net[0];
	struct accel_probe_images im;
	char templates[512], why[ACCEL_REASON_MAX];
	if (accel_probe_images(probe->daemon, &im, templates, sizeof(templates), why, sizeof(why)) < 0) {
		printf("images=no: %s\n", why);
		ok = false;
	} else {
		printf("images=ok\nimages.templates=%s\n", templates);
	}
	struct accel_info accel;
	accel_get(&accel);
	if (need_probe) {
		/* A running airlockd's VMMs keep their uids. */
		jail_uid_reserve_running();
		struct al_error err = {0};
		if (accel_probe_run(probe, &accel, &err) < 0) {
			accel = (struct accel_info){.decided = false};
			strlcpy_al(accel.reason, err.message, sizeof(accel.reason));
			ok = false;
		}
	}
	printf("accel=%s\naccel.cpu=%s\naccel.reason=%s\n", accel.decided ? accel_name(&accel) : "none",
	       accel.cpu[0] ? accel.cpu : "-", accel.reason);
	if (accel.probe_ms)
		printf("accel.probe_ms=%" PRIu64 "\n", accel.probe_ms);
	printf("ok=%s\n", ok ? "yes" : "no");
	return ok ? 0 : 1;
}

/* What the start-up makes, for the serve loop and the shutdown. main() keeps
 * it static: the sandboxes, the API and the probe hold pointers into it. */
struct daemon {
	struct daemon_options opt;
	struct vmm_choice backend;
	struct accel_info accel;
	int need_probe; /* accel_plan(): > 0 when a probe decides the accelerator */
	sigset_t sigs;
	char state_abs[PATH_MAX], image_abs[PATH_MAX];
	struct daemon_config probe_daemon;
	struct accel_probe_config probe;
	struct daemon_config cfg;
	char *default_network;         /* --network-policy, normalized; NULL: deny everything */
	char *build_network;           /* --build-network-policy, normalized (deny all by default) */
	struct policy_ceiling ceiling; /* --network-ceiling */
	struct store *store;
	struct proxy_server *proxy; /* --proxy-listen */
	struct api_server *server, *tcp;
};

/* Fail closed: no VMM, no daemon (rather than sandboxes that cannot start). */
static int backend_choose(struct daemon *d)
{
	struct vmm_host host;
	struct al_error err = {0};
	vmm_host_probe(&host);
	test_hook_firecracker_without_kvm(d->opt.want_backend, &host);
	if (d->opt.accel_mode == ACCEL_MODE_TCG && host.kvm) {
		/* Nothing runs on KVM: not Firecracker either. */
		host.kvm = false;
		snprintf(host.kvm_why, sizeof(host.kvm_why), "--accel tcg");
	}
	int r = vmm_select(d->opt.want_backend, &host, &d->backend, &err);
	if (r < 0) {
		log_error("%s", err.message);
		return r;
	}
	/* The accelerator: what is known now; a probe decides the rest. */
	d->need_probe =
	    vmm_choice_accel(&d->backend, d->opt.accel_mode, host.kvm_why, d->opt.cpu_model, &d->accel, &err);
	if (d->need_probe < 0) {
		log_error("%s", err.message);
		return d->need_probe;
	}
	accel_set(&d->accel);
	return 0;
}

/* Signals are taken synchronously by the main thread; every other thread has them blocked. */
static void signals_block(sigset_t *sigs)
{
	sigemptyset(sigs);
	sigaddset(sigs, SIGTERM);
	sigaddset(sigs, SIGINT);
	sigaddset(sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
}

#define STATE_DIR_LOCK "airlockd.lock"

/* Two daemons on one state dir would take each other's VMs for orphans and
 * sweep each other's files: the state dir is locked before anything in it
 * is touched, and the lock is held (its fd kept, close-on-exec: no VMM or
 * gateway inherits it) until the daemon is gone. The file says who holds it. */
static int state_dir_lock(const char *state_dir)
{
	cleanup_free char *path = xasprintf("%s/" STATE_DIR_LOCK, state_dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		int e = errno;
		log_error("cannot open %s: %s", path, strerror(e));
		return -e;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		char buf[32] = "";
		ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		close(fd);
		if (e == EWOULDBLOCK)
			log_error(
			    "the state dir %s is in use by another airlockd (pid %s): two daemons must never share "
			    "a state dir; stop that one first, or give this one its own --state-dir",
			    state_dir, buf[0] ? buf : "?");
		else
			log_error("cannot lock %s: %s", path, strerror(e));
		return e == EWOULDBLOCK ? -EBUSY : -e;
	}
	char pid[32];
	int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)len, 0) != len)
		log_error("cannot write %s: %m", path);
	return fd; /* held for the daemon's life */
}

static int dirs_resolve(struct daemon *d)
{
	const char *state_dir = d->opt.state_dir, *image_dir = d->opt.image_dir ? d->opt.image_dir : state_dir;
	int r = mkdir_p(state_dir, 0700);
	if (r < 0 || !realpath(state_dir, d->state_abs)) {
		int e = r < 0 ? -r : errno;
		log_error("cannot create the state dir %s: %s", state_dir, strerror(e));
		return -e;
	}
	if ((r = state_dir_lock(d->state_abs)) < 0)
		return r;
	if (!realpath(image_dir, d->image_abs)) {
		int e = errno;
		log_error("image dir %s: %s", image_dir, strerror(e));
		return -e;
	}
	return 0;
}

static int nft_check(void)
{
	if (netns_nft_path())
		return 0;
	log_error("nft not found (or $AIRLOCK_NFT not executable): every sandbox's network rules need "
	          "nftables ('make deps')");
	return -ENOENT;
}

/* Fail closed: no jail, no VMM, no daemon. */
static int jail_start(const struct daemon_options *o)
{
	cleanup_free char *jailer = path_or_sibling(o->jailer_bin, "airlock-jailer");
	cleanup_free char *seccomp = o->seccomp_profile ? xstrdup(o->seccomp_profile) : default_seccomp_profile();
	struct jail_settings js = {
	    .jailer = jailer,
	    .seccomp = seccomp,
	    .cgroup_parent = o->cgroup_parent,
	    .uid_base = (uint32_t)o->numbers[NUM(OPT_JAIL_UID_BASE)],
	    .uid_count = (uint32_t)o->numbers[NUM(OPT_JAIL_UID_COUNT)],
	    .orphan_timeout_s = (unsigned)o->numbers[NUM(OPT_ORPHAN_TIMEOUT)],
	};
	struct al_error err = {0};
	int r = jail_init(&js, &err);
	if (r < 0) {
		log_error("%s", err.message);
		if (o->check)
			printf("jail=no: %s\nok=no\n", err.message);
		return r;
	}
	log_info("jail: %s, seccomp profile %s, uids %u-%u, cgroups %s/<sandbox>", js.jailer, js.seccomp, js.uid_base,
	         js.uid_base + js.uid_count - 1, js.cgroup_parent);
	return 0;
}

/* The accelerator's probe boots QEMU from the image dir. */
static void probe_prepare(struct daemon *d)
{
	d->probe_daemon =
	    (struct daemon_config){.state_dir = d->state_abs, .image_dir = d->image_abs, .vmm = vmm_accel_probe_ops()};
	d->probe = (struct accel_probe_config){
	    .daemon = &d->probe_daemon,
	    .mode = d->opt.accel_mode,
	    .cpu_pinned = d->opt.cpu_model,
	    .timeout_s = (unsigned)d->opt.numbers[NUM(OPT_ACCEL_PROBE_TIMEOUT)],
	};
}

/* --accel kvm: proven before a request is taken, or no daemon. */
static int accel_prove(struct daemon *d)
{
	if (!d->need_probe || d->opt.accel_mode != ACCEL_MODE_KVM)
		return 0;
	log_info("accelerator: %s", d->accel.reason);
	struct al_error err = {0};
	int r = accel_probe_run(&d->probe, &d->accel, &err);
	if (r < 0) {
		log_error("%s", err.message);
		return r;
	}
	accel_set(&d->accel);
	d->need_probe = 0;
	return 0;
}

/* --network-ceiling FILE (or the default) with the --egress-public-cidr
 * networks: set before any policy is parsed, the default's first. */
static int network_ceiling_load(struct daemon *d)
{
	const char *path = d->opt.network_ceiling_file;
	struct al_error err = {0};
	json_error_t jerr;
	cleanup_json json_t *j = NULL;
	int r = 0;
	if (path && !(j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr)))
		r = al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s (line %d)", jerr.text, jerr.line);
	else if ((r = network_ceiling_parse(j, d->opt.public_cidrs, d->opt.n_public_cidrs, &d->ceiling, &err)) == 0)
		network_policy_set_ceiling(&d->ceiling);
	if (r < 0)
		log_error("--network-ceiling %s: %s", path ? path : "(default)", err.message);
	return r;
}

/* A policy file (flag names it in errors) as canonical JSON; no file: NULL. */
static int policy_file_load(const char *flag, const char *path, char **ret)
{
	*ret = NULL;
	if (!path)
		return 0;
	struct al_error err = {0};
	json_error_t jerr;
	cleanup_json json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	int r;
	if (!j)
		r = al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s %s: %s (line %d)", flag, path, jerr.text,
		                 jerr.line);
	else if ((r = network_policy_parse(j, ret, &err)) < 0)
		al_error_prefix(&err, "%s %s", flag, path);
	if (r < 0)
		log_error("%s", err.message);
	return r;
}

/* --network-policy FILE: the policy of sandboxes created without one;
 * --build-network-policy FILE: of template builds (default: deny all, as
 * an empty policy is). */
static int network_policy_load(struct daemon *d)
{
	if (network_ceiling_load(d) < 0)
		return -EINVAL;
	int r = policy_file_load("--network-policy", d->opt.network_policy_file, &d->default_network);
	if (r == 0)
		r = policy_file_load("--build-network-policy", d->opt.build_network_policy_file, &d->build_network);
	if (r == 0 && !d->build_network) {
		struct al_error err = {0};
		cleanup_json json_t *none = json_object();
		r = network_policy_parse(none, &d->build_network, &err);
	}
	return r;
}

static int store_start(struct daemon *d)
{
	cleanup_free char *db = xasprintf("%s/airlock.db", d->state_abs);
	struct al_error err = {0};
	int r = store_open(db, &d->store, &err);
	if (r < 0)
		log_error("%s", err.message);
	return r;
}

/* The settings of the API and the sandboxes, from the options. */
static void config_fill(struct daemon *d)
{
	const long *n = d->opt.numbers;
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	long boot_timeout_s = n[NUM(OPT_BOOT_TIMEOUT)];
	d->cfg = (struct daemon_config){
	    .state_dir = d->state_abs,
	    .image_dir = d->image_abs,
	    .boot_timeout_s = (unsigned)boot_timeout_s,
	    .host_memory_mib = pages > 0 && page > 0 ? (unsigned)((uint64_t)pages * (uint64_t)page >> 20) : 0,
	    .vmm = d->backend.backend->ops,
	    .store = d->store,
	    .default_network_json = d->default_network,
	    .max_vcpus = (unsigned)n[NUM(OPT_MAX_VCPUS)],
	    .max_disk_mib = (unsigned)n[NUM(OPT_MAX_DISK)],
	    .max_concurrent_starts = (unsigned)n[NUM(OPT_MAX_STARTS)],
	    .start_queue_timeout_s =
	        (unsigned)(n[NUM(OPT_START_QUEUE)] >= 0 ? n[NUM(OPT_START_QUEUE)] : boot_timeout_s),
	    .watchdog_s = (unsigned)n[NUM(OPT_WATCHDOG)],
	    .rate_limit_rps = (unsigned)n[NUM(OPT_RATE_RPS)],
	    .rate_limit_burst = (unsigned)n[NUM(OPT_RATE_BURST)],
	    .template_snapshots = d->opt.template_snapshots,
	    .api_max_connections = (unsigned)n[NUM(OPT_API_MAX_CONNECTIONS)],
	    .api_max_connections_per_client = (unsigned)n[NUM(OPT_API_MAX_PER_CLIENT)],
	    .api_idle_timeout_s = (unsigned)n[NUM(OPT_API_IDLE_TIMEOUT)],
	    .auth_failure_burst = (unsigned)n[NUM(OPT_AUTH_FAILURE_BURST)],
	    .auth_failure_per_min = (unsigned)n[NUM(OPT_AUTH_FAILURE_PER_MIN)],
	    .netns_pool = (unsigned)n[NUM(OPT_NETNS_POOL)],
	    .warm_pools = d->opt.warm_pools,
	    .n_warm_pools = d->opt.n_warm_pools,
	    .pool_memory_high_pct = (unsigned)n[NUM(OPT_POOL_MEMORY_HIGH)],
	    .proxy_listen = d->opt.proxy_listen,
	    .accel_wait_s = accel_probe_wait_s(&d->probe),
	};
	cleanup_free char *oci = path_or_sibling(NULL, "airlock-oci");
	static char oci_bin[PATH_MAX];
	strlcpy_al(oci_bin, oci, sizeof(oci_bin));
	template_builds_configure(
	    &(struct template_build_config){.oci_bin = oci_bin,
	                                    .qemu_img = "/usr/bin/qemu-img",
	                                    .build_network_json = d->build_network,
	                                    .max_upload_bytes = (uint64_t)n[NUM(OPT_TEMPLATE_UPLOAD)] << 20,
	                                    .step_timeout_s = (unsigned)n[NUM(OPT_BUILD_STEP_TIMEOUT)],
	                                    .cache_max_bytes = (uint64_t)n[NUM(OPT_BUILD_CACHE)] << 20,
	                                    .max_disk_mib = (unsigned)n[NUM(OPT_MAX_DISK)]});
	/* Memory: what the operator allows, never more than the host has. */
	long mem = n[NUM(OPT_MAX_MEMORY)];
	d->cfg.max_memory_mib = mem > 0 ? (unsigned)mem : SANDBOX_MEMORY_MIB_MAX;
	if (d->cfg.host_memory_mib && d->cfg.host_memory_mib < d->cfg.max_memory_mib)
		d->cfg.max_memory_mib = d->cfg.host_memory_mib;
}

/* What lives in the store, and the CA. */
static int stores_init(struct daemon *d)
{
	struct al_error err = {0};
	bool ca_created = false;
	int r;
	if ((r = auth_init(d->store, &err)) < 0 || (r = events_init(d->store, &err)) < 0 ||
	    (r = snapshots_init(d->store, d->state_abs, &err)) < 0 ||
	    (r = secrets_init(d->store, d->state_abs, &err)) < 0 ||
	    (r = ca_init(d->state_abs, &ca_created, &err)) < 0) {
		log_error("%s", err.message);
		secrets_shutdown();
		store_close(d->store);
		return r;
	}
	if (ca_created)
		log_info("made the Airlock CA in %s/%s (every new sandbox trusts it)", d->state_abs, CA_DIR);
	return 0;
}

static void start_log(const struct daemon *d)
{
	const struct daemon_config *cfg = &d->cfg;
	log_info("backend: %s", d->backend.reason);
	log_info("airlockd %s starting: backend %s, state dir %s, image dir %s", AIRLOCK_VERSION, cfg->vmm->name,
	         d->state_abs, d->image_abs);
	log_info("accelerator: %s", d->accel.reason);
	log_info("limits: a sandbox has at most %u vCPUs, %u MiB of memory, %u MiB of disk; %u starts at once "
	         "(a create waits up to %u s); watchdog %u s%s; TCP API %u requests/s per tenant%s, burst %u",
	         cfg->max_vcpus, cfg->max_memory_mib, cfg->max_disk_mib, cfg->max_concurrent_starts,
	         cfg->start_queue_timeout_s, cfg->watchdog_s, cfg->watchdog_s ? "" : " (off)", cfg->rate_limit_rps,
	         cfg->rate_limit_rps ? "" : " (off)", cfg->rate_limit_burst);
}

/* The gateway first: re-attached sandboxes hand it their listeners. */
static int sandboxes_start(struct daemon *d)
{
	const struct daemon_options *o = &d->opt;
	cleanup_free char *egress_bin = path_or_sibling(o->egress_bin, "airlock-egress");
	cleanup_free char *egress_log = xasprintf("%s/egress.log", d->state_abs);
	struct egress_config ecfg = {
	    .bin = egress_bin,
	    .resolver = o->resolver,
	    .trust_ca = o->egress_ca,
	    .log_path = egress_log,
	    .n_public_cidrs = o->n_public_cidrs,
	    .ceiling = &d->ceiling,
	    .uid = (uint32_t)o->numbers[NUM(OPT_EGRESS_UID)],
	    .no_seccomp = o->egress_no_seccomp,
	};
	memcpy(ecfg.public_cidrs, o->public_cidrs, o->n_public_cidrs * sizeof(o->public_cidrs[0]));
	struct al_error err = {0};
	int r;
	if ((r = egress_start(&ecfg, &err)) < 0 || (r = sandboxes_init(&d->cfg, &err)) < 0) {
		log_error("%s", err.message);
		egress_stop();
		secrets_shutdown();
		store_close(d->store);
		return r;
	}
	return 0;
}

/* The web console's files (docs/console.md): --ui-dir, else the build
 * tree's (build/ui next to build/airlockd), else the installed ones
 * (PREFIX/share/airlock/ui from PREFIX/bin/airlockd). Canonical, so that a
 * later symlink swap of the path does not move it. None: /ui says so. */
static void ui_dir_set(const struct daemon_options *o)
{
	if (!o->listen_addr)
		return;
	cleanup_free char *tree = sibling_path("ui");
	cleanup_free char *installed = sibling_path("../share/airlock/ui");
	const char *const tries[] = {o->ui_dir, o->ui_dir ? NULL : tree, o->ui_dir ? NULL : installed};
	char real[PATH_MAX];
	for (size_t i = 0; i < ARRAY_SIZE(tries); i++) {
		struct stat st;
		if (!tries[i] || !realpath(tries[i], real) || stat(real, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		api_ui_set_dir(real);
		log_info("console: http://%s/ui/ serves %s", o->listen_addr, real);
		return;
	}
	if (o->ui_dir)
		log_error("--ui-dir %s is not a directory: /ui answers 404", o->ui_dir);
	else
		log_info("console: not built (make ui) nor installed; /ui answers 404");
}

static int api_start(struct daemon *d)
{
	const char *listen_addr = d->opt.listen_addr;
	struct al_error err = {0};
	int r = 0;
	ui_dir_set(&d->opt);
	const long *n = d->opt.numbers;
	struct proxy_config pcfg = {
	    .listen = d->opt.proxy_listen,
	    .domain = d->opt.proxy_domain,
	    .header_timeout_s = (unsigned)n[NUM(OPT_PROXY_HEADER_TIMEOUT)],
	    .idle_timeout_s = (unsigned)n[NUM(OPT_PROXY_IDLE_TIMEOUT)],
	    .max_body_mib = (unsigned)n[NUM(OPT_PROXY_MAX_BODY)],
	    .max_connections = d->cfg.api_max_connections,
	    .max_per_client = d->cfg.api_max_connections_per_client,
	};
	/* The proxy first: the API's answers give its URLs (cfg.proxy_domain). */
	if (pcfg.listen) {
		api_auth_failures_start();
		if ((r = proxy_server_start(&pcfg, &d->proxy, &err)) >= 0)
			d->cfg.proxy_domain = proxy_server_domain(d->proxy);
	}
	if ((pcfg.listen && !d->proxy) || (r = api_server_start_unix(d->opt.socket_path, &d->server, &err)) < 0 ||
	    (listen_addr && (r = api_server_start_tcp(listen_addr, &d->tcp, &err)) < 0)) {
		log_error("%s", err.message);
		proxy_server_stop(d->proxy);
		api_server_stop(d->tcp);
		api_server_stop(d->server);
		sandboxes_shutdown();
		egress_stop();
		events_shutdown();
		secrets_shutdown();
		store_close(d->store);
		return r;
	}
	return 0;
}

static void listen_log(const struct daemon *d)
{
	const struct daemon_config *cfg = &d->cfg;
	const char *listen_addr = d->opt.listen_addr;
	log_info("listening on %s%s%s%s", d->opt.socket_path, listen_addr ? " and on TCP " : "",
	         listen_addr ? listen_addr : "", listen_addr ? " (bearer tokens)" : "");
	log_info("API: %u connections a listener, %u per TCP client%s, idle timeout %u s; auth.failure events per "
	         "client address: %u at once, then %u a minute%s",
	         cfg->api_max_connections, cfg->api_max_connections_per_client,
	         cfg->api_max_connections_per_client ? "" : " (no cap)", cfg->api_idle_timeout_s,
	         cfg->auth_failure_burst, cfg->auth_failure_per_min,
	         cfg->auth_failure_per_min ? "" : " (off: one per failure)");
	if (d->proxy)
		log_info(
		    "port proxy on %s: http://<port>-<sandbox id>.%s/ and /sandbox/<id>/<port>/; head within %ld s, "
		    "idle %ld s, bodies up to %ld MiB",
		    d->opt.proxy_listen, proxy_server_domain(d->proxy), d->opt.numbers[NUM(OPT_PROXY_HEADER_TIMEOUT)],
		    d->opt.numbers[NUM(OPT_PROXY_IDLE_TIMEOUT)], d->opt.numbers[NUM(OPT_PROXY_MAX_BODY)]);
}

/* Cluster mode (docs/cluster.md): its flags, the database, the secrets'
 * rows, before the sandboxes are re-attached. */
static int cluster_prepare_flags(struct daemon *d)
{
	struct cluster_config *c = &d->opt.cluster;
	if (!c->db_conninfo)
		return 0;
	static char host[CLUSTER_NODE_NAME_MAX + 1];
	if (!c->node_name) {
		if (gethostname(host, sizeof(host)) < 0)
			host[0] = '\0';
		host[sizeof(host) - 1] = '\0';
		for (char *h = host; *h; h++)
			*h = *h >= 'A' && *h <= 'Z' ? (char)(*h - 'A' + 'a') : *h == '.' ? '\0' : *h;
		c->node_name = host;
	}
	c->lease_s = (unsigned)d->opt.numbers[NUM(OPT_NODE_LEASE)];
	/* Its ports proxy, as fronts reach it: the node URL's host, the
	 * proxy's port. */
	static char proxy_url[CLUSTER_NODE_URL_MAX + 16];
	const char *port = d->opt.proxy_listen ? strrchr(d->opt.proxy_listen, ':') : NULL;
	const char *host_end = c->node_url ? strrchr(c->node_url, ':') : NULL;
	if (port && host_end && host_end > c->node_url + 5) {
		snprintf(proxy_url, sizeof(proxy_url), "%.*s%s", (int)(host_end - c->node_url), c->node_url, port);
		c->proxy_url = proxy_url;
	}
	struct al_error err = {0};
	int r = cluster_config_check(c, &err);
	if (r == 0 && !d->opt.listen_addr)
		r = al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                 "--cluster-db needs --listen: fronts reach "
		                 "the node there");
	if (r == 0)
		r = cluster_prepare(c, api_sandbox_json, d->store, d->cfg.host_memory_mib, &err);
	if (r < 0)
		log_error("cluster: %s", err.message);
	return r;
}

/* Once the API answers: a front may send work as soon as the node is
 * registered. */
static int cluster_join(struct daemon *d)
{
	const struct cluster_config *c = &d->opt.cluster;
	if (!c->db_conninfo)
		return 0;
	struct al_error err = {0};
	int r = cluster_start(&err);
	if (r < 0) {
		log_error("cluster: %s", err.message);
		return r;
	}
	log_info("cluster: node %s at %s, lease %u s, shared store %s", c->node_name, c->node_url, c->lease_s,
	         c->shared_store);
	return 0;
}

static void daemon_stop(struct daemon *d, int sig)
{
	log_info("signal %d: shutting down (VMs keep running and are re-attached at the next start)", sig);
	/* The lease goes first: no new work comes while the rest stops. */
	cluster_stop();
	/* Tunnels and the proxy's connections to guests end first: an upgraded
	 * connection would hold the API's stop, a relay the registry. */
	sandbox_ports_hang_up_all();
	/* The proxy's connections dial into sandboxes: gone before the registry. */
	proxy_server_stop(d->proxy);
	api_auth_failures_flush(true);
	accel_probe_join();
	/* Builds use sandboxes: they end (and delete theirs) before the registry. */
	template_jobs_shutdown(TEMPLATE_JOBS_STOP_S);
	events_shutdown();
	sandboxes_shutdown();
	egress_stop();
	api_server_stop(d->tcp);
	api_server_stop(d->server);
	auth_shutdown();
	snapshots_shutdown();
	secrets_shutdown();
	ca_shutdown();
	store_close(d->store);
	log_info("stopped");
}

int main(int argc, char **argv)
{
	static struct daemon d;
	int status = options_parse(argc, argv, &d.opt);
	if (status != DAEMON_RUN)
		return status;
	if (backend_choose(&d) < 0)
		return 1;
	if (d.opt.print_backend) {
		printf("backend=%s\naccel=%s\nreason=%s\naccel.reason=%s\n", vmm_backend_name(d.backend.backend),
		       accel_name(&d.accel), d.backend.reason, d.accel.reason);
		return 0;
	}
	signals_block(&d.sigs);
	if (dirs_resolve(&d) < 0 || nft_check() < 0 || jail_start(&d.opt) < 0)
		return 1;
	probe_prepare(&d);
	if (d.opt.check)
		return daemon_check(&d.probe, d.need_probe > 0, d.opt.egress_bin);
	if (accel_prove(&d) < 0 || network_policy_load(&d) < 0 || store_start(&d) < 0)
		return 1;
	config_fill(&d);
	api_set_config(&d.cfg, d.opt.max_file_bytes);
	raise_fd_limit(&d.cfg);
	if (stores_init(&d) < 0)
		return 1;
	process_set_exit_hook(on_process_exit);
	start_log(&d);
	if (cluster_prepare_flags(&d) < 0 || sandboxes_start(&d) < 0 || api_start(&d) < 0 || cluster_join(&d) < 0)
		return 1;
	/* After the live sandboxes took back their uids: the probe takes one. */
	if (d.need_probe)
		accel_probe_start(&d.probe);
	listen_log(&d);
	daemon_stop(&d, wait_for_signal(&d.sigs));
	free(d.default_network);
	free(d.build_network);
	return 0;
}
