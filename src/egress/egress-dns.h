/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DNS for the egress gateway.
 *
 * 1. The message codec of the gateway's DNS listener (what a guest sends to
 *    10.0.2.2:53 over UDP or TCP): a strict parser of one query and a builder
 *    of its response (NOERROR with A/AAAA answers, NXDOMAIN, REFUSED,
 *    SERVFAIL, FORMERR).
 * 2. The upstream resolver airlock-egress uses for allowed names (c-ares,
 *    pointed at one configured server; a small TTL cache of its own).
 *
 * SECURITY: queries are fully guest-controlled: every length and pointer is
 * checked against the message, compression pointers are refused in queries
 * (a query has no reason to use them), exactly one question is accepted,
 * and names are returned only as LDH text for policy_host_canonicalize().
 * Upstream answers are not trusted either: only A/AAAA (and the CNAME chain
 * leading to them) for the asked name are taken, bounded in number.
 */
#ifndef AIRLOCK_EGRESS_DNS_H
#define AIRLOCK_EGRESS_DNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "policy-addr.h"
#include "error.h"

#define EGRESS_DNS_UDP_MAX 4096 /* largest query/response over UDP we read or write */
#define EGRESS_DNS_TCP_MAX 4096 /* largest query we accept over TCP (after the 2-byte length) */
#define EGRESS_DNS_NAME_MAX 253 /* presentation form, without the trailing dot */
#define EGRESS_DNS_ADDRS_MAX 16 /* addresses kept from one answer */
#define EGRESS_DNS_TTL_MAX 300  /* seconds: cap on what we cache and hand out */
#define EGRESS_DNS_TTL_MIN 1
#define EGRESS_DNS_TTL_NEGATIVE 10    /* seconds: NXDOMAIN / no address of the family */
#define EGRESS_DNS_TTL_TIMEOUT 5      /* seconds: no answer in time (the name is not asked again) */
#define EGRESS_DNS_CACHE_MAX 4096     /* resolver cache entries (one per name and family) */
#define EGRESS_DNS_EDNS_UDP_SIZE 1232 /* UDP payload size advertised in our OPT records */

enum {
	EGRESS_DNS_TYPE_A = 1,
	EGRESS_DNS_TYPE_CNAME = 5,
	EGRESS_DNS_TYPE_AAAA = 28,
	EGRESS_DNS_TYPE_OPT = 41,
	EGRESS_DNS_CLASS_IN = 1,
};

enum {
	EGRESS_DNS_RCODE_NOERROR = 0,
	EGRESS_DNS_RCODE_FORMERR = 1,
	EGRESS_DNS_RCODE_SERVFAIL = 2,
	EGRESS_DNS_RCODE_NXDOMAIN = 3,
	EGRESS_DNS_RCODE_NOTIMP = 4,
	EGRESS_DNS_RCODE_REFUSED = 5,
};

struct egress_dns_query {
	uint16_t id;
	bool rd; /* recursion desired, echoed in the response */
	/* The question name in presentation form without the trailing dot,
	 * NUL-terminated, labels of [A-Za-z0-9_-] only (case kept); "" for the
	 * root. Not canonical yet: pass it to policy_host_canonicalize(). */
	char name[EGRESS_DNS_NAME_MAX + 1];
	size_t name_len;
	uint16_t qtype;
	uint16_t qclass;
	/* The question section as sent (name + type + class), echoed in the
	 * response so that the guest sees its own spelling. */
	uint8_t question[EGRESS_DNS_NAME_MAX + 2 + 4];
	size_t question_len;
	bool edns;             /* an OPT record was present */
	uint16_t edns_udp_max; /* the client's advertised UDP size (>= 512) */
};

/*
 * Parses one query message (UDP payload, or a TCP message without its
 * 2-byte length). Returns
 *   0         *ret_query is filled;
 *   -EBADMSG  not a well-formed query: too short, QR set, opcode not QUERY,
 *             QDCOUNT != 1, ANCOUNT/NSCOUNT != 0, ARCOUNT > 1 or an
 *             additional record other than one OPT at the root, a
 *             compression pointer or a bad label, trailing bytes, a name
 *             over EGRESS_DNS_NAME_MAX, an OPT with EDNS version != 0 or
 *             options that do not exactly fill its data;
 *   -EILSEQ   a label has bytes outside [A-Za-z0-9_-].
 * When the header at least could be read (len >= 12) *ret_id is set even on
 * error (ret_id may be NULL), so that a FORMERR can be sent back.
 */
