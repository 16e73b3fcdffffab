/* SPDX-License-Identifier: Apache-2.0 */
#ifndef AIRLOCK_CLI_HTTP_H
#define AIRLOCK_CLI_HTTP_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* Max answer the CLI buffers from the daemon (an exec answer carries two
 * capped output streams, base64-encoded at worst). */
#define CLI_RESPONSE_MAX (200u << 20)
/* Max error answer (a non-2xx body) the CLI buffers. */
#define CLI_ERROR_BODY_MAX (1u << 20)
/* Max JSON line of a streamed answer (ndjson). */
#define CLI_LINE_MAX (1u << 20)

/* Where the daemon is: a unix socket, or host:port over TCP with a token. */
struct cli_conn {
	const char *socket_path; /* used when host is NULL */
	char *host;              /* "127.0.0.1", "::1" or a name */
	char *port;
	const char *token; /* Authorization: Bearer (NULL: none) */
};
extern struct cli_conn cli_conn;

/* Parses "tcp://ADDR:PORT" (ADDR may be "[v6]") into cli_conn. */
int cli_conn_set_host(const char *spec);
/* "unix socket PATH" or "tcp://HOST:PORT", for messages. */
const char *cli_conn_describe(void);

/* One request. Exactly one body source (or none): json, raw bytes, or a curl
 * read callback (sent chunked). A 2xx answer goes to on_line (one NUL-
 * terminated line at a time, without '\n', at most CLI_LINE_MAX) or to
 * on_bytes as it arrives; without either it is buffered and parsed as JSON.
 * Any other status is buffered (CLI_ERROR_BODY_MAX) and parsed as JSON. A
 * sink returning < 0 aborts the transfer; the message it may set in err is
 * the request's. */
struct cli_req {
	const char *method;
	const char *path;
	json_t *json;
	const void *raw;
	size_t raw_len;
	curl_read_callback reader;
	void *reader_data;
	const char *content_type; /* for raw / reader; default octet-stream */
	int (*on_line)(void *ud, char *line, size_t len, struct al_error *err);
	int (*on_bytes)(void *ud, const void *buf, size_t len, struct al_error *err);
	void *ud;
};

/* Returns 0 with the status and body (JSON or NULL), or < 0 with err set
 * (transport failure, oversize or malformed answer, a sink's error; err may
 * be NULL when nobody reads it). */
int cli_request(struct cli_req *req, long *ret_status, json_t **ret_body, struct al_error *err);

/* The plain JSON request of cli_request. */
int cli_http(const char *method, const char *path, json_t *body, long *ret_status, json_t **ret_body,
             struct al_error *err);

#endif
