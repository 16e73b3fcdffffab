/* SPDX-License-Identifier: Apache-2.0 */
#include "netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "airlock/proto.h"
#include "json-cleanup.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

#define NFT_OUTPUT_MAX (64 * 1024)
#define NFT_TIMEOUT_MS 10000
#define LISTEN_BACKLOG 1024
#define ATTACH_BIND_RETRY_MS 3000

/*
 * The rules of every sandbox namespace. Nothing in the namespace routes
 * anywhere (tap0 is its only interface besides lo), so what the guest can
 * reach is exactly: the egress listener (all TCP, redirected), the DNS
 * listeners (UDP/TCP 53 to any address, redirected), ARP for the gateway.
 * The netdev table stops, before the stack sees it, what is not the guest's
 * own IPv4 or ARP (other source addresses or MACs, IPv6, other ethertypes)
 * and every IPv4 packet that is neither TCP nor DNS (UDP, ICMP, ...): the
 * stack would drop those too (no route out), but silently; here they are
 * counted.
 */
/* The host side may open TCP connections to the guest (a sandbox's ports
 * reached from outside: netns_guest_socket), only from sockets marked
 * NETNS_PORT_MARK, which only airlockd can set (SO_MARK needs
 * CAP_NET_ADMIN); the guest's answers are accepted as replies
 * (`ct direction reply`: the namespace began the connection), so the guest
 * can still begin nothing but what the prerouting rules redirect.
 *
 * %1$s tap, %2$s gateway address, %3$s guest address, %4$s guest MAC (the
 * namespace's own: netns.h),
 * %5$d DNS port, %6$d egress port, %7$u the mark of port sockets. */
static const char nft_rules_format[] = "table inet airlock {\n"
                                       "  counter dropped {\n  }\n"
                                       "  chain prerouting {\n"
                                       "    type nat hook prerouting priority dstnat; policy accept;\n"
                                       "    iifname \"%1$s\" udp dport 53 redirect to :%5$d\n"
                                       "    iifname \"%1$s\" tcp dport 53 redirect to :%5$d\n"
                                       "    iifname \"%1$s\" meta l4proto tcp redirect to :%6$d\n"
                                       "  }\n"
                                       "  chain input {\n"
                                       "    type filter hook input priority filter; policy drop;\n"
                                       "    iifname \"lo\" accept\n"
                                       "    iifname \"%1$s\" ip daddr %2$s tcp dport { %5$d, %6$d } accept\n"
                                       "    iifname \"%1$s\" ip daddr %2$s udp dport %5$d accept\n"
                                       "    iifname \"%1$s\" ip saddr %3$s ct direction reply accept\n"
                                       "    counter name dropped drop\n"
                                       "  }\n"
                                       "  chain forward {\n"
                                       "    type filter hook forward priority filter; policy drop;\n"
                                       "    counter name dropped drop\n"
                                       "  }\n"
                                       "  chain output {\n"
                                       "    type filter hook output priority filter; policy drop;\n"
                                       "    oifname \"lo\" accept\n"
                                       "    oifname \"%1$s\" ip daddr %3$s ct state established accept\n"
                                       "    oifname \"%1$s\" ip daddr %3$s meta l4proto tcp meta mark %7$u accept\n"
                                       "    counter name dropped drop\n"
                                       "  }\n"
                                       "}\n"
                                       "table netdev airlock_tap {\n"
                                       "  counter dropped {\n  }\n"
                                       "  chain ingress {\n"
                                       "    type filter hook ingress device \"%1$s\" priority filter; policy accept;\n"
                                       "    ether saddr != %4$s counter name dropped drop\n"
                                       "    meta protocol != { ip, arp } counter name dropped drop\n"
                                       "    meta protocol ip ip saddr != %3$s counter name dropped drop\n"
                                       "    meta protocol arp arp saddr ip != %3$s counter name dropped drop\n"
                                       "    meta protocol ip meta l4proto != { tcp, udp } counter name dropped drop\n"
                                       "    meta protocol ip udp dport != 53 counter name dropped drop\n"
                                       "  }\n"
                                       "}\n";

