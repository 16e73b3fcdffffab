/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pure parts of the port-exposure proxy (docs/api.md, "Ports"; issue
 * 22): the HTTP/1.1 head parser for client requests and guest responses,
 * the head rewriters, and the routing of a request to (sandbox, port) with
 * the credentials it may carry in its query or cookies. No sockets, no
 * logging: bytes in, structs and bytes out. The connection loop
 * (proxy-server.c) frames bodies with libhttp-parser, fed the same bytes.
 *
 * SECURITY: every byte of a request comes from anyone who can reach the
 * proxy's listener, every byte of a response from a guest. The parser takes
 * only a complete head of at most a bounded size (PROXY_*_HEAD_MAX) and is
 * strict (RFC 9112): it refuses what request smuggling relies on — bare CR
 * or LF, obs-fold, whitespace before a colon, field names that are not
 * tokens, controls in values, Content-Length that is not plain digits or
 * given twice, Transfer-Encoding other than exactly "chunked" or with
 * Content-Length, Transfer-Encoding in HTTP/1.0, more than one Host, a
 * request-target that is not origin-form — so the guest's server and the
 * client frame every message exactly as the proxy does.
 */
#ifndef AIRLOCK_PROXY_HTTP_H
#define AIRLOCK_PROXY_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "sandbox-model.h"

#define PROXY_HEAD_MAX (16 * 1024)                     /* a request head with its empty line: else 431 */
#define PROXY_RESPONSE_HEAD_MAX (64 * 1024)            /* a guest's response head: else 502 */
#define PROXY_FIELDS_MAX 100                           /* header fields of a head: else 431 (502) */
#define PROXY_METHOD_MAX 32                            /* bytes of a method */
#define PROXY_HOST_MAX 255                             /* bytes of the Host value */
#define PROXY_OUT_MAX (PROXY_RESPONSE_HEAD_MAX + 2048) /* a rewritten head */
#define PROXY_DOMAIN_MAX 200                           /* --proxy-domain, with its :PORT */
#define PROXY_TOKEN_MAX 512                            /* a credential taken from a query or cookie */
#define PROXY_SANDBOX_ID_MAX 19                        /* "sb-" and 16 hex digits (sandbox_id_valid) */
#define PROXY_PATH_PREFIX "/sandbox/"
#define PROXY_COOKIE_NAME "airlock_token"
#define PROXY_QUERY_NAME "airlock_token"

struct proxy_span {
	uint32_t off, len;
};

struct proxy_field {
	struct proxy_span name, value; /* value without the OWS around it */
};

enum proxy_framing {
	PROXY_NO_BODY, /* neither Content-Length nor Transfer-Encoding */
	PROXY_LENGTH,  /* Content-Length: content_length bytes */
	PROXY_CHUNKED, /* Transfer-Encoding: chunked */
};

/* A head that passed every check. Spans point into raw (the caller's
 * buffer, which must outlive the struct). */
struct proxy_head {
	const char *raw;
	size_t len; /* through the empty line */
	bool response;
	struct proxy_span method, target; /* requests */
	int status;                       /* responses: 100..999 */
	int minor_version;                /* HTTP/1.0 or HTTP/1.1 */
	enum proxy_framing framing;
	uint64_t content_length;                        /* PROXY_LENGTH */
	int host;                                       /* index of the Host field, -1: none */
	int upgrade;                                    /* index of the Upgrade field, -1: none */
	bool conn_close, conn_keep_alive, conn_upgrade; /* tokens of Connection */
	size_t n_fields;
	struct proxy_field fields[PROXY_FIELDS_MAX];
};

/* The length of the head at the start of buf (through its empty line: CRLF
 * CRLF, or a bare LF LF the parser will refuse), 0 while it is incomplete. */
size_t proxy_head_end(const char *buf, size_t len);

/* Parses the head buf[0, len) (len from proxy_head_end). -EBADMSG
 * (AL_ERR_INVALID_ARGUMENT: 400, or 502 from a guest), -E2BIG (too many
 * fields or a part too long: 431). Messages quote no input. */
int proxy_head_parse(const char *buf, size_t len, bool response, struct proxy_head *ret, struct al_error *err);

/* Index of the first field at or after from named name (ASCII
 * case-insensitive), or -1. */
