/* SPDX-License-Identifier: Apache-2.0 */
/* libmicrohttpd glue: one thread per connection, so a request that waits (a
 * boot, a long exec, a followed stream) never blocks requests about other
 * sandboxes. Routing, auth and body limits happen on the first call for a
 * request, before a byte of its body is read. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "api-ratelimit.h"
#include "api.h"
#include "auth.h"
#include "events.h"
#include "log.h"
#include "metrics.h"
#include "sandbox.h"
#include "util.h"

#define API_HEADER_MAX 8192
#define API_CONNECTIONS_MAX 1024
#define API_CONNECTION_TIMEOUT_S 3600
#define API_STREAM_BLOCK 65536

struct api_server {
	struct MHD_Daemon *mhd;
	int listen_fd;
	char *path; /* unix socket to remove at stop, or NULL */
	bool tcp;
};

struct conn_state {
	const struct api_route *route;
	struct api_request req;
	char tenant[TENANT_NAME_MAX + 1];
	char remote[64];
	char *body;
	size_t len, limit;
	bool too_large;
	bool answered; /* an early answer was queued */
	struct api_upload upload;
	bool uploading;
	bool upload_failed;
	struct al_error upload_err;
};

static uint64_t max_file_bytes;
static const struct daemon_config *config;
/* Per tenant on the TCP listener; NULL: no limit (or no listener). */
static struct rate_limiter *rate_limiter;

void api_set_config(const struct daemon_config *cfg, uint64_t max_file)
{
	config = cfg;
	max_file_bytes = max_file;
}

const struct daemon_config *api_config(void)
{
	return config;
}

uint64_t api_max_file_bytes(void)
{
	return max_file_bytes;
}

