/* SPDX-License-Identifier: Apache-2.0 */
/* airlockd: the API, the state machine of every sandbox, the supervisor of
 * VMM processes. */
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include "api.h"
#include "auth.h"
#include "ca.h"
#include "egress-supervisor.h"
#include "events.h"
#include "json-cleanup.h"
#include "log.h"
#include "netns.h"
#include "network-policy.h"
#include "metrics.h"
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
#define BOOT_TIMEOUT_S_MAX 3600

#define DEFAULT_MAX_FILE_BYTES (1ull << 30)

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
	OPT_END,
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
	        "                [--backend auto|qemu|firecracker] [--print-backend]\n"
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
	        "  --watchdog-s N       kill a running VM whose QEMU or agent has not answered for N s\n"
	        "                       (default %d; 0 = off)\n"
	        "  --rate-limit-rps N   API requests a second per tenant over TCP (default %d; 0 = off)\n"
	        "  --rate-limit-burst N requests a tenant may make at once (default %d)\n"
	        "  --backend B          the VMM: auto (default: firecracker when its binary is on PATH and\n"
	        "                       /dev/kvm is usable, else qemu), qemu or firecracker (docs/kvm-host.md)\n"
	        "  --print-backend      print the backend --backend selects on this host, and why, and exit\n",
	        DEFAULT_BOOT_TIMEOUT_S, SANDBOX_VCPUS_MAX, SANDBOX_MEMORY_MIB_MAX, DEFAULT_MAX_DISK_MIB,
	        DEFAULT_MAX_CONCURRENT_STARTS, DEFAULT_WATCHDOG_S, DEFAULT_RATE_LIMIT_RPS, DEFAULT_RATE_LIMIT_BURST);
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

int main(int argc, char **argv)
{
	const char *socket_path = DEFAULT_SOCKET;
	const char *state_dir = DEFAULT_STATE_DIR;
	const char *image_dir = NULL;
	long boot_timeout_s = DEFAULT_BOOT_TIMEOUT_S;
	const char *listen_addr = NULL;
	uint64_t max_file_bytes = DEFAULT_MAX_FILE_BYTES;
	const char *egress_bin = NULL, *resolver = NULL, *egress_ca = NULL, *network_policy_file = NULL;
	const char *public_cidrs[EGRESS_PUBLIC_CIDRS_MAX];
	size_t n_public_cidrs = 0;
	enum vmm_backend want_backend = VMM_BACKEND_AUTO;
	bool print_backend = false;
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
	    {"backend", required_argument, NULL, 'b'},
	    {"print-backend", no_argument, NULL, 'B'},
	    {NULL, 0, NULL, 0},
	};
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
		case OPT_RATE_BURST: {
			size_t i = (size_t)LIMIT(c);
			if (parse_int_range(optarg, limit_flags[i].min, limit_flags[i].max, &limits[i]) < 0) {
				fprintf(stderr, "airlockd: --%s must be from %ld to %ld\n", limit_flags[i].name,
				        limit_flags[i].min, limit_flags[i].max);
				return 2;
			}
			break;
		}
		case 'b':
			if (vmm_backend_parse(optarg, &want_backend) < 0) {
				fprintf(stderr, "airlockd: --backend is auto, qemu or firecracker, not \"%s\"\n",
				        optarg);
				return 2;
			}
			break;
		case 'B':
			print_backend = true;
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
	if (vmm_select(want_backend, &host, &backend, &berr) < 0) {
		log_error("%s", berr.message);
		return 1;
	}
	if (print_backend) {
		printf("backend=%s\naccel=%s\nreason=%s\n", vmm_backend_name(backend.backend),
		       backend.kvm ? "kvm" : "tcg", backend.reason);
		return 0;
	}
	/* Until sandbox.c uses the vmm_ops fields added for Firecracker (its
	 * disk, channel, console and snapshot files: docs/kvm-host.md,
	 * "Status"), sandboxes run on qemu only. */
	if (backend.backend == VMM_BACKEND_FIRECRACKER) {
		log_error("%s; but the Firecracker backend is not wired into the sandbox lifecycle yet: start with "
		          "--backend qemu (docs/kvm-host.md, \"Status\")",
		          backend.reason);
		return 1;
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
	    .vmm = backend.backend == VMM_BACKEND_FIRECRACKER ? &vmm_firecracker_ops : &vmm_qemu_ops,
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
	};
	/* Memory: what the operator allows, never more than the host has. */
	long mem = limits[LIMIT(OPT_MAX_MEMORY)];
	cfg.max_memory_mib = mem > 0 ? (unsigned)mem : SANDBOX_MEMORY_MIB_MAX;
	if (cfg.host_memory_mib && cfg.host_memory_mib < cfg.max_memory_mib)
		cfg.max_memory_mib = cfg.host_memory_mib;
	api_set_config(&cfg, max_file_bytes);
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
	log_info("airlockd %s starting: backend %s, accel %s%s, state dir %s, image dir %s", AIRLOCK_VERSION,
	         cfg.vmm->name, cfg.vmm->accel(),
	         strcmp(cfg.vmm->accel(), "kvm") ? " (no /dev/kvm: software emulation, slower)" : "", state_abs,
	         image_abs);
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
	log_info("listening on %s%s%s%s", socket_path, listen_addr ? " and on TCP " : "",
	         listen_addr ? listen_addr : "", listen_addr ? " (bearer tokens)" : "");

	int sig = 0;
	while (sigwait(&sigs, &sig) == 0 && sig == SIGHUP)
		log_info("SIGHUP ignored");
	log_info("signal %d: shutting down (VMs keep running and are re-attached at the next start)", sig);
	events_shutdown();
	sandboxes_shutdown();
	egress_stop();
	api_server_stop(tcp);
	api_server_stop(server);
	auth_shutdown();
	secrets_shutdown();
	ca_shutdown();
	store_close(store);
	log_info("stopped");
	return 0;
}
