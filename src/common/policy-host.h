/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host names of the policy grammar, as airlockd validates them and the egress
 * gateway enforces them: one canonical value that drives every later step
 * (rule matching, resolution, audit), a strict host:port splitter, and the
 * strict parsers of IP literals and ports that rules share (policy-rule.h).
 *
 * Canonical forms:
 *  - names: lower-case ASCII, no trailing dot, LDH labels of 1-63 bytes, at
 *    most 253 bytes; a non-ASCII (UTF-8) label is converted to its punycode
 *    A-label ("bücher" -> "xn--bcher-kva"); an "xn--" label is kept only if
 *    it decodes to a label this code would itself have produced;
 *  - IPv4: dotted quad, four decimal parts without leading zeros. Any other
 *    spelling the C library or a resolver would accept (0177.0.0.1, 0x7f.1,
 *    127.1, 2130706433, 127.000.0.1) is refused, not normalised;
 *  - IPv6: written in brackets ("[::1]"), canonical text per RFC 5952
 *    stored without brackets ("::1"); zone ids are refused.
 *
 * SECURITY: inputs come from the guest (HTTP Host, TLS SNI) or from policy.
 * Everything is bounded by the limits below and every byte is checked; what
 * cannot be normalised with certainty is refused rather than guessed.
 */
#ifndef AIRLOCK_POLICY_HOST_H
#define AIRLOCK_POLICY_HOST_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "policy-addr.h"
#include "policy-limits.h"

enum policy_host_kind {
	POLICY_HOST_NAME = 1,
	POLICY_HOST_IPV4,
	POLICY_HOST_IPV6,
};

struct policy_host {
	enum policy_host_kind kind;
	/* Canonical text, NUL-terminated: name, dotted quad, or RFC 5952 IPv6
	 * without brackets. */
	char name[POLICY_HOST_NAME_MAX + 1];
	size_t len;
	struct policy_addr addr; /* for POLICY_HOST_IPV4/IPV6 */
};

/*
 * Canonicalises a host (no port): a name (ASCII or UTF-8), a dotted quad, or
 * a bracketed IPv6 literal. Returns 0, or -EINVAL (not a valid host: the
 * message says which rule it broke), -ENAMETOOLONG (over a length limit),
 * -EILSEQ (invalid UTF-8, or a character that cannot be normalised with
 * certainty: other scripts than those listed in policy-host.c, mixed scripts
 * in one label, combining marks, compatibility forms).
 */
int policy_host_canonicalize(const uint8_t *in, size_t len, struct policy_host *ret_host, struct al_error *err);

/*
 * Splits "host", "host:port", "[v6]" or "[v6]:port". ret_host points into
 * in (brackets kept, for policy_host_canonicalize()); *ret_port is 0 when no
 * port was given. A port is 1-65535 in plain decimal digits, no leading zero,
 * never empty. Returns 0 or -EINVAL.
 */
int policy_host_split_port(const uint8_t *in, size_t len, const uint8_t **ret_host, size_t *ret_host_len,
                           uint16_t *ret_port, struct al_error *err);

/* Writes "name", "[v6]", or with a port "name:443" / "[v6]:443" (port 0: none). */
int policy_host_format(const struct policy_host *host, uint16_t port, char *buf, size_t size);

/* A port: 1-65535 in plain decimal digits, no leading zero. -EINVAL if not. */
int policy_port_parse(const uint8_t *in, size_t len, uint16_t *ret);
/* SECURITY: the only IPv4 spelling accepted anywhere in a policy or a Host:
 * four decimal parts of 1-3 digits, no leading zero, each <= 255. -EINVAL if
 * not (0177.0.0.1, 0x7f.1, 127.1, 2130706433, a trailing dot). */
int policy_ipv4_parse(const uint8_t *in, size_t len, struct in_addr *ret);
/* IPv6 text without brackets; -EINVAL also for a zone id ("%eth0"). */
int policy_ipv6_parse(const uint8_t *in, size_t len, struct in6_addr *ret);

/* RFC 3492 punycode of a sequence of code points into out (ASCII, not
 * terminated); -ENAMETOOLONG if it does not fit in out_size, -EOVERFLOW on
 * arithmetic overflow. Exposed for tests. */
int policy_punycode_encode(const uint32_t *cps, size_t n, char *out, size_t out_size, size_t *ret_len);
/* The inverse: ASCII (without "xn--") to code points; -EINVAL on bad input. */
int policy_punycode_decode(const char *in, size_t len, uint32_t *out, size_t out_max, size_t *ret_n);

#endif
