/* SPDX-License-Identifier: Apache-2.0 */
/* libmicrohttpd glue: one thread per connection, so a request that waits (a
 * boot, a long exec, a followed stream) never blocks requests about other
 * sandboxes. Routing, auth and body limits happen on the first call for a
 * request, before a byte of its body is read.
 *
 * Each listener is its own MHD daemon with its own connection slots
 * (api-connlimit.h), so nothing a TCP client does takes a slot of the
 * operator's unix socket. Connections are polled with poll(), not select():
 * any fd number works, however many the process holds. An idle connection
 * (waiting for a request head, or between requests) is closed after
 * --api-idle-timeout-s, or earlier when its slot is needed; a streamed answer
 * or an upgraded connection is never timed out (its reader waits for the
 * guest, not for the client). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "api-connlimit.h"
#include "api-ratelimit.h"
#include "api-e2b.h"
#include "api-ui-path.h"
#include "api-ws.h"
#include "api.h"
#include "connect-wire.h"
#include "auth-failures.h"
#include "auth.h"
#include "cluster-node.h"
#include "events.h"
#include "log.h"
#include "metrics.h"
#include "sandbox.h"
#include "util.h"

#define API_HEADER_MAX 8192
#define API_STREAM_BLOCK 65536
#define API_REFUSAL_LOG_MS 10000 /* at most one log line this often about refused connections */
/* TCP keepalive of API connections: a streamed answer has no idle timeout,
 * but a client that vanished is noticed after about two minutes. */
#define API_KEEPALIVE_IDLE_S 60
#define API_KEEPALIVE_INTERVAL_S 10
#define API_KEEPALIVE_COUNT 6

struct api_server {
	struct MHD_Daemon *mhd;
	int listen_fd;
	char *path; /* unix socket to remove at stop, or NULL */
	bool tcp;
	const char *name; /* "unix" or "tcp": the listener label in /metrics */
	struct conn_table *conns;
	unsigned max_connections, max_per_client, idle_timeout_s;
	/* Refused connections not yet logged; only the listening thread touches these. */
	uint64_t refused_unlogged, refusal_logged_ms;
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
	bool streaming;                       /* the answer is streamed or upgraded: the idle timeout is off */
	enum api_route_kind kind;             /* by the path's prefix, before routing */
	char e2b_sandbox[SANDBOX_ID_MAX + 1]; /* envd routes: the authenticated E2b-Sandbox-Id */
	bool operator_;                       /* cluster mode: a front's delegation for the operator */
};

static uint64_t max_file_bytes;
static const struct daemon_config *config;
/* Per tenant on the TCP listener; NULL: no limit (or no listener). */
static struct rate_limiter *rate_limiter;
/* auth.failure events per client address on the TCP listener; NULL: one per failure. */
static struct authfail_limiter *auth_failures;

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
	/* 503 is for a moment (a start slot, a sandbox being re-attached): when to ask again. */
	if (err->code == AL_ERR_UNAVAILABLE && !resp->retry_after_s)
		resp->retry_after_s = 1;
	/* A message may quote a client's or guest's bytes, or be cut inside a character. */
	cleanup_free char *message = utf8_repair(err->message);
	resp->body = json_pack("{s:{s:s, s:s}}", "error", "code", al_error_code_name(err->code), "message", message);
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

