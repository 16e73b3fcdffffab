/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP API: server glue (api-server.c), the route table (api-routes.c)
 * and one handler file per resource (api-sandboxes.c, api-processes.c,
 * api-files.c, api-admin.c). */
#ifndef AIRLOCK_API_H
#define AIRLOCK_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "auth.h"
#include "error.h"

#define API_PARAMS_MAX 4
#define API_PARAM_MAX 64
#define API_QUERY_VALUE_MAX 4096
#define API_UPGRADE_HEADERS_MAX 2

struct api_request {
	const char *method;
	const char *path;   /* without the query string */
	const char *tenant; /* NULL: the admin (unix socket); else the token's tenant */
	const char *remote; /* "unix" or the peer address */
	const char *body;
	size_t body_len;
	char params[API_PARAMS_MAX][API_PARAM_MAX + 1]; /* the {…} parts of the route, in order */
	void *conn;                                     /* the MHD connection, for query arguments and headers */
	int conn_fd;                                    /* to notice a client that went away during a long answer */
	/* E2B's in-sandbox routes (API_ROUTE_E2B_ENVD): params[0] holds the
	 * sandbox the E2b-Sandbox-Id header names, whose envd access token the
	 * request carried; tenant is that sandbox's tenant. */
	bool e2b_stream; /* a Connect streaming call (application/connect+json) */
};

/* A query argument or request header, NULL when absent. */
const char *api_query(const struct api_request *req, const char *name);
const char *api_header(const struct api_request *req, const char *name);
/* Calls fn for every query argument. */
void api_query_foreach(const struct api_request *req, void (*fn)(void *ctx, const char *key, const char *value),
                       void *ctx);
/* True once the client closed its connection. */
bool api_client_gone(int conn_fd);

struct api_response {
	int status;   /* HTTP status */
	json_t *body; /* owned; NULL for no body (unless a reader is set) */
	/* A streamed body: reader returns bytes written into buf (> 0), 0 at
	 * the end, < 0 on failure (the connection is cut). It may block. */
	ssize_t (*reader)(void *ctx, uint8_t *buf, size_t max);
	void (*reader_free)(void *ctx);
	void *reader_ctx;
	const char *content_type; /* default application/json */
	unsigned retry_after_s;   /* > 0: a Retry-After header (429, 503) */
	int64_t content_length;   /* of a streamed body; -1: unknown (chunked) */
	/* 101 Switching Protocols: after the answer, run(ctx, fd, extra, n)
	 * owns the connection's socket in a thread of its own; it returns when
	 * done and the server closes the connection. */
	void (*upgrade)(void *ctx, int fd, const uint8_t *extra, size_t extra_len);
	void (*upgrade_free)(void *ctx);
	void *upgrade_ctx;
	const char *upgrade_protocol;
	/* More headers of the 101 (name, value; NULL name: none), e.g. a
	 * WebSocket's Sec-WebSocket-Accept; the strings live in upgrade_ctx. */
	const char *upgrade_headers[API_UPGRADE_HEADERS_MAX][2];
	/* One more response header (X-Next-Token of a list page); value owned. */
	const char *header_name;
	char *header_value;
	/* More headers: static name, value pairs, NULL-terminated (the console's). */
	const char *const *headers;
};

/* Sets an error answer from err. */
void api_response_error(struct api_response *resp, const struct al_error *err);
/* The other way: an error answer (from a shared helper) back into err, for
 * upload handlers that answer through their begin() error; frees the body. */
