/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Addresses of the policy grammar: the value an IP literal or a network of a
 * rule stands for, and the egress gateway's classifier of destinations: which
 * kind an IPv4/IPv6 address is (public, loopback, private, metadata, ...),
 * from one table per family, and whether the gateway may dial it.
 *
 * SECURITY: this is the last check before connect(): every address the
 * gateway resolved (or that a rule or a Host named as a literal) goes through
 * policy_addr_is_forbidden() and is then dialled exactly as checked.
 */
#ifndef AIRLOCK_POLICY_ADDR_H
#define AIRLOCK_POLICY_ADDR_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum policy_addr_class {
	POLICY_ADDR_PUBLIC = 0,
	POLICY_ADDR_LOOPBACK,      /* 127/8, ::1 */
	POLICY_ADDR_PRIVATE,       /* 10/8, 172.16/12, 192.168/16, fc00::/7, fec0::/10 */
	POLICY_ADDR_CGNAT,         /* 100.64/10 */
	POLICY_ADDR_LINK_LOCAL,    /* 169.254/16, fe80::/10 */
	POLICY_ADDR_MULTICAST,     /* 224/4, ff00::/8 */
	POLICY_ADDR_UNSPECIFIED,   /* 0/8 ("this network"), :: */
	POLICY_ADDR_BROADCAST,     /* 255.255.255.255 */
	POLICY_ADDR_METADATA,      /* cloud instance metadata endpoints */
	POLICY_ADDR_DOCUMENTATION, /* 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20 */
	POLICY_ADDR_BENCHMARKING,  /* 198.18/15, 2001:2::/48 */
	POLICY_ADDR_RESERVED,      /* 240/4, 192.0.0/24, IPv6 outside 2000::/3, ... */
	POLICY_ADDR_EMBEDDED_IPV4, /* an IPv6 form that carries an IPv4 address (see embed) */
	POLICY_ADDR__COUNT,
};

/* How an IPv6 address embeds an IPv4 address. */
enum policy_addr_embed {
	POLICY_EMBED_NONE = 0,
	POLICY_EMBED_MAPPED, /* ::ffff:0:0/96 */
	POLICY_EMBED_COMPAT, /* ::/96 (deprecated IPv4-compatible) */
	POLICY_EMBED_NAT64,  /* 64:ff9b::/96 */
	POLICY_EMBED_6TO4,   /* 2002::/16, IPv4 in bits 16..47 */
	POLICY_EMBED_TEREDO, /* 2001::/32, client IPv4 = ~(last 32 bits) */
};

struct policy_addr {
	int family; /* AF_INET or AF_INET6 */
	union {
		struct in_addr v4;
		struct in6_addr v6;
	};
};

struct policy_addr_info {
	enum policy_addr_class cls;
	enum policy_addr_embed embed;
	/* Valid when embed != POLICY_EMBED_NONE: the embedded IPv4 address (for
	 * Teredo the client's, de-obfuscated) and its own class. */
	struct in_addr embedded;
	enum policy_addr_class embedded_cls;
};

enum policy_addr_class policy_addr_classify_v4(const struct in_addr *a);
void policy_addr_classify_v6(const struct in6_addr *a, struct policy_addr_info *ret_info);
/* Either family; an unknown family is classified POLICY_ADDR_RESERVED. */
void policy_addr_classify(const struct policy_addr *a, struct policy_addr_info *ret_info);

/* True unless the address is public, or a rule named it explicitly
 * (explicitly_allowed). Unspecified, broadcast and multicast addresses are
 * forbidden even then: they are never a unicast destination (connecting to
 * 0.0.0.0 reaches the gateway's own host). */
bool policy_addr_is_forbidden(const struct policy_addr *a, bool explicitly_allowed);

/* Same family and same address. */
bool policy_addr_equal(const struct policy_addr *a, const struct policy_addr *b);
/* Is a in the network net/prefix_len (same family, the first prefix_len bits
 * equal)? */
bool policy_addr_in_net(const struct policy_addr *a, const struct policy_addr *net, unsigned prefix_len);
/* Is every address of the network net/prefix_len public by the tables
 * above (no overlap with a non-public class; IPv6 inside 2000::/3)? "/0"
 * never is. */
bool policy_addr_range_is_public(const struct policy_addr *net, unsigned prefix_len);
/* Does the network net/prefix_len hold a metadata address, in its own
 * family or embedded in an IPv6 form (::ffff:169.254.169.254, 6to4,
 * Teredo, NAT64)? */
bool policy_addr_range_has_metadata(const struct policy_addr *net, unsigned prefix_len);
/* Is the address a metadata address, itself or embedded? */
bool policy_addr_is_metadata(const struct policy_addr *a);

/* "203.0.113.7:443" / "[2001:db8::1]:443" (port 0: no port, no brackets). */
void policy_addr_format(const struct policy_addr *a, uint16_t port, char *buf, size_t size);

/* "public", "loopback", ... for audit events; "embedded_ipv4" etc. */
const char *policy_addr_class_name(enum policy_addr_class cls);
const char *policy_addr_embed_name(enum policy_addr_embed embed);

#endif