static char *nft_rules(const char *guest_mac)
{
	return xasprintf(nft_rules_format, AIRLOCK_NET_TAP, AIRLOCK_NET_GATEWAY, AIRLOCK_NET_GUEST_ADDR, guest_mac,
	                 AIRLOCK_NET_DNS_PORT, AIRLOCK_NET_EGRESS_PORT, NETNS_PORT_MARK);
}

const char *netns_nft_path(void)
{
	/* An operator's nft elsewhere (and tests that make it fail). */
	const char *env = getenv("AIRLOCK_NFT");
	if (env && *env)
		return access(env, X_OK) == 0 ? env : NULL;
	static const char *const paths[] = {"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"};
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

/* Runs `nft ARGS` inside the namespace with `input` on stdin; its output
 * (stdout and stderr, bounded) in *ret_out when asked. */
static int nft_run(int ns_fd, const char *const args[], const char *input, char **ret_out, struct al_error *err)
{
	const char *nft = netns_nft_path();
	if (!nft)
		return al_error_set(err, AL_ERR_UNAVAILABLE, ENOENT,
		                    "nftables: the nft tool is not installed (apt-get install nftables); "
		                    "sandboxes cannot start without their network rules");
	int in[2], out[2];
	if (pipe2(in, O_CLOEXEC) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "nftables: pipe: %m");
	if (pipe2(out, O_CLOEXEC) < 0) {
		close(in[0]);
		close(in[1]);
		return al_error_set(err, AL_ERR_INTERNAL, errno, "nftables: pipe: %m");
	}
	char *argv[8] = {(char *)nft};
	size_t n = 1;
	for (size_t i = 0; args[i] && n < ARRAY_SIZE(argv) - 1; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(in[0]), close(in[1]), close(out[0]), close(out[1]);
		return al_error_set(err, AL_ERR_INTERNAL, e, "nftables: fork: %m");
	}
	if (pid == 0) {
		if (setns(ns_fd, CLONE_NEWNET) < 0)
			_exit(125);
		dup2(in[0], 0);
		dup2(out[1], 1);
		dup2(out[1], 2);
		close_range(3, ~0u, 0);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
		execve(argv[0], argv, envp);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	int wr = input ? write_full(in[1], input, strlen(input)) : 0;
	close(in[1]);
	cleanup_free char *buf = xmalloc(NFT_OUTPUT_MAX + 1);
	size_t len = 0;
	uint64_t deadline = now_ms_monotonic() + NFT_TIMEOUT_MS;
	for (;;) {
		uint64_t now = now_ms_monotonic();
		struct pollfd p = {.fd = out[0], .events = POLLIN};
		if (now >= deadline || poll(&p, 1, (int)(deadline - now)) == 0) {
			kill(pid, SIGKILL);
			break;
		}
		ssize_t k = read(out[0], buf + len, NFT_OUTPUT_MAX - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		len += (size_t)k;
		if (len == NFT_OUTPUT_MAX)
			break;
	}
	close(out[0]);
	buf[len] = '\0';
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || wr < 0) {
		/* nft names the line and column; keep the first line. */
		char *nl = strchr(buf, '\n');
		if (nl)
			*nl = '\0';
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "nftables: %s %s failed (%s %d): %.300s", nft, args[0],
		                    WIFEXITED(status) ? "exit" : "signal",
		                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
		                    len ? buf : "no output");
	}
	if (ret_out)
		*ret_out = TAKE_PTR(buf);
	return 0;
}

static int write_sysctl(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = write_full(fd, value, strlen(value));
	close(fd);
	return r;
}

static int if_ioctl(int sock, unsigned long req, struct ifreq *ifr, const char *what, struct al_error *err)
{
	if (ioctl(sock, req, ifr) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "network namespace: %s of %s: %m", what,
		                    ifr->ifr_name);
	return 0;
}

static void set_sin(struct sockaddr *sa, const char *addr)
{
	struct sockaddr_in sin = {.sin_family = AF_INET};
	inet_pton(AF_INET, addr, &sin.sin_addr);
	memcpy(sa, &sin, sizeof(sin));
}

/* SECURITY: only the sandbox's jailed VMM (its own uid and gid, no
 * capability) may attach to the tap; a pool's tap (owner 0) only root. An
 * owner must be set: a tap without one is open to every process of the
 * namespace. */
static int set_tap_owner(int tun, uid_t owner, struct al_error *err)
{
	if (ioctl(tun, TUNSETOWNER, (unsigned long)owner) < 0 || ioctl(tun, TUNSETGROUP, (unsigned long)owner) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "network namespace: cannot give %s to uid %u: %m",
		                    AIRLOCK_NET_TAP, (unsigned)owner);
	return 0;
}

static int open_tap(int *ret_fd, struct al_error *err)
{
	cleanup_close int tun = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (tun < 0)
		return al_error_set(err, AL_ERR_UNAVAILABLE, errno,
		                    "network namespace: cannot open /dev/net/tun (%m); the host needs TUN/TAP");
	struct ifreq tr = {0};
	strlcpy_al(tr.ifr_name, AIRLOCK_NET_TAP, IFNAMSIZ);
	tr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
	if (ioctl(tun, TUNSETIFF, &tr) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "network namespace: cannot open %s: %m",
		                    AIRLOCK_NET_TAP);
	*ret_fd = TAKE_FD(tun);
	return 0;
}

/* In a pool's namespace: its tap (persistent, made by setup_links) to the
 * sandbox's jail uid. */
static int give_tap(uid_t owner, struct al_error *err)
{
	cleanup_close int tun = -1;
	int r = open_tap(&tun, err);
	return r < 0 ? r : set_tap_owner(tun, owner, err);
}

/* In the new namespace: IPv6 off, lo up, tap0 (persistent, fixed MAC,
 * the gateway address) up. */
static int setup_links(uid_t tap_owner, struct al_error *err)
{
	/* SECURITY: no IPv6 at all in the namespace: no link-local address on
	 * tap0, no router advertisements, nothing to route. */
	static const char *const v6off[] = {"/proc/sys/net/ipv6/conf/all/disable_ipv6",
	                                    "/proc/sys/net/ipv6/conf/default/disable_ipv6"};
	for (size_t i = 0; i < ARRAY_SIZE(v6off); i++) {
		int r = write_sysctl(v6off[i], "1");
		if (r < 0 && r != -ENOENT) /* ENOENT: a kernel without IPv6 */
			return al_error_set(err, AL_ERR_INTERNAL, -r, "network namespace: cannot write %s: %s",
			                    v6off[i], strerror(-r));
	}
	cleanup_close int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "network namespace: socket: %m");
	struct ifreq ifr = {0};
	strlcpy_al(ifr.ifr_name, "lo", IFNAMSIZ);
	int r = if_ioctl(sock, SIOCGIFFLAGS, &ifr, "flags", err);
	if (r < 0)
		return r;
	ifr.ifr_flags |= IFF_UP;
	if ((r = if_ioctl(sock, SIOCSIFFLAGS, &ifr, "up", err)) < 0)
		return r;

	cleanup_close int tun = -1;
	if ((r = open_tap(&tun, err)) < 0)
		return r;
	if ((r = set_tap_owner(tun, tap_owner, err)) < 0)
		return r;
	/* It outlives this fd: the VMM opens it by name. It goes away with the
	 * namespace. */
	if (ioctl(tun, TUNSETPERSIST, 1) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "network namespace: TUNSETPERSIST: %m");

	struct ifreq a = {0};
	strlcpy_al(a.ifr_name, AIRLOCK_NET_TAP, IFNAMSIZ);
	static const uint8_t mac[6] = AIRLOCK_NET_GATEWAY_MAC_BYTES;
	a.ifr_hwaddr.sa_family = ARPHRD_ETHER;
	memcpy(a.ifr_hwaddr.sa_data, mac, sizeof(mac));
	if ((r = if_ioctl(sock, SIOCSIFHWADDR, &a, "MAC address", err)) < 0)
		return r;
	set_sin(&a.ifr_addr, AIRLOCK_NET_GATEWAY);
	if ((r = if_ioctl(sock, SIOCSIFADDR, &a, "address", err)) < 0)
		return r;
	set_sin(&a.ifr_netmask, AIRLOCK_NET_NETMASK);
	if ((r = if_ioctl(sock, SIOCSIFNETMASK, &a, "netmask", err)) < 0)
		return r;
	if ((r = if_ioctl(sock, SIOCGIFFLAGS, &a, "flags", err)) < 0)
		return r;
	a.ifr_flags |= IFF_UP;
	return if_ioctl(sock, SIOCSIFFLAGS, &a, "up", err);
}

