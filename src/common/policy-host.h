/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host names as the egress gateway sees them: one canonical value that drives
 * every later step (rule matching, resolution, audit), a strict host:port
 * splitter, and the policy pattern matcher.
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

#include "policy-addr.h"
#include "error.h"

#define POLICY_HOST_NAME_MAX 253   /* canonical name, bytes, without trailing dot */
#define POLICY_HOST_LABEL_MAX 63   /* bytes of one (A-)label */
#define POLICY_HOST_INPUT_MAX 1024 /* raw input bytes (UTF-8 labels are longer than their A-labels) */
#define POLICY_RULE_TEXT_MAX 1100  /* a rule's text: "*." + host input + "/128:65535" */

/* Port for rules that name none: such rules open only the ports on which the
 * gateway reads a host name (HTTP 80, TLS 443); see policy_rule_match(). */
#define POLICY_PORT_HTTP 80
#define POLICY_PORT_TLS 443

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
 * certainty: other scripts than those listed in egress-host.c, mixed scripts
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

/* RFC 3492 punycode of a sequence of code points into out (ASCII, not
 * terminated); -ENAMETOOLONG if it does not fit in out_size, -EOVERFLOW on
 * arithmetic overflow. Exposed for tests. */
int policy_punycode_encode(const uint32_t *cps, size_t n, char *out, size_t out_size, size_t *ret_len);
/* The inverse: ASCII (without "xn--") to code points; -EINVAL on bad input. */
int policy_punycode_decode(const char *in, size_t len, uint32_t *out, size_t out_max, size_t *ret_n);

/* ------------------------------------------------------------ rules */

enum policy_rule_kind {
	POLICY_RULE_EXACT = 1, /* "example.com", "203.0.113.7", "[2001:db8::1]" */
	POLICY_RULE_WILDCARD,  /* "*.example.com": one or more labels, then .example.com */
	POLICY_RULE_CIDR,      /* "203.0.113.0/24", "2001:db8::/32" (brackets optional) */
};

struct policy_rule {
	enum policy_rule_kind kind;
	/* EXACT: the host; WILDCARD: the suffix (a name of at least two labels). */
	struct policy_host host;
	/* CIDR: network address (host bits zero) and prefix length. */
	struct policy_addr net;
	unsigned prefix_len;
	uint16_t port; /* 0: the rule names no port */
};

/*
 * Parses one rule: PATTERN or PATTERN:PORT, PATTERN one of the kinds above
 * ("2001:db8::/32:443" and "[2001:db8::]/32:443" both work). Refused:
 * partial wildcards ("*example.com", "a.*.example.com"), "*" alone, a wildcard
 * over a single label ("*.com") or an IP literal, a CIDR with host bits set.
 * Returns 0 or -EINVAL/-ENAMETOOLONG/-EILSEQ with a message.
 */
int policy_rule_parse(const char *text, size_t len, struct policy_rule *ret_rule, struct al_error *err);

/*
 * Does the rule allow this canonical host on this port? A rule with a port
 * matches that port only; a rule without one matches ports 80 and 443 only.
 * EXACT compares canonical values; WILDCARD needs at least one whole label
 * before ".suffix" (never the suffix itself); CIDR matches IP-literal hosts in
 * the network. Names never match IP rules and vice versa.
 */
bool policy_rule_match(const struct policy_rule *rule, const struct policy_host *host, uint16_t port);
/* Does the rule name this address (EXACT IP or CIDR, same port semantics)?
 * Used for the dialled address of a connection without a host name. */
bool policy_rule_match_addr(const struct policy_rule *rule, const struct policy_addr *addr, uint16_t port);

#endif
