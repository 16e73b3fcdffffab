/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Address classes as data: one table per family, most specific prefix first,
 * the first match wins; anything that matches nothing is public (IPv4) or
 * falls in the IPv6 catch-alls at the end of the table.
 *
 * SECURITY: the input is an address the gateway is about to dial; nothing
 * here trusts the guest. The tables follow the IANA special-purpose address
 * registries plus the cloud metadata endpoints.
 */
#include "policy-addr.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "util.h"

struct v4_range {
	uint32_t base; /* host byte order */
	unsigned prefix_len;
	enum policy_addr_class cls;
};

#define V4(a, b, c, d) (((uint32_t)(a) << 24) | ((uint32_t)(b) << 16) | ((uint32_t)(c) << 8) | (uint32_t)(d))

static const struct v4_range v4_table[] = {
    /* Instance metadata: AWS/GCP/Azure/OpenStack, Alibaba, Oracle, Azure WireServer. */
    {V4(169, 254, 169, 254), 32, POLICY_ADDR_METADATA},
    {V4(100, 100, 100, 200), 32, POLICY_ADDR_METADATA},
    {V4(192, 0, 0, 192), 32, POLICY_ADDR_METADATA},
    {V4(168, 63, 129, 16), 32, POLICY_ADDR_METADATA},
    {V4(255, 255, 255, 255), 32, POLICY_ADDR_BROADCAST},
    {V4(0, 0, 0, 0), 8, POLICY_ADDR_UNSPECIFIED},
    {V4(10, 0, 0, 0), 8, POLICY_ADDR_PRIVATE},
    {V4(100, 64, 0, 0), 10, POLICY_ADDR_CGNAT},
    {V4(127, 0, 0, 0), 8, POLICY_ADDR_LOOPBACK},
    {V4(169, 254, 0, 0), 16, POLICY_ADDR_LINK_LOCAL},
    {V4(172, 16, 0, 0), 12, POLICY_ADDR_PRIVATE},
    {V4(192, 0, 0, 0), 24, POLICY_ADDR_RESERVED}, /* IETF protocol assignments */
    {V4(192, 0, 2, 0), 24, POLICY_ADDR_DOCUMENTATION},
    {V4(192, 88, 99, 0), 24, POLICY_ADDR_RESERVED}, /* deprecated 6to4 relay anycast */
    {V4(192, 168, 0, 0), 16, POLICY_ADDR_PRIVATE},
    {V4(198, 18, 0, 0), 15, POLICY_ADDR_BENCHMARKING},
    {V4(198, 51, 100, 0), 24, POLICY_ADDR_DOCUMENTATION},
    {V4(203, 0, 113, 0), 24, POLICY_ADDR_DOCUMENTATION},
    {V4(224, 0, 0, 0), 4, POLICY_ADDR_MULTICAST},
    {V4(240, 0, 0, 0), 4, POLICY_ADDR_RESERVED},
};

struct v6_range {
	uint8_t prefix[16];
	unsigned prefix_len;
	enum policy_addr_class cls;
	enum policy_addr_embed embed;
};

