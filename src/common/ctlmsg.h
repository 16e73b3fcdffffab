/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Control messages between airlockd and airlock-egress: one JSON object per
 * datagram on an AF_UNIX SOCK_SEQPACKET socket pair (created by airlockd, one
 * end inherited by airlock-egress as --control-fd), with up to CTLMSG_FDS_MAX
 * file descriptors attached by SCM_RIGHTS.
 *
 * The messages (docs/egress.md, "Control protocol"):
 *
 * airlockd -> airlock-egress
 *   {"op":"add","seq":N,"sandbox":ID,"tenant":T|null,"policy":P}
 *       + 3 fds: [TCP listener, DNS UDP socket, DNS TCP listener], all
 *       created inside the sandbox's network namespace. Replaces an entry
 *       with the same id (its old fds are closed, its connections kept).
 *   {"op":"policy","seq":N,"sandbox":ID,"policy":P}
 *       Replaces the policy atomically: connections and DNS queries decided
 *       after the ack use the new one; none sees a mix.
 *   {"op":"remove","seq":N,"sandbox":ID}
 *       Closes the listeners and every open connection of the sandbox.
 *   {"op":"ping","seq":N}
 *   {"op":"secrets","seq":N,"sandbox":ID,"bindings":[B...]}
 *       (issue 6) Replaces the sandbox's secret bindings atomically (a
 *       rotated or deleted secret: new requests see the change at once).
 *   {"op":"ca","seq":N,"cert_pem":"...","key_pem":"..."}
 *       (issue 6) The Airlock CA that signs interception leaf certificates;
 *       sent after "ready" (and again after every restart) before any
 *       "add". The key is never written to disk by airlock-egress.
 * P is {"allow":[RULE...],"deny":[RULE...]} with RULE text as parsed by
 * policy_rule_parse(); airlockd has validated it already, airlock-egress
 * parses it again and refuses the whole message if any rule is invalid.
 * (issue 6) P may also hold "tls":"passthrough"|"inspect" (passthrough:
 * only hosts a binding names are intercepted; inspect: every allowed TLS
 * host is; absent, issue 17: inspect, or spliced when no "ca" was sent)
 * and "pinned":[HOST PATTERN...] (never intercepted).
 * "add" may carry "bindings":[B...] as well.
 * B (one secret bound to one sandbox) is
 *   {"secret":NAME, "placeholder":"airlock-ph-<64 hex>", "value":"...",
 *    "hosts":[HOST PATTERN...], "paths":[PREFIX...] (empty: any),
 *    "methods":["GET",...] (empty: any),
 *    "header":NAME|null, "format":"Bearer {value}"|null,
 *    "headers":[NAME...]|null (placeholder mode: where; null: Authorization)}
 * header set: the gateway removes every client-sent field of that name and
 * adds NAME: format with {value} replaced; header null: every occurrence of
 * the placeholder in the values of the fields "headers" names is replaced
 * by the value (issue 17: nowhere else).
 * SECURITY: values travel only on this socket pair and live only in
 * airlock-egress's memory; they are never logged or put in an event.
 *
 * airlock-egress -> airlockd
 *   {"op":"ack","seq":N}  or  {"op":"nack","seq":N,"error":"..."}
 *       one per request, in order.
 *   {"op":"event","sandbox":ID,"type":T,"data":{...}}
 *       an audit record (types and fields in docs/egress.md).
 *   {"op":"ready","version":V}
 *       sent once at start, before anything else.
 *
 * SECURITY: airlockd trusts airlock-egress only as far as its messages go: a
 * message is bounded (CTLMSG_MAX), must be one JSON object, and events are
 * attributed to the sandbox id only after checking it is known. fds are
 * accepted only by airlock-egress and only on "add".
 */
#ifndef AIRLOCK_CTLMSG_H
#define AIRLOCK_CTLMSG_H

#include <stddef.h>

#include <jansson.h>

#define CTLMSG_MAX (512 * 1024) /* bytes of one message (JSON text) */
#define CTLMSG_FDS_MAX 4

/* Sends one message (the object is not stolen) with nfds fds attached.
 * Blocks until the whole datagram is queued. Returns 0 or -errno
 * (-EMSGSIZE when the encoded object is over CTLMSG_MAX). */
int ctlmsg_send(int sock, json_t *msg, const int *fds, size_t nfds);

/* Receives one message: *ret_msg is a new object; received fds (up to
 * CTLMSG_FDS_MAX, O_CLOEXEC) are stored in fds[] and their number in
 * *ret_nfds (fds may be NULL when none are expected: any that arrive are
 * closed and -EPROTO returned). Returns 0, -EPIPE at end of stream, -EBADMSG
 * for a truncated or non-object message, or -errno. */
int ctlmsg_recv(int sock, json_t **ret_msg, int *fds, size_t fds_max, size_t *ret_nfds);

#endif
