/* SPDX-License-Identifier: Apache-2.0 */
/* airlockd: the API, the state machine of every sandbox, the supervisor of
 * VMM processes. */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "accel-probe.h"
#include "accel.h"
#include "api.h"
#include "auth.h"
#include "ca.h"
#include "daemon-config.h"
#include "egress-supervisor.h"
#include "events.h"
#include "json-cleanup.h"
#include "log.h"
#include "netns.h"
#include "network-policy.h"
#include "metrics.h"
#include "jail.h"
#include "process.h"
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

/* Long-only flags of the limits (docs/api.md, "Limits"). */
enum {
	OPT_FIRST = 1000,
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
	OPT_ACCEL_PROBE_TIMEOUT,
	OPT_END,
	/* Not limits. */
	OPT_JAILER = 2000,
	OPT_SECCOMP,
	OPT_JAIL_UID_BASE,
	OPT_JAIL_UID_COUNT,
	OPT_CGROUP_PARENT,
	OPT_TEMPLATE_SNAPSHOTS,
	OPT_ACCEL,
	OPT_CPU_MODEL,
	OPT_CHECK,
};
#define LIMIT(opt) ((opt)-OPT_FIRST)

/* Indexed by LIMIT(OPT_*); `def` -1: computed from other settings. */
static const struct {
	const char *name;
	long min, max, def;
} limit_flags[LIMIT(OPT_END)] = {
    [LIMIT(OPT_MAX_VCPUS)] = {"max-vcpus", 1, SANDBOX_VCPUS_MAX, SANDBOX_VCPUS_MAX},
    [LIMIT(OPT_MAX_MEMORY)] = {"max-memory-mib", SANDBOX_MEMORY_MIB_MIN, SANDBOX_MEMORY_MIB_MAX, -1},
    [LIMIT(OPT_MAX_DISK)] = {"max-disk-mib", 1, SANDBOX_DISK_MIB_MAX, DEFAULT_MAX_DISK_MIB},
    [LIMIT(OPT_MAX_STARTS)] = {"max-concurrent-starts", 1, MAX_CONCURRENT_STARTS_MAX, DEFAULT_MAX_CONCURRENT_STARTS},
    [LIMIT(OPT_START_QUEUE)] = {"start-queue-timeout-s", 0, BOOT_TIMEOUT_S_MAX, -1},
    [LIMIT(OPT_WATCHDOG)] = {"watchdog-s", 0, WATCHDOG_S_MAX, DEFAULT_WATCHDOG_S},
    [LIMIT(OPT_RATE_RPS)] = {"rate-limit-rps", 0, RATE_LIMIT_MAX, DEFAULT_RATE_LIMIT_RPS},
    [LIMIT(OPT_RATE_BURST)] = {"rate-limit-burst", 1, RATE_LIMIT_MAX, DEFAULT_RATE_LIMIT_BURST},
    [LIMIT(OPT_API_MAX_CONNECTIONS)] = {"api-max-connections", 1, API_MAX_CONNECTIONS_MAX, DEFAULT_API_MAX_CONNECTIONS},
    [LIMIT(OPT_API_MAX_PER_CLIENT)] = {"api-max-connections-per-client", 0, API_MAX_CONNECTIONS_MAX,
                                       DEFAULT_API_MAX_CONNECTIONS_PER_CLIENT},
    [LIMIT(OPT_API_IDLE_TIMEOUT)] = {"api-idle-timeout-s", 1, API_IDLE_TIMEOUT_S_MAX, DEFAULT_API_IDLE_TIMEOUT_S},
    [LIMIT(OPT_AUTH_FAILURE_BURST)] = {"auth-failure-burst", 1, AUTH_FAILURE_LIMIT_MAX, DEFAULT_AUTH_FAILURE_BURST},
    [LIMIT(OPT_AUTH_FAILURE_PER_MIN)] = {"auth-failure-per-min", 0, AUTH_FAILURE_LIMIT_MAX,
                                         DEFAULT_AUTH_FAILURE_PER_MIN},
    [LIMIT(OPT_NETNS_POOL)] = {"netns-pool", 0, NETNS_POOL_MAX, NETNS_POOL_DEFAULT},
    [LIMIT(OPT_ACCEL_PROBE_TIMEOUT)] = {"accel-probe-timeout-s", 1, BOOT_TIMEOUT_S_MAX, ACCEL_PROBE_TIMEOUT_S_DEFAULT},
};

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: airlockd [--socket PATH] [--state-dir DIR] [--image-dir DIR] [--boot-timeout-s N]\n"
	        "                [--listen ADDR:PORT] [--max-file-bytes N] [--print-routes]\n"
	        "                [--egress-bin PATH] [--resolver IP:PORT] [--egress-ca FILE]\n"
	        "                [--network-policy FILE] [--egress-public-cidr CIDR]...\n"
	        "                [--max-vcpus N] [--max-memory-mib N] [--max-disk-mib N]\n"
	        "                [--max-concurrent-starts N] [--start-queue-timeout-s N] [--watchdog-s N]\n"
	        "                [--rate-limit-rps N] [--rate-limit-burst N]\n"
	        "                [--jailer PATH] [--seccomp-profile FILE] [--jail-uid-base N]\n"
	        "                [--jail-uid-count N] [--cgroup-parent NAME] [--template-snapshots on|off]\n"
	        "                [--api-max-connections N] [--api-max-connections-per-client N]\n"
	        "                [--api-idle-timeout-s N] [--auth-failure-burst N] [--auth-failure-per-min N]\n"
	        "                [--netns-pool N] [--backend auto|qemu|firecracker] [--print-backend]\n"
	        "                [--accel auto|kvm|tcg] [--cpu-model MODEL] [--accel-probe-timeout-s N]\n"
	        "                [--check] [--config FILE]\n"
	        "\n"
	        "  --socket PATH        API socket (default " DEFAULT_SOCKET ")\n"
	        "  --state-dir DIR      database, sandboxes, logs (default " DEFAULT_STATE_DIR ")\n"
	        "  --image-dir DIR      kernels/ and templates/ (default: the state dir)\n"
	        "  --boot-timeout-s N   a guest that has not said hello after N s is an error (default %d)\n"
	        "  --listen ADDR:PORT   also serve the API over TCP; every request needs a bearer token\n"
	        "  --max-file-bytes N   largest file or archive upload (default 1 GiB)\n"
	        "  --print-routes       print every route of the API and exit\n"
	        "  --egress-bin PATH    the egress gateway (default: airlock-egress next to airlockd)\n"
	        "  --resolver IP:PORT   upstream DNS server of the egress gateway\n"
	        "                       (default: the first nameserver of /etc/resolv.conf)\n"
	        "  --egress-ca FILE     extra CA certificates the gateway trusts upstream\n"
	        "  --network-policy FILE  egress policy of sandboxes created without one,\n"
	        "                       {\"allow\": [...], \"deny\": [...]} (default: deny everything)\n"
	        "  --egress-public-cidr CIDR  a network the gateway may dial although it is not public\n"
	        "                       (e.g. an internal range; rules still decide); up to 16\n"
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
	        "  --backend B          the VMM: auto (default: firecracker when its binary is on PATH and\n"
	        "                       /dev/kvm is usable, else qemu), qemu or firecracker (docs/kvm-host.md)\n"
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
	        DEFAULT_BOOT_TIMEOUT_S, SANDBOX_VCPUS_MAX, SANDBOX_MEMORY_MIB_MAX, DEFAULT_MAX_DISK_MIB,
	        DEFAULT_MAX_CONCURRENT_STARTS, DEFAULT_WATCHDOG_S, DEFAULT_RATE_LIMIT_RPS, DEFAULT_RATE_LIMIT_BURST,
	        JAIL_DEFAULT_UID_BASE, JAIL_DEFAULT_UID_COUNT, DEFAULT_API_MAX_CONNECTIONS,
	        DEFAULT_API_MAX_CONNECTIONS_PER_CLIENT, DEFAULT_API_IDLE_TIMEOUT_S, DEFAULT_AUTH_FAILURE_BURST,
	        DEFAULT_AUTH_FAILURE_PER_MIN, NETNS_POOL_DEFAULT, ACCEL_PROBE_TIMEOUT_S_DEFAULT);
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

