/* SPDX-License-Identifier: Apache-2.0 */
/* airlock mcp: the Model Context Protocol (JSON-RPC 2.0) over stdio
 * (newline-delimited) or streamable HTTP (POST /mcp; libmicrohttpd). The
 * methods: initialize, ping, tools/list, tools/call (with progress
 * notifications), resources/list, resources/templates/list, resources/read. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>

#include "cli-mcp.h"
#include "cli.h"
#include "version.h"

#define MCP_SESSIONS_MAX 64         /* HTTP sessions at once */
#define MCP_HTTP_CONNECTIONS_MAX 32 /* HTTP connections at once */
#define MCP_SESSION_ID_BYTES 16

struct mcp_session {
	bool in_use;
	bool initialized;
	char id[2 * MCP_SESSION_ID_BYTES + 1];
	char version[16]; /* the negotiated protocol revision */
	uint64_t used_ms; /* last request (HTTP): the least recent goes when the table is full */
};

/* Where answers and notifications go; send returns < 0 when the client is gone. */
struct mcp_sink {
	int (*send)(void *ud, json_t *msg);
	void *ud;
};

/* ------------------------------------------------------------ methods */

static const char instructions[] =
    "Airlock runs code in microVM sandboxes. create_sandbox, then run_command / write_file / read_file / "
    "list_files / upload / download / start_process + get_output in it; snapshot and restore; delete_sandbox "
    "when done. What you may do is what the configured Airlock token allows.";

static json_t *do_initialize(struct mcp_session *s, json_t *params, struct mcp_fault *f)
{
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
	if (!asked) {
		mcp_fault_set(f, MCP_INVALID_PARAMS, "initialize needs params.protocolVersion (a string)");
		return NULL;
	}
	const char *v = mcp_protocol_negotiate(asked);
	snprintf(s->version, sizeof(s->version), "%s", v);
	s->initialized = true;
	return json_pack("{s:s, s:{s:{s:b}, s:{s:b, s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion", v,
	                 "capabilities", "tools", "listChanged", 0, "resources", "subscribe", 0, "listChanged", 0,
	                 "serverInfo", "name", "airlock", "title", "Airlock", "version", AIRLOCK_VERSION,
	                 "instructions", instructions);
}

static json_t *do_tools_list(void)
{
	json_t *tools = json_array();
	for (size_t i = 0; i < mcp_tools_count; i++) {
		const struct mcp_tool *t = &mcp_tools[i];
		json_array_append_new(tools,
		                      json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:b, s:b, s:b, s:b}}", "name", t->name,
		                                "title", t->title, "description", t->description, "inputSchema",
		                                mcp_args_schema(t->args, t->n_args), "annotations", "title", t->title,
		                                "readOnlyHint", t->read_only, "destructiveHint", t->destructive,
		                                "idempotentHint", t->read_only, "openWorldHint", 0));
	}
	return json_pack("{s:o}", "tools", tools);
}

struct progress_ctx {
	struct mcp_sink *sink;
	json_t *token;
};

static int send_progress(void *ud, double done, const char *message)
{
	struct progress_ctx *p = ud;
	cleanup_json json_t *n =
	    json_pack("{s:s, s:s, s:{s:O, s:f, s:s}}", "jsonrpc", "2.0", "method", "notifications/progress", "params",
	              "progressToken", p->token, "progress", done, "message", message);
	return p->sink->send(p->sink->ud, n);
}

/* The request's _meta.progressToken (a string or an integer), or NULL. */
static json_t *progress_token(json_t *params)
{
	json_t *t = json_object_get(json_object_get(params, "_meta"), "progressToken");
	return json_is_string(t) || json_is_integer(t) ? t : NULL;
}

