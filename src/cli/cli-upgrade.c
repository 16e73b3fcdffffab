/* SPDX-License-Identifier: Apache-2.0 */
/* Upgraded connections to airlockd (exec -it's PTY attach, port-forward's
 * tunnel): libcurl does not do HTTP upgrades, so the request is written by
 * hand on a socket of our own and the answer's head read here. */
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "cli.h"

static int connect_unix(const char *path, struct al_error *err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "the socket path %s is too long", path);
	strlcpy_al(sa.sun_path, path, sizeof(sa.sun_path));
	cleanup_close int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return al_error_set(err, AL_ERR_UNAVAILABLE, errno,
		                    "cannot reach airlockd at %s (%m). Is the daemon running? Point --socket / "
		                    "AIRLOCK_SOCKET at its socket",
		                    path);
	return TAKE_FD(fd);
}

static int connect_tcp(const char *host, const char *port, struct al_error *err)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	int r = getaddrinfo(host, port, &hints, &res);
	if (r != 0)
		return al_error_set(err, AL_ERR_UNAVAILABLE, EHOSTUNREACH, "cannot resolve %s: %s", host,
		                    gai_strerror(r));
	int fd = -1, e = ECONNREFUSED;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
			e = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return al_error_set(err, AL_ERR_UNAVAILABLE, e,
		                    "cannot reach airlockd at %s (%s). Is it running with --listen?",
		                    cli_conn_describe(), strerror(e));
	return fd;
}

bool cli_id_ok(const char *s)
{
	if (!*s || strlen(s) > 128)
		return false;
	for (; *s; s++)
		if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') || ('0' <= *s && *s <= '9') || *s == '-' ||
		      *s == '_' || *s == '.'))
			return false;
	return true;
}

/* Reads the answer's head (bounded). Bytes after it are left in buf at
 * *ret_body_off..*ret_len. Returns the HTTP status or < 0. */
static int read_head(int fd, char *buf, size_t size, size_t *ret_len, size_t *ret_body_off)
{
	size_t len = 0;
	for (;;) {
		if (len == size - 1)
			return -EMSGSIZE;
		ssize_t n = read(fd, buf + len, size - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		len += (size_t)n;
		buf[len] = '\0';
		char *end = strstr(buf, "\r\n\r\n");
		if (end) {
			int major, minor, status;
			if (sscanf(buf, "HTTP/%d.%d %d", &major, &minor, &status) != 3)
				return -EBADMSG;
			*ret_len = len;
			*ret_body_off = (size_t)(end + 4 - buf);
			return status;
		}
	}
}

/* The error answer to the upgrade (a JSON body up to CLI_ERROR_BODY_MAX, read to EOF). */
static int report_upgrade_refusal(int fd, int status, const char *already, size_t already_len)
{
	cleanup_free char *body = xmalloc(CLI_ERROR_BODY_MAX + 1);
	size_t len = MIN(already_len, (size_t)CLI_ERROR_BODY_MAX);
	memcpy(body, already, len);
	while (len < CLI_ERROR_BODY_MAX) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 5000) <= 0)
			break;
		ssize_t n = read(fd, body + len, CLI_ERROR_BODY_MAX - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	cleanup_json json_t *j = json_loadb(body, len, JSON_DISABLE_EOF_CHECK, NULL);
	return cli_report(status, j);
}

int cli_upgrade(const char *path, const char *protocol, const char *what, int *ret_fd, uint8_t *extra,
                size_t extra_size, size_t *ret_extra_len)
{
	struct al_error err = {0};
	cleanup_close int fd =
	    cli_conn.host ? connect_tcp(cli_conn.host, cli_conn.port, &err) : connect_unix(cli_conn.socket_path, &err);
	if (fd < 0)
		return cli_report_error(&err);
	cleanup_free char *auth = cli_conn.token ? xasprintf("Authorization: Bearer %s\r\n", cli_conn.token) : NULL;
	cleanup_free char *reqs =
	    xasprintf("GET %s HTTP/1.1\r\n"
	              "Host: %s\r\n%s"
	              "Connection: Upgrade\r\nUpgrade: %s\r\n\r\n",
	              path, cli_conn.host ? cli_conn_describe() + 6 : "airlockd", auth ? auth : "", protocol);
	if (write_full(fd, reqs, strlen(reqs)) < 0)
		return cli_client_error("cannot send the %s request: %s", what, strerror(errno));
	cleanup_free char *head = xmalloc(CLI_UPGRADE_HEAD_MAX);
	size_t len = 0, body_off = 0;
	int status = read_head(fd, head, CLI_UPGRADE_HEAD_MAX, &len, &body_off);
	if (status < 0)
		return cli_client_error("the daemon's answer to the %s request is not HTTP (%s)", what,
		                        strerror(-status));
	if (status != 101)
		return report_upgrade_refusal(fd, status, head + body_off, len - body_off);
	if (len - body_off > extra_size)
		return cli_client_error("the daemon sent %zu bytes after its answer to the %s request (limit %zu)",
		                        len - body_off, what, extra_size);
	memcpy(extra, head + body_off, len - body_off);
	*ret_extra_len = len - body_off;
	*ret_fd = TAKE_FD(fd);
	return 0;
}