static int load_network_policy(const char *path, char **ret, struct al_error *err)
{
	json_error_t jerr;
	cleanup_json json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!j)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--network-policy %s: %s (line %d)", path,
		                    jerr.text, jerr.line);
	int r = network_policy_parse(j, ret, err);
	if (r < 0)
		al_error_prefix(err, "--network-policy %s", path);
	return r;
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
static int check_host(const struct accel_probe_config *probe, bool need_probe, const char *egress_bin)
{
	printf("jail=ok\n"); /* main() got here only through jail_init */
	const char *nft = netns_nft_path();
	cleanup_free char *egress_default = egress_bin ? NULL : sibling_path("airlock-egress");
	const char *egress = egress_bin ? egress_bin : egress_default;
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

int main(int argc, char **argv)
{
	const char *socket_path = DEFAULT_SOCKET;
	const char *state_dir = DEFAULT_STATE_DIR;
	const char *image_dir = NULL;
	long boot_timeout_s = DEFAULT_BOOT_TIMEOUT_S;
	const char *listen_addr = NULL;
	uint64_t max_file_bytes = DEFAULT_MAX_FILE_BYTES;
	const char *egress_bin = NULL, *resolver = NULL, *egress_ca = NULL, *network_policy_file = NULL;
	const char *jailer_bin = NULL, *seccomp_profile = NULL, *cgroup_parent = JAIL_DEFAULT_CGROUP_PARENT;
	long jail_uid_base = JAIL_DEFAULT_UID_BASE, jail_uid_count = JAIL_DEFAULT_UID_COUNT;
	bool template_snapshots = true;
	const char *public_cidrs[EGRESS_PUBLIC_CIDRS_MAX];
	size_t n_public_cidrs = 0;
	const struct vmm_backend *want_backend = NULL; /* auto */
	bool print_backend = false, check = false;
	enum accel_mode accel_mode = ACCEL_MODE_AUTO;
	const char *cpu_model = NULL;
	long limits[LIMIT(OPT_END)];
	for (size_t i = 0; i < ARRAY_SIZE(limits); i++)
		limits[i] = limit_flags[i].def;
	static const struct option opts[] = {
	    {"socket", required_argument, NULL, 's'},
	    {"state-dir", required_argument, NULL, 'd'},
	    {"image-dir", required_argument, NULL, 'i'},
	    {"boot-timeout-s", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"listen", required_argument, NULL, 'l'},
	    {"max-file-bytes", required_argument, NULL, 'm'},
	    {"print-routes", no_argument, NULL, 'r'},
	    {"egress-bin", required_argument, NULL, 'E'},
	    {"resolver", required_argument, NULL, 'R'},
	    {"egress-ca", required_argument, NULL, 'C'},
	    {"network-policy", required_argument, NULL, 'N'},
	    {"egress-public-cidr", required_argument, NULL, 'P'},
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
	    {"cgroup-parent", required_argument, NULL, OPT_CGROUP_PARENT},
	    {"template-snapshots", required_argument, NULL, OPT_TEMPLATE_SNAPSHOTS},
	    {"api-max-connections", required_argument, NULL, OPT_API_MAX_CONNECTIONS},
	    {"api-max-connections-per-client", required_argument, NULL, OPT_API_MAX_PER_CLIENT},
	    {"api-idle-timeout-s", required_argument, NULL, OPT_API_IDLE_TIMEOUT},
	    {"auth-failure-burst", required_argument, NULL, OPT_AUTH_FAILURE_BURST},
	    {"auth-failure-per-min", required_argument, NULL, OPT_AUTH_FAILURE_PER_MIN},
	    {"netns-pool", required_argument, NULL, OPT_NETNS_POOL},
	    {"backend", required_argument, NULL, 'b'},
	    {"print-backend", no_argument, NULL, 'B'},
	    {"accel", required_argument, NULL, OPT_ACCEL},
	    {"cpu-model", required_argument, NULL, OPT_CPU_MODEL},
	    {"accel-probe-timeout-s", required_argument, NULL, OPT_ACCEL_PROBE_TIMEOUT},
	    {"check", no_argument, NULL, OPT_CHECK},
	    {NULL, 0, NULL, 0},
	};
	/* --config FILE: the file's flags first, the command line's after them
	 * (getopt_long keeps the last, so the command line wins). Never freed:
	 * optarg points into it for as long as the process lives. "config" is
	 * not in opts: getopt must not take an abbreviation of it. */
	{
		struct al_error cerr = {0};
		char **config_argv = NULL;
		int config_argc = 0;
		if (daemon_config_argv(NULL, opts, argc, argv, &config_argc, &config_argv, &cerr) < 0) {
			fprintf(stderr, "airlockd: %s\n", cerr.message);
			return 2;
		}
		argc = config_argc;
		argv = config_argv;
	}
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			socket_path = optarg;
			break;
		case 'd':
			state_dir = optarg;
			break;
		case 'i':
			image_dir = optarg;
			break;
		case 't':
			if (parse_int_range(optarg, 1, BOOT_TIMEOUT_S_MAX, &boot_timeout_s) < 0) {
				fprintf(stderr, "airlockd: --boot-timeout-s must be from 1 to %d\n",
				        BOOT_TIMEOUT_S_MAX);
				return 2;
			}
			break;
		case 'l':
			listen_addr = optarg;
			break;
		case 'm':
			if (parse_u64(optarg, &max_file_bytes) < 0 || max_file_bytes == 0) {
				fprintf(stderr, "airlockd: --max-file-bytes takes a positive number of bytes\n");
				return 2;
			}
			break;
		case 'r':
			api_print_routes(stdout);
			return 0;
		case 'E':
			egress_bin = optarg;
			break;
		case 'R':
			resolver = optarg;
			break;
		case 'C':
			egress_ca = optarg;
			break;
		case 'N':
			network_policy_file = optarg;
			break;
		case OPT_JAILER:
			jailer_bin = optarg;
			break;
		case OPT_SECCOMP:
			seccomp_profile = optarg;
			break;
		case OPT_CGROUP_PARENT:
			cgroup_parent = optarg;
			break;
		case OPT_TEMPLATE_SNAPSHOTS:
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				fprintf(stderr, "airlockd: --template-snapshots takes on or off\n");
				return 2;
			}
			template_snapshots = !strcmp(optarg, "on");
			break;
		case OPT_JAIL_UID_BASE:
			if (parse_int_range(optarg, 1000, UINT32_MAX - 2, &jail_uid_base) < 0) {
				fprintf(stderr, "airlockd: --jail-uid-base must be from 1000 to %u\n", UINT32_MAX - 2);
				return 2;
			}
			break;
		case OPT_JAIL_UID_COUNT:
			if (parse_int_range(optarg, 1, JAIL_UID_COUNT_MAX, &jail_uid_count) < 0) {
				fprintf(stderr, "airlockd: --jail-uid-count must be from 1 to %u\n",
				        JAIL_UID_COUNT_MAX);
				return 2;
			}
			break;
		case 'P':
			if (n_public_cidrs == EGRESS_PUBLIC_CIDRS_MAX) {
				fprintf(stderr, "airlockd: at most %d --egress-public-cidr\n", EGRESS_PUBLIC_CIDRS_MAX);
				return 2;
			}
			public_cidrs[n_public_cidrs++] = optarg;
			break;
		case OPT_MAX_VCPUS:
		case OPT_MAX_MEMORY:
		case OPT_MAX_DISK:
		case OPT_MAX_STARTS:
		case OPT_START_QUEUE:
		case OPT_WATCHDOG:
		case OPT_RATE_RPS:
		case OPT_RATE_BURST:
		case OPT_API_MAX_CONNECTIONS:
		case OPT_API_MAX_PER_CLIENT:
		case OPT_API_IDLE_TIMEOUT:
		case OPT_AUTH_FAILURE_BURST:
		case OPT_AUTH_FAILURE_PER_MIN:
		case OPT_NETNS_POOL:
		case OPT_ACCEL_PROBE_TIMEOUT: {
			size_t i = (size_t)LIMIT(c);
			if (parse_int_range(optarg, limit_flags[i].min, limit_flags[i].max, &limits[i]) < 0) {
				fprintf(stderr, "airlockd: --%s must be from %ld to %ld\n", limit_flags[i].name,
				        limit_flags[i].min, limit_flags[i].max);
				return 2;
			}
			break;
		}
		case 'b': {
			struct al_error perr = {0};
			if (vmm_backend_parse(optarg, &want_backend, &perr) < 0) {
				fprintf(stderr, "airlockd: %s\n", perr.message);
				return 2;
			}
			break;
		}
		case 'B':
			print_backend = true;
			break;
		case OPT_ACCEL:
			if (accel_mode_parse(optarg, &accel_mode) < 0) {
				fprintf(stderr, "airlockd: --accel is auto, kvm or tcg, not \"%s\"\n", optarg);
				return 2;
			}
			break;
		case OPT_CPU_MODEL:
			if (accel_cpu_model_check(optarg) < 0) {
				fprintf(stderr,
				        "airlockd: --cpu-model takes a QEMU CPU model and its options "
				        "([A-Za-z0-9_.,=+-], 1-%d bytes, e.g. host,-arch-capabilities)\n",
				        ACCEL_CPU_MAX - 1);
				return 2;
			}
			cpu_model = optarg;
			break;
		case OPT_CHECK:
			check = true;
			break;
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
	if (optind != argc) {
		usage(stderr);
		return 2;
	}

	/* Fail closed: no VMM, no daemon (rather than sandboxes that cannot start). */
	struct vmm_host host;
	struct vmm_choice backend;
	struct al_error berr = {0};
	vmm_host_probe(&host);
	test_hook_firecracker_without_kvm(want_backend, &host);
	if (accel_mode == ACCEL_MODE_TCG && host.kvm) {
		/* Nothing runs on KVM: not Firecracker either. */
		host.kvm = false;
		snprintf(host.kvm_why, sizeof(host.kvm_why), "--accel tcg");
	}
	if (vmm_select(want_backend, &host, &backend, &berr) < 0) {
		log_error("%s", berr.message);
		return 1;
	}
	/* The accelerator: what is known now; a probe decides the rest. */
	struct accel_info accel;
	int need_probe = vmm_choice_accel(&backend, accel_mode, host.kvm_why, cpu_model, &accel, &berr);
	if (need_probe < 0) {
		log_error("%s", berr.message);
		return 1;
	}
	accel_set(&accel);
	if (print_backend) {
		printf("backend=%s\naccel=%s\nreason=%s\naccel.reason=%s\n", vmm_backend_name(backend.backend),
		       accel_name(&accel), backend.reason, accel.reason);
		return 0;
	}

	/* Signals are taken synchronously by the main thread; every other thread has them blocked. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	char state_abs[PATH_MAX], image_abs[PATH_MAX];
	int r = mkdir_p(state_dir, 0700);
	if (r < 0 || !realpath(state_dir, state_abs)) {
		log_error("cannot create the state dir %s: %s", state_dir, strerror(r < 0 ? -r : errno));
		return 1;
	}
	if (!realpath(image_dir ? image_dir : state_dir, image_abs)) {
		log_error("image dir %s: %m", image_dir ? image_dir : state_dir);
		return 1;
	}

	if (!netns_nft_path()) {
		log_error("nft not found (or $AIRLOCK_NFT not executable): every sandbox's network rules need "
		          "nftables ('make deps')");
		return 1;
	}
	struct al_error err = {0};
	/* Fail closed: no jail, no VMM, no daemon. */
	cleanup_free char *jailer_default = jailer_bin ? NULL : sibling_path("airlock-jailer");
	cleanup_free char *seccomp_default = seccomp_profile ? NULL : default_seccomp_profile();
	struct jail_settings js = {
	    .jailer = jailer_bin ? jailer_bin : jailer_default,
	    .seccomp = seccomp_profile ? seccomp_profile : seccomp_default,
	    .cgroup_parent = cgroup_parent,
	    .uid_base = (uint32_t)jail_uid_base,
	    .uid_count = (uint32_t)jail_uid_count,
	};
	if (jail_init(&js, &err) < 0) {
		log_error("%s", err.message);
		if (check)
			printf("jail=no: %s\nok=no\n", err.message);
		return 1;
	}
	log_info("jail: %s, seccomp profile %s, uids %u-%u, cgroups %s/<sandbox>", js.jailer, js.seccomp, js.uid_base,
	         js.uid_base + js.uid_count - 1, js.cgroup_parent);
	static struct daemon_config probe_daemon;
	probe_daemon =
	    (struct daemon_config){.state_dir = state_abs, .image_dir = image_abs, .vmm = vmm_accel_probe_ops()};
	struct accel_probe_config probe = {
	    .daemon = &probe_daemon,
	    .mode = accel_mode,
	    .cpu_pinned = cpu_model,
	    .timeout_s = (unsigned)limits[LIMIT(OPT_ACCEL_PROBE_TIMEOUT)],
	};
	if (check)
		return check_host(&probe, need_probe > 0, egress_bin);
	if (need_probe && accel_mode == ACCEL_MODE_KVM) {
		/* --accel kvm: proven before a request is taken, or no daemon. */
		log_info("accelerator: %s", accel.reason);
		if (accel_probe_run(&probe, &accel, &err) < 0) {
			log_error("%s", err.message);
			return 1;
		}
		accel_set(&accel);
		need_probe = 0;
	}
	cleanup_free char *default_network = NULL;
	if (network_policy_file && load_network_policy(network_policy_file, &default_network, &err) < 0) {
		log_error("%s", err.message);
		return 1;
	}
	cleanup_free char *egress_default = egress_bin ? NULL : sibling_path("airlock-egress");
	cleanup_free char *egress_log = xasprintf("%s/egress.log", state_abs);
	struct egress_config ecfg = {
	    .bin = egress_bin ? egress_bin : egress_default,
	    .resolver = resolver,
	    .trust_ca = egress_ca,
	    .log_path = egress_log,
	    .n_public_cidrs = n_public_cidrs,
	};
	memcpy(ecfg.public_cidrs, public_cidrs, n_public_cidrs * sizeof(public_cidrs[0]));
	struct store *store = NULL;
	cleanup_free char *db = xasprintf("%s/airlock.db", state_abs);
	if (store_open(db, &store, &err) < 0) {
		log_error("%s", err.message);
		return 1;
	}
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	static struct daemon_config cfg;
	cfg = (struct daemon_config){
	    .state_dir = state_abs,
	    .image_dir = image_abs,
	    .boot_timeout_s = (unsigned)boot_timeout_s,
	    .host_memory_mib = pages > 0 && page > 0 ? (unsigned)((uint64_t)pages * (uint64_t)page >> 20) : 0,
	    .vmm = backend.backend->ops,
	    .store = store,
	    .default_network_json = default_network,
	    .max_vcpus = (unsigned)limits[LIMIT(OPT_MAX_VCPUS)],
	    .max_disk_mib = (unsigned)limits[LIMIT(OPT_MAX_DISK)],
	    .max_concurrent_starts = (unsigned)limits[LIMIT(OPT_MAX_STARTS)],
	    .start_queue_timeout_s =
	        (unsigned)(limits[LIMIT(OPT_START_QUEUE)] >= 0 ? limits[LIMIT(OPT_START_QUEUE)] : boot_timeout_s),
	    .watchdog_s = (unsigned)limits[LIMIT(OPT_WATCHDOG)],
	    .rate_limit_rps = (unsigned)limits[LIMIT(OPT_RATE_RPS)],
	    .rate_limit_burst = (unsigned)limits[LIMIT(OPT_RATE_BURST)],
	    .template_snapshots = template_snapshots,
	    .api_max_connections = (unsigned)limits[LIMIT(OPT_API_MAX_CONNECTIONS)],
	    .api_max_connections_per_client = (unsigned)limits[LIMIT(OPT_API_MAX_PER_CLIENT)],
	    .api_idle_timeout_s = (unsigned)limits[LIMIT(OPT_API_IDLE_TIMEOUT)],
	    .auth_failure_burst = (unsigned)limits[LIMIT(OPT_AUTH_FAILURE_BURST)],
	    .auth_failure_per_min = (unsigned)limits[LIMIT(OPT_AUTH_FAILURE_PER_MIN)],
	    .netns_pool = (unsigned)limits[LIMIT(OPT_NETNS_POOL)],
	    .accel_wait_s = accel_probe_wait_s(&probe),
	};
	/* Memory: what the operator allows, never more than the host has. */
	long mem = limits[LIMIT(OPT_MAX_MEMORY)];
	cfg.max_memory_mib = mem > 0 ? (unsigned)mem : SANDBOX_MEMORY_MIB_MAX;
	if (cfg.host_memory_mib && cfg.host_memory_mib < cfg.max_memory_mib)
		cfg.max_memory_mib = cfg.host_memory_mib;
	api_set_config(&cfg, max_file_bytes);
	raise_fd_limit(&cfg);
	bool ca_created = false;
	if (auth_init(store, &err) < 0 || events_init(store, &err) < 0 || snapshots_init(store, state_abs, &err) < 0 ||
	    secrets_init(store, state_abs, &err) < 0 || ca_init(state_abs, &ca_created, &err) < 0) {
		log_error("%s", err.message);
		secrets_shutdown();
		store_close(store);
		return 1;
	}
	if (ca_created)
		log_info("made the Airlock CA in %s/%s (every new sandbox trusts it)", state_abs, CA_DIR);
	process_set_exit_hook(on_process_exit);
	log_info("backend: %s", backend.reason);
	log_info("airlockd %s starting: backend %s, state dir %s, image dir %s", AIRLOCK_VERSION, cfg.vmm->name,
	         state_abs, image_abs);
	log_info("accelerator: %s", accel.reason);
	log_info("limits: a sandbox has at most %u vCPUs, %u MiB of memory, %u MiB of disk; %u starts at once "
	         "(a create waits up to %u s); watchdog %u s%s; TCP API %u requests/s per tenant%s, burst %u",
	         cfg.max_vcpus, cfg.max_memory_mib, cfg.max_disk_mib, cfg.max_concurrent_starts,
	         cfg.start_queue_timeout_s, cfg.watchdog_s, cfg.watchdog_s ? "" : " (off)", cfg.rate_limit_rps,
	         cfg.rate_limit_rps ? "" : " (off)", cfg.rate_limit_burst);
	/* The gateway first: re-attached sandboxes hand it their listeners. */
	if (egress_start(&ecfg, &err) < 0 || sandboxes_init(&cfg, &err) < 0) {
		log_error("%s", err.message);
		egress_stop();
		secrets_shutdown();
		store_close(store);
		return 1;
	}
	struct api_server *server = NULL, *tcp = NULL;
	if (api_server_start_unix(socket_path, &server, &err) < 0 ||
	    (listen_addr && api_server_start_tcp(listen_addr, &tcp, &err) < 0)) {
		log_error("%s", err.message);
		api_server_stop(server);
		sandboxes_shutdown();
		egress_stop();
		events_shutdown();
		secrets_shutdown();
		store_close(store);
		return 1;
	}
	/* After the live sandboxes took back their uids: the probe takes one. */
	if (need_probe)
		accel_probe_start(&probe);
	log_info("listening on %s%s%s%s", socket_path, listen_addr ? " and on TCP " : "",
	         listen_addr ? listen_addr : "", listen_addr ? " (bearer tokens)" : "");
	log_info("API: %u connections a listener, %u per TCP client%s, idle timeout %u s; auth.failure events per "
	         "client address: %u at once, then %u a minute%s",
	         cfg.api_max_connections, cfg.api_max_connections_per_client,
	         cfg.api_max_connections_per_client ? "" : " (no cap)", cfg.api_idle_timeout_s, cfg.auth_failure_burst,
	         cfg.auth_failure_per_min, cfg.auth_failure_per_min ? "" : " (off: one per failure)");

	int sig = wait_for_signal(&sigs);
	log_info("signal %d: shutting down (VMs keep running and are re-attached at the next start)", sig);
	api_auth_failures_flush(true);
	accel_probe_join();
	events_shutdown();
	sandboxes_shutdown();
	egress_stop();
	api_server_stop(tcp);
	api_server_stop(server);
	auth_shutdown();
	snapshots_shutdown();
	secrets_shutdown();
	ca_shutdown();
	store_close(store);
	log_info("stopped");
	return 0;
}