int api_response_to_error(struct api_response *resp, struct al_error *err);
void api_response_errorf(struct api_response *resp, enum al_error_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A handler that takes its body as a stream (file uploads, stdin). */
struct api_upload {
	/* Each piece of the body, in order; < 0 stops forwarding (err kept for the answer). */
	int (*data)(void *ctx, const uint8_t *buf, size_t len, struct al_error *err);
	/* The whole body arrived (failed is true when data failed): answer. */
	void (*end)(void *ctx, bool failed, const struct al_error *data_err, struct api_response *resp);
	/* Always called last, also when the client went away. */
	void (*release)(void *ctx);
	void *ctx;
};

/* Who a route is for: its authentication and how its errors are written. */
enum api_route_kind {
	API_ROUTE_NATIVE,      /* Bearer token (TCP) or the unix socket; {"error":{"code","message"}} */
	API_ROUTE_E2B_CONTROL, /* E2B's control API: X-API-KEY (a tenant token); {"code":404,"message"} */
	API_ROUTE_E2B_ENVD,    /* E2B's in-sandbox API: X-Access-Token; Connect errors (connect-wire.h) */
	API_ROUTE_UI,          /* the console's static files (api-ui.c): TCP only, no token */
};
#define API_E2B_PREFIX "/e2b/"
#define API_E2B_ENVD_PREFIX "/e2b/envd/"

struct api_route {
	const char *method;
	const char *pattern; /* "/v1/sandboxes/{id}/exec" */
	size_t body_max;     /* JSON routes: max body; upload routes: 0 = --max-file-bytes */
	void (*handle)(const struct api_request *req, struct api_response *resp);
	int (*upload_begin)(const struct api_request *req, struct api_upload *ret, struct al_error *err);
	bool admin_only;
	enum api_route_kind kind;
	/* A WebSocket upgrade of this route may carry its bearer token as the
	 * subprotocol airlock.bearer.<token> (a browser cannot set
	 * Authorization): api-server.c, websocket_authenticate. */
	bool ws_bearer;
};

/* Finds the route for method + path in the table (api-routes.c) and fills
 * req->params. NULL with *ret_path_known telling 404 from 405. */
const struct api_route *api_route_match(const char *method, const char *path, struct api_request *req,
                                        bool *ret_path_known, char *allowed, size_t allowed_size);
void api_print_routes(FILE *f);

/* Settings the handlers need. */
struct daemon_config;
void api_set_config(const struct daemon_config *cfg, uint64_t max_file_bytes);
const struct daemon_config *api_config(void);
uint64_t api_max_file_bytes(void);

/* The servers: a unix socket (mode 0660, the admin interface) and an optional
 * TCP listener that requires bearer tokens. */
struct api_server;
int api_server_start_unix(const char *socket_path, struct api_server **ret, struct al_error *err);
int api_server_start_tcp(const char *addr_port, struct api_server **ret, struct al_error *err);
void api_server_stop(struct api_server *s);
/* A listening TCP socket (CLOEXEC) on ADDR:PORT or [ADDR6]:PORT, port at
 * least min_port (0: any free one), its port in *ret_port (may be NULL);
 * errors name flag ("--listen"). */
int api_tcp_listen(const char *flag, const char *addr_port, unsigned min_port, int *ret_fd, unsigned *ret_port,
                   struct al_error *err);
/* The web console's files (api-ui.c, docs/console.md), served at /ui on the
 * TCP listener; NULL: none (/ui answers 404 saying so). Before the servers start. */
void api_ui_set_dir(const char *dir);
/* Records the summaries of failed authentications that are due (all: every
 * pending one, before the event log shuts down). Call every few seconds. */
void api_auth_failures_flush(bool all);
/* The bounds of auth.failure events (--auth-failure-per-min), for the TCP
 * listener and the ports proxy: made once, at start-up (main thread). */
void api_auth_failures_start(void);
/* One failed authentication from the client address key source (IPv6: its
 * /64) at remote: counted, and recorded as an auth.failure event within the
 * bounds of the TCP listener's (auth-failures.h; without --listen, every
 * one). parts: method, URL, credential (a fingerprint, never stored). */
void api_auth_failure_note(const char *source, const char *remote, const char *const parts[3],
                           enum auth_failure failure);

/* JSON-lines streaming shared by exec, process output and events. */
struct api_line_stream;
struct api_line_stream *api_line_stream_new(int conn_fd);
/* Appends one JSON value as a line (stolen). */
void api_line_stream_push(struct api_line_stream *ls, json_t *line);
/* Copies buffered lines into buf; 0 when the buffer is empty. */
size_t api_line_stream_take(struct api_line_stream *ls, uint8_t *buf, size_t max);
bool api_line_stream_empty(struct api_line_stream *ls);
int api_line_stream_fd(struct api_line_stream *ls);
void api_line_stream_free(struct api_line_stream *ls);

/* The API's view of a sandbox (docs/api.md, "The sandbox object"): what
 * answers show, and what cluster mode's index keeps. */
struct sandbox_record;
json_t *api_sandbox_json(const struct sandbox_record *r);

#endif