static json_t *do_tools_call(struct mcp_session *s, json_t *params, struct mcp_sink *sink, struct mcp_fault *f)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	const struct mcp_tool *t = mcp_tool_find(name);
	if (!t) {
		mcp_fault_set(f, MCP_INVALID_PARAMS, "Unknown tool: %.64s (tools/list names them)",
		              name ? name : "(none)");
		return NULL;
	}
	json_t *args = json_object_get(params, "arguments");
	char msg[200];
	if (mcp_args_check(t->args, t->n_args, args, msg, sizeof(msg)) < 0) {
		/* 2025-06-18 calls invalid arguments a protocol error; 2025-11-25
		 * a tool error the model can read and correct. */
		if (strcmp(s->version, "2025-11-25") >= 0)
			return json_pack("{s:[{s:s, s:s+}], s:b}", "content", "type", "text", "text",
			                 "invalid arguments: ", msg, "isError", 1);
		mcp_fault_set(f, MCP_INVALID_PARAMS, "invalid arguments for %s: %s", t->name, msg);
		return NULL;
	}
	cleanup_json json_t *empty = json_object();
	struct progress_ctx pc = {.sink = sink, .token = progress_token(params)};
	struct mcp_call call = {.args = args ? args : empty};
	if (pc.token) {
		call.progress = send_progress;
		call.progress_ud = &pc;
	}
	return t->run(&call);
}

static json_t *do_resources_read(json_t *params, struct mcp_fault *f)
{
	const char *uri = json_string_value(json_object_get(params, "uri"));
	if (!uri || strlen(uri) > MCP_STRING_MAX) {
		mcp_fault_set(f, MCP_INVALID_PARAMS, "resources/read needs params.uri (a string)");
		return NULL;
	}
	json_t *result = NULL;
	return mcp_resource_read(uri, &result, f) < 0 ? NULL : result;
}

/* The answer to one message (NULL for notifications and responses). */
static json_t *mcp_dispatch(struct mcp_session *s, struct mcp_message *m, struct mcp_sink *sink)
{
	if (m->kind == MCP_RESPONSE)
		return NULL; /* we ask nothing of the client */
	struct mcp_fault f = {0};
	json_t *result = NULL;
	const char *method = m->method;
	if (m->kind == MCP_NOTIFICATION) {
		/* notifications/initialized, notifications/cancelled (a stdio call
		 * runs to its end; over HTTP closing the request stops it), others. */
		return NULL;
	}
	if (!strcmp(method, "initialize"))
		result = do_initialize(s, m->params, &f);
	else if (!strcmp(method, "ping"))
		result = json_object();
	else if (!s->initialized)
		mcp_fault_set(&f, MCP_INVALID_REQUEST, "the session is not initialized: send initialize first");
	else if (!strcmp(method, "tools/list"))
		result = do_tools_list();
	else if (!strcmp(method, "tools/call"))
		result = do_tools_call(s, m->params, sink, &f);
	else if (!strcmp(method, "resources/list"))
		result = mcp_resources_list();
	else if (!strcmp(method, "resources/templates/list"))
		result = mcp_resource_templates();
	else if (!strcmp(method, "resources/read"))
		result = do_resources_read(m->params, &f);
	else
		mcp_fault_set(&f, MCP_METHOD_NOT_FOUND, "method not found: %.128s", method);
	if (!result)
		return mcp_error_response(m->id, f.code, f.message);
	return mcp_result_response(m->id, result);
}

/* ------------------------------------------------------------ stdio */

static int stdio_send(void *ud, json_t *msg)
{
	(void)ud;
	/* JSON_COMPACT escapes every newline inside strings: one message, one line. */
	if (json_dumpf(msg, stdout, JSON_COMPACT) < 0 || putchar('\n') == EOF || fflush(stdout) != 0)
		return -EPIPE;
	return 0;
}

static void stdio_fault(struct mcp_sink *sink, struct mcp_fault *f)
{
	cleanup_json json_t *e = mcp_error_response(f->id, f->code, f->message);
	sink->send(sink->ud, e);
	mcp_fault_release(f);
}

static void stdio_line(struct mcp_session *s, struct mcp_sink *sink, const char *line, size_t len)
{
	struct mcp_message m = {0};
	struct mcp_fault f = {0};
	if (mcp_message_parse(line, len, &m, &f) < 0) {
		stdio_fault(sink, &f);
		return;
	}
	cleanup_json json_t *answer = mcp_dispatch(s, &m, sink);
	if (answer)
		sink->send(sink->ud, answer);
	mcp_message_release(&m);
}

