/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-egress: the egress gateway (docs/egress.md).
 *
 * Started by airlockd (egress-supervisor.c) as an unprivileged process with
 * one end of a SOCK_SEQPACKET pair as --control-fd. It needs no privilege:
 * every socket a guest reaches was created by airlockd inside the sandbox's
 * namespace and handed over; the gateway's own connections go out of its
 * own namespace. It exits when the control channel closes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "egress-runtime.h"
#include "egress-seccomp.h"
#include "util.h"
#include "version.h"

#define RESOLV_CONF "/etc/resolv.conf"
#define RESOLV_CONF_MAX (64 * 1024)

static enum egress_log_level log_level = EGRESS_LOG_INFO;
/* --no-seccomp: for debugging only (strace the gateway, try a new library). */
static bool seccomp_off;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void egress_log(enum egress_log_level level, const char *fmt, ...)
{
	if (level > log_level)
		return;
	char line[2048];
	char ts[32];
	format_time_rfc3339(now_ms_realtime(), ts);
	int n = snprintf(line, sizeof(line), "%s airlock-egress %s: ", ts, level_names[level]);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	size_t len = strlen(line);
	if (len == sizeof(line) - 1)
		line[len - 1] = '\n'; /* cut: still one line */
	else
		line[len++] = '\n';
	/* One write per line: lines of different threads never interleave. */
	(void)!write(STDERR_FILENO, line, len);
}

int egress_thread_start(void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, EGRESS_THREAD_STACK);
	pthread_t t;
	int r = pthread_create(&t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return -r;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: airlock-egress --control-fd N [options]\n"
	        "       airlock-egress --help | --version\n"
	        "\n"
	        "The egress gateway of Airlock: the only way out of a sandbox.\n"
	        "\n"
	        "airlockd hands it listening sockets created inside each sandbox's network\n"
	        "namespace, with the sandbox's policy, over the control socket; TCP and DNS\n"
	        "from the guest are redirected to them. Per connection it\n"
	        "  - reads the HTTP Host header (port 80) or the TLS SNI from the ClientHello\n"
	        "    (port 443; no SNI or Encrypted ClientHello: denied), other ports only\n"
	        "    by an explicit host:port or CIDR:port rule;\n"
	        "  - canonicalises the name and matches it against the sandbox's policy;\n"
	        "  - resolves the name itself, refuses loopback, private, link-local,\n"
	        "    metadata and IPv4-in-IPv6 addresses unless a rule names them, and\n"
	        "    dials exactly the address it checked;\n"
	        "  - records every decision as an audit event.\n"
	        "Nothing is resolved or dialled for a denied connection. DNS queries for\n"
	        "names the policy does not allow get NXDOMAIN without any upstream query.\n"
	        "TLS to a host a secret of the sandbox is bound to (or every allowed TLS\n"
	        "host, with \"tls\":\"inspect\") is intercepted: terminated with a leaf\n"
	        "certificate of the Airlock CA airlockd sends, every HTTP/1.1 request checked\n"
	        "(Host = SNI) and given its secrets, and re-encrypted to the verified server.\n"
	        "\n"
	        "Options:\n"
	        "  --control-fd N                    the control socket (SOCK_SEQPACKET), required\n"
	        "  --resolver IP[:PORT]              upstream DNS server (default: the first\n"
	        "                                    nameserver of " RESOLV_CONF ", port 53)\n"
	        "  --trust-ca FILE                   extra CA certificates (PEM) trusted, with the\n"
	        "                                    system store, for servers of intercepted TLS\n"
	        "  --connect-timeout-ms MS           per dialled address (default 10000)\n"
	        "  --idle-timeout-s S                close a connection idle this long (default 300)\n"
	        "  --max-connection-s S              close a connection after this long (default 3600)\n"
	        "  --max-connections N               open connections, all sandboxes (default 4096)\n"
	        "  --max-connections-per-sandbox N   open connections per sandbox (default 256)\n"
	        "  --max-connections-per-tenant N    open connections of one tenant's sandboxes\n"
	        "                                    (default: half of --max-connections)\n"
	        "  --sniff-timeout-ms MS             the request head / ClientHello must arrive\n"
	        "                                    within this (default 3000)\n"
	        "  --public-cidr CIDR                dial addresses in CIDR as if public (test\n"
	        "                                    networks; repeatable, at most %d)\n"
	        "  --ceiling-cidr CIDR               a network an explicit rule may open although\n"
	        "                                    not public (the operator's ceiling; repeatable)\n"
	        "  --ceiling-metadata                rules may open the metadata addresses\n"
	        "  --log-level LEVEL                 error, warn, info (default) or debug\n"
	        "  --no-seccomp                      do not install the syscall allow-list (debugging\n"
	        "                                    only: the gateway holds every tenant's secrets)\n"
	        "  --check-seccomp                   install the allow-list and make a syscall it\n"
	        "                                    forbids: the kernel must kill the process (SIGSYS)\n"
	        "\n"
	        "Logs go to stderr, one line per event. Exits when the control socket closes.\n",
	        EGRESS_PUBLIC_CIDRS_MAX);
}