static int listener(int type, uint16_t port, bool retry, int *ret_fd, struct al_error *err)
{
	cleanup_close int fd = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "egress listener: socket: %m");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, AIRLOCK_NET_GATEWAY, &sin.sin_addr);
	uint64_t deadline = now_ms_monotonic() + (retry ? ATTACH_BIND_RETRY_MS : 0);
	/* After a daemon restart the old gateway may still hold the port for
	 * a moment. */
	while (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		if (errno != EADDRINUSE || now_ms_monotonic() >= deadline)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "egress listener: bind %s:%u (%s): %m",
			                    AIRLOCK_NET_GATEWAY, port, type == SOCK_STREAM ? "tcp" : "udp");
		struct timespec ts = {0, 50 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (type == SOCK_STREAM && listen(fd, LISTEN_BACKLOG) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "egress listener: listen: %m");
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static int listeners(struct netns *n, bool retry, struct al_error *err)
{
	int r = listener(SOCK_STREAM, AIRLOCK_NET_EGRESS_PORT, retry, &n->listen_fds[NETNS_LISTEN_TCP], err);
	if (r == 0)
		r = listener(SOCK_DGRAM, AIRLOCK_NET_DNS_PORT, retry, &n->listen_fds[NETNS_LISTEN_DNS_UDP], err);
	if (r == 0)
		r = listener(SOCK_STREAM, AIRLOCK_NET_DNS_PORT, retry, &n->listen_fds[NETNS_LISTEN_DNS_TCP], err);
	return r;
}

/* A TCP socket of the namespace, marked so that its rules let it reach
 * the guest. */
static int guest_socket(int *ret_fd, struct al_error *err)
{
	cleanup_close int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "a socket in the sandbox's namespace: %m");
	unsigned mark = NETNS_PORT_MARK;
	if (setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno,
		                    "a socket in the sandbox's namespace: SO_MARK: %m (airlockd needs CAP_NET_ADMIN)");
	*ret_fd = TAKE_FD(fd);
	return 0;
}