static const struct v6_range v6_table[] = {
    {{0}, 128, POLICY_ADDR_UNSPECIFIED, POLICY_EMBED_NONE},
    {{[15] = 1}, 128, POLICY_ADDR_LOOPBACK, POLICY_EMBED_NONE},
    /* AWS IMDS over IPv6: fd00:ec2::254 */
    {{0xfd, 0x00, 0x0e, 0xc2, [15] = 0x54, [14] = 0x02}, 128, POLICY_ADDR_METADATA, POLICY_EMBED_NONE},
    {{[10] = 0xff, [11] = 0xff}, 96, POLICY_ADDR_EMBEDDED_IPV4, POLICY_EMBED_MAPPED},
    {{0}, 96, POLICY_ADDR_EMBEDDED_IPV4, POLICY_EMBED_COMPAT},
    {{0x00, 0x64, 0xff, 0x9b}, 96, POLICY_ADDR_EMBEDDED_IPV4, POLICY_EMBED_NAT64},
    {{0x00, 0x64, 0xff, 0x9b, 0x00, 0x01}, 48, POLICY_ADDR_RESERVED, POLICY_EMBED_NONE}, /* local NAT64 */
    {{0x01, 0x00}, 64, POLICY_ADDR_RESERVED, POLICY_EMBED_NONE},                         /* discard-only */
    {{0x20, 0x01, 0x00, 0x00}, 32, POLICY_ADDR_EMBEDDED_IPV4, POLICY_EMBED_TEREDO},
    {{0x20, 0x01, 0x00, 0x02, 0x00, 0x00}, 48, POLICY_ADDR_BENCHMARKING, POLICY_EMBED_NONE},
    {{0x20, 0x01, 0x00, 0x10}, 28, POLICY_ADDR_RESERVED, POLICY_EMBED_NONE}, /* ORCHID */
    {{0x20, 0x01, 0x00, 0x20}, 28, POLICY_ADDR_RESERVED, POLICY_EMBED_NONE}, /* ORCHIDv2 */
    {{0x20, 0x01, 0x0d, 0xb8}, 32, POLICY_ADDR_DOCUMENTATION, POLICY_EMBED_NONE},
    {{0x20, 0x02}, 16, POLICY_ADDR_EMBEDDED_IPV4, POLICY_EMBED_6TO4},
    {{0x3f, 0xff}, 20, POLICY_ADDR_DOCUMENTATION, POLICY_EMBED_NONE},
    {{0xfc}, 7, POLICY_ADDR_PRIVATE, POLICY_EMBED_NONE},
    {{0xfe, 0x80}, 10, POLICY_ADDR_LINK_LOCAL, POLICY_EMBED_NONE},
    {{0xfe, 0xc0}, 10, POLICY_ADDR_PRIVATE, POLICY_EMBED_NONE}, /* deprecated site-local */
    {{0xff}, 8, POLICY_ADDR_MULTICAST, POLICY_EMBED_NONE},
    /* Global unicast is 2000::/3; everything else is not (yet) a destination. */
    {{0x20}, 3, POLICY_ADDR_PUBLIC, POLICY_EMBED_NONE},
    {{0}, 0, POLICY_ADDR_RESERVED, POLICY_EMBED_NONE},
};

static bool v4_in(uint32_t addr, uint32_t base, unsigned prefix_len)
{
	uint32_t mask = prefix_len == 0 ? 0 : 0xffffffffu << (32 - prefix_len);
	return (addr & mask) == (base & mask);
}

/* Are the first prefix_len bits of two addresses (network byte order) equal? */
static bool bits_equal(const uint8_t *addr, const uint8_t *prefix, unsigned prefix_len)
{
	unsigned full = prefix_len / 8, rest = prefix_len % 8;
	if (memcmp(addr, prefix, full) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xffu << (8 - rest));
	return (addr[full] & mask) == (prefix[full] & mask);
}

enum policy_addr_class policy_addr_classify_v4(const struct in_addr *a)
{
	uint32_t addr = ntohl(a->s_addr);
	for (size_t i = 0; i < ARRAY_SIZE(v4_table); i++) {
		if (v4_in(addr, v4_table[i].base, v4_table[i].prefix_len))
			return v4_table[i].cls;
	}
	return POLICY_ADDR_PUBLIC;
}

static struct in_addr v4_at(const uint8_t *p, bool invert)
{
	uint32_t v = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
	if (invert)
		v = ~v;
	return (struct in_addr){.s_addr = htonl(v)};
}

void policy_addr_classify_v6(const struct in6_addr *a, struct policy_addr_info *ret_info)
{
	const uint8_t *b = a->s6_addr;
	struct policy_addr_info info = {.cls = POLICY_ADDR_RESERVED};
	for (size_t i = 0; i < ARRAY_SIZE(v6_table); i++) {
		if (!bits_equal(b, v6_table[i].prefix, v6_table[i].prefix_len))
			continue;
		info.cls = v6_table[i].cls;
		info.embed = v6_table[i].embed;
		break;
	}
	switch (info.embed) {
	case POLICY_EMBED_MAPPED:
	case POLICY_EMBED_COMPAT:
	case POLICY_EMBED_NAT64:
		info.embedded = v4_at(b + 12, false);
		break;
	case POLICY_EMBED_6TO4:
		info.embedded = v4_at(b + 2, false);
		break;
	case POLICY_EMBED_TEREDO:
		info.embedded = v4_at(b + 12, true);
		break;
	case POLICY_EMBED_NONE:
		break;
	}
	if (info.embed != POLICY_EMBED_NONE)
		info.embedded_cls = policy_addr_classify_v4(&info.embedded);
	*ret_info = info;
}