const char *api_query(const struct api_request *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *api_header(const struct api_request *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

struct foreach_ctx {
	void (*fn)(void *, const char *, const char *);
	void *ctx;
};

static enum MHD_Result foreach_cb(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	(void)kind;
	struct foreach_ctx *f = cls;
	f->fn(f->ctx, key, value ? value : "");
	return MHD_YES;
}

void api_query_foreach(const struct api_request *req, void (*fn)(void *ctx, const char *key, const char *value),
                       void *ctx)
{
	struct foreach_ctx f = {fn, ctx};
	MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, foreach_cb, &f);
}

bool api_client_gone(int conn_fd)
{
	if (conn_fd < 0)
		return false;
	struct pollfd p = {.fd = conn_fd, .events = POLLRDHUP};
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

void api_response_error(struct api_response *resp, const struct al_error *err)
{
	if (resp->body)
		json_decref(resp->body);
	resp->status = al_error_http_status(err->code);
	resp->body =
	    json_pack("{s:{s:s, s:s}}", "error", "code", al_error_code_name(err->code), "message", err->message);
}

int api_response_to_error(struct api_response *resp, struct al_error *err)
{
	json_t *e = json_object_get(resp->body, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	const char *code = json_string_value(json_object_get(e, "code"));
	enum al_error_code c = AL_ERR_INVALID_ARGUMENT;
	for (int i = 0; code && i < AL_ERR__COUNT; i++)
		if (!strcmp(code, al_error_code_name((enum al_error_code)i)))
			c = (enum al_error_code)i;
	al_error_set(err, c, EINVAL, "%s", msg ? msg : "the request failed");
	if (resp->body)
		json_decref(resp->body);
	resp->body = NULL;
	return -EINVAL;
}

void api_response_errorf(struct api_response *resp, enum al_error_code code, const char *fmt, ...)
{
	struct al_error err = {.code = code};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	api_response_error(resp, &err);
}

/* ---- answers ------------------------------------------------------------------------------------ */

struct stream_ctx {
	struct api_response resp;
};

static ssize_t stream_cb(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct stream_ctx *sc = cls;
	ssize_t n = sc->resp.reader(sc->resp.reader_ctx, (uint8_t *)buf, max);
	if (n > 0)
		return n;
	return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free_cb(void *cls)
{
	struct stream_ctx *sc = cls;
	if (sc->resp.reader_free)
		sc->resp.reader_free(sc->resp.reader_ctx);
	free(sc);
}

static void upgrade_cb(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra_in, size_t extra_len,
                       MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	(void)c;
	(void)con_cls;
	struct stream_ctx *sc = cls;
	/* Thread-per-connection: this may block for the life of the session. */
	sc->resp.upgrade(sc->resp.upgrade_ctx, sock, (const uint8_t *)extra_in, extra_len);
	MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
	if (sc->resp.upgrade_free)
		sc->resp.upgrade_free(sc->resp.upgrade_ctx);
	free(sc);
}

static enum MHD_Result send_response(struct MHD_Connection *c, struct api_response *resp)
{
	struct MHD_Response *r;
	metrics_count_request(resp->status);
	/* Errors are counted once, as they are answered. */
	const char *code = json_string_value(json_object_get(json_object_get(resp->body, "error"), "code"));
	if (code && resp->status >= 400)
		metrics_count_error(code);
	if (resp->upgrade) {
		struct stream_ctx *sc = xcalloc(1, sizeof(*sc));
		sc->resp = *resp;
		r = MHD_create_response_for_upgrade(upgrade_cb, sc);
		/* MHD adds "Connection: Upgrade" itself. */
		MHD_add_response_header(r, MHD_HTTP_HEADER_UPGRADE, resp->upgrade_protocol);
		enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_SWITCHING_PROTOCOLS, r);
		MHD_destroy_response(r);
		if (ret != MHD_YES) {
			if (resp->upgrade_free)
				resp->upgrade_free(resp->upgrade_ctx);
			free(sc);
		}
		return ret;
	}
	if (resp->reader) {
		struct stream_ctx *sc = xcalloc(1, sizeof(*sc));
		sc->resp = *resp;
		r = MHD_create_response_from_callback(resp->content_length >= 0 ? (uint64_t)resp->content_length
		                                                                : MHD_SIZE_UNKNOWN,
		                                      API_STREAM_BLOCK, stream_cb, sc, stream_free_cb);
		MHD_add_response_header(r, "Content-Type",
		                        resp->content_type ? resp->content_type : "application/x-ndjson");
		if (resp->body)
			json_decref(resp->body);
	} else if (resp->body) {
		char *text = json_dumps(resp->body, JSON_COMPACT);
		json_decref(resp->body);
		if (!text)
			abort();
		size_t len = strlen(text);
		text = xrealloc(text, len + 2);
		text[len++] = '\n';
		text[len] = '\0';
		r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
		MHD_add_response_header(r, "Content-Type", "application/json");
	} else {
		r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	}
	resp->body = NULL;
	if (resp->retry_after_s) {
		char after[16];
		snprintf(after, sizeof(after), "%u", resp->retry_after_s);
		MHD_add_response_header(r, "Retry-After", after);
	}
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)resp->status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, enum al_error_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result send_error(struct MHD_Connection *c, enum al_error_code code, const char *fmt, ...)
{
	struct al_error err = {.code = code};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	struct api_response resp = {0};
	api_response_error(&resp, &err);
	return send_response(c, &resp);
}

/* ---- requests ----------------------------------------------------------------------------------- */

static bool content_type_json(struct MHD_Connection *c)
{
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	if (!ct)
		return true;
	size_t n = strlen("application/json");
	return strncasecmp(ct, "application/json", n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static void describe_peer(struct MHD_Connection *c, bool tcp, char *out, size_t size)
{
	strlcpy_al(out, "unix", size);
	if (!tcp)
		return;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (!ci || !ci->client_addr)
		return;
	const struct sockaddr *sa = ci->client_addr;
	char host[INET6_ADDRSTRLEN] = "?";
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, host, sizeof(host));
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, host, sizeof(host));
	strlcpy_al(out, host, size);
}

/* First call for a request: route, authenticate, check the declared body. */
/* An error answered before the body was read. */
static enum MHD_Result early(struct conn_state *st, enum MHD_Result r)
{
	st->answered = true;
	return r;
}

static enum MHD_Result on_headers(struct api_server *srv, struct MHD_Connection *c, const char *url, const char *method,
                                  struct conn_state *st)
{
	char allowed[128] = "";
	bool path_known = false;
	st->req.method = method;
	st->req.path = url;
	st->req.conn = c;
	const union MHD_ConnectionInfo *fdi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	st->req.conn_fd = fdi ? fdi->connect_fd : -1;
	describe_peer(c, srv->tcp, st->remote, sizeof(st->remote));
	st->req.remote = st->remote;

	if (strlen(url) > 1024)
		return early(st, send_error(c, AL_ERR_INVALID_ARGUMENT, "the request path is longer than 1024 bytes"));
	if (srv->tcp) {
		/* SECURITY: every TCP request carries a token; its tenant scopes everything it can see. */
		struct al_error err = {0};
		const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
		if (auth_token_verify(auth, st->remote, st->tenant, &err) < 0)
			return early(st, send_error(c, err.code ? err.code : AL_ERR_UNAUTHORIZED, "%s", err.message));
		st->req.tenant = st->tenant;
		/* A tenant over its rate gets nothing done, not even routing. */
		unsigned after = 0;
		if (rate_limiter && !rate_limiter_allow(rate_limiter, st->tenant, now_ms_monotonic(), &after)) {
			metrics_count_rate_limited();
			struct api_response resp = {.retry_after_s = after};
			api_response_errorf(&resp, AL_ERR_QUOTA,
			                    "tenant %s: more than %u API requests a second (burst %u; airlockd "
			                    "--rate-limit-rps, --rate-limit-burst); retry after %u s",
			                    st->tenant, config->rate_limit_rps, config->rate_limit_burst, after);
			return early(st, send_response(c, &resp));
		}
	}
	st->route = api_route_match(method, url, &st->req, &path_known, allowed, sizeof(allowed));
	if (!st->route) {
		if (path_known)
			return early(st, send_error(c, AL_ERR_METHOD, "%s is not allowed on %s (allowed: %s)", method,
			                            url, allowed));
		return early(
		    st, send_error(c, AL_ERR_NOT_FOUND, "no such endpoint: %s %.200s (see docs/api.md)", method, url));
	}
	if (st->route->admin_only && st->req.tenant)
		return early(st, send_error(c, AL_ERR_FORBIDDEN,
		                            "%s %s is for the operator: use the unix socket (tokens cannot do this)",
		                            method, st->route->pattern));

	st->limit = st->route->upload_begin ? (st->route->body_max ? st->route->body_max : max_file_bytes)
	                                    : st->route->body_max;
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	uint64_t declared = 0;
	if (cl && parse_u64(cl, &declared) < 0)
		return early(st, send_error(c, AL_ERR_INVALID_ARGUMENT, "Content-Length is not a number"));
	if (declared > 0 && st->limit == 0)
		return early(st, send_error(c, AL_ERR_INVALID_ARGUMENT, "%s %s takes no request body", method, url));
	if (declared > st->limit)
		return early(st,
		             send_error(c, AL_ERR_TOO_LARGE,
		                        "request body of %" PRIu64 " bytes is above this endpoint's limit of %zu bytes",
		                        declared, st->limit));
	if (!st->route->upload_begin && declared > 0 && !content_type_json(c))
		return early(st, send_error(c, AL_ERR_UNSUPPORTED_MEDIA, "Content-Type must be application/json"));
	if (st->route->upload_begin) {
		struct al_error err = {0};
		if (st->route->upload_begin(&st->req, &st->upload, &err) < 0)
			return early(st, send_error(c, err.code, "%s", err.message));
		st->uploading = true;
	}
	return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
	(void)version;
	struct api_server *srv = cls;
	struct conn_state *st = *con_cls;
	if (!st) {
		st = xcalloc(1, sizeof(*st));
		*con_cls = st;
		return on_headers(srv, c, url, method, st);
	}
	if (st->answered) {
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (!st->too_large && st->len + n > st->limit)
			st->too_large = true;
		if (st->too_large)
			return MHD_YES; /* read and dropped; the answer says why */
		st->len += n;
		if (st->uploading) {
			if (!st->upload_failed &&
			    st->upload.data(st->upload.ctx, (const uint8_t *)upload_data, n, &st->upload_err) < 0)
				st->upload_failed = true;
			return MHD_YES;
		}
		st->body = xrealloc(st->body, st->len + 1);
		memcpy(st->body + st->len - n, upload_data, n);
		st->body[st->len] = '\0';
		return MHD_YES;
	}
	st->answered = true;
	if (st->too_large) {
		return send_error(c, AL_ERR_TOO_LARGE, "request body is above this endpoint's limit of %zu bytes",
		                  st->limit);
	}
	struct api_response resp = {.status = 200, .content_length = -1};
	if (st->uploading) {
		st->upload.end(st->upload.ctx, st->upload_failed, &st->upload_err, &resp);
	} else {
		st->req.body = st->body ? st->body : "";
		st->req.body_len = st->len;
		st->route->handle(&st->req, &resp);
	}
	return send_response(c, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)c;
	(void)toe;
	struct conn_state *st = *con_cls;
	if (!st)
		return;
	if (st->uploading && st->upload.release)
		st->upload.release(st->upload.ctx);
	free(st->body);
	free(st);
	*con_cls = NULL;
}

/* MHD's logger hands us its own format strings. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n > 0 && msg[n - 1] == '\n')
		msg[--n] = '\0';
	log_line("http", "%s", msg);
}
#pragma GCC diagnostic pop

static int start_mhd(struct api_server *s, struct al_error *err)
{
	s->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
	                              MHD_USE_ITC | MHD_ALLOW_UPGRADE,
	                          0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
	                          MHD_OPTION_LISTEN_SOCKET, s->listen_fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
	                          NULL, MHD_OPTION_CONNECTION_LIMIT, (unsigned)API_CONNECTIONS_MAX,
	                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)API_CONNECTION_TIMEOUT_S,
	                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(API_HEADER_MAX * 8), MHD_OPTION_END);
	if (!s->mhd)
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot start the HTTP server");
	return 0;
}

int api_server_start_unix(const char *socket_path, struct api_server **ret, struct al_error *err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlcpy_al(sa.sun_path, socket_path, sizeof(sa.sun_path)) >= sizeof(sa.sun_path))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
		                    "socket path %s is longer than %zu bytes; pick a shorter --socket", socket_path,
		                    sizeof(sa.sun_path) - 1);
	cleanup_free char *dir = xstrdup(socket_path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		int r = mkdir_p(dir, 0755);
		if (r < 0)
			return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot create %s: %s", dir, strerror(-r));
	}
	cleanup_close int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "socket: %m");
	/* A stale socket from a previous run is replaced; a live one means another daemon. */
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (probe >= 0) {
		bool live = connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		close(probe);
		if (live)
			return al_error_set(err, AL_ERR_CONFLICT, EADDRINUSE,
			                    "another airlockd is listening on %s; stop it or pick another --socket",
			                    socket_path);
	}
	unlink(socket_path);
	mode_t old = umask(0117);
	int br = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (br < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot bind %s: %m", socket_path);
	chmod(socket_path, 0660);
	if (listen(fd, 128) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "listen on %s: %m", socket_path);

	struct api_server *s = xcalloc(1, sizeof(*s));
	s->path = xstrdup(socket_path);
	s->listen_fd = TAKE_FD(fd);
	if (start_mhd(s, err) < 0) {
		unlink(socket_path);
		close(s->listen_fd);
		free(s->path);
		free(s);
		return -EIO;
	}
	*ret = s;
	return 0;
}

int api_server_start_tcp(const char *addr_port, struct api_server **ret, struct al_error *err)
{
	/* ADDR:PORT with an IPv4 address, or [ADDR]:PORT with IPv6. */
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon = strrchr(addr_port, ':');
	long port;
	if (!colon || (size_t)(colon - addr_port) >= sizeof(host) || parse_int_range(colon + 1, 1, 65535, &port) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--listen takes ADDR:PORT (e.g. 127.0.0.1:7070), got \"%s\"", addr_port);
	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr_port), addr_port);
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		host[strlen(host) - 1] = '\0';
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--listen: bad IPv6 address %s",
			                    host);
		sl = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--listen: bad IPv4 address %s",
			                    host);
		sl = sizeof(*s4);
	}
	cleanup_close int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "socket: %m");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 128) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot listen on %s: %m", addr_port);
	struct api_server *s = xcalloc(1, sizeof(*s));
	s->listen_fd = TAKE_FD(fd);
	s->tcp = true;
	if (config && config->rate_limit_rps && !rate_limiter)
		rate_limiter = rate_limiter_new(config->rate_limit_rps, config->rate_limit_burst, RATELIMIT_KEYS_MAX);
	if (start_mhd(s, err) < 0) {
		close(s->listen_fd);
		free(s);
		return -EIO;
	}
	*ret = s;
	return 0;
}