struct ns_job {
	enum { NS_CREATE, NS_ATTACH, NS_GIVE, NS_SOCKET } kind;
	int socket_fd;   /* socket: the new socket */
	uid_t tap_owner; /* create, give: tap0's owner uid and group */
	int attach_fd;   /* attach, give: the namespace to enter */
	struct netns n;
	int r;
	struct al_error err;
};

/* SECURITY: setns()/unshare() change only this thread's namespace; the
 * thread exits right after, so no other work of the daemon ever runs in a
 * sandbox's namespace. */
static void *ns_thread(void *arg)
{
	struct ns_job *j = arg;
	if (j->kind == NS_CREATE) {
		if (unshare(CLONE_NEWNET) < 0) {
			j->r =
			    al_error_set(&j->err, AL_ERR_UNAVAILABLE, errno,
			                 "network namespace: unshare(CLONE_NEWNET): %m (airlockd needs CAP_SYS_ADMIN)");
			return NULL;
		}
		j->n.ns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		if (j->n.ns_fd < 0) {
			j->r = al_error_set(&j->err, AL_ERR_INTERNAL, errno, "network namespace: open: %m");
			return NULL;
		}
		if ((j->r = setup_links(j->tap_owner, &j->err)) < 0)
			return NULL;
	} else if (setns(j->attach_fd, CLONE_NEWNET) < 0) {
		j->r = al_error_set(&j->err, AL_ERR_INTERNAL, errno, "network namespace: setns: %m");
		return NULL;
	}
	if (j->kind == NS_SOCKET)
		j->r = guest_socket(&j->socket_fd, &j->err);
	else
		j->r = j->kind == NS_GIVE ? give_tap(j->tap_owner, &j->err)
		                          : listeners(&j->n, j->kind == NS_ATTACH, &j->err);
	return NULL;
}

