/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pure part of airlock-api (the cluster's front, docs/cluster.md): the
 * parser of a client's HTTP/1.1 request head, the rewrite of that head for
 * the node it is forwarded to, and the small readers routing needs (a
 * field's value, the port-proxy Host form). No sockets, no logging: bytes in,
 * structs and bytes out. Fuzzed by tests/fuzz/fuzz-front-head.c.
 *
 * SECURITY: every byte of a head comes from anyone who can reach the front's
 * listener. The parser takes only a complete head of at most FRONT_HEAD_MAX
 * bytes and is strict (RFC 9112), so that the node behind frames the request
 * exactly as the front read it: it refuses bare CR or LF, obs-fold,
 * whitespace before a colon, field names that are not tokens, control
 * characters in values, Content-Length that is not plain digits or given
 * twice, Transfer-Encoding other than exactly "chunked" or given with
 * Content-Length (or in HTTP/1.0), more than one Host (none in HTTP/1.1), a
 * request-target that is not origin-form ("/path?query", no '#', no
 * controls), and versions other than HTTP/1.0 and 1.1. Messages quote no
 * input.
 */
#ifndef AIRLOCK_FRONT_HEAD_H
#define AIRLOCK_FRONT_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define FRONT_HEAD_MAX (16 * 1024) /* a request head with its empty line: else 431 */
#define FRONT_FIELDS_MAX 100       /* header fields of a head: else 431 */
#define FRONT_METHOD_MAX 32        /* bytes of a method */
#define FRONT_HOST_MAX 255         /* bytes of the Host value */
#define FRONT_SANDBOX_ID_LEN 19    /* "sb-" and 16 hex digits */
/* A rewritten head: the client's, less what is dropped, plus the delegation
 * and X-Forwarded-For (FRONT_ADDED_MAX bytes at most). */
#define FRONT_ADDED_MAX 1024
#define FRONT_OUT_MAX (FRONT_HEAD_MAX + FRONT_ADDED_MAX)

struct front_span {
	uint32_t off, len;
};

struct front_field {
	struct front_span name, value; /* value without the whitespace around it */
};

/* A head that passed every check. Spans point into raw (the caller's buffer,
 * which must outlive the struct). */
struct front_head {
	const char *raw;
	size_t len; /* through the empty line */
	struct front_span method, target;
	struct front_span path, query; /* the target split at its first '?' (query without it) */
	int minor_version;             /* HTTP/1.0 or HTTP/1.1 */
	bool has_length, chunked;
	uint64_t content_length;
	int host;                      /* index of the Host field, -1: none */
	bool conn_close, conn_upgrade; /* tokens of Connection */
	bool upgrade;                  /* an Upgrade field and "upgrade" in Connection: a protocol switch */
	size_t n_fields;
	struct front_field fields[FRONT_FIELDS_MAX];
};

/* The length of the head at the start of buf (through its empty line: CRLF
 * CRLF, or a bare LF LF the parser will refuse), 0 while it is incomplete. */
size_t front_head_end(const char *buf, size_t len);

/* Parses the head buf[0, len) (len from front_head_end). -EBADMSG
 * (AL_ERR_INVALID_ARGUMENT: 400), -E2BIG (too many fields or too long:
 * AL_ERR_TOO_LARGE, answered 431). */
int front_head_parse(const char *buf, size_t len, struct front_head *ret, struct al_error *err);

/* Index of the first field at or after from named name (ASCII
 * case-insensitive), or -1. */
int front_head_find(const struct front_head *h, const char *name, size_t from);
/* Copies the value of the only field named name to out (NUL-terminated): 1,
 * or 0 when there is none; -E2BIG when it does not fit in size, -EBADMSG
 * when the field is given twice or holds a NUL. */
int front_head_value(const struct front_head *h, const char *name, char *out, size_t size);
/* The method (or path) equals s. */
bool front_span_is(const struct front_head *h, struct front_span s, const char *str);

/* The port proxy's host form "<port>-<sb-id>.<anything>" (docs/api.md,
 * "The proxy"): 0 with the sandbox id, -ENOENT when host is not of that form. */
int front_proxy_host(const char *host, char ret_id[FRONT_SANDBOX_ID_LEN + 1]);
/* A sandbox id: "sb-" and 16 lower-case hex digits. */
bool front_sandbox_id_valid(const char *s, size_t n);

struct front_rewrite {
	const char *principal;     /* X-Airlock-Principal to send; NULL: none */
	const char *authorization; /* Authorization to send (the delegation); NULL: none */
	const char *forwarded_for; /* X-Forwarded-For (the client's address); NULL: none */
	const char *target;        /* the request-target to send; NULL: the client's */
	const char *ws_protocol;   /* Sec-WebSocket-Protocol to send instead; NULL: the client's, "": none */
	bool keep_credentials;     /* keep the client's Authorization and X-API-KEY (port proxy, envd) */
	bool drop_expect;          /* the front read the body already: no Expect: 100-continue */
};

/* Writes the head for the node: the request line (with rw->target), every
 * field of the client's but Authorization and X-API-KEY (unless
 * keep_credentials), X-Airlock-Principal, X-Forwarded-For, Connection,
 * Keep-Alive, Proxy-Connection, Expect (with drop_expect) and, but for a
 * protocol switch, Upgrade (each
 * under '_' spellings too); then rw's fields and "Connection: close" (a
 * switch: "Connection: Upgrade"). -E2BIG when it does not fit in size. */
int front_head_rewrite(const struct front_head *h, const struct front_rewrite *rw, char *out, size_t size,
                       size_t *ret_len);

#endif