void policy_addr_classify(const struct policy_addr *a, struct policy_addr_info *ret_info)
{
	if (a->family == AF_INET) {
		*ret_info = (struct policy_addr_info){.cls = policy_addr_classify_v4(&a->v4)};
		return;
	}
	if (a->family == AF_INET6) {
		policy_addr_classify_v6(&a->v6, ret_info);
		return;
	}
	*ret_info = (struct policy_addr_info){.cls = POLICY_ADDR_RESERVED};
}

bool policy_addr_is_forbidden(const struct policy_addr *a, bool explicitly_allowed)
{
	struct policy_addr_info info;
	policy_addr_classify(a, &info);
	/* SECURITY: fail closed. Only public addresses pass on their own; a rule
	 * can open the others, except those that are never a unicast peer. */
	switch (info.cls) {
	case POLICY_ADDR_PUBLIC:
		return false;
	case POLICY_ADDR_UNSPECIFIED:
	case POLICY_ADDR_BROADCAST:
	case POLICY_ADDR_MULTICAST:
		return true;
	default:
		if (a->family != AF_INET && a->family != AF_INET6)
			return true;
		return !explicitly_allowed;
	}
}

/* Do two networks overlap (the shorter prefix's bits equal)? */
static bool v4_overlap(uint32_t a, unsigned alen, uint32_t b, unsigned blen)
{
	return v4_in(a, b, MIN(alen, blen));
}

bool policy_addr_range_is_public(const struct policy_addr *net, unsigned prefix_len)
{
	if (net->family == AF_INET) {
		uint32_t a = ntohl(net->v4.s_addr);
		for (size_t i = 0; i < ARRAY_SIZE(v4_table); i++) {
			if (v4_overlap(a, prefix_len, v4_table[i].base, v4_table[i].prefix_len))
				return false;
		}
		return prefix_len <= 32;
	}
	if (net->family != AF_INET6 || prefix_len > 128)
		return false;
	/* SECURITY: inside 2000::/3 (the table's public entry), and overlapping
	 * none of the entries before it, which are all non-public. */
	const uint8_t *b = net->v6.s6_addr;
	for (size_t i = 0; i < ARRAY_SIZE(v6_table); i++) {
		const struct v6_range *t = &v6_table[i];
		if (t->cls == POLICY_ADDR_PUBLIC)
			return prefix_len >= t->prefix_len && bits_equal(b, t->prefix, t->prefix_len);
		if (bits_equal(b, t->prefix, MIN(prefix_len, t->prefix_len)))
			return false;
	}
	return false;
}

/* Is there an address in net/prefix_len whose bits [0, fixed_len) are
 * fixed[] and whose bits [v4_at_bit, +32) are v4 (inverted when invert)? */
static bool v6_range_holds(const uint8_t *net, unsigned prefix_len, const uint8_t *fixed, unsigned fixed_len,
                           unsigned v4_at_bit, uint32_t v4, bool invert)
{
	uint8_t cand[16];
	memcpy(cand, net, sizeof(cand));
	for (unsigned bit = 0; bit < fixed_len; bit++) {
		uint8_t m = (uint8_t)(0x80u >> (bit % 8));
		cand[bit / 8] = (uint8_t)((cand[bit / 8] & ~m) | (fixed[bit / 8] & m));
	}
	uint32_t v = invert ? ~v4 : v4;
	for (unsigned i = 0; i < 32; i++) {
		unsigned bit = v4_at_bit + i;
		uint8_t m = (uint8_t)(0x80u >> (bit % 8));
		uint8_t on = (v >> (31 - i)) & 1u ? m : 0;
		cand[bit / 8] = (uint8_t)((cand[bit / 8] & ~m) | on);
	}
	return bits_equal(cand, net, prefix_len);
}