/* SECURITY: stdin is the client's: each line is bounded by MCP_MESSAGE_MAX
 * before it is kept (a longer one is skipped to its newline and answered
 * with an error), then parsed strictly (mcp_message_parse). */
static int serve_stdio(void)
{
	struct mcp_session s = {.in_use = true};
	struct mcp_sink sink = {.send = stdio_send};
	size_t cap = 64 * 1024, len = 0;
	cleanup_free char *buf = xmalloc(cap);
	bool skipping = false;
	for (;;) {
		if (len == cap) {
			if (cap > MCP_MESSAGE_MAX) {
				struct mcp_fault f = {0};
				mcp_fault_set(&f, MCP_INVALID_REQUEST, "a message is longer than %u bytes",
				              MCP_MESSAGE_MAX);
				stdio_fault(&sink, &f);
				skipping = true;
				len = 0;
			} else {
				cap *= 2;
				buf = xrealloc(buf, cap);
			}
		}
		ssize_t n = read(0, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? cli_client_error("mcp: cannot read standard input: %s", strerror(errno)) : 0;
		size_t start = 0, end = len + (size_t)n;
		for (size_t i = len; i < end; i++) {
			if (buf[i] != '\n')
				continue;
			size_t l = i - start;
			if (l > 0 && buf[start + l - 1] == '\r')
				l--;
			if (!skipping && l > 0)
				stdio_line(&s, &sink, buf + start, l);
			skipping = false;
			start = i + 1;
		}
		memmove(buf, buf + start, end - start);
		len = skipping ? 0 : end - start;
	}
}

/* ------------------------------------------------------------ streamable HTTP */

struct http_server {
	pthread_mutex_t lock;
	struct mcp_session sessions[MCP_SESSIONS_MAX];
};

static struct http_server server = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* AIRLOCK_MCP_HTTP_TOKEN: when set, every request must carry it as a bearer
 * token (for a host where other local users could reach the port). */
static const char *http_token;

/* SECURITY: compared in time independent of where the first difference is. */
static bool http_token_ok(const char *auth)
{
	if (!http_token)
		return true;
	if (!auth || strncmp(auth, "Bearer ", 7))
		return false;
	const char *given = auth + 7;
	size_t n = strlen(http_token), m = strlen(given);
	unsigned char diff = n != m;
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(http_token[i] ^ (i < m ? given[i] : 0));
	return diff == 0;
}

/* One POST's body, bounded. */
struct http_body {
	char *data;
	size_t len;
	bool too_large;
};

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)c;
	(void)toe;
	struct http_body *b = *con_cls;
	if (b) {
		free(b->data);
		free(b);
	}
	*con_cls = NULL;
}

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *ctype, char *body,
                               const char *session_id)
{
	/* body is ours (freed by MHD); NULL for none. */
	struct MHD_Response *r = body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE)
	                              : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!r)
		abort();
	if (ctype)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (session_id)
		MHD_add_response_header(r, "Mcp-Session-Id", session_id);
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "POST, DELETE");
	enum MHD_Result ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result respond_json(struct MHD_Connection *c, unsigned status, json_t *msg, const char *session_id)
{
	return respond(c, status, "application/json", json_dumps(msg, JSON_COMPACT), session_id);
}

static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, json_t *id, int code,
                                     const char *message)
{
	cleanup_json json_t *e = mcp_error_response(id, code, message);
	return respond_json(c, status, e, NULL);
}

/* SECURITY: a browser page may post to a loopback port (DNS rebinding, or a
 * plain form): a request with an Origin that is not a loopback origin is
 * refused, as the MCP spec asks. Clients that are not browsers send none. */
static bool origin_ok(const char *origin)
{
	if (!origin)
		return true;
	static const char *const ok[] = {"http://127.0.0.1",  "http://localhost",  "http://[::1]",
	                                 "https://127.0.0.1", "https://localhost", "https://[::1]"};
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		size_t n = strlen(ok[i]);
		if (!strncmp(origin, ok[i], n) && (origin[n] == '\0' || origin[n] == ':'))
			return true;
	}
	return false;
}

