/* SPDX-License-Identifier: Apache-2.0 */
/* expose, unexpose, ports and port-forward: a sandbox's ports reached from
 * outside (docs/api.md, "Ports"). port-forward listens locally and carries
 * each accepted connection over its own upgraded API connection
 * (GET .../ports/{port}/connect, Upgrade: airlock-tcp/1) to the guest. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "cli-port-spec.h"
#include "cli.h"
#include "fd-relay.h"

#define PORT_FORWARD_PROTOCOL "airlock-tcp/1"
#define PORT_FORWARD_MAX 16     /* forwards in one command */
#define PORT_FORWARD_BACKLOG 64 /* connections waiting for accept */

static long long num(json_t *obj, const char *key)
{
	return (long long)json_integer_value(json_object_get(obj, key));
}

/* PORT: 1-65535 (the daemon checks again). */
static int port_operand(const char *verb, const char *arg, long *ret)
{
	if (parse_int_range(arg, 1, 65535, ret) < 0)
		return cli_usage_error("%s: PORT must be a number 1-65535, got \"%s\"", verb, arg);
	return 0;
}

/* The answer's entry for port (NULL if none). */
static json_t *port_entry(json_t *answer, long port)
{
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(answer, "ports"), i, p)
		if (num(p, "port") == port)
			return p;
	return NULL;
}

/* ------------------------------------------------------------ expose, unexpose */

static int expose_opt(int c, void *ud)
{
	if (c == 'p')
		*(bool *)ud = true;
	return 0;
}

static void print_exposed(const char *id, long port, json_t *answer)
{
	json_t *p = port_entry(answer, port);
	bool pub = json_is_true(json_object_get(p, "public"));
	const char *url = json_string_value(json_object_get(p, "url"));
	const char *path_url = json_string_value(json_object_get(p, "path_url"));
	printf("%s:%ld exposed, %s\n", cli_esc(id), port,
	       pub ? "public (anyone who has the URL)"
	           : "private (requests need the traffic token, see 'airlock ports')");
	if (url) {
		printf("url       %s\n", cli_esc(url));
		if (path_url)
			printf("path_url  %s\n", cli_esc(path_url));
	} else {
		printf("airlockd runs no proxy (--proxy-listen); reach the port with 'airlock port-forward %s "
		       "LOCAL_PORT:%ld'\n",
		       cli_esc(id), port);
	}
}

int cli_cmd_expose(int argc, char **argv)
{
	static const struct option longs[] = {{"public", no_argument, NULL, 'p'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	bool pub = false;
	long port;
	int first = 0, r = cli_small_opts(argc, argv, "h", longs, &first, expose_opt, &pub);
	if (r)
		return r;
	if (argc - first != 2)
		return cli_usage_error("expose takes a sandbox id and a port: expose ID PORT [--public]");
	if ((r = port_operand("expose", argv[first + 1], &port)))
		return r;
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/ports/%ld", argv[first], port);
	cleanup_json json_t *body = json_pack("{s:b}", "public", pub);
	cleanup_json json_t *resp = NULL;
	if ((r = cli_call("PUT", path, body, 200, &resp)))
		return r;
	if (cli_opt_json)
		cli_print_json(resp, true);
	else
		print_exposed(argv[first], port, resp);
	return 0;
}

int cli_cmd_unexpose(int argc, char **argv)
{
	long port;
	int first = 0, r = cli_small_opts(argc, argv, "h", cli_json_only, &first, cli_no_opt, NULL);
	if (r)
		return r;
	if (argc - first != 2)
		return cli_usage_error("unexpose takes a sandbox id and a port: unexpose ID PORT");
	if ((r = port_operand("unexpose", argv[first + 1], &port)))
		return r;
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/ports/%ld", argv[first], port);
	cleanup_json json_t *resp = NULL;
	if ((r = cli_call("DELETE", path, NULL, 200, &resp)))
		return r;
	if (cli_opt_json)
		cli_print_json(resp, true);
	else
		printf("%s:%ld unexposed\n", cli_esc(argv[first]), port);
	return 0;
}

/* ------------------------------------------------------------ ports */

static void print_port_row(json_t *p)
{
	const char *url = json_string_value(json_object_get(p, "url"));
	printf("%-6lld %-7s %-6s %8lld %10lld %10lld %6lld  %s\n", num(p, "port"),
	       json_is_true(json_object_get(p, "exposed")) ? "yes" : "no",
	       json_is_true(json_object_get(p, "public")) ? "yes" : "no", num(p, "requests"), num(p, "bytes_in"),
	       num(p, "bytes_out"), num(p, "errors"), url ? cli_esc(url) : "-");
}

int cli_cmd_ports(int argc, char **argv)
{
	const char *id;
	int r = cli_sandbox_operand(argc, argv, &id);
	if (r)
		return r;
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/ports", id);
	cleanup_json json_t *resp = NULL;
	if ((r = cli_call("GET", path, NULL, 200, &resp)))
		return r;
	if (cli_opt_json) {
		cli_print_json(resp, true);
		return 0;
	}
	printf("%-6s %-7s %-6s %8s %10s %10s %6s  %s\n", "PORT", "EXPOSED", "PUBLIC", "REQUESTS", "BYTES_IN",
	       "BYTES_OUT", "ERRORS", "URL");
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(resp, "ports"), i, p)
		print_port_row(p);
	printf("traffic token  %s\n", cli_esc_json(resp, "traffic_token"));
	printf("auto-resume    %s\n", json_is_true(json_object_get(resp, "auto_resume")) ? "on" : "off");
	if (!json_is_true(json_object_get(resp, "proxy")))
		printf("proxy          none (airlockd runs without --proxy-listen); use 'airlock port-forward'\n");
	return 0;
}

/* ------------------------------------------------------------ port-forward */

struct forward {
	struct port_spec spec;
	int fd;        /* listening */
	unsigned port; /* the local port bound */
};

static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t w = write(signal_pipe[1], &b, 1);
	(void)w;
	errno = saved;
}

