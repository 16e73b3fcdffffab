/* SPDX-License-Identifier: Apache-2.0 */
/* Rules: parser, canonical text, matchers (policy-rule.h). */
#include "policy-rule.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "util.h"

/* ------------------------------------------------------------ parsing */

static int prefix_parse(const char *in, size_t len, unsigned max, unsigned *ret)
{
	if (len == 0 || len > 3 || (len > 1 && in[0] == '0'))
		return -EINVAL;
	unsigned v = 0;
	for (size_t i = 0; i < len; i++) {
		if (in[i] < '0' || in[i] > '9')
			return -EINVAL;
		v = v * 10 + (unsigned)(in[i] - '0');
	}
	if (v > max)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int rule_parse_cidr(const char *text, size_t len, const char *slash, struct policy_rule *ret_rule,
                           struct al_error *err)
{
	struct policy_rule r = {.kind = POLICY_RULE_CIDR};
	const uint8_t *a = (const uint8_t *)text;
	size_t alen = (size_t)(slash - text);
	if (alen >= 2 && a[0] == '[' && a[alen - 1] == ']') {
		a++;
		alen -= 2;
	}
	unsigned max;
	if (memchr(a, ':', alen)) {
		r.net.family = AF_INET6;
		max = 128;
		if (policy_ipv6_parse(a, alen, &r.net.v6) < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "invalid IPv6 network address");
	} else {
		r.net.family = AF_INET;
		max = 32;
		if (policy_ipv4_parse(a, alen, &r.net.v4) < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "invalid IPv4 network address (dotted quad, no leading zeros)");
	}
	const char *p = slash + 1;
	size_t plen = len - (size_t)(p - text);
	const char *colon = memchr(p, ':', plen);
	size_t digits = colon ? (size_t)(colon - p) : plen;
	if (prefix_parse(p, digits, max, &r.prefix_len) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "invalid prefix length (0-%u)", max);
	if (colon && policy_port_parse((const uint8_t *)colon + 1, plen - digits - 1, &r.port) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "invalid port: 1-65535 in decimal digits without leading zeros");
	/* Host bits set ("203.0.113.5/24"): the author meant something else. */
	const uint8_t *m = r.net.family == AF_INET ? (const uint8_t *)&r.net.v4 : r.net.v6.s6_addr;
	for (unsigned bit = r.prefix_len; bit < max; bit++) {
		if (m[bit / 8] & (0x80u >> (bit % 8)))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "network address has host bits set");
	}
	*ret_rule = r;
	return 0;
}

int policy_rule_parse(const char *text, size_t len, struct policy_rule *ret_rule, struct al_error *err)
{
	if (len == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "empty rule");
	if (len > POLICY_RULE_TEXT_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "rule longer than %d bytes",
		                    POLICY_RULE_TEXT_MAX);
	const char *slash = memchr(text, '/', len);
	if (slash)
		return rule_parse_cidr(text, len, slash, ret_rule, err);

	struct policy_rule r = {.kind = POLICY_RULE_EXACT};
	const uint8_t *host;
	size_t host_len;
	int ret = policy_host_split_port((const uint8_t *)text, len, &host, &host_len, &r.port, err);
	if (ret < 0)
		return ret;
	if (host_len >= 2 && host[0] == '*' && host[1] == '.') {
		r.kind = POLICY_RULE_WILDCARD;
		host += 2;
		host_len -= 2;
	}
	if (memchr(host, '*', host_len))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "'*' is only allowed as a whole first label (\"*.example.com\")");
	ret = policy_host_canonicalize(host, host_len, &r.host, err);
	if (ret < 0)
		return ret;
	if (r.kind == POLICY_RULE_WILDCARD) {
		if (r.host.kind != POLICY_HOST_NAME)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "a wildcard applies to names, not IP addresses");
		if (!memchr(r.host.name, '.', r.host.len))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "a wildcard needs at least two labels after \"*.\"");
	}
	*ret_rule = r;
	return 0;
}