/* A copy of the session named by the request's Mcp-Session-Id; -ENOENT unknown, -EINVAL none. */
static int session_get(struct MHD_Connection *c, struct mcp_session *ret)
{
	const char *id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
	if (!id)
		return -EINVAL;
	int r = -ENOENT;
	pthread_mutex_lock(&server.lock);
	for (size_t i = 0; i < MCP_SESSIONS_MAX; i++)
		if (server.sessions[i].in_use && !strcmp(server.sessions[i].id, id)) {
			server.sessions[i].used_ms = now_ms_monotonic();
			*ret = server.sessions[i];
			r = 0;
		}
	pthread_mutex_unlock(&server.lock);
	return r;
}

/* A new session in the table; when it is full, the one least recently used
 * makes room (its client gets 404 and initializes again, as the spec says). */
static void session_add(struct mcp_session *s)
{
	uint8_t raw[MCP_SESSION_ID_BYTES];
	random_bytes(raw, sizeof(raw));
	hex_encode(raw, sizeof(raw), s->id);
	s->in_use = true;
	s->used_ms = now_ms_monotonic();
	pthread_mutex_lock(&server.lock);
	size_t slot = 0;
	for (size_t i = 0; i < MCP_SESSIONS_MAX; i++) {
		if (!server.sessions[i].in_use) {
			slot = i;
			break;
		}
		if (server.sessions[i].used_ms < server.sessions[slot].used_ms)
			slot = i;
	}
	server.sessions[slot] = *s;
	pthread_mutex_unlock(&server.lock);
}

static bool session_remove(const char *id)
{
	bool found = false;
	pthread_mutex_lock(&server.lock);
	for (size_t i = 0; i < MCP_SESSIONS_MAX; i++)
		if (server.sessions[i].in_use && id && !strcmp(server.sessions[i].id, id)) {
			server.sessions[i] = (struct mcp_session){0};
			found = true;
		}
	pthread_mutex_unlock(&server.lock);
	return found;
}

/* ---- an answer as an SSE stream: a worker thread runs the call and writes
 * events into a pipe; MHD's connection thread reads the pipe into the body. */

struct sse_job {
	int fd; /* the pipe's write end */
	struct mcp_session session;
	struct mcp_message msg;
};

static int sse_send(void *ud, json_t *msg)
{
	struct sse_job *j = ud;
	cleanup_free char *text = json_dumps(msg, JSON_COMPACT);
	cleanup_free char *event = xasprintf("event: message\ndata: %s\n\n", text);
	return write_full(j->fd, event, strlen(event)) < 0 ? -EPIPE : 0;
}

static void *sse_worker(void *arg)
{
	struct sse_job *j = arg;
	struct mcp_sink sink = {.send = sse_send, .ud = j};
	cleanup_json json_t *answer = mcp_dispatch(&j->session, &j->msg, &sink);
	if (answer)
		sse_send(j, answer);
	close(j->fd);
	mcp_message_release(&j->msg);
	free(j);
	return NULL;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	int *fd = cls;
	for (;;) {
		ssize_t n = read(*fd, buf, max);
		if (n > 0)
			return n;
		if (n == 0)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (errno != EINTR)
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
}

static void sse_free(void *cls)
{
	int *fd = cls;
	close(*fd); /* the worker's next write fails: a running command is stopped */
	free(fd);
}

static enum MHD_Result respond_sse(struct MHD_Connection *c, struct mcp_session *s, struct mcp_message *m)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return respond_error(c, 500, m->id, MCP_INTERNAL_ERROR, "cannot create a pipe");
	struct sse_job *j = xcalloc(1, sizeof(*j));
	j->fd = p[1];
	j->session = *s;
	j->msg = *m;
	*m = (struct mcp_message){0};
	pthread_t t;
	if (pthread_create(&t, NULL, sse_worker, j) != 0)
		abort();
	pthread_detach(t);
	int *rfd = xmalloc(sizeof(*rfd));
	*rfd = p[0];
	struct MHD_Response *r =
	    MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, sse_read, rfd, sse_free);
	if (!r)
		abort();
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* Collects answers of a request answered as one JSON body (progress is
 * dropped: the client did not accept a stream). */
static int json_send_none(void *ud, json_t *msg)
{
	(void)ud;
	(void)msg;
	return 0;
}