int egress_dns_parse_query(const uint8_t *buf, size_t len, struct egress_dns_query *ret_query, uint16_t *ret_id,
                           struct al_error *err);

/*
 * Builds the response to q: header (id, QR, opcode 0, RD echoed, RA set,
 * rcode), the question echoed, then one answer per address in addrs[0..n)
 * whose family matches q->qtype (A: AF_INET, AAAA: AF_INET6; others are
 * skipped) with the given TTL, owner name a pointer to the question. n may
 * be 0 (NODATA when rcode is NOERROR). If the answers do not fit in
 * out_size (use 512 for UDP without EDNS, else MIN(edns_udp_max,
 * EGRESS_DNS_UDP_MAX)), as many as fit are written and TC is set.
 * Answers are written only with rcode NOERROR. When q->edns, an OPT record
 * (EGRESS_DNS_EDNS_UDP_SIZE, version 0) ends the message; room for it is
 * kept before answers are added. An rcode outside 0..15 is sent as
 * SERVFAIL. Returns 0, -ENOBUFS (not even the header and question fit), or
 * -EINVAL (q was not filled by egress_dns_parse_query()).
 */
int egress_dns_build_response(const struct egress_dns_query *q, int rcode, const struct policy_addr *addrs, size_t n,
                              uint32_t ttl, uint8_t *out, size_t out_size, size_t *ret_len);

/* A response without a question section (FORMERR for an unparsable query):
 * header only, with the given id and rcode. out_size >= 12. */
void egress_dns_build_error(uint16_t id, int rcode, uint8_t out[12]);

/* ------------------------------------------------------------ resolver */

struct egress_resolver;

/*
 * A resolver that sends every query to `server` (IPv4 or IPv6 address and
 * port; UDP, TCP on truncation), waits at most timeout_ms per query
 * (retrying once over UDP), and caches answers for their TTL clamped to
 * [EGRESS_DNS_TTL_MIN, EGRESS_DNS_TTL_MAX] seconds (negative answers for
 * 10 s), at most 4096 entries. Thread-safe: any thread may call
 * egress_resolve() concurrently.
 */
int egress_resolver_new(const struct sockaddr *server, socklen_t server_len, unsigned timeout_ms,
                        struct egress_resolver **ret, struct al_error *err);
void egress_resolver_free(struct egress_resolver *r);
static inline void egress_resolver_freep(struct egress_resolver **r)
{
	egress_resolver_free(*r);
}
#define cleanup_egress_resolver __attribute__((cleanup(egress_resolver_freep)))

/*
 * Resolves a canonical host name (output of policy_host_canonicalize(),
 * kind POLICY_HOST_NAME) to its addresses of `family` (AF_INET: A,
 * AF_INET6: AAAA, AF_UNSPEC: both, A first), unfiltered: the caller runs
 * policy_addr_is_forbidden() on each. At most max addresses are written.
 * *ret_ttl is the smallest TTL of the records used (clamped as above).
 * Returns 0 (n >= 1), -ENOENT (NXDOMAIN or no address of that family),
 * -ETIMEDOUT, or -EIO (SERVFAIL, REFUSED, a malformed answer); err says
 * which.
 */
int egress_resolve(struct egress_resolver *r, const char *name, int family, struct policy_addr *out, size_t max,
                   size_t *ret_n, uint32_t *ret_ttl, struct al_error *err);

/* Counters for /metrics and tests, counted per (name, record type): an
 * AF_UNSPEC call counts up to two. upstream_queries: ares_query() calls
 * (c-ares' own retransmissions and TCP retries not counted); cache_hits:
 * answers (positive or negative) taken from the cache. */
void egress_resolver_stats(struct egress_resolver *r, uint64_t *ret_upstream_queries, uint64_t *ret_cache_hits);

#endif
