/* SPDX-License-Identifier: Apache-2.0 */
/* libmicrohttpd glue: one thread per connection, so a request that waits (a
 * boot, a long exec) never blocks requests about other sandboxes. */
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "api.h"
#include "log.h"
#include "util.h"

#define API_HEADER_MAX 8192
#define API_CONNECTIONS_MAX 1024
#define API_CONNECTION_TIMEOUT_S 600

struct api_server {
	struct MHD_Daemon *mhd;
	int listen_fd;
	char *path;
};

struct conn_state {
	char *body;
	size_t len, limit;
	bool too_large;
	bool no_body_allowed;
};

void api_response_error(struct api_response *resp, const struct al_error *err)
{
	if (resp->body)
		json_decref(resp->body);
	resp->status = al_error_http_status(err->code);
	resp->body = json_pack("{s:{s:s, s:s}}", "error", "code", al_error_code_name(err->code), "message",
			       err->message);
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, json_t *body)
{
	struct MHD_Response *r;
	if (body) {
		char *text = json_dumps(body, JSON_COMPACT);
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
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
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
	enum MHD_Result r = send_json(c, resp.status, resp.body);
	json_decref(resp.body);
	return r;
}

static bool content_type_ok(struct MHD_Connection *c)
{
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	if (!ct)
		return true;
	size_t n = strlen("application/json");
	return strncasecmp(ct, "application/json", n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload_data, size_t *upload_data_size,
				  void **con_cls)
{
	(void)cls;
	(void)version;
	struct conn_state *st = *con_cls;
	if (!st) {
		/* First call: headers only. Refuse oversize bodies before reading them. */
		st = xcalloc(1, sizeof(*st));
		*con_cls = st;
		st->limit = api_body_limit(method, url);
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		uint64_t declared = 0;
		if (cl && parse_u64(cl, &declared) == 0 && declared > 0) {
			if (st->limit == 0)
				return send_error(c, AL_ERR_INVALID_ARGUMENT, "%s %s takes no request body", method,
						  url);
			if (declared > st->limit)
				return send_error(c, AL_ERR_TOO_LARGE,
						  "request body of %" PRIu64 " bytes is above this endpoint's limit of %zu bytes",
						  declared, st->limit);
			if (!content_type_ok(c))
				return send_error(c, AL_ERR_UNSUPPORTED_MEDIA,
						  "Content-Type must be application/json");
		}
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		/* Chunked or undeclared bodies: stop keeping bytes past the limit. */
		size_t n = *upload_data_size;
		if (!st->too_large && st->len + n > st->limit) {
			st->too_large = true;
			free(st->body);
			st->body = NULL;
		}
		if (!st->too_large) {
			st->body = xrealloc(st->body, st->len + n + 1);
			memcpy(st->body + st->len, upload_data, n);
			st->len += n;
			st->body[st->len] = '\0';
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (st->too_large)
		return send_error(c, AL_ERR_TOO_LARGE, "request body is above this endpoint's limit of %zu bytes",
				  st->limit);
	if (st->len > 0 && !content_type_ok(c))
		return send_error(c, AL_ERR_UNSUPPORTED_MEDIA, "Content-Type must be application/json");

	/* MHD hands over the path without its query; arguments are looked up by name. */
	struct api_request req = {
		.method = method,
		.path = url,
		.arg_all = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "all"),
		.body = st->body ? st->body : "",
		.body_len = st->len,
	};
	struct api_response resp = {.status = 200};
	api_dispatch(&req, &resp);
	enum MHD_Result r = send_json(c, resp.status, resp.body);
	if (resp.body)
		json_decref(resp.body);
	return r;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)c;
	(void)toe;
	struct conn_state *st = *con_cls;
	if (st) {
		free(st->body);
		free(st);
		*con_cls = NULL;
	}
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

int api_server_start(const char *socket_path, struct api_server **ret, struct al_error *err)
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
	s->listen_fd = fd;
	s->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
					  MHD_USE_ERROR_LOG | MHD_USE_ITC,
				  0, NULL, NULL, on_request, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
				  MHD_OPTION_LISTEN_SOCKET, fd,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_LIMIT,
				  (unsigned)API_CONNECTIONS_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
				  (unsigned)API_CONNECTION_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
				  (size_t)(API_HEADER_MAX * 4), MHD_OPTION_END);
	if (!s->mhd) {
		unlink(socket_path);
		free(s->path);
		free(s);
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot start the HTTP server on %s", socket_path);
	}
	TAKE_FD(fd);
	*ret = s;
	return 0;
}

void api_server_stop(struct api_server *s)
{
	if (!s)
		return;
	MHD_quiesce_daemon(s->mhd);
	unlink(s->path);
	MHD_stop_daemon(s->mhd);
	close(s->listen_fd);
	free(s->path);
	free(s);
}
