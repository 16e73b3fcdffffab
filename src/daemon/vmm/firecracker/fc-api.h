/* SPDX-License-Identifier: Apache-2.0 */
/* A small HTTP/1.1 client for Firecracker's API socket
 * (../shared/firecracker/firecracker.yaml): one request per connection, JSON
 * bodies with jansson, a deadline on everything, and a strict, bounded parser
 * of the answer. */
#ifndef AIRLOCK_FC_API_H
#define AIRLOCK_FC_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "error.h"

/* Limits on what Firecracker may answer. Its answers are a status line, a
 * handful of headers and at most a small JSON object (InstanceInfo, Error,
 * the VM's configuration), so these are generous. */
#define FC_HEAD_MAX (8u * 1024u)      /* status line + headers + blank line */
#define FC_RESPONSE_MAX (64u * 1024u) /* head + body */
#define FC_HEADERS_MAX 32             /* header fields */
#define FC_REQUEST_BODY_MAX (16u * 1024u)
#define FC_FAULT_MAX 512 /* the part of fault_message kept */

struct fc_response {
	int status;               /* 200..599 (1xx is refused: never asked for) */
	bool deprecated;          /* "Deprecation: true": the request used something Firecracker deprecated */
	json_t *body;             /* the JSON object of a response with a body, else NULL */
	char fault[FC_FAULT_MAX]; /* fault_message of an error body (printable ASCII), else "" */
};
void fc_response_release(struct fc_response *r);

/* SECURITY: parses one complete response at the start of buf[0, len): 1 with
 * *ret (caller releases) and *ret_used = the bytes it took, 0 when more bytes
 * are needed, -EBADMSG/-EMSGSIZE/-EPROTO with why[] when it is malformed or too
 * big. Strict: "HTTP/1.1 NNN reason" CRLF, header lines `token ":" OWS value
 * OWS` CRLF (no folding, no bare CR or LF, no NUL), at most FC_HEADERS_MAX
 * of them, Content-Length given once and only digits, no Transfer-Encoding, a
 * body only with Content-Length and Content-Type application/json, and
 * that body one JSON object (no duplicate keys). Nothing from Firecracker is
 * trusted because it runs next to a hostile guest. */
int fc_response_parse(const char *buf, size_t len, struct fc_response *ret, size_t *ret_used, char *why,
                      size_t why_size);

/* Builds the request bytes (malloc'd): method GET, PUT or PATCH; path from
 * [A-Za-z0-9/_.-], starting with '/'; body NULL or a JSON object of at most
 * FC_REQUEST_BODY_MAX bytes. -EINVAL on anything else. */
int fc_request_build(const char *method, const char *path, json_t *body, char **ret, size_t *ret_len);

/* One request on a fresh connection to the unix socket `sock` in directory
 * dirfd, the whole exchange within timeout_ms. The connect never blocks:
 * -ENOENT/-ECONNREFUSED when Firecracker is not listening (yet), -EAGAIN when
 * it does not accept. Any status is returned in *ret; only transport and
 * parse failures are errors (err says which, with the request named). */
int fc_request(int dirfd, const char *sock, const char *method, const char *path, json_t *body, unsigned timeout_ms,
               struct fc_response *ret, struct al_error *err);

/* fc_request that wants success: 204, or 200 and then *ret_body (optional,
 * the caller's reference). Any other status is an error that quotes
 * Firecracker's fault_message. */
int fc_call(int dirfd, const char *sock, const char *method, const char *path, json_t *body, unsigned timeout_ms,
            json_t **ret_body, struct al_error *err);

#endif
