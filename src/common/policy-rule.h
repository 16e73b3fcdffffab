/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rules of the policy grammar (docs/egress.md, "Policy"): what one entry of a
 * policy's "allow", "deny" or "pinned" list, or of a secret binding's
 * "hosts", says; its parser, its canonical text and the matchers the gateway
 * decides with. airlockd validates with these functions and airlock-egress
 * enforces with them, so what the API accepts is exactly what is enforced.
 *
 * SECURITY: rules come from clients (through airlockd) and are parsed
 * strictly: bounded by POLICY_RULE_TEXT_MAX, every byte checked, hosts
 * canonicalised (policy_host_canonicalize), no alternative spelling left to
 * compare when matching.
 */
#ifndef AIRLOCK_POLICY_RULE_H
#define AIRLOCK_POLICY_RULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "policy-addr.h"
#include "policy-host.h"
#include "policy-limits.h"

/* Ports a rule that names none opens: only those on which the gateway reads
 * a host name (HTTP 80, TLS 443); see policy_rule_match(). */
#define POLICY_PORT_HTTP 80
#define POLICY_PORT_TLS 443

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
 * A host pattern where only TLS server names can match ("pinned", the
 * "hosts" of a secret binding): a rule naming a host name or *.suffix,
 * optionally with a port. It is matched with policy_rule_match() on port
 * 443, where TLS is intercepted: a pattern with another port never matches.
 * IP addresses and networks are not host patterns: a TLS server name is
 * never an address (RFC 6066), so they could never match.
 */
bool policy_rule_is_host_pattern(const struct policy_rule *rule);
/* policy_rule_parse(), then policy_rule_is_host_pattern(), or -EINVAL: "a
 * host name or *.name pattern is needed here, not an IP address or network". */
int policy_host_pattern_parse(const char *text, size_t len, struct policy_rule *ret_rule, struct al_error *err);

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

/*
 * The rule's canonical text, which policy_rule_parse() reads back as the same
 * rule: "example.com", "*.example.com:8443", "203.0.113.7", "[2001:db8::1]:443",
 * "203.0.113.0/24", "2001:db8::/32:443" (host names as canonicalised: lower
 * case, A-labels, no trailing dot). Returns 0 or -ENAMETOOLONG (buf too
 * small; POLICY_RULE_TEXT_MAX + 1 bytes always fit).
 */
int policy_rule_format(const struct policy_rule *rule, char *buf, size_t size);

/* ------------------------------------------------------------ secret bindings */

/*
 * Is this a header field a secret binding may not set (ASCII case-insensitive):
 * Host, Content-Length, Transfer-Encoding, Connection, Upgrade, TE, Trailer,
 * Keep-Alive, Proxy-Connection, Expect? They frame, route or upgrade the
 * request or belong to one hop.
 * SECURITY: a secret must never be able to change where a request goes or
 * where it ends; airlockd refuses such a binding and the gateway refuses it
 * again.
 */
bool policy_header_reserved(const char *name);

#endif
