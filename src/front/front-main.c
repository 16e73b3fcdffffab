/* SPDX-License-Identifier: Apache-2.0 */
/* airlock-api --cluster-db CONNINFO --cluster-key-file PATH --listen HOST:PORT
 *             [--socket PATH] [--place-k N] [--reaper-interval-ms N] [--lost-grace-s N]
 *
 * The cluster's front (front.h): a TCP listener for clients with tokens, an
 * optional unix socket (mode 0660) for the operator, one thread per
 * connection (at most FRONT_CONNS_MAX at once), the reaper's thread. */
#include <arpa/inet.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "front.h"
#include "util.h"

#define FRONT_CONNS_MAX 1024             /* connections served at once, both listeners together */
#define FRONT_SEND_TIMEOUT_S 60          /* a client that reads nothing of its answer for this long is cut */
#define FRONT_THREAD_STACK (512 * 1024)  /* a connection's thread: 1024 of them stay small */
#define FRONT_LINGER_MS 1000             /* a lingering close waits at most this */
#define FRONT_LINGER_BYTES (1024 * 1024) /* and reads at most this */
#define FRONT_PLACE_K_DEFAULT 2
#define FRONT_REAPER_MS_DEFAULT 1000
#define FRONT_LOST_GRACE_DEFAULT 2

struct front_config front_cfg;
static atomic_int conns_active;

struct listener {
	int fd;
	bool operator;
};

static void usage(FILE *f)
{
	fprintf(f,
	        "usage: airlock-api --cluster-db CONNINFO --cluster-key-file PATH --listen HOST:PORT\n"
	        "                   [--socket PATH] [--place-k N] [--reaper-interval-ms N] [--lost-grace-s N]\n"
	        "The cluster's front (docs/cluster.md): clients talk to it as to one airlockd.\n"
	        "  --cluster-db CONNINFO     PostgreSQL connection string (libpq), e.g. \"host=db dbname=airlock\"\n"
	        "  --cluster-key-file PATH   the cluster key, the same bytes as the nodes' (%d to %d bytes,\n"
	        "                            a regular file others cannot read)\n"
	        "  --listen HOST:PORT        the TCP listener of clients with tokens\n"
	        "  --socket PATH             a unix socket for the operator (mode 0660, no token)\n"
	        "  --place-k N               best of N random nodes for a create (default %d)\n"
	        "  --reaper-interval-ms N    how often lost nodes are looked for (default %d)\n"
	        "  --lost-grace-s N          seconds past a node's lease before it is lost (default %d)\n",
	        CLUSTER_KEY_MIN, CLUSTER_KEY_MAX, FRONT_PLACE_K_DEFAULT, FRONT_REAPER_MS_DEFAULT,
	        FRONT_LOST_GRACE_DEFAULT);
}

static __attribute__((noreturn)) void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("airlock-api: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

static unsigned opt_uint(const char *s, const char *flag, long min, long max)
{
	long v;
	if (parse_int_range(s, min, max, &v) < 0)
		die("%s must be an integer from %ld to %ld, not \"%s\"", flag, min, max, s);
	return (unsigned)v;
}

static void key_load(const char *path)
{
	char msg[512];
	if (cluster_key_load(path, &front_cfg.key, msg, sizeof(msg)) < 0)
		die("%s", msg);
}

static void opts_parse(int argc, char **argv)
{
	static const struct option opts[] = {{"cluster-db", required_argument, NULL, 'd'},
	                                     {"cluster-key-file", required_argument, NULL, 'k'},
	                                     {"listen", required_argument, NULL, 'l'},
	                                     {"socket", required_argument, NULL, 's'},
	                                     {"place-k", required_argument, NULL, 'K'},
	                                     {"reaper-interval-ms", required_argument, NULL, 'r'},
	                                     {"lost-grace-s", required_argument, NULL, 'g'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {NULL, 0, NULL, 0}};
	const char *key = NULL;
	front_cfg = (struct front_config){.place_k = FRONT_PLACE_K_DEFAULT,
	                                  .reaper_interval_ms = FRONT_REAPER_MS_DEFAULT,
	                                  .lost_grace_s = FRONT_LOST_GRACE_DEFAULT};
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			front_cfg.conninfo = optarg;
			break;
		case 'k':
			key = optarg;
			break;
		case 'l':
			front_cfg.listen = optarg;
			break;
		case 's':
			front_cfg.socket_path = optarg;
			break;
		case 'K':
			front_cfg.place_k = opt_uint(optarg, "--place-k", 1, FRONT_NODES_MAX);
			break;
		case 'r':
			front_cfg.reaper_interval_ms = opt_uint(optarg, "--reaper-interval-ms", 10, 3600000);
			break;
		case 'g':
			front_cfg.lost_grace_s = opt_uint(optarg, "--lost-grace-s", 0, 86400);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (optind < argc)
		die("unexpected argument \"%s\" (see --help)", argv[optind]);
	if (!front_cfg.conninfo || !key || !front_cfg.listen)
		die("--cluster-db, --cluster-key-file and --listen are required (see --help)");
	key_load(key);
}

/* ------------------------------------------------------------ listeners */

static int listen_tcp(const char *spec)
{
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec || !colon[1])
		die("--listen must be HOST:PORT, not \"%s\"", spec);
	char host[256];
	size_t hl = (size_t)(colon - spec);
	if (spec[0] == '[' && colon[-1] == ']')
		spec++, hl -= 2;
	if (hl >= sizeof(host))
		die("--listen: the host is too long");
	memcpy(host, spec, hl);
	host[hl] = '\0';
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
	int gr = getaddrinfo(host, colon + 1, &hints, &ai);
	if (gr != 0)
		die("--listen %s: %s", front_cfg.listen, gai_strerror(gr));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 512) < 0)
		die("cannot listen on %s: %s", front_cfg.listen, strerror(errno));
	freeaddrinfo(ai);
	return fd;
}