static enum MHD_Result handle_post(struct MHD_Connection *c, struct http_body *b)
{
	if (b->too_large)
		return respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE, NULL, MCP_INVALID_REQUEST,
		                     "the message is larger than the server's limit (8 MiB)");
	const char *ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	if (!ctype || strncasecmp(ctype, "application/json", 16))
		return respond_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, NULL, MCP_INVALID_REQUEST,
		                     "POST a JSON-RPC message with Content-Type: application/json");
	struct mcp_message m = {0};
	struct mcp_fault f = {0};
	if (mcp_message_parse(b->data ? b->data : "", b->len, &m, &f) < 0) {
		enum MHD_Result r = respond_error(c, MHD_HTTP_BAD_REQUEST, f.id, f.code, f.message);
		mcp_fault_release(&f);
		return r;
	}
	struct mcp_session s = {0};
	bool init = m.kind == MCP_REQUEST && !strcmp(m.method, "initialize");
	const char *pv = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "MCP-Protocol-Version");
	enum MHD_Result ret;
	if (!init && pv && !mcp_protocol_known(pv)) {
		ret = respond_error(c, MHD_HTTP_BAD_REQUEST, m.id, MCP_INVALID_REQUEST,
		                    "unsupported MCP-Protocol-Version header");
	} else if (init) {
		struct mcp_sink sink = {.send = json_send_none};
		cleanup_json json_t *answer = mcp_dispatch(&s, &m, &sink);
		if (s.initialized)
			session_add(&s);
		ret = respond_json(c, MHD_HTTP_OK, answer, s.initialized ? s.id : NULL);
	} else {
		int r = session_get(c, &s);
		const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
		if (r == -EINVAL)
			ret = respond_error(c, MHD_HTTP_BAD_REQUEST, m.id, MCP_INVALID_REQUEST,
			                    "no Mcp-Session-Id header: send initialize first");
		else if (r < 0)
			ret = respond_error(c, MHD_HTTP_NOT_FOUND, m.id, MCP_INVALID_REQUEST,
			                    "unknown or ended session: initialize a new one");
		else if (m.kind != MCP_REQUEST)
			ret = respond(c, MHD_HTTP_ACCEPTED, NULL, NULL, NULL);
		else if (!strcmp(m.method, "tools/call") && progress_token(m.params) && accept &&
		         strstr(accept, "text/event-stream"))
			ret = respond_sse(c, &s, &m);
		else {
			struct mcp_sink sink = {.send = json_send_none};
			cleanup_json json_t *answer = mcp_dispatch(&s, &m, &sink);
			ret = respond_json(c, MHD_HTTP_OK, answer, NULL);
		}
	}
	mcp_message_release(&m);
	return ret;
}

/* SECURITY: requests come from whoever reaches the loopback port: only
 * /mcp, bodies bounded by MCP_MESSAGE_MAX before they are kept, the Origin
 * checked, the bearer token when one is set, sessions by unguessable ids
 * (128 random bits). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
	(void)cls;
	(void)version;
	struct http_body *b = *con_cls;
	if (!b) {
		*con_cls = xcalloc(1, sizeof(struct http_body));
		return MHD_YES;
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (b->too_large || b->len + n > MCP_MESSAGE_MAX) {
			b->too_large = true;
			return MHD_YES;
		}
		b->data = xrealloc(b->data, b->len + n + 1);
		memcpy(b->data + b->len, upload_data, n);
		b->len += n;
		b->data[b->len] = '\0';
		return MHD_YES;
	}
	if (strcmp(url, "/mcp"))
		return respond(c, MHD_HTTP_NOT_FOUND, "text/plain", xstrdup("airlock mcp serves POST /mcp\n"), NULL);
	if (!origin_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin")))
		return respond(c, MHD_HTTP_FORBIDDEN, "text/plain", xstrdup("a non-loopback Origin is refused\n"),
		               NULL);
	if (!http_token_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION)))
		return respond(c, MHD_HTTP_UNAUTHORIZED, "text/plain",
		               xstrdup("this server wants Authorization: Bearer $AIRLOCK_MCP_HTTP_TOKEN\n"), NULL);
	if (!strcmp(method, "POST"))
		return handle_post(c, b);
	if (!strcmp(method, "DELETE")) {
		const char *id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Mcp-Session-Id");
		return respond(c, session_remove(id) ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND, NULL, NULL, NULL);
	}
	/* GET would open a stream for messages the server starts: it sends none. */
	return respond(c, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, NULL, NULL);
}