enum {
	OPT_CONTROL_FD = 256,
	OPT_RESOLVER,
	OPT_TRUST_CA,
	OPT_CONNECT_TIMEOUT_MS,
	OPT_IDLE_TIMEOUT_S,
	OPT_MAX_CONNECTION_S,
	OPT_MAX_CONNECTIONS,
	OPT_MAX_CONNECTIONS_PER_SANDBOX,
	OPT_MAX_CONNECTIONS_PER_TENANT,
	OPT_SNIFF_TIMEOUT_MS,
	OPT_PUBLIC_CIDR,
	OPT_CEILING_CIDR,
	OPT_CEILING_METADATA,
	OPT_LOG_LEVEL,
	OPT_NO_SECCOMP,
	OPT_HELP,
	OPT_VERSION,
};

static const struct option long_options[] = {
    {"control-fd", required_argument, NULL, OPT_CONTROL_FD},
    {"resolver", required_argument, NULL, OPT_RESOLVER},
    {"trust-ca", required_argument, NULL, OPT_TRUST_CA},
    {"connect-timeout-ms", required_argument, NULL, OPT_CONNECT_TIMEOUT_MS},
    {"idle-timeout-s", required_argument, NULL, OPT_IDLE_TIMEOUT_S},
    {"max-connection-s", required_argument, NULL, OPT_MAX_CONNECTION_S},
    {"max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS},
    {"max-connections-per-sandbox", required_argument, NULL, OPT_MAX_CONNECTIONS_PER_SANDBOX},
    {"max-connections-per-tenant", required_argument, NULL, OPT_MAX_CONNECTIONS_PER_TENANT},
    {"sniff-timeout-ms", required_argument, NULL, OPT_SNIFF_TIMEOUT_MS},
    {"public-cidr", required_argument, NULL, OPT_PUBLIC_CIDR},
    {"ceiling-cidr", required_argument, NULL, OPT_CEILING_CIDR},
    {"ceiling-metadata", no_argument, NULL, OPT_CEILING_METADATA},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"no-seccomp", no_argument, NULL, OPT_NO_SECCOMP},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static int parse_unsigned(const char *opt, const char *s, long min, long max, unsigned *ret, struct al_error *err)
{
	long v;
	if (parse_int_range(s, min, max, &v) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--%s: expected a number from %ld to %ld",
		                    opt, min, max);
	*ret = (unsigned)v;
	return 0;
}

/* "IP", "IP:PORT", "[v6]" or "[v6]:PORT"; port 53 when none. */
static int parse_server(const char *text, struct egress_options *o, struct al_error *err)
{
	const uint8_t *host;
	size_t host_len;
	uint16_t port = 0;
	struct al_error e = {0};
	struct policy_host h;
	int r = policy_host_split_port((const uint8_t *)text, strlen(text), &host, &host_len, &port, &e);
	if (r == 0)
		r = policy_host_canonicalize(host, host_len, &h, &e);
	if (r == 0 && h.kind == POLICY_HOST_NAME)
		r = al_error_set(&e, AL_ERR_INVALID_ARGUMENT, EINVAL, "a name, not an IP address");
	if (r < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "resolver \"%.100s\": %s", text, e.message);
	if (port == 0)
		port = 53;
	o->resolver_len = egress_addr_sockaddr(&h.addr, port, &o->resolver);
	policy_addr_format(&h.addr, port, o->resolver_text, sizeof(o->resolver_text));
	return 0;
}

/* The first "nameserver" line of resolv.conf. */
static int resolver_from_resolv_conf(struct egress_options *o, struct al_error *err)
{
	cleanup_free char *text = NULL;
	size_t len;
	int r = read_file_limited(RESOLV_CONF, RESOLV_CONF_MAX, &text, &len);
	if (r < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, -r,
		                    "no --resolver given and " RESOLV_CONF " cannot be read: %s", strerror(-r));
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *p = line + strspn(line, " \t");
		if (strncmp(p, "nameserver", 10) != 0 || (p[10] != ' ' && p[10] != '\t'))
			continue;
		p += 10 + strspn(p + 10, " \t");
		p[strcspn(p, " \t\r#;")] = '\0';
		char buf[80];
		/* An IPv6 address is written without brackets there. */
		if (strchr(p, ':'))
			snprintf(buf, sizeof(buf), "[%.64s]", p);
		else
			snprintf(buf, sizeof(buf), "%.64s", p);
		r = parse_server(buf, o, err);
		if (r < 0)
			al_error_prefix(err, RESOLV_CONF);
		return r;
	}
	return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOENT,
	                    "no --resolver given and no nameserver in " RESOLV_CONF);
}