static enum MHD_Result send_response(struct MHD_Connection *c, const struct conn_state *st, struct api_response *resp)
{
	struct MHD_Response *r;
	if (st)
		e2b_error_render(st->kind, st->req.e2b_stream, resp);
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
		for (size_t i = 0; i < API_UPGRADE_HEADERS_MAX && resp->upgrade_headers[i][0]; i++)
			MHD_add_response_header(r, resp->upgrade_headers[i][0], resp->upgrade_headers[i][1]);
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
	if (resp->header_name && resp->header_value)
		MHD_add_response_header(r, resp->header_name, resp->header_value);
	free(resp->header_value);
	resp->header_value = NULL;
	for (const char *const *h = resp->headers; h && h[0] && h[1]; h += 2)
		MHD_add_response_header(r, h[0], h[1]);
	if (resp->retry_after_s) {
		char after[16];
		snprintf(after, sizeof(after), "%u", resp->retry_after_s);
		MHD_add_response_header(r, "Retry-After", after);
	}
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)resp->status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const struct conn_state *st, enum al_error_code code,
                                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result send_error(struct MHD_Connection *c, const struct conn_state *st, enum al_error_code code,
                                  const char *fmt, ...)
{
	struct al_error err = {.code = code};
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	struct api_response resp = {0};
	api_response_error(&resp, &err);
	return send_response(c, st, &resp);
}

/* ---- connections -------------------------------------------------------------------------------- */

/* The client address of c as a key (conn_source_key); "unix" on the unix socket. */
static void peer_source(const struct api_server *srv, struct MHD_Connection *c, bool prefix64,
                        char out[CONN_SOURCE_MAX + 1])
{
	strlcpy_al(out, "unix", CONN_SOURCE_MAX + 1);
	if (!srv->tcp)
		return;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	socklen_t len = !sa                         ? 0
	                : sa->sa_family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6)
	                                            : (socklen_t)sizeof(struct sockaddr_in);
	conn_source_key(sa, len, prefix64, out);
}

static struct conn_slot *conn_slot_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

static void conn_shed(void *ctx, int fd)
{
	struct api_server *srv = ctx;
	/* The connection's own thread sees the hang-up and closes it: MHD closes
	 * the fd only after conn_notify() removed it from the table. */
	shutdown(fd, SHUT_RDWR);
	metrics_count_api_connection(srv->name, "shed");
}

static void log_refusal(struct api_server *srv, const char *source, enum conn_verdict v)
{
	srv->refused_unlogged++;
	uint64_t now = now_ms_monotonic();
	if (srv->refusal_logged_ms && now - srv->refusal_logged_ms < API_REFUSAL_LOG_MS)
		return;
	if (v == CONN_REFUSE_SOURCE)
		log_info("%s listener: refused %" PRIu64 " connection(s), the last from %s: its %u connections "
		         "are all busy (--api-max-connections-per-client)",
		         srv->name, srv->refused_unlogged, source, srv->max_per_client);
	else
		log_info("%s listener: refused %" PRIu64 " connection(s), the last from %s: all %u connections "
		         "are busy (--api-max-connections)",
		         srv->name, srv->refused_unlogged, source, srv->max_connections);
	srv->refused_unlogged = 0;
	srv->refusal_logged_ms = now;
}

/* SECURITY: runs for every accepted connection before MHD reads a byte of it.
 * The caps are per listener (the unix socket has its own) and, on TCP, per
 * client address; an idle connection gives way to a new one (api-connlimit.h),
 * so only busy connections, which a client gets only by sending complete
 * requests (authenticated, on TCP, and rate-limited), can fill a listener. */
static enum MHD_Result conn_admit(void *cls, const struct sockaddr *addr, socklen_t len)
{
	struct api_server *srv = cls;
	char source[CONN_SOURCE_MAX + 1] = "unix";
	if (srv->tcp)
		conn_source_key(addr, len, false, source);
	enum conn_verdict v = conn_table_admit(srv->conns, source, conn_shed, srv);
	if (v == CONN_ADMIT)
		return MHD_YES;
	metrics_count_api_connection(srv->name, "refused");
	log_refusal(srv, source, v);
	return MHD_NO;
}

