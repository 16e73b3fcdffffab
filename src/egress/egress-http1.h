/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The HTTP/1.1 request stream of an intercepted connection (issue 6): once
 * the gateway has terminated the guest's TLS for a host a secret is bound
 * to, it reads the guest's plaintext requests with this parser, checks EVERY
 * request on the connection (keep-alive and pipelining included), and sends
 * upstream a rewritten head (credential header removed and set, placeholders
 * replaced) followed by the body bytes, forwarded unchanged as they arrive.
 *
 * No sockets, no TLS, no logging: bytes in, events out.
 *
 *   struct egress_http1_parser *p = egress_http1_parser_new();
 *   for each read of n bytes into buf:
 *       size_t off = 0;
 *       for (;;) {
 *           size_t used;
 *           int ev = egress_http1_feed(p, buf + off, n - off, &used, &err);
 *           if (ev < 0) -> answer (err.code's status, "Connection: close") and close;
 *           off += used;
 *           if (ev == EGRESS_HTTP1_EV_NEED_MORE) break;          (off == n now)
 *           if (ev == EGRESS_HTTP1_EV_HEAD) -> decide on egress_http1_parser_head(p);
 *               refuse (400/403/421 and close), or egress_http1_head_rewrite()
 *               and send the result upstream, then explicit_bzero() it;
 *           if (ev == EGRESS_HTTP1_EV_BODY) -> send buf[off - used, off) upstream;
 *           if (ev == EGRESS_HTTP1_EV_END) -> the request is complete.
 *       }
 *
 * SECURITY: every byte is guest-controlled. The parser holds at most one
 * request head (EGRESS_HTTP1_HEAD_MAX) and a few counters: nothing grows with
 * the input; bodies are never buffered. It is strict (RFC 9112) and refuses
 * everything request smuggling relies on, i.e. anything two HTTP parsers
 * (ours and the upstream server's) could frame or route differently:
 *   - line ends other than CRLF (bare LF, bare CR), obs-fold, whitespace
 *     before a field's colon, field names that are not tokens, NUL and other
 *     control characters in field values, an empty line before a request;
 *   - not exactly one Host, a Host with whitespace or list/URI delimiters,
 *     an absolute-form target (http:// or https://) whose authority differs
 *     from Host or carries userinfo; the authority-form; '*' outside OPTIONS;
 *     a '#' in the target;
 *   - Content-Length that is not plain decimal digits (no sign, comma, space
 *     or leading zero), above INT64_MAX, or given more than once (even with
 *     equal values); Transfer-Encoding with Content-Length, Transfer-Encoding
 *     other than exactly "chunked" (any case), given more than once, or in an
 *     HTTP/1.0 request; a Connection field naming Host, Content-Length or
 *     Transfer-Encoding (hop-by-hop removal of framing by an intermediary);
 *     field names some servers read as those two ("Content_Length");
 *   - in chunked bodies: a chunk size that is not 1 to 16 hex digits (no
 *     sign, "0x", whitespace — not even the BWS RFC 9112 allows before a
 *     chunk extension), above INT64_MAX, chunk data not followed by CRLF,
 *     malformed chunk extensions, malformed trailer fields, and trailer
 *     fields named Host, Content-Length or Transfer-Encoding (or alike);
 *   - versions other than HTTP/1.0 and HTTP/1.1; the methods CONNECT, TRACE
 *     and TRACK (any case); upgrade requests (an Upgrade or HTTP2-Settings
 *     field, or "upgrade" in Connection);
 *   - request hiding (issue 17): a body (Content-Length above 0, or
 *     Transfer-Encoding) on GET or HEAD, and any Expect field, even
 *     100-continue (a server answering early reads the body as a request).
 * The first refusal is final: the parser answers every later call with the
 * same error, and the connection must be closed (nothing after a refused
 * request can be framed reliably).
 */
#ifndef AIRLOCK_EGRESS_HTTP1_H
#define AIRLOCK_EGRESS_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define EGRESS_HTTP1_HEAD_MAX (16 * 1024)       /* request line + fields + empty line, with CRLFs */
#define EGRESS_HTTP1_LINE_MAX (8 * 1024)        /* one line of the head or the trailers, without CRLF */
#define EGRESS_HTTP1_FIELDS_MAX 100             /* header fields; trailer fields counted the same way */
#define EGRESS_HTTP1_TRAILERS_MAX (16 * 1024)   /* the trailer section with its CRLFs */
#define EGRESS_HTTP1_CHUNK_LINE_MAX 1024        /* chunk-size [chunk-ext], without CRLF */
#define EGRESS_HTTP1_METHOD_MAX 32              /* bytes */
#define EGRESS_HTTP1_HOST_MAX 1100              /* the Host value (host[:port]), bytes */
#define EGRESS_HTTP1_OUT_MAX (24 * 1024)        /* a rewritten head: the head + room for added fields */
#define EGRESS_HTTP1_REWRITE_OPS_MAX 16         /* removals, additions, substitutions: each */
#define EGRESS_HTTP1_PLACEHOLDER_MAX 256        /* bytes */
#define EGRESS_HTTP1_FIELD_NAME_MAX 64          /* the name of a field the caller adds or removes */
#define EGRESS_HTTP1_VALUE_MAX (8 * 1024 - 128) /* a replacement or an added value, bytes */
#define EGRESS_HTTP1_SUBST_FIELDS_MAX 8         /* fields one placeholder may be replaced in */

/* Bytes [off, off + len) of egress_http1_head.raw. */
struct egress_http1_span {
	uint16_t off;
	uint16_t len;
};

struct egress_http1_field {
	struct egress_http1_span line;  /* name ":" OWS value OWS, as received, without its CRLF */
	struct egress_http1_span name;  /* as spelled by the client (compare case-insensitively) */
	struct egress_http1_span value; /* without the OWS around it; may be empty */
};

enum egress_http1_form {
	EGRESS_HTTP1_ORIGIN_FORM,   /* "/path?query" */
	EGRESS_HTTP1_ABSOLUTE_FORM, /* "http://host/path?query" or https:// (authority == Host) */
	EGRESS_HTTP1_ASTERISK_FORM, /* "*" (OPTIONS only) */
};

enum egress_http1_framing {
	EGRESS_HTTP1_NO_BODY, /* neither Content-Length nor Transfer-Encoding */
	EGRESS_HTTP1_LENGTH,  /* Content-Length: content_length bytes (may be 0) */
	EGRESS_HTTP1_CHUNKED, /* Transfer-Encoding: chunked */
};

/* A request head that passed every check above. The spans point into raw,
 * which holds the head exactly as the guest sent it (not NUL-terminated;
 * never contains CR or LF except as the CRLF line ends, never NUL or other
 * controls except HTAB). */
struct egress_http1_head {
	size_t len;                            /* bytes of raw: request line .. empty line */
	struct egress_http1_span request_line; /* without its CRLF */
	struct egress_http1_span target;       /* the request-target as sent */
	/* The path of the target without the query: origin-form: up to '?';
	 * absolute-form: from the end of the authority up to '?' (empty means
	 * "/"); asterisk-form: empty. Not normalised: "/v1/../admin" and
	 * "%2e%2e" are left for the caller's path rules to refuse. */
	struct egress_http1_span path;
	char method[EGRESS_HTTP1_METHOD_MAX + 1]; /* a token, case as sent */
	/* The Host value without OWS, NUL-terminated: no whitespace, controls,
	 * ",/?#@\\"; not canonical (policy_host_split_port, then canonicalise). */
	char host[EGRESS_HTTP1_HOST_MAX + 1];
	size_t host_len;
	int minor_version; /* 0 or 1 */
	enum egress_http1_form form;
	enum egress_http1_framing framing;
	uint64_t content_length; /* EGRESS_HTTP1_LENGTH only; <= INT64_MAX */
	bool keep_alive;         /* the client expects the connection to stay open after this request */
	size_t n_fields;
	struct egress_http1_field fields[EGRESS_HTTP1_FIELDS_MAX];
	uint8_t raw[EGRESS_HTTP1_HEAD_MAX];
};

static inline const char *egress_http1_span_ptr(const struct egress_http1_head *h, struct egress_http1_span s)
{
	return (const char *)h->raw + s.off;
}

/* Index of the first field at or after index from whose name equals name
 * (ASCII case-insensitive), or -ENOENT. */
int egress_http1_head_find(const struct egress_http1_head *h, const char *name, size_t from);

/* ------------------------------------------------------------ the parser */

struct egress_http1_parser;

enum egress_http1_event {
	/* Every byte given was taken (*ret_consumed == len) and nothing is
	 * complete yet: read more from the guest. */
	EGRESS_HTTP1_EV_NEED_MORE = 0,
	/* A request head is complete (egress_http1_parser_head()); its bytes
	 * were consumed and must NOT be forwarded: send the rewritten head
	 * instead, or refuse the request. */
	EGRESS_HTTP1_EV_HEAD,
	/* The first *ret_consumed bytes given are message body as framed
	 * (Content-Length bytes, or chunk-size lines, chunk data and trailers):
	 * forward them upstream unchanged, now. */
	EGRESS_HTTP1_EV_BODY,
	/* The request (head and body) is complete; *ret_consumed == 0. The next
	 * bytes begin the next request. */
	EGRESS_HTTP1_EV_END,
};

/* Allocates a parser at the start of a connection (about 20 KiB; aborts if
 * memory runs out). Free with egress_http1_parser_free (NULL is fine). */
struct egress_http1_parser *egress_http1_parser_new(void);
void egress_http1_parser_free(struct egress_http1_parser *p);
static inline void egress_http1_parser_freep(struct egress_http1_parser **p)
{
	egress_http1_parser_free(*p);
}
#define cleanup_egress_http1_parser __attribute__((cleanup(egress_http1_parser_freep)))

/*
 * Takes the next bytes of the guest's stream, data[0, len) (len may be 0),
 * and reports one event; *ret_consumed says how many of the bytes it took.
 * Call it again with the rest (data + *ret_consumed) until it returns
 * EGRESS_HTTP1_EV_NEED_MORE: an event can be due with no bytes left (the END
 * of a request without a body, or after its last body byte). Any split of the
 * stream into calls gives the same events, heads and errors; the BODY bytes
 * of one request add up to the same total.
 *
 * Returns an event (>= 0) or
 *   -EBADMSG     malformed, or framed in a way another parser could read
 *                differently (err->code AL_ERR_INVALID_ARGUMENT: answer 400);
 *   -E2BIG       the head, a line, the field count, a chunk-size line or the
 *                trailers over their limit (AL_ERR_TOO_LARGE: 431 or 413);
 *   -EOPNOTSUPP  CONNECT/TRACE/TRACK (AL_ERR_METHOD: 405) or an upgrade
 *                request (AL_ERR_FORBIDDEN: 403);
 *   -ENOMSG      an Expect field (AL_ERR_FORBIDDEN: answer 417).
 * err (may be NULL) gets the message, which quotes no guest bytes. Once a
 * call fails every later one fails the same way. When bytes before the
 * failing one were body, they are first reported as EGRESS_HTTP1_EV_BODY
 * (they are a valid prefix of the body, safe to forward), and the error
 * comes with the next call.
 */
int egress_http1_feed(struct egress_http1_parser *p, const uint8_t *data, size_t len, size_t *ret_consumed,
                      struct al_error *err);

/* The head of the current request: valid from EGRESS_HTTP1_EV_HEAD until a
 * byte of the next request is fed (after EGRESS_HTTP1_EV_END); NULL before
 * the first head. */
const struct egress_http1_head *egress_http1_parser_head(const struct egress_http1_parser *p);

/* True between requests (no byte of a next request taken yet, nothing
 * pending): a guest that closes its side now ended cleanly; at any other
 * point it cut a request short, and the upstream side must be closed too. */
bool egress_http1_parser_idle(const struct egress_http1_parser *p);

/* ------------------------------------------------------------ the rewriter */

struct egress_http1_field_add {
	const char *name; /* a token, NUL-terminated */
	const char *value;
	size_t value_len;
};

struct egress_http1_subst {
	const char *placeholder; /* 1..EGRESS_HTTP1_PLACEHOLDER_MAX bytes */
	size_t placeholder_len;
	const char *value; /* the secret */
	size_t value_len;
	/* SECURITY (issue 17): the names of the only fields it is replaced in
	 * (ASCII case-insensitive, exactly: no '_' for '-'), 1 to
	 * EGRESS_HTTP1_SUBST_FIELDS_MAX of them. A placeholder in any other
	 * field (Origin, Referer, a custom header a server echoes back) goes
	 * as it is. */
	const char *const *fields;
	size_t n_fields;
};

struct egress_http1_rewrite {
	/* Field names, NUL-terminated: removes every field so named, in any
	 * case and with '_' for '-' ("X_Api_Key" goes with "X-Api-Key"). */
	const char *const *remove;
	size_t n_remove;
	const struct egress_http1_field_add *add; /* appended after the kept fields, in this order */
	size_t n_add;
	const struct egress_http1_subst *subst;
	size_t n_subst;
};

/*
 * Writes the head to send upstream into out (at most
 * MIN(out_size, EGRESS_HTTP1_OUT_MAX) bytes): the request line as received;
 * the header fields in their order and spelling, without those named in
 * remove; in the value of each kept field that a substitution names, every
 * occurrence of its placeholder replaced by its value (left to right, non-overlapping, the
 * first substitution that matches at a position wins; the replacement is not
 * scanned again); then the added fields ("name: value"); then the empty line.
 *
 * Never substituted: the request line (a placeholder in the request-target,
 * path or query reaches upstream as it is — the issue allows substitution in
 * header fields only), the body and trailers (never seen here), added fields,
 * and the fields this parser interprets (Host, Content-Length,
 * Transfer-Encoding, Connection, Expect), which are also refused as names to
 * remove or add: the rewritten head frames and routes exactly as the
 * checked one.
 *
 * SECURITY: replacement and added values are secrets. They must be field
 * content (no CR, LF, NUL or other controls, so no header injection) without
 * whitespace at either end; messages never quote them. On failure out is
 * wiped; on success the caller owns secret bytes in out and must
 * explicit_bzero() them once sent.
 *
 * Returns 0 and *ret_len, -EINVAL (a bad rewrite: names, values, counts) or
 * -E2BIG (the result does not fit).
 */
int egress_http1_head_rewrite(const struct egress_http1_head *h, const struct egress_http1_rewrite *rw, uint8_t *out,
                              size_t out_size, size_t *ret_len, struct al_error *err);

#endif