void api_server_stop(struct api_server *s)
{
	if (!s)
		return;
	MHD_quiesce_daemon(s->mhd);
	if (s->path)
		unlink(s->path);
	MHD_stop_daemon(s->mhd);
	close(s->listen_fd);
	if (s->tcp) {
		rate_limiter_free(rate_limiter);
		rate_limiter = NULL;
	}
	free(s->path);
	free(s);
}

/* ---- JSON lines -------------------------------------------------------------------------------- */

struct line_stream {
	char *buf;
	size_t len, off;
	int conn_fd;
};

struct line_stream *line_stream_new(int conn_fd)
{
	struct line_stream *ls = xcalloc(1, sizeof(*ls));
	ls->conn_fd = conn_fd;
	return ls;
}

void line_stream_push(struct line_stream *ls, json_t *line)
{
	char *text = json_dumps(line, JSON_COMPACT);
	json_decref(line);
	if (!text)
		abort();
	size_t n = strlen(text);
	if (ls->off > 0 && ls->off == ls->len) {
		ls->off = ls->len = 0;
	}
	ls->buf = xrealloc(ls->buf, ls->len + n + 1);
	memcpy(ls->buf + ls->len, text, n);
	ls->buf[ls->len + n] = '\n';
	ls->len += n + 1;
	free(text);
}

size_t line_stream_take(struct line_stream *ls, uint8_t *buf, size_t max)
{
	size_t n = MIN(max, ls->len - ls->off);
	memcpy(buf, ls->buf + ls->off, n);
	ls->off += n;
	if (ls->off == ls->len)
		ls->off = ls->len = 0;
	return n;
}

bool line_stream_empty(struct line_stream *ls)
{
	return ls->off == ls->len;
}

int line_stream_fd(struct line_stream *ls)
{
	return ls->conn_fd;
}

void line_stream_free(struct line_stream *ls)
{
	if (!ls)
		return;
	free(ls->buf);
	free(ls);
}