bool policy_rule_is_host_pattern(const struct policy_rule *rule)
{
	return rule->kind != POLICY_RULE_CIDR && rule->host.kind == POLICY_HOST_NAME;
}

int policy_host_pattern_parse(const char *text, size_t len, struct policy_rule *ret_rule, struct al_error *err)
{
	struct policy_rule rule;
	int r = policy_rule_parse(text, len, &rule, err);
	if (r < 0)
		return r;
	/* Interception happens on port 443 for a TLS server name, which is
	 * never an IP address (RFC 6066): such patterns could never match. */
	if (!policy_rule_is_host_pattern(&rule))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "a host name or *.name pattern is needed here, not an IP address or network");
	*ret_rule = rule;
	return 0;
}

/* ------------------------------------------------------------ canonical text */

int policy_rule_format(const struct policy_rule *rule, char *buf, size_t size)
{
	char port[sizeof(":65535")] = "";
	if (rule->port)
		snprintf(port, sizeof(port), ":%u", rule->port);
	switch (rule->kind) {
	case POLICY_RULE_EXACT:
		return policy_host_format(&rule->host, rule->port, buf, size);
	case POLICY_RULE_WILDCARD:
		return snprintf_ok(buf, size, "*.%s%s", rule->host.name, port);
	case POLICY_RULE_CIDR: {
		char net[INET6_ADDRSTRLEN];
		policy_addr_format(&rule->net, 0, net, sizeof(net));
		return snprintf_ok(buf, size, "%s/%u%s", net, rule->prefix_len, port);
	}
	}
	return -EINVAL;
}

/* ------------------------------------------------------------ matching */

static bool port_ok(const struct policy_rule *rule, uint16_t port)
{
	if (rule->port)
		return port == rule->port;
	return port == POLICY_PORT_HTTP || port == POLICY_PORT_TLS;
}

bool policy_rule_match(const struct policy_rule *rule, const struct policy_host *host, uint16_t port)
{
	/* SECURITY: both sides are canonical values; no case folding, no
	 * trailing dots, no alternative IP spellings are left to compare. */
	if (!port_ok(rule, port))
		return false;
	switch (rule->kind) {
	case POLICY_RULE_EXACT:
		return host->kind == rule->host.kind && host->len == rule->host.len &&
		       memcmp(host->name, rule->host.name, host->len) == 0;
	case POLICY_RULE_WILDCARD: {
		size_t sl = rule->host.len;
		if (host->kind != POLICY_HOST_NAME || host->len < sl + 2)
			return false;
		const char *tail = host->name + host->len - sl;
		return tail[-1] == '.' && memcmp(tail, rule->host.name, sl) == 0;
	}
	case POLICY_RULE_CIDR:
		if (host->kind != POLICY_HOST_IPV4 && host->kind != POLICY_HOST_IPV6)
			return false;
		return policy_addr_in_net(&host->addr, &rule->net, rule->prefix_len);
	}
	return false;
}

bool policy_rule_match_addr(const struct policy_rule *rule, const struct policy_addr *addr, uint16_t port)
{
	if (!port_ok(rule, port))
		return false;
	switch (rule->kind) {
	case POLICY_RULE_EXACT:
		if (rule->host.kind == POLICY_HOST_NAME)
			return false;
		return policy_addr_in_net(addr, &rule->host.addr, rule->host.kind == POLICY_HOST_IPV4 ? 32 : 128);
	case POLICY_RULE_CIDR:
		return policy_addr_in_net(addr, &rule->net, rule->prefix_len);
	case POLICY_RULE_WILDCARD:
		return false;
	}
	return false;
}

/* ------------------------------------------------------------ secret bindings */

bool policy_header_reserved(const char *name)
{
	static const char *const reserved[] = {
	    "host", "content-length", "transfer-encoding", "connection",       "upgrade",
	    "te",   "trailer",        "keep-alive",        "proxy-connection", "expect"};
	for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
		if (strcasecmp(name, reserved[i]) == 0)
			return true;
	return false;
}