/* SECURITY: only a loopback address: whoever reaches the port acts with
 * this process's token, and there is no other authentication. */
static int parse_listen(const char *spec, struct sockaddr_storage *ret, socklen_t *ret_len)
{
	cleanup_free char *host = NULL;
	const char *port;
	if (spec[0] == '[') {
		const char *end = strchr(spec, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		host = xstrndup(spec + 1, (size_t)(end - spec - 1));
		port = end + 2;
	} else {
		const char *colon = strrchr(spec, ':');
		if (!colon)
			return -EINVAL;
		host = xstrndup(spec, (size_t)(colon - spec));
		port = colon + 1;
	}
	long p;
	if (parse_int_range(port, 0, 65535, &p) < 0)
		return -EINVAL;
	struct sockaddr_in *v4 = (struct sockaddr_in *)ret;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ret;
	memset(ret, 0, sizeof(*ret));
	if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		if ((ntohl(v4->sin_addr.s_addr) >> 24) != 127)
			return -EPERM;
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)p);
		*ret_len = sizeof(*v4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		if (!IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr))
			return -EPERM;
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)p);
		*ret_len = sizeof(*v6);
		return 0;
	}
	return -EINVAL;
}

static int serve_http(const char *spec)
{
	struct sockaddr_storage addr;
	socklen_t addr_len = 0;
	int r = parse_listen(spec, &addr, &addr_len);
	if (r == -EPERM)
		return cli_usage_error("mcp --http listens on a loopback address only (127.0.0.1:PORT or [::1]:PORT): "
		                       "whoever reaches it acts with your token");
	if (r < 0)
		return cli_usage_error("mcp --http takes ADDR:PORT (e.g. 127.0.0.1:8765), got \"%s\"", spec);
	/* The threads MHD starts inherit this mask: only sigwait below takes them. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
	if (addr.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	struct MHD_Daemon *d = MHD_start_daemon(
	    flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)MCP_HTTP_CONNECTIONS_MAX, MHD_OPTION_CONNECTION_TIMEOUT,
	    (unsigned)3600, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_END);
	if (!d)
		return cli_client_error("mcp: cannot listen on %s (in use? a bad address?)", spec);
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	fprintf(stderr, "airlock mcp: listening on http://%s%s%s:%u/mcp (daemon %s)\n",
	        addr.ss_family == AF_INET6 ? "[" : "", addr.ss_family == AF_INET6 ? "::1" : "127.0.0.1",
	        addr.ss_family == AF_INET6 ? "]" : "", info ? info->port : 0, cli_conn_describe());
	int sig = 0;
	sigwait(&set, &sig);
	MHD_stop_daemon(d);
	return 0;
}

/* ------------------------------------------------------------ the verb */

int cli_cmd_mcp(int argc, char **argv)
{
	static const struct option longs[] = {
	    {"http", required_argument, NULL, 'H'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
	const char *http = NULL;
	optind = 0;
	int c;
	while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
		if (c == 'h') {
			fputs("usage: airlock mcp [--http 127.0.0.1:PORT]\n"
			      "A Model Context Protocol server: over stdio (newline-delimited JSON-RPC), or\n"
			      "streamable HTTP at http://ADDR:PORT/mcp. See docs/mcp.md.\n",
			      stdout);
			exit(0);
		}
		if (c != 'H')
			return cli_usage_error("mcp: unknown option (it takes --http ADDR:PORT)");
		http = optarg;
	}
	if (optind != argc)
		return cli_usage_error("mcp takes no operands");
	signal(SIGPIPE, SIG_IGN);
	const char *t = getenv("AIRLOCK_MCP_HTTP_TOKEN");
	http_token = t && *t ? t : NULL;
	return http ? serve_http(http) : serve_stdio();
}