static void signals_install(void)
{
	if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		abort();
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	/* The tunnels' processes are reaped by the kernel. */
	struct sigaction chld = {.sa_handler = SIG_DFL, .sa_flags = SA_NOCLDWAIT};
	sigemptyset(&chld.sa_mask);
	sigaction(SIGCHLD, &chld, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static const char *addr_text(const struct sockaddr_storage *ss, char *buf, size_t size)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
		snprintf(buf, size, "%s:%u", host, port);
	} else {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
		snprintf(buf, size, "[%s]:%u", host, port);
	}
	return buf;
}

static int forward_listen(struct forward *f)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
	char port[8];
	snprintf(port, sizeof(port), "%u", f->spec.local_port);
	int r = getaddrinfo(f->spec.addr, port, &hints, &res);
	if (r != 0)
		return cli_client_error("port-forward: cannot resolve %s: %s", f->spec.addr, gai_strerror(r));
	int e = EADDRNOTAVAIL;
	for (struct addrinfo *ai = res; ai && f->fd < 0; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int one = 1;
		if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		                bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, PORT_FORWARD_BACKLOG) < 0)) {
			e = errno;
			close(fd);
			fd = -1;
		}
		f->fd = fd;
	}
	freeaddrinfo(res);
	if (f->fd < 0)
		return cli_client_error("port-forward: cannot listen on %s port %u: %s", f->spec.addr,
		                        f->spec.local_port, strerror(e));
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (getsockname(f->fd, (struct sockaddr *)&ss, &sl) < 0)
		return cli_client_error("port-forward: getsockname: %s", strerror(errno));
	f->port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
	                                        : ((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}

/* One accepted connection, in its own process: the tunnel, then the relay. */
static void tunnel_run(const char *id, const struct forward *f, int client, const char *peer)
{
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/ports/%u/connect", id, f->spec.remote_port);
	uint8_t extra[CLI_UPGRADE_HEAD_MAX];
	size_t extra_len = 0;
	cleanup_close int fd = -1;
	if (cli_upgrade(path, PORT_FORWARD_PROTOCOL, "port-forward", &fd, extra, sizeof(extra), &extra_len)) {
		fprintf(stderr, "airlock: port-forward: closed the connection from %s to %s:%u (local port %u)\n", peer,
		        id, f->spec.remote_port, f->port);
		return;
	}
	if (extra_len && write_full(client, extra, extra_len) < 0)
		return;
	struct fd_relay r = {.a = client, .b = fd};
	int rc = fd_relay_run(&r);
	if (rc < 0 && rc != -ECONNRESET && rc != -EPIPE)
		fprintf(stderr, "airlock: port-forward: the connection from %s to %s:%u ended: %s\n", peer, id,
		        f->spec.remote_port, strerror(-rc));
}

static void tunnel_spawn(const char *id, const struct forward *fw, size_t n, size_t which, pid_t parent)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl = sizeof(ss);
	int client = accept4(fw[which].fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
	if (client < 0)
		return; /* the client went away, or EMFILE: the next poll tries again */
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "airlock: port-forward: cannot fork for a connection: %s\n", strerror(errno));
		close(client);
		return;
	}
	if (pid > 0) {
		close(client);
		return;
	}
	/* The child: ends with the forwarder. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(0);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	for (size_t i = 0; i < n; i++)
		close(fw[i].fd);
	close(signal_pipe[0]);
	close(signal_pipe[1]);
	char peer[INET6_ADDRSTRLEN + 16];
	tunnel_run(id, &fw[which], client, addr_text(&ss, peer, sizeof(peer)));
	close(client);
	fflush(stderr);
	_exit(0);
}

static int forward_loop(const char *id, const struct forward *fw, size_t n)
{
	pid_t self = getpid();
	for (;;) {
		struct pollfd p[PORT_FORWARD_MAX + 1];
		p[0] = (struct pollfd){.fd = signal_pipe[0], .events = POLLIN};
		for (size_t i = 0; i < n; i++)
			p[i + 1] = (struct pollfd){.fd = fw[i].fd, .events = POLLIN};
		if (poll(p, (nfds_t)n + 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return cli_client_error("port-forward: poll: %s", strerror(errno));
		}
		if (p[0].revents & POLLIN)
			return 0; /* SIGINT, SIGTERM, SIGHUP: the tunnels end with us */
		for (size_t i = 0; i < n; i++)
			if (p[i + 1].revents & POLLIN)
				tunnel_spawn(id, fw, n, i, self);
	}
}