static void conn_keepalive(int fd)
{
	int one = 1, idle = API_KEEPALIVE_IDLE_S, interval = API_KEEPALIVE_INTERVAL_S, count = API_KEEPALIVE_COUNT;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

static void conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                        enum MHD_ConnectionNotificationCode code)
{
	struct api_server *srv = cls;
	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		conn_table_remove(srv->conns, *socket_context);
		*socket_context = NULL;
		return;
	}
	const union MHD_ConnectionInfo *fdi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!fdi)
		return;
	char source[CONN_SOURCE_MAX + 1];
	peer_source(srv, c, false, source);
	if (srv->tcp)
		conn_keepalive(fdi->connect_fd);
	*socket_context = conn_table_add(srv->conns, source, fdi->connect_fd, now_ms_monotonic());
}

/* The idle timeout is the client's: while our code works on a request (a
 * handler that boots a VM, an upload waiting for the guest's flow control)
 * MHD's clock is stopped, and restarted after (a timeout set after none
 * starts from now). */
static void idle_clock_stop(struct MHD_Connection *c)
{
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
}

static void idle_clock_restart(const struct api_server *srv, struct MHD_Connection *c)
{
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, srv->idle_timeout_s);
}

/* A streamed answer waits on the guest, not on the client, for as long as
 * the process runs: the clock stays stopped until the request completes. An
 * upgraded connection keeps its slot busy for good. */
static void conn_stream_begin(struct api_server *srv, struct MHD_Connection *c, struct conn_state *st, bool upgrade)
{
	st->streaming = true;
	if (upgrade)
		conn_table_pin(srv->conns, conn_slot_of(c));
}

/* ---- failed authentication ---------------------------------------------------------------------- */

static void auth_summary_emit(void *ctx, const struct authfail_summary *sum)
{
	(void)ctx;
	json_t *reasons = json_object();
	for (int r = 0; r < AUTH_FAILURE__COUNT; r++)
		if (sum->by_reason[r])
			json_object_set_new(reasons, auth_failure_name((enum auth_failure)r),
			                    json_integer((json_int_t)sum->by_reason[r]));
	events_emit("auth.failure", NULL, NULL,
	            json_pack("{s:s, s:s, s:I, s:o}", "reason", auth_failure_name(sum->top), "remote", sum->source,
	                      "suppressed", (json_int_t)sum->suppressed, "reasons", reasons));
}

/* SECURITY: a client without a token decides how often this runs. Every
 * failure is counted in /metrics; what it leaves in the event log is bounded
 * per client address (IPv6: per /64) and in all (auth-failures.h), the rest
 * is reported in summaries. */
void api_auth_failure_note(const char *source, const char *remote, const char *const parts[3],
                           enum auth_failure failure)
{
	metrics_count_auth_failure(auth_failure_name(failure));
	struct authfail_summary sum = {0};
	bool record = true;
	if (auth_failures)
		record = authfail_limiter_note(auth_failures, source, failure, authfail_fingerprint(parts, 3),
		                               now_ms_monotonic(), &sum);
	if (sum.suppressed)
		auth_summary_emit(NULL, &sum);
	if (record)
		events_emit("auth.failure", NULL, NULL,
		            json_pack("{s:s, s:s}", "reason", auth_failure_name(failure), "remote", remote));
	else
		metrics_count_auth_failure_unrecorded();
}

static void auth_failure_record(struct api_server *srv, struct MHD_Connection *c, const char *method, const char *url,
                                const char *authorization, const char *remote, enum auth_failure failure)
{
	char source[CONN_SOURCE_MAX + 1];
	peer_source(srv, c, true, source);
	const char *const parts[] = {method, url, authorization};
	api_auth_failure_note(source, remote, parts, failure);
}

void api_auth_failures_start(void)
{
	if (config && config->auth_failure_per_min && !auth_failures) {
		struct authfail_limits lim = {.per_min = config->auth_failure_per_min,
		                              .burst = config->auth_failure_burst,
		                              .summary_ms = AUTHFAIL_SUMMARY_MS};
		auth_failures = authfail_limiter_new(&lim, AUTHFAIL_SOURCES_MAX);
	}
}