static int run_ns_job(struct ns_job *j, struct al_error *err)
{
	pthread_t t;
	int e = pthread_create(&t, NULL, ns_thread, j);
	if (e)
		return al_error_set(err, AL_ERR_INTERNAL, e, "network namespace: thread: %s", strerror(e));
	pthread_join(t, NULL);
	if (j->r < 0) {
		*err = j->err;
		netns_release(&j->n);
		return j->r;
	}
	return 0;
}

/* tap_owner 0: a pool's namespace, its tap usable by root only until
 * netns_take gives it to a jail uid. */
static int create(uid_t tap_owner, struct netns *ret, struct al_error *err)
{
	struct ns_job j = {.kind = NS_CREATE, .tap_owner = tap_owner, .attach_fd = -1, .n = NETNS_INIT};
	int r = run_ns_job(&j, err);
	if (r < 0)
		return r;
	static const char *const args[] = {"-f", "-", NULL};
	mac_random_local(j.n.guest_mac);
	cleanup_free char *rules = nft_rules(j.n.guest_mac);
	if ((r = nft_run(j.n.ns_fd, args, rules, NULL, err)) < 0) {
		netns_release(&j.n);
		return r;
	}
	*ret = j.n;
	return 0;
}

/* ---- the pool ------------------------------------------------------------------------------------ */

/* Namespaces made ahead by a thread of their own (--netns-pool): a create
 * takes one and only gives its tap to the jail uid (two ioctls instead of
 * a namespace, its links and an nft run). A namespace is never used twice:
 * a sandbox's goes with it, and the pool makes fresh ones. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* CLOCK_MONOTONIC */
	pthread_t thread;
	bool running, stop;
	unsigned size, n;
	struct netns ready[NETNS_POOL_MAX];
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define POOL_RETRY_MIN_MS 1000
#define POOL_RETRY_MAX_MS 30000

static void *pool_main(void *arg)
{
	(void)arg;
	unsigned retry_ms = 0;
	pthread_mutex_lock(&pool.lock);
	while (!pool.stop) {
		if (pool.n >= pool.size) {
			pthread_cond_wait(&pool.cond, &pool.lock);
			continue;
		}
		pthread_mutex_unlock(&pool.lock);
		struct netns n = NETNS_INIT;
		struct al_error e = {0};
		int r = create(0, &n, &e);
		pthread_mutex_lock(&pool.lock);
		if (r < 0) {
			/* Creates make their own meanwhile (and fail closed the
			 * same way if the host cannot). */
			retry_ms = retry_ms ? MIN(retry_ms * 2, POOL_RETRY_MAX_MS) : POOL_RETRY_MIN_MS;
			log_error("network namespace pool: %s (next try in %u ms)", e.message, retry_ms);
			struct timespec until = monotonic_in_ms(retry_ms);
			while (!pool.stop && pthread_cond_timedwait(&pool.cond, &pool.lock, &until) == 0)
				;
			continue;
		}
		retry_ms = 0;
		if (pool.stop || pool.n >= pool.size) {
			netns_release(&n);
			continue;
		}
		pool.ready[pool.n++] = n;
		metrics_set_netns_pool(pool.n);
	}
	pthread_mutex_unlock(&pool.lock);
	return NULL;
}

int netns_pool_start(unsigned size, struct al_error *err)
{
	if (size > NETNS_POOL_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "network namespace pool: at most %d",
		                    NETNS_POOL_MAX);
	if (size == 0 || pool.running)
		return 0;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pool.cond, &ca);
	pthread_condattr_destroy(&ca);
	pool.size = size;
	pool.stop = false;
	int e = pthread_create(&pool.thread, NULL, pool_main, NULL);
	if (e) {
		pthread_cond_destroy(&pool.cond);
		return al_error_set(err, AL_ERR_INTERNAL, e, "network namespace pool: thread: %s", strerror(e));
	}
	pool.running = true;
	return 0;
}

