/* SPDX-License-Identifier: Apache-2.0 */
#include "policy-ceiling.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "util.h"

static const char *const metadata_names[] = {
    "metadata.google.internal",
    "metadata.goog",
    "metadata.azure.com",
    "instance-data.ec2.internal",
};

int policy_ceiling_add_net(struct policy_ceiling *c, const char *text, size_t len, struct al_error *err)
{
	struct policy_rule rule;
	struct al_error e = {0};
	int r = policy_rule_parse(text, len, &rule, &e);
	if (r == 0 && rule.kind == POLICY_RULE_EXACT && rule.host.kind != POLICY_HOST_NAME) {
		rule.kind = POLICY_RULE_CIDR;
		rule.net = rule.host.addr;
		rule.prefix_len = rule.net.family == AF_INET ? 32 : 128;
	}
	if (r == 0 && (rule.kind != POLICY_RULE_CIDR || rule.port != 0))
		r = al_error_set(&e, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                 "expected a network or address without a port (\"10.20.0.0/16\")");
	if (r < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"%.*s\": %s", (int)MIN(len, 100), text,
		                    e.message);
	/* The gateway is handed airlockd's ceiling and its --public-cidr
	 * networks, which are in it already: one entry each. */
	for (size_t i = 0; i < c->n_nets; i++) {
		if (c->nets[i].prefix_len == rule.prefix_len && policy_addr_equal(&c->nets[i].net, &rule.net))
			return 0;
	}
	if (c->n_nets == POLICY_CEILING_NETS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG, "at most %d networks",
		                    POLICY_CEILING_NETS_MAX);
	c->nets[c->n_nets++] = rule;
	return 0;
}

/* Is net/prefix_len inside one of the ceiling's networks? */
static bool ceiling_holds(const struct policy_ceiling *c, const struct policy_addr *net, unsigned prefix_len)
{
	for (size_t i = 0; i < c->n_nets; i++) {
		const struct policy_rule *n = &c->nets[i];
		if (prefix_len >= n->prefix_len && policy_addr_in_net(net, &n->net, n->prefix_len))
			return true;
	}
	return false;
}

static bool range_allowed(const struct policy_ceiling *c, const struct policy_addr *net, unsigned prefix_len)
{
	/* SECURITY: metadata first: a ceiling network around it does not open it. */
	if (!c->metadata && policy_addr_range_has_metadata(net, prefix_len))
		return false;
	/* The opt-in opens the metadata addresses themselves, nothing around them. */
	unsigned host_len = net->family == AF_INET ? 32 : 128;
	if (c->metadata && prefix_len == host_len && policy_addr_is_metadata(net))
		return true;
	return policy_addr_range_is_public(net, prefix_len) || ceiling_holds(c, net, prefix_len);
}

bool policy_ceiling_allows_addr(const struct policy_ceiling *c, const struct policy_addr *a)
{
	return range_allowed(c, a, a->family == AF_INET ? 32 : 128);
}

/* Is name the pattern's host, or (wildcard) a name under its suffix? */
static bool name_matches(const struct policy_rule *rule, const char *name)
{
	const char *suffix = rule->host.name;
	if (rule->kind == POLICY_RULE_EXACT)
		return !strcmp(suffix, name);
	size_t n = strlen(name), s = strlen(suffix);
	return n > s + 1 && name[n - s - 1] == '.' && !strcmp(name + n - s, suffix);
}

bool policy_ceiling_is_metadata_name(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(metadata_names); i++) {
		if (!strcmp(name, metadata_names[i]))
			return true;
	}
	return false;
}

int policy_ceiling_check_rule(const struct policy_ceiling *c, const struct policy_rule *rule, struct al_error *err)
{
	if (rule->kind == POLICY_RULE_CIDR ||
	    (rule->kind == POLICY_RULE_EXACT && rule->host.kind != POLICY_HOST_NAME)) {
		const struct policy_addr *net = rule->kind == POLICY_RULE_CIDR ? &rule->net : &rule->host.addr;
		unsigned len = rule->kind == POLICY_RULE_CIDR ? rule->prefix_len : (net->family == AF_INET ? 32 : 128);
		if (range_allowed(c, net, len))
			return 0;
		if (!c->metadata && policy_addr_range_has_metadata(net, len))
			return al_error_set(err, AL_ERR_FORBIDDEN, EPERM,
			                    "the metadata service needs the ceiling's \"metadata\": true");
		return al_error_set(err, AL_ERR_FORBIDDEN, EPERM, "names non-public addresses");
	}
	if (c->metadata)
		return 0;
	for (size_t i = 0; i < ARRAY_SIZE(metadata_names); i++) {
		if (name_matches(rule, metadata_names[i]))
			return al_error_set(err, AL_ERR_FORBIDDEN, EPERM,
			                    "%s is a metadata service; it needs the ceiling's \"metadata\": true",
			                    metadata_names[i]);
	}
	return 0;
}

void policy_ceiling_describe(const struct policy_ceiling *c, char *buf, size_t size)
{
	size_t off = (size_t)snprintf(buf, size, "public addresses");
	for (size_t i = 0; i < c->n_nets && off < size; i++) {
		char net[POLICY_RULE_TEXT_MAX + 1];
		if (policy_rule_format(&c->nets[i], net, sizeof(net)) < 0)
			continue;
		off += (size_t)snprintf(buf + off, size - off, ", %s", net);
	}
	if (c->metadata && off < size)
		snprintf(buf + off, size - off, ", metadata");
}