static int check_control_fd(int fd, struct al_error *err)
{
	int type = 0;
	socklen_t len = sizeof(type);
	if (fcntl(fd, F_GETFD) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "--control-fd %d: not an open fd", fd);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_SEQPACKET)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOTSOCK,
		                    "--control-fd %d: not a SOCK_SEQPACKET socket (airlockd creates it)", fd);
	/* Children (there are none) would not inherit it. */
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	return 0;
}

static int check_readable_file(const char *path, struct al_error *err)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	if (fd < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "--trust-ca %s: %m", path);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--trust-ca %s: not a regular file", path);
	return 0;
}

static int parse_options(int argc, char **argv, struct egress_options *o, struct al_error *err)
{
	*o = (struct egress_options){
	    .control_fd = -1,
	    .connect_timeout_ms = 10000,
	    .idle_timeout_s = 300,
	    .max_connection_s = 3600,
	    .max_connections = 4096,
	    .max_connections_per_sandbox = 256,
	    .max_connections_per_tenant = 0, /* half of max_connections */
	    .sniff_timeout_ms = EGRESS_SNIFF_TIMEOUT_MS,
	    .log_level = EGRESS_LOG_INFO,
	};
	bool have_resolver = false;
	long fd;
	int c, r = 0;
	opterr = 0;
	while (r == 0 && (c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
		switch (c) {
		case OPT_CONTROL_FD:
			if (parse_int_range(optarg, 0, 1 << 20, &fd) < 0)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
				                    "--control-fd: expected a file descriptor number");
			o->control_fd = (int)fd;
			break;
		case OPT_RESOLVER:
			r = parse_server(optarg, o, err);
			have_resolver = true;
			break;
		case OPT_TRUST_CA:
			r = check_readable_file(optarg, err);
			free(o->trust_ca);
			o->trust_ca = xstrdup(optarg);
			break;
		case OPT_CONNECT_TIMEOUT_MS:
			r = parse_unsigned("connect-timeout-ms", optarg, 1, 600000, &o->connect_timeout_ms, err);
			break;
		case OPT_IDLE_TIMEOUT_S:
			r = parse_unsigned("idle-timeout-s", optarg, 1, 7 * 86400, &o->idle_timeout_s, err);
			break;
		case OPT_MAX_CONNECTION_S:
			r = parse_unsigned("max-connection-s", optarg, 1, 30 * 86400, &o->max_connection_s, err);
			break;
		case OPT_MAX_CONNECTIONS:
			r = parse_unsigned("max-connections", optarg, 1, 1000000, &o->max_connections, err);
			break;
		case OPT_MAX_CONNECTIONS_PER_SANDBOX:
			r = parse_unsigned("max-connections-per-sandbox", optarg, 1, 1000000,
			                   &o->max_connections_per_sandbox, err);
			break;
		case OPT_MAX_CONNECTIONS_PER_TENANT:
			r = parse_unsigned("max-connections-per-tenant", optarg, 1, 1000000,
			                   &o->max_connections_per_tenant, err);
			break;
		case OPT_SNIFF_TIMEOUT_MS:
			r = parse_unsigned("sniff-timeout-ms", optarg, 100, 60000, &o->sniff_timeout_ms, err);
			break;
		case OPT_PUBLIC_CIDR: {
			struct policy_rule rule;
			struct al_error e = {0};
			if (o->n_public_cidrs == EGRESS_PUBLIC_CIDRS_MAX)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG, "--public-cidr: at most %d",
				                    EGRESS_PUBLIC_CIDRS_MAX);
			r = policy_rule_parse(optarg, strlen(optarg), &rule, &e);
			if (r == 0 && (rule.kind != POLICY_RULE_CIDR || rule.port != 0))
				r = al_error_set(&e, AL_ERR_INVALID_ARGUMENT, EINVAL,
				                 "expected a network without a port (\"192.0.2.0/24\")");
			if (r < 0)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--public-cidr %.100s: %s",
				                    optarg, e.message);
			o->public_cidrs[o->n_public_cidrs++] = rule;
			/* Dialled as if public: inside the ceiling too. */
			r = policy_ceiling_add_net(&o->ceiling, optarg, strlen(optarg), err);
			break;
		}
		case OPT_CEILING_CIDR:
			if ((r = policy_ceiling_add_net(&o->ceiling, optarg, strlen(optarg), err)) < 0)
				al_error_prefix(err, "--ceiling-cidr");
			break;
		case OPT_CEILING_METADATA:
			o->ceiling.metadata = true;
			break;
		case OPT_NO_SECCOMP:
			seccomp_off = true;
			break;
		case OPT_LOG_LEVEL: {
			bool found = false;
			for (size_t i = 0; i < ARRAY_SIZE(level_names); i++)
				if (strcmp(optarg, level_names[i]) == 0) {
					o->log_level = (enum egress_log_level)i;
					found = true;
				}
			if (!found)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
				                    "--log-level: expected error, warn, info or debug");
			break;
		}
		default:
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "unknown option or missing value: %.100s (see --help)",
			                    argv[optind - 1] ? argv[optind - 1] : "?");
		}
	}
	if (r < 0)
		return r;
	if (optind < argc)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "unexpected argument: %.100s (see --help)",
		                    argv[optind]);
	if (o->control_fd < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--control-fd is required (airlock-egress is started by airlockd)");
	if (o->max_connections_per_sandbox > o->max_connections)
		o->max_connections_per_sandbox = o->max_connections;
	/* One tenant takes at most half of the gateway by default: the other
	 * half stays for every other tenant (issue 17). */
	if (o->max_connections_per_tenant == 0)
		o->max_connections_per_tenant = MAX(1u, o->max_connections / 2);
	r = check_control_fd(o->control_fd, err);
	if (r == 0 && !have_resolver)
		r = resolver_from_resolv_conf(o, err);
	return r;
}