void api_auth_failures_flush(bool all)
{
	if (auth_failures)
		authfail_limiter_flush(auth_failures, now_ms_monotonic(), all, auth_summary_emit, NULL);
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

static enum api_route_kind route_kind_of(const char *url)
{
	if (ui_path_is_ui(url))
		return API_ROUTE_UI;
	if (strncmp(url, API_E2B_PREFIX, strlen(API_E2B_PREFIX)) != 0)
		return API_ROUTE_NATIVE;
	if (strncmp(url, API_E2B_ENVD_PREFIX, strlen(API_E2B_ENVD_PREFIX)) == 0)
		return API_ROUTE_E2B_ENVD;
	return API_ROUTE_E2B_CONTROL;
}

/* SECURITY: a browser cannot set Authorization on a WebSocket. On a route
 * that allows it (ws_bearer in the route table: the PTY attach), a GET with
 * "Upgrade: websocket" may carry the token as the subprotocol
 * airlock.bearer.<token> instead: the Sec-WebSocket-Protocol list is parsed
 * strictly (ws_protocols_parse) and the token checked as the Bearer value it
 * stands for, with the same failures (401, auth.failure events). Never both
 * an Authorization header and a bearer subprotocol. Returns 1 when this does
 * not apply (Authorization decides), else auth_token_verify's answer. The
 * token is never echoed: the handler answers with airlock.pty.v1 only. */
static int websocket_authenticate(struct MHD_Connection *c, struct conn_state *st, const char **ret_auth,
                                  enum auth_failure *ret_failure, struct al_error *err)
{
	const char *upgrade = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Upgrade");
	const char *offered = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Protocol");
	if (!upgrade || strcasecmp(upgrade, "websocket") || !offered || strcmp(st->req.method, "GET"))
		return 1;
	struct api_request probe = {0};
	bool known = false;
	char allowed[128];
	const struct api_route *route =
	    api_route_match(st->req.method, st->req.path, &probe, &known, allowed, sizeof(allowed));
	if (!route || !route->ws_bearer || route->kind != API_ROUTE_NATIVE)
		return 1;
	struct ws_protocols p;
	int r = ws_protocols_parse(offered, &p);
	bool authorization = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (r == 0 && !p.bearer && authorization)
		return 1;
	if (r == 0 && !p.bearer) {
		*ret_failure = AUTH_FAILURE_MISSING;
		return al_error_set(err, AL_ERR_UNAUTHORIZED, EACCES,
		                    "this endpoint needs a token: offer the subprotocol \"" WS_PROTOCOL_BEARER
		                    "<token>\" (browsers) or send \"Authorization: Bearer <token>\"");
	}
	*ret_auth = offered;
	if (r == 0 && authorization)
		r = -EINVAL;
	if (r < 0) {
		explicit_bzero(&p, sizeof(p));
		*ret_failure = AUTH_FAILURE_MALFORMED;
		return al_error_set(err, AL_ERR_UNAUTHORIZED, EACCES,
		                    "Sec-WebSocket-Protocol must be a list of subprotocols (at most %d, %d bytes) "
		                    "with one \"" WS_PROTOCOL_BEARER "<token>\" and no Authorization header besides",
		                    WS_PROTOCOL_COUNT_MAX, WS_PROTOCOLS_MAX);
	}
	char bearer[WS_TOKEN_MAX + 8];
	snprintf(bearer, sizeof(bearer), "Bearer %s", p.token);
	explicit_bzero(&p, sizeof(p));
	r = auth_token_verify(bearer, st->tenant, ret_failure, err);
	explicit_bzero(bearer, sizeof(bearer));
	if (r < 0 && err->code == AL_ERR_UNAUTHORIZED)
		al_error_set(err, AL_ERR_UNAUTHORIZED, EACCES,
		             "the token of the subprotocol " WS_PROTOCOL_BEARER "<token> is not valid (unknown, "
		             "revoked or malformed); ask an administrator for a new one");
	return r;
}

/* SECURITY: in cluster mode a front forwards a client's request with a
 * delegation (include/airlock/cluster.h) in place of the client's token: the
 * principal it names, checked with the cluster key, is the request's tenant
 * or the operator. Returns 1 when the request carries none (its own token
 * decides), 0 with st->tenant / st->operator_ set, or -EACCES. */
static int delegation_authenticate(struct MHD_Connection *c, struct conn_state *st, const char **ret_auth,
                                   enum auth_failure *ret_failure, struct al_error *err)
{
	const struct cluster_key *key = cluster_key_get();
	const char *principal = MHD_lookup_connection_value(c, MHD_HEADER_KIND, CLUSTER_PRINCIPAL_HEADER);
	if (!key || !principal || st->kind == API_ROUTE_E2B_ENVD)
		return 1;
	*ret_auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	const char *token = *ret_auth && !strncasecmp(*ret_auth, "Bearer ", 7) ? *ret_auth + 7 : NULL;
	struct cluster_principal p;
	const char *why = "";
	if (cluster_delegation_verify(key, principal, token, (int64_t)(now_ms_realtime() / 1000u), &p, &why) < 0) {
		*ret_failure = AUTH_FAILURE_UNKNOWN;
		return al_error_set(err, AL_ERR_UNAUTHORIZED, EACCES, "cluster delegation refused: %s", why);
	}
	st->operator_ = p.operator_;
	strlcpy_al(st->tenant, p.tenant, sizeof(st->tenant));
	return 0;
}

/* SECURITY: the credential a TCP request must carry depends on the path's
 * prefix, decided before any routing: Authorization: Bearer (Airlock's API),
 * X-API-KEY (E2B's control API, the same tokens) or X-Access-Token with
 * E2b-Sandbox-Id (E2B's envd: one sandbox). *ret_auth is the value to log. */
static int request_authenticate(struct MHD_Connection *c, struct conn_state *st, const char **ret_auth,
                                enum auth_failure *ret_failure, struct al_error *err)
{
	int d = delegation_authenticate(c, st, ret_auth, ret_failure, err);
	if (d <= 0)
		return d;
	switch (st->kind) {
	case API_ROUTE_E2B_CONTROL:
		*ret_auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-KEY");
		return e2b_control_authenticate(*ret_auth, st->tenant, ret_failure, err);
	case API_ROUTE_E2B_ENVD:
		*ret_auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Access-Token");
		return e2b_envd_authenticate(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "E2b-Sandbox-Id"),
		                             *ret_auth, st->tenant, st->e2b_sandbox, ret_failure, err);
	case API_ROUTE_NATIVE:
	case API_ROUTE_UI:
		break;
	}
	int r = websocket_authenticate(c, st, ret_auth, ret_failure, err);
	if (r <= 0)
		return r;
	*ret_auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	return auth_token_verify(*ret_auth, st->tenant, ret_failure, err);
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

	st->kind = route_kind_of(url);
	if (strlen(url) > 1024)
		return early(st,
		             send_error(c, st, AL_ERR_INVALID_ARGUMENT, "the request path is longer than 1024 bytes"));
	if (st->kind == API_ROUTE_E2B_ENVD) {
		const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
		st->req.e2b_stream =
		    ct && !strncasecmp(ct, CONNECT_STREAM_CONTENT_TYPE, strlen(CONNECT_STREAM_CONTENT_TYPE));
	}
	if (st->kind == API_ROUTE_UI && !srv->tcp)
		return early(st, send_error(c, st, AL_ERR_NOT_FOUND,
		                            "no such endpoint: %s %.200s (see docs/api.md; "
		                            "the console is on the TCP listener)",
		                            method, url));
	if (st->kind != API_ROUTE_NATIVE && !srv->tcp)
		return early(st, send_error(c, st, AL_ERR_NOT_FOUND,
		                            "E2B's API is served on the TCP listener (airlockd --listen), not on the "
		                            "unix socket"));
	/* SECURITY: the console's static files are public (the same for everyone,
	 * no tenant's data): no token, no tenant, so no rate limit of one; they
	 * never make a connection busy nor stop its idle clock (below), so an
	 * unauthenticated client holds nothing a token-holder needs. Every API
	 * call the page makes carries the token like any other client's. Such a
	 * request has no tenant, which elsewhere means the operator: only the
	 * UI routes can match it (a route answers only its own kind, below), and
	 * api_ui_get reads no tenant's data. */
	if (srv->tcp && st->kind != API_ROUTE_UI) {
		/* SECURITY: every TCP request carries a token; its tenant scopes everything it can see. */
		struct al_error err = {0};
		const char *auth = NULL;
		enum auth_failure failure = AUTH_FAILURE_MISSING;
		int r = request_authenticate(c, st, &auth, &failure, &err);
		if (r < 0) {
			if (r == -EACCES)
				auth_failure_record(srv, c, method, url, auth, st->remote, failure);
			return early(st,
			             send_error(c, st, err.code ? err.code : AL_ERR_UNAUTHORIZED, "%s", err.message));
		}
		st->req.tenant = st->operator_ ? NULL : st->tenant;
		/* A tenant over its rate gets nothing done, not even routing. */
		unsigned after = 0;
		if (rate_limiter && !st->operator_ &&
		    !rate_limiter_allow(rate_limiter, st->tenant, now_ms_monotonic(), &after)) {
			metrics_count_rate_limited();
			struct api_response resp = {.retry_after_s = after};
			api_response_errorf(&resp, AL_ERR_QUOTA,
			                    "tenant %s: more than %u API requests a second (burst %u; airlockd "
			                    "--rate-limit-rps, --rate-limit-burst); retry after %u s",
			                    st->tenant, config->rate_limit_rps, config->rate_limit_burst, after);
			return early(st, send_response(c, st, &resp));
		}
	}
	st->route = api_route_match(method, url, &st->req, &path_known, allowed, sizeof(allowed));
	if (st->route && st->route->kind != st->kind)
		st->route = NULL; /* a route answers only under its own prefix (and so its own authentication) */
	if (st->route && st->kind == API_ROUTE_E2B_ENVD)
		strlcpy_al(st->req.params[0], st->e2b_sandbox, sizeof(st->req.params[0]));
	if (!st->route) {
		if (path_known)
			return early(st, send_error(c, st, AL_ERR_METHOD, "%s is not allowed on %s (allowed: %s)",
			                            method, url, allowed));
		return early(st, send_error(c, st, AL_ERR_NOT_FOUND, "no such endpoint: %s %.200s (see docs/api.md)",
		                            method, url));
	}
	if (st->route->admin_only && st->req.tenant)
		return early(st, send_error(c, st, AL_ERR_FORBIDDEN,
		                            "%s %s is for the operator: use the unix socket (tokens cannot do this)",
		                            method, st->route->pattern));

	st->limit = st->route->upload_begin ? (st->route->body_max ? st->route->body_max : max_file_bytes)
	                                    : st->route->body_max;
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	uint64_t declared = 0;
	if (cl && parse_u64(cl, &declared) < 0)
		return early(st, send_error(c, st, AL_ERR_INVALID_ARGUMENT, "Content-Length is not a number"));
	if (declared > 0 && st->limit == 0)
		return early(st,
		             send_error(c, st, AL_ERR_INVALID_ARGUMENT, "%s %s takes no request body", method, url));
	if (declared > st->limit)
		return early(st,
		             send_error(c, st, AL_ERR_TOO_LARGE,
		                        "request body of %" PRIu64 " bytes is above this endpoint's limit of %zu bytes",
		                        declared, st->limit));
	if (!st->route->upload_begin && declared > 0 && !content_type_json(c) && !st->req.e2b_stream)
		return early(st, send_error(c, st, AL_ERR_UNSUPPORTED_MEDIA, "Content-Type must be application/json"));
	/* Accepted: from now on the connection is not shed to make room (an
	 * early answer, a 401 included, leaves it idle, so a client cannot hold
	 * a slot by sending a refused request's body slowly). */
	if (st->kind != API_ROUTE_UI)
		conn_table_busy(srv->conns, conn_slot_of(c));
	if (st->route->upload_begin) {
		struct al_error err = {0};
		idle_clock_stop(c);
		int r = st->route->upload_begin(&st->req, &st->upload, &err);
		idle_clock_restart(srv, c);
		if (r < 0)
			return early(st, send_error(c, st, err.code, "%s", err.message));
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
			idle_clock_stop(c);
			if (!st->upload_failed &&
			    st->upload.data(st->upload.ctx, (const uint8_t *)upload_data, n, &st->upload_err) < 0)
				st->upload_failed = true;
			idle_clock_restart(srv, c);
			return MHD_YES;
		}
		st->body = xrealloc(st->body, st->len + 1);
		memcpy(st->body + st->len - n, upload_data, n);
		st->body[st->len] = '\0';
		return MHD_YES;
	}
	st->answered = true;
	if (st->too_large) {
		return send_error(c, st, AL_ERR_TOO_LARGE, "request body is above this endpoint's limit of %zu bytes",
		                  st->limit);
	}
	struct api_response resp = {.status = 200, .content_length = -1};
	idle_clock_stop(c);
	if (st->uploading) {
		st->upload.end(st->upload.ctx, st->upload_failed, &st->upload_err, &resp);
	} else {
		st->req.body = st->body ? st->body : "";
		st->req.body_len = st->len;
		st->route->handle(&st->req, &resp);
	}
	if ((resp.reader || resp.upgrade) && st->kind != API_ROUTE_UI)
		conn_stream_begin(srv, c, st, resp.upgrade != NULL);
	else
		idle_clock_restart(srv, c); /* a client that does not read its answer is idle */
	return send_response(c, st, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	(void)toe;
	struct api_server *srv = cls;
	struct conn_state *st = *con_cls;
	/* Waiting for the next request of a kept-alive connection: idle again
	 * (setting a timeout after none restarts its clock). */
	conn_table_idle(srv->conns, conn_slot_of(c), now_ms_monotonic());
	if (!st)
		return;
	if (st->streaming)
		idle_clock_restart(srv, c);
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
	/* select() cannot watch an fd at or above FD_SETSIZE (1024), which a
	 * daemon holding many connections and VMs reaches. */
	if (MHD_is_feature_supported(MHD_FEATURE_POLL) != MHD_YES)
		return al_error_set(err, AL_ERR_INTERNAL, ENOTSUP,
		                    "libmicrohttpd was built without poll() support; install Debian's libmicrohttpd12");
	s->name = s->tcp ? "tcp" : "unix";
	s->max_connections = config ? config->api_max_connections : DEFAULT_API_MAX_CONNECTIONS;
	s->max_per_client = !s->tcp  ? 0
	                    : config ? config->api_max_connections_per_client
	                             : DEFAULT_API_MAX_CONNECTIONS_PER_CLIENT;
	s->idle_timeout_s = config ? config->api_idle_timeout_s : DEFAULT_API_IDLE_TIMEOUT_S;
	s->conns = conn_table_new(s->max_connections, s->max_per_client);
	/* MHD refuses at its own limit without asking conn_admit: keep it above
	 * ours, with room for connections that were shed and are still closing. */
	unsigned mhd_limit = s->max_connections + s->max_connections / 4 + 16;
	s->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG |
	                              MHD_USE_ITC | MHD_ALLOW_UPGRADE,
	                          0, conn_admit, s, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
	                          MHD_OPTION_LISTEN_SOCKET, s->listen_fd, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
	                          MHD_OPTION_NOTIFY_CONNECTION, conn_notify, s, MHD_OPTION_CONNECTION_LIMIT, mhd_limit,
	                          MHD_OPTION_CONNECTION_TIMEOUT, s->idle_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
	                          (size_t)(API_HEADER_MAX * 8), MHD_OPTION_END);
	if (!s->mhd) {
		conn_table_free(s->conns);
		s->conns = NULL;
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot start the HTTP server");
	}
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