static int listen_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		die("--socket %s: the path is too long", path);
	strlcpy_al(sa.sun_path, path, sizeof(sa.sun_path));
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (probe >= 0)
		close(probe);
	if (live)
		die("something is listening on %s already; stop it or pick another --socket", path);
	unlink(path);
	mode_t old = umask(0117);
	int br = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (fd < 0 || br < 0 || chmod(path, 0660) < 0 || listen(fd, 128) < 0)
		die("cannot listen on %s: %s", path, strerror(errno));
	return fd;
}

static void peer_describe(int fd, char *out, size_t size)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	strlcpy_al(out, "unix", size);
	if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return;
	if (ss.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, out, (socklen_t)size);
	else if (ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, out, (socklen_t)size);
}

/* A lingering close: what the client still sends (a refused request's
 * head or body) is read and dropped for a moment, so that closing with
 * unread bytes does not reset the connection before it read the answer. */
static void conn_linger(int fd)
{
	char buf[4096];
	uint64_t deadline = now_ms_monotonic() + FRONT_LINGER_MS;
	shutdown(fd, SHUT_WR);
	for (size_t total = 0; total < FRONT_LINGER_BYTES;) {
		uint64_t now = now_ms_monotonic();
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (now >= deadline || poll(&p, 1, (int)(deadline - now)) <= 0)
			return;
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n <= 0)
			return;
		total += (size_t)n;
	}
}

static void *conn_main(void *arg)
{
	struct front_conn *c = arg;
	front_conn_serve(c);
	conn_linger(c->fd);
	close(c->fd);
	free(c);
	atomic_fetch_sub(&conns_active, 1);
	return NULL;
}

static void conn_start(int fd, bool operator)
{
	static const char busy_body[] = "{\"error\":{\"code\":\"unavailable\",\"message\":\"airlock-api serves "
	                                "1024 connections already; retry\"}}";
	if (atomic_fetch_add(&conns_active, 1) >= FRONT_CONNS_MAX) {
		atomic_fetch_sub(&conns_active, 1);
		char busy[512];
		int n =
		    snprintf(busy, sizeof(busy),
		             "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: "
		             "%zu\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s",
		             sizeof(busy_body) - 1, busy_body);
		send(fd, busy, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
		close(fd);
		return;
	}
	struct timeval tv = {.tv_sec = FRONT_SEND_TIMEOUT_S};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	front_keepalive(fd);
	struct front_conn *c = xcalloc(1, sizeof(*c));
	c->fd = fd;
	c->operator= operator;
	peer_describe(fd, c->remote, sizeof(c->remote));
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, FRONT_THREAD_STACK);
	pthread_t t;
	if (pthread_create(&t, &attr, conn_main, c) != 0) {
		close(fd);
		free(c);
		atomic_fetch_sub(&conns_active, 1);
	}
	pthread_attr_destroy(&attr);
}

static void *accept_main(void *arg)
{
	const struct listener *l = arg;
	for (;;) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			conn_start(fd, l->operator);
		else if (errno == EMFILE || errno == ENFILE)
			usleep(100 * 1000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	opts_parse(argc, argv);
	signal(SIGPIPE, SIG_IGN);
	struct al_error err = {0};
	if (front_pg_init(front_cfg.conninfo, &err) < 0)
		die("%s", err.message);
	static struct listener tcp, unix_l;
	tcp = (struct listener){.fd = listen_tcp(front_cfg.listen)};
	pthread_t t;
	if (front_cfg.socket_path) {
		unix_l = (struct listener){.fd = listen_unix(front_cfg.socket_path), .operator= true };
		if (pthread_create(&t, NULL, accept_main, &unix_l) != 0)
			die("cannot start a thread");
	}
	front_reaper_start();
	fprintf(stderr, "airlock-api: listening on %s%s%s\n", front_cfg.listen, front_cfg.socket_path ? " and " : "",
	        front_cfg.socket_path ? front_cfg.socket_path : "");
	accept_main(&tcp);
	return 0;
}