/* Each guest connection holds up to six fds (two sockets, two pipes). */
static void raise_fd_limit(const struct egress_options *o)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	rlim_t want = (rlim_t)o->max_connections * 6 + 256;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
		egress_log(EGRESS_LOG_WARN, "RLIMIT_NOFILE is %llu, %llu would serve --max-connections %u",
		           (unsigned long long)rl.rlim_cur, (unsigned long long)want, o->max_connections);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--version") == 0) {
			printf("airlock-egress %s\n", AIRLOCK_VERSION);
			return 0;
		}
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(argv[i], "--check-seccomp") == 0) {
			egress_seccomp_self_test();
			return 1; /* alive: the filter did not work */
		}
	}

	static struct egress_runtime rt;
	struct al_error err = {0};
	if (parse_options(argc, argv, &rt.opt, &err) < 0) {
		fprintf(stderr, "airlock-egress: %s\n", err.message);
		return 2;
	}
	log_level = rt.opt.log_level;
	/* SECURITY: secret values and the CA key live in this process's
	 * memory: no core dump, no ptrace or /proc/PID/mem by other processes
	 * of the same (shared, "nobody") uid. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	/* A peer that went away is an error return (EPIPE), not a signal. */
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit(&rt.opt);

	rt.ctl_fd = rt.opt.control_fd;
	pthread_mutex_init(&rt.loop_lock, NULL);
	pthread_mutex_init(&rt.send_lock, NULL);
	pthread_mutex_init(&rt.ev_lock, NULL);
	pthread_cond_init(&rt.ev_cond, NULL);
	pthread_mutex_init(&rt.dns_lock, NULL);
	pthread_cond_init(&rt.dns_cond, NULL);
	pthread_mutex_init(&rt.ca_lock, NULL);
	pthread_mutex_init(&rt.tenant_lock, NULL);
	rt.next_key = 1; /* 0 is the stop eventfd */

	if (egress_intercept_init(&rt, &err) < 0) {
		egress_log(EGRESS_LOG_ERROR, "TLS interception: %s", err.message);
		return err.code == AL_ERR_INVALID_ARGUMENT ? 2 : 1;
	}

	if (egress_resolver_new((struct sockaddr *)&rt.opt.resolver, rt.opt.resolver_len, EGRESS_RESOLVE_TIMEOUT_MS,
	                        &rt.resolver, &err) < 0) {
		egress_log(EGRESS_LOG_ERROR, "resolver %s: %s", rt.opt.resolver_text, err.message);
		return 1;
	}
	rt.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	rt.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	rt.reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
	if (rt.epoll_fd < 0 || rt.stop_fd < 0 || epoll_ctl(rt.epoll_fd, EPOLL_CTL_ADD, rt.stop_fd, &ev) < 0) {
		egress_log(EGRESS_LOG_ERROR, "epoll: %s", strerror(errno));
		return 1;
	}
	/* SECURITY: start-up is done (options, trust store, resolver, epoll);
	 * from here on the gateway parses guest bytes: only the syscalls it
	 * needs for that (egress-seccomp.c). Before any thread is started, so
	 * every thread inherits it. */
	if (seccomp_off) {
		egress_log(EGRESS_LOG_WARN, "--no-seccomp: running without the syscall allow-list (debugging only)");
	} else if (egress_seccomp_install(&err) < 0) {
		egress_log(EGRESS_LOG_ERROR, "%s", err.message);
		return 1;
	}
	int r = egress_dnsd_start(&rt);
	if (r == 0)
		r = egress_ctl_start(&rt);
	if (r < 0) {
		egress_log(EGRESS_LOG_ERROR, "start-up failed: %s", strerror(-r));
		return 1;
	}
	egress_log(EGRESS_LOG_INFO,
	           "ready: resolver %s, connect timeout %u ms, idle %u s, max %u s, %u connections (%u per sandbox)",
	           rt.opt.resolver_text, rt.opt.connect_timeout_ms, rt.opt.idle_timeout_s, rt.opt.max_connection_s,
	           rt.opt.max_connections, rt.opt.max_connections_per_sandbox);

	egress_loop_run(&rt);
	/* The control channel is gone: airlockd died or stopped us. Open
	 * connections end with the process; nothing is left behind. */
	egress_log(EGRESS_LOG_INFO, "control channel closed: exiting");
	return 0;
}