int proxy_head_find(const struct proxy_head *h, const char *name, size_t from);
/* A field's name equals name but for ASCII case and '_' for '-' (how CGI
 * style servers read names): credentials are stripped under both spellings. */
bool proxy_name_alike(const char *a, size_t alen, const char *name);

/* ------------------------------------------------------------ routing */

struct proxy_route {
	char id[PROXY_SANDBOX_ID_MAX + 1];
	unsigned port;
	bool path_form;
	/* path form: the bytes of the target the prefix "/sandbox/<id>/<port>"
	 * took; the guest's target is the rest ("/" when it is empty or starts
	 * with '?'). 0 in the host form. */
	size_t prefix_len;
};

/* Which sandbox port a request is for: the host form, Host
 * "<port>-<id>.<domain>" (domain compared case-insensitively; when domain
 * names a port, Host must name the same), else the path form
 * "/sandbox/<id>/<port>[/rest]". -ENOENT when neither matches. host may be
 * NULL (an HTTP/1.0 request without Host). */
int proxy_route_parse(const char *host, size_t host_len, const char *target, size_t target_len, const char *domain,
                      struct proxy_route *ret);

/* The target the guest sees: the path form's rest, or the target as is. */
size_t proxy_route_guest_target(const struct proxy_route *r, const char *target, size_t target_len, char *out,
                                size_t out_size);

/* Takes "airlock_token=VALUE" out of the query of target: 1 with the token
 * and the target without that parameter (the '?' goes when nothing is left),
 * 0 when the query has none, -E2BIG when a part does not fit. */
int proxy_query_take_token(const char *target, size_t target_len, char *ret_token, size_t token_size, char *ret_target,
                           size_t target_size);

/* Splits one Cookie field's value: 1 when it has an airlock_token pair (its
 * value to ret_token; the last one wins), 0 when not; ret_rest gets the
 * other pairs joined with "; " (appended to what it holds, NUL-terminated).
 * -E2BIG when a part does not fit. */
int proxy_cookie_take(const char *value, size_t len, char *ret_token, size_t token_size, char *ret_rest,
                      size_t rest_size);

/* ------------------------------------------------------------ rewriting */

struct proxy_request_rewrite {
	const char *target; /* the guest's request-target */
	bool drop_authorization;
	const char *cookie; /* the Cookie value to send (without airlock_token); NULL or "": none */
	bool upgrade;       /* keep the Upgrade handshake */
	const char *forwarded_for, *forwarded_host, *forwarded_proto;
	const char *forwarded_prefix; /* path form; NULL: none */
};

/*
 * The head to send to the guest: the request line with the new target, the
 * fields in their order without the hop-by-hop ones (Connection and what it
 * names, Keep-Alive, Proxy-Connection, TE, Upgrade, Proxy-Authorization),
 * the proxy's credentials (X-Airlock-Traffic-Token, e2b-traffic-access-token,
 * Authorization when it was consumed, every Cookie field: the rest comes back
 * in one), and the X-Forwarded-* the client sent; then the proxy's
 * X-Forwarded-*, "Connection: upgrade" with the Upgrade field when upgrade,
 * and the empty line.
 *
 * SECURITY: the guest never sees a credential the proxy consumed, and never
 * an X-Forwarded-* the client made up. Framing fields are never removed (a
 * Connection naming them does not count).
 * Returns 0 and *ret_len, or -E2BIG.
 */
int proxy_request_rewrite(const struct proxy_head *h, const struct proxy_request_rewrite *rw, char *out,
                          size_t out_size, size_t *ret_len);

/* The response head to send to the client: the status line, the fields
 * without the hop-by-hop ones (Upgrade kept on a 101), then "Connection:
 * close" when close, "Connection: upgrade" on a 101. -E2BIG. */
int proxy_response_rewrite(const struct proxy_head *h, bool close, char *out, size_t out_size, size_t *ret_len);

/* A short answer of the proxy itself: status line, Content-Type text/plain,
 * Content-Length, "Connection: close" when close, extra (whole lines with
 * CRLF, or NULL), the body. Returns its length (cut to out_size). */
size_t proxy_answer_format(char *out, size_t out_size, int status, bool close, const char *extra, const char *body);
const char *proxy_status_reason(int status);

#endif