int api_tcp_listen(const char *flag, const char *addr_port, unsigned min_port, int *ret_fd, unsigned *ret_port,
                   struct al_error *err)
{
	/* ADDR:PORT with an IPv4 address, or [ADDR]:PORT with IPv6. */
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon = strrchr(addr_port, ':');
	long port;
	if (!colon || (size_t)(colon - addr_port) >= sizeof(host) ||
	    parse_int_range(colon + 1, min_port, 65535, &port) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "%s takes ADDR:PORT (e.g. 127.0.0.1:7070), got \"%s\"", flag, addr_port);
	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr_port), addr_port);
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	size_t hl = strlen(host);
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
		host[hl - 1] = '\0';
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: bad IPv6 address %s", flag,
			                    host + 1);
		sl = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: bad IPv4 address %s", flag,
			                    host);
		sl = sizeof(*s4);
	}
	cleanup_close int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "socket: %m");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 128) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "%s: cannot listen on %s: %m", flag, addr_port);
	struct sockaddr_storage bound;
	socklen_t bl = sizeof(bound);
	if (ret_port && getsockname(fd, (struct sockaddr *)&bound, &bl) == 0)
		*ret_port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
		                                              : ((struct sockaddr_in *)&bound)->sin_port);
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int api_server_start_tcp(const char *addr_port, struct api_server **ret, struct al_error *err)
{
	int fd;
	int r = api_tcp_listen("--listen", addr_port, 1, &fd, NULL, err);
	if (r < 0)
		return r;
	struct api_server *s = xcalloc(1, sizeof(*s));
	s->listen_fd = fd;
	s->tcp = true;
	if (config && config->rate_limit_rps && !rate_limiter)
		rate_limiter = rate_limiter_new(config->rate_limit_rps, config->rate_limit_burst, RATELIMIT_KEYS_MAX);
	api_auth_failures_start();
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
	conn_table_free(s->conns);
	if (s->tcp) {
		rate_limiter_free(rate_limiter);
		rate_limiter = NULL;
		authfail_limiter_free(auth_failures);
		auth_failures = NULL;
	}
	free(s->path);
	free(s);
}

/* ---- JSON lines -------------------------------------------------------------------------------- */

struct api_line_stream {
	char *buf;
	size_t len, off;
	int conn_fd;
};

struct api_line_stream *api_line_stream_new(int conn_fd)
{
	struct api_line_stream *ls = xcalloc(1, sizeof(*ls));
	ls->conn_fd = conn_fd;
	return ls;
}

void api_line_stream_push(struct api_line_stream *ls, json_t *line)
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

size_t api_line_stream_take(struct api_line_stream *ls, uint8_t *buf, size_t max)
{
	size_t n = MIN(max, ls->len - ls->off);
	memcpy(buf, ls->buf + ls->off, n);
	ls->off += n;
	if (ls->off == ls->len)
		ls->off = ls->len = 0;
	return n;
}

bool api_line_stream_empty(struct api_line_stream *ls)
{
	return ls->off == ls->len;
}

int api_line_stream_fd(struct api_line_stream *ls)
{
	return ls->conn_fd;
}

void api_line_stream_free(struct api_line_stream *ls)
{
	if (!ls)
		return;
	free(ls->buf);
	free(ls);
}