int cli_cmd_port_forward(int argc, char **argv)
{
	int first = 0, r = cli_small_opts(argc, argv, "h", cli_json_only, &first, cli_no_opt, NULL);
	if (r)
		return r;
	if (argc - first < 2)
		return cli_usage_error("port-forward takes a sandbox id and one or more "
		                       "[LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT (e.g. port-forward ID 8080:80)");
	if (argc - first - 1 > PORT_FORWARD_MAX)
		return cli_usage_error("port-forward: at most %d forwards in one command", PORT_FORWARD_MAX);
	const char *id = argv[first];
	if (!cli_id_ok(id))
		return cli_usage_error("port-forward: \"%s\" is not a sandbox id", id);
	struct forward fw[PORT_FORWARD_MAX];
	size_t n = (size_t)(argc - first - 1);
	for (size_t i = 0; i < n; i++) {
		char why[512];
		fw[i] = (struct forward){.fd = -1};
		if (port_spec_parse(argv[first + 1 + i], &fw[i].spec, why, sizeof(why)) < 0)
			return cli_usage_error("port-forward: \"%s\": %s", argv[first + 1 + i], why);
	}
	/* The sandbox must be there and ours before anything listens. */
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/ports", id);
	cleanup_json json_t *resp = NULL;
	if ((r = cli_call("GET", path, NULL, 200, &resp)))
		return r;
	signals_install();
	int status = 0;
	for (size_t i = 0; i < n && !status; i++)
		status = forward_listen(&fw[i]);
	for (size_t i = 0; i < n && !status; i++) {
		bool v6 = strchr(fw[i].spec.addr, ':') != NULL;
		printf("Forwarding from %s%s%s:%u -> %s:%u\n", v6 ? "[" : "", fw[i].spec.addr, v6 ? "]" : "",
		       fw[i].port, id, fw[i].spec.remote_port);
	}
	fflush(stdout);
	if (!status)
		status = forward_loop(id, fw, n);
	for (size_t i = 0; i < n; i++)
		if (fw[i].fd >= 0)
			close(fw[i].fd);
	return status;
}