bool policy_addr_range_has_metadata(const struct policy_addr *net, unsigned prefix_len)
{
	if (net->family == AF_INET) {
		uint32_t a = ntohl(net->v4.s_addr);
		for (size_t i = 0; i < ARRAY_SIZE(v4_table); i++) {
			if (v4_table[i].cls == POLICY_ADDR_METADATA &&
			    v4_overlap(a, prefix_len, v4_table[i].base, v4_table[i].prefix_len))
				return true;
		}
		return false;
	}
	if (net->family != AF_INET6)
		return true; /* fail closed */
	const uint8_t *b = net->v6.s6_addr;
	for (size_t i = 0; i < ARRAY_SIZE(v6_table); i++) {
		const struct v6_range *t = &v6_table[i];
		if (t->cls == POLICY_ADDR_METADATA && bits_equal(b, t->prefix, MIN(prefix_len, t->prefix_len)))
			return true;
		if (t->embed == POLICY_EMBED_NONE)
			continue;
		unsigned at = t->embed == POLICY_EMBED_6TO4 ? 16 : 96;
		for (size_t k = 0; k < ARRAY_SIZE(v4_table); k++) {
			if (v4_table[k].cls == POLICY_ADDR_METADATA &&
			    v6_range_holds(b, prefix_len, t->prefix, t->prefix_len, at, v4_table[k].base,
			                   t->embed == POLICY_EMBED_TEREDO))
				return true;
		}
	}
	return false;
}

bool policy_addr_is_metadata(const struct policy_addr *a)
{
	return policy_addr_range_has_metadata(a, a->family == AF_INET ? 32 : 128);
}

bool policy_addr_equal(const struct policy_addr *a, const struct policy_addr *b)
{
	if (a->family != b->family)
		return false;
	if (a->family == AF_INET)
		return a->v4.s_addr == b->v4.s_addr;
	return memcmp(&a->v6, &b->v6, sizeof(a->v6)) == 0;
}

bool policy_addr_in_net(const struct policy_addr *a, const struct policy_addr *net, unsigned prefix_len)
{
	if (a->family != net->family)
		return false;
	const uint8_t *x = a->family == AF_INET ? (const uint8_t *)&a->v4 : a->v6.s6_addr;
	const uint8_t *y = net->family == AF_INET ? (const uint8_t *)&net->v4 : net->v6.s6_addr;
	return bits_equal(x, y, prefix_len);
}

void policy_addr_format(const struct policy_addr *a, uint16_t port, char *buf, size_t size)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	inet_ntop(a->family, a->family == AF_INET ? (const void *)&a->v4 : (const void *)&a->v6, ip, sizeof(ip));
	bool v6 = a->family == AF_INET6;
	if (port)
		snprintf(buf, size, "%s%s%s:%u", v6 ? "[" : "", ip, v6 ? "]" : "", port);
	else
		snprintf(buf, size, "%s", ip);
}

static const char *const class_names[POLICY_ADDR__COUNT] = {
    [POLICY_ADDR_PUBLIC] = "public",
    [POLICY_ADDR_LOOPBACK] = "loopback",
    [POLICY_ADDR_PRIVATE] = "private",
    [POLICY_ADDR_CGNAT] = "cgnat",
    [POLICY_ADDR_LINK_LOCAL] = "link_local",
    [POLICY_ADDR_MULTICAST] = "multicast",
    [POLICY_ADDR_UNSPECIFIED] = "unspecified",
    [POLICY_ADDR_BROADCAST] = "broadcast",
    [POLICY_ADDR_METADATA] = "metadata",
    [POLICY_ADDR_DOCUMENTATION] = "documentation",
    [POLICY_ADDR_BENCHMARKING] = "benchmarking",
    [POLICY_ADDR_RESERVED] = "reserved",
    [POLICY_ADDR_EMBEDDED_IPV4] = "embedded_ipv4",
};

const char *policy_addr_class_name(enum policy_addr_class cls)
{
	if ((unsigned)cls >= ARRAY_SIZE(class_names) || !class_names[cls])
		return "unknown";
	return class_names[cls];
}

const char *policy_addr_embed_name(enum policy_addr_embed embed)
{
	switch (embed) {
	case POLICY_EMBED_NONE:
		return "none";
	case POLICY_EMBED_MAPPED:
		return "ipv4_mapped";
	case POLICY_EMBED_COMPAT:
		return "ipv4_compatible";
	case POLICY_EMBED_NAT64:
		return "nat64";
	case POLICY_EMBED_6TO4:
		return "6to4";
	case POLICY_EMBED_TEREDO:
		return "teredo";
	}
	return "unknown";
}
