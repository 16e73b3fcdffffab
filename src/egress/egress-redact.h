/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reflected secrets (issue 17; docs/egress.md "Responses of a bound host"):
 * a bound host that reflects a request (an echo endpoint, an error page
 * quoting a header) would hand the secret's real value back to the guest.
 * On an intercepted connection to a host a binding names, the server's
 * plaintext goes through this before the guest sees a byte of it:
 *
 *   - a strict HTTP/1.1 response parser frames the stream: status line and
 *     fields, then the body by Content-Length, chunked or the end of the
 *     connection; no body for HEAD, 1xx, 204 and 304 (one request record
 *     per forwarded request says which are HEAD, in order);
 *   - a streaming matcher (one KMP automaton per value) reads the logical
 *     bytes (the head, the body's data without chunk framing, trailers)
 *     and replaces every occurrence of a value with '*' of the same length,
 *     so Content-Length and chunk sizes stay true, whatever the read,
 *     chunk or TLS record boundaries;
 *   - it holds back only what it must: a response head until it is
 *     complete, and the bytes from the start of the longest partial match
 *     (at most len(value) - 1 logical bytes, with the framing between them);
 *   - a response to a request a binding applied to must not be compressed
 *     (the request asked for Accept-Encoding: identity): a Content-Encoding
 *     other than identity is refused (-EPROTONOSUPPORT), and the connection
 *     ends before a byte of that response reaches the guest.
 *
 * No sockets, no TLS, no logging.
 *
 * SECURITY: the values are secrets: copied here, wiped on free, never in a
 * message. The server's bytes are not trusted either: every size is bounded
 * (EGRESS_REDACT_*), anything malformed or over a limit is an error and the
 * connection ends (fail closed: never an unredacted byte).
 */
#ifndef AIRLOCK_EGRESS_REDACT_H
#define AIRLOCK_EGRESS_REDACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define EGRESS_REDACT_VALUES_MAX 16            /* distinct values on one connection */
#define EGRESS_REDACT_VALUE_MAX 8192           /* bytes of one value */
#define EGRESS_REDACT_BUF (256 * 1024)         /* held + ready bytes */
#define EGRESS_REDACT_FEED_MAX (64 * 1024)     /* one feed at most (the rest is for what is held) */
#define EGRESS_REDACT_HEAD_MAX (64 * 1024)     /* a response head */
#define EGRESS_REDACT_LINE_MAX 1024            /* a chunk-size line */
#define EGRESS_REDACT_TRAILERS_MAX (16 * 1024) /* a trailer section */
#define EGRESS_REDACT_PENDING_MAX 32           /* requests forwarded and not yet answered */
#define EGRESS_REDACT_TAIL_MIN 8               /* a held partial match masked at the end of the stream */
#define EGRESS_REDACT_MASK '*'

struct egress_redactor;

struct egress_redactor *egress_redactor_new(void);
/* Wipes the values. Accepts NULL. */
void egress_redactor_free(struct egress_redactor *r);
static inline void egress_redactor_freep(struct egress_redactor **r)
{
	egress_redactor_free(*r);
}
#define cleanup_egress_redactor __attribute__((cleanup(egress_redactor_freep)))

/* A value to redact from now on (a copy is kept; the same bytes twice are
 * one value). Returns its index, or -E2BIG (too many values, or too long:
 * the caller must not send the secret then), -EINVAL (empty). */
int egress_redactor_add_value(struct egress_redactor *r, const char *value, size_t len);
/* Occurrences of value idx replaced so far. */
uint64_t egress_redactor_count(const struct egress_redactor *r, int idx);

/* One request was forwarded: its response comes in this order. head: the
 * method was HEAD (no body); identity: a binding applied (its response must
 * not be compressed). -E2BIG: too many outstanding. */
int egress_redactor_request(struct egress_redactor *r, bool head, bool identity);

/* Room for the next feed (0: send what is ready first). */
size_t egress_redactor_room(const struct egress_redactor *r);
/*
 * The next bytes from the server (len <= egress_redactor_room()). Returns 0,
 * or (the connection must end; what was ready before may still be sent)
 * -EBADMSG (malformed response, an answer with no request outstanding, 101),
 * -E2BIG (a head, line or the held bytes over a limit),
 * -EPROTONOSUPPORT (a compressed response to a request a binding applied to).
 * err says what, never quoting a value.
 */
int egress_redactor_feed(struct egress_redactor *r, const uint8_t *data, size_t len, struct al_error *err);
/* The server ended the stream: a held partial match of at least
 * EGRESS_REDACT_TAIL_MIN bytes is masked, an unfinished response head is
 * dropped (never checked), and everything else becomes ready. */
void egress_redactor_finish(struct egress_redactor *r);

/* Bytes ready for the guest: *ret points at them (valid until the next
 * feed); mark them sent with egress_redactor_sent(). */
size_t egress_redactor_ready(const struct egress_redactor *r, const uint8_t **ret);
void egress_redactor_sent(struct egress_redactor *r, size_t n);

/* No byte held and no response in progress (between responses). */
bool egress_redactor_idle(const struct egress_redactor *r);

#endif