void netns_pool_stop(void)
{
	if (!pool.running)
		return;
	pthread_mutex_lock(&pool.lock);
	pool.stop = true;
	pthread_cond_broadcast(&pool.cond);
	pthread_mutex_unlock(&pool.lock);
	pthread_join(pool.thread, NULL);
	while (pool.n > 0)
		netns_release(&pool.ready[--pool.n]);
	metrics_set_netns_pool(0);
	pthread_cond_destroy(&pool.cond);
	pool.running = false;
}

int netns_take(uid_t tap_owner, struct netns *ret, struct al_error *err)
{
	if (tap_owner == 0)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM, "network namespace: the tap needs a jail uid");
	struct netns n = NETNS_INIT;
	pthread_mutex_lock(&pool.lock);
	bool pooled = pool.n > 0;
	if (pooled) {
		n = pool.ready[--pool.n];
		metrics_set_netns_pool(pool.n);
		pthread_cond_signal(&pool.cond);
	}
	pthread_mutex_unlock(&pool.lock);
	if (pooled) {
		struct ns_job j = {.kind = NS_GIVE, .tap_owner = tap_owner, .attach_fd = n.ns_fd, .n = NETNS_INIT};
		struct al_error e = {0};
		if (run_ns_job(&j, &e) == 0) {
			metrics_count_netns_take(true);
			*ret = n;
			return 0;
		}
		log_error("network namespace pool: %s; making a new one", e.message);
		netns_release(&n);
	}
	metrics_count_netns_take(false);
	return create(tap_owner, ret, err);
}

int netns_attach(pid_t pid, struct netns *ret, struct al_error *err)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "network namespace of VMM %d: %m", (int)pid);
	/* The VMM must be in a sandbox namespace, never in the daemon's own. */
	struct stat mine, theirs;
	if (fstat(fd, &theirs) < 0 || stat("/proc/self/ns/net", &mine) < 0 || mine.st_ino == theirs.st_ino)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM, "VMM %d is not in a sandbox network namespace",
		                    (int)pid);
	struct ns_job j = {.kind = NS_ATTACH, .attach_fd = fd, .n = NETNS_INIT};
	j.n.ns_fd = TAKE_FD(fd);
	int r = run_ns_job(&j, err);
	if (r < 0)
		return r;
	static const char *const args[] = {"list", "table", "inet", "airlock", NULL};
	if ((r = nft_run(j.n.ns_fd, args, NULL, NULL, err)) < 0) {
		al_error_prefix(err, "the rules of VMM %d's namespace are gone", (int)pid);
		netns_release(&j.n);
		return r;
	}
	*ret = j.n;
	return 0;
}

int netns_guest_socket(int ns_fd, int *ret_fd, struct al_error *err)
{
	struct ns_job j = {.kind = NS_SOCKET, .attach_fd = ns_fd, .socket_fd = -1, .n = NETNS_INIT};
	int r = run_ns_job(&j, err);
	if (r < 0)
		return r;
	*ret_fd = j.socket_fd;
	return 0;
}

void netns_release(struct netns *n)
{
	if (n->ns_fd >= 0)
		close(n->ns_fd);
	n->ns_fd = -1;
	for (size_t i = 0; i < NETNS_LISTEN_COUNT; i++) {
		if (n->listen_fds[i] >= 0)
			close(n->listen_fds[i]);
		n->listen_fds[i] = -1;
	}
}

int netns_dropped(int ns_fd, uint64_t *ret_packets, uint64_t *ret_bytes, struct al_error *err)
{
	static const char *const args[] = {"-j", "list", "counters", NULL};
	cleanup_free char *out = NULL;
	int r = nft_run(ns_fd, args, NULL, &out, err);
	if (r < 0)
		return r;
	cleanup_json json_t *doc = json_loads(out, 0, NULL);
	json_t *items = json_object_get(doc, "nftables");
	uint64_t packets = 0, bytes = 0;
	size_t i;
	json_t *it;
	json_array_foreach (items, i, it) {
		json_t *c = json_object_get(it, "counter");
		if (!c)
			continue;
		packets += (uint64_t)json_integer_value(json_object_get(c, "packets"));
		bytes += (uint64_t)json_integer_value(json_object_get(c, "bytes"));
	}
	*ret_packets = packets;
	*ret_bytes = bytes;
	return 0;
}
