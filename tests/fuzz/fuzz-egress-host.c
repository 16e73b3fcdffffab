/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for host canonicalisation, host:port splitting, rules and
 * their canonical text: the policy grammar (src/common/policy-host.c,
 * policy-rule.c) that airlockd validates with and the egress gateway
 * enforces with.
 *
 * Input: "RULE\nHOST" (no newline: the whole input is a host). Checks,
 * beyond the sanitizers:
 *  - a canonical name is lower-case LDH labels of 1..63 bytes, <= 253 bytes,
 *    no leading/trailing hyphen, and canonicalising it again is the identity
 *    (IP literals likewise, IPv6 in brackets);
 *  - every "xn--" label of a canonical name decodes and re-encodes to itself;
 *  - format + split + canonicalise gives back the same host and port;
 *  - a rule's canonical text parses back to the same rule, whose text is the
 *    same again;
 *  - a matching wildcard rule means the host ends in ".suffix" with at least
 *    one label before it; a matching exact rule means the same canonical name.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy-rule.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-egress-host: check failed: %s (line %d)\n", #cond, __LINE__);            \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static void check_name(const struct policy_host *h)
{
	CHECK(h->len >= 1 && h->len <= POLICY_HOST_NAME_MAX && strlen(h->name) == h->len);
	size_t start = 0;
	for (size_t i = 0; i <= h->len; i++) {
		if (i < h->len && h->name[i] != '.') {
			char c = h->name[i];
			CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
			continue;
		}
		size_t l = i - start;
		const char *label = h->name + start;
		CHECK(l >= 1 && l <= POLICY_HOST_LABEL_MAX);
		CHECK(label[0] != '-' && label[l - 1] != '-');
		if (l > 4 && memcmp(label, "xn--", 4) == 0) {
			uint32_t cps[POLICY_HOST_LABEL_MAX];
			size_t n, elen;
			char again[POLICY_HOST_LABEL_MAX];
			CHECK(policy_punycode_decode(label + 4, l - 4, cps, ARRAY_SIZE(cps), &n) == 0);
			CHECK(policy_punycode_encode(cps, n, again, sizeof(again), &elen) == 0);
			CHECK(elen == l - 4 && memcmp(again, label + 4, elen) == 0);
		}
		start = i + 1;
	}
}

static void check_host(const struct policy_host *h)
{
	struct policy_host again;
	char buf[POLICY_HOST_NAME_MAX + 16];
	switch (h->kind) {
	case POLICY_HOST_NAME:
		check_name(h);
		break;
	case POLICY_HOST_IPV4:
		CHECK(h->addr.family == AF_INET);
		break;
	case POLICY_HOST_IPV6:
		CHECK(h->addr.family == AF_INET6);
		break;
	default:
		CHECK(0);
	}
	/* idempotent, through the format the gateway logs and the splitter */
	uint16_t port = (uint16_t)(1 + h->len * 131u % 65535u);
	CHECK(policy_host_format(h, port, buf, sizeof(buf)) == 0);
	const uint8_t *hp;
	size_t hl;
	uint16_t p2;
	CHECK(policy_host_split_port((const uint8_t *)buf, strlen(buf), &hp, &hl, &p2, NULL) == 0);
	CHECK(p2 == port);
	CHECK(policy_host_canonicalize(hp, hl, &again, NULL) == 0);
	CHECK(again.kind == h->kind && again.len == h->len && strcmp(again.name, h->name) == 0);
	struct policy_addr_info info;
	if (h->kind != POLICY_HOST_NAME)
		policy_addr_classify(&h->addr, &info);
}

static void check_rule_text(const struct policy_rule *rule)
{
	char text[POLICY_RULE_TEXT_MAX + 1], again_text[POLICY_RULE_TEXT_MAX + 1];
	struct policy_rule again;
	struct al_error err = {0};
	CHECK(policy_rule_format(rule, text, sizeof(text)) == 0);
	if (policy_rule_parse(text, strlen(text), &again, &err) != 0) {
		fprintf(stderr, "fuzz-egress-host: canonical text \"%s\" refused: %s\n", text, err.message);
		CHECK(0);
	}
	CHECK(again.kind == rule->kind && again.port == rule->port);
	if (rule->kind == POLICY_RULE_CIDR)
		CHECK(again.prefix_len == rule->prefix_len && policy_addr_equal(&again.net, &rule->net));
	else
		CHECK(again.host.kind == rule->host.kind && strcmp(again.host.name, rule->host.name) == 0);
	CHECK(policy_rule_format(&again, again_text, sizeof(again_text)) == 0);
	CHECK(strcmp(text, again_text) == 0);
	CHECK(policy_rule_is_host_pattern(&again) == policy_rule_is_host_pattern(rule));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	const uint8_t *host_in = nl ? nl + 1 : data;
	size_t host_len = nl ? size - (size_t)(nl + 1 - data) : size;

	struct policy_host h;
	struct al_error err = {0};
	int r = policy_host_canonicalize(host_in, host_len, &h, &err);
	CHECK(r == 0 || r == -EINVAL || r == -ENAMETOOLONG || r == -EILSEQ);
	if (r == 0)
		check_host(&h);
	else
		CHECK(err.message[0] != '\0');

	/* host:port splitting of the same bytes */
	const uint8_t *hp;
	size_t hl;
	uint16_t port = 0;
	if (policy_host_split_port(host_in, host_len, &hp, &hl, &port, NULL) == 0) {
		CHECK(hp == host_in && hl >= 1 && hl <= host_len);
		struct policy_host h2;
		if (policy_host_canonicalize(hp, hl, &h2, NULL) == 0)
			check_host(&h2);
	}

	if (!nl)
		return 0;
	struct policy_rule rule;
	if (policy_rule_parse((const char *)data, (size_t)(nl - data), &rule, &err) < 0)
		return 0;
	check_rule_text(&rule);
	if (r < 0)
		return 0;
	for (int k = 0; k < 3; k++) {
		uint16_t p = k == 0 ? 443 : k == 1 ? 80 : (rule.port ? rule.port : 22);
		bool m = policy_rule_match(&rule, &h, p);
		if (!m)
			continue;
		CHECK(rule.port ? p == rule.port : (p == 80 || p == 443));
		switch (rule.kind) {
		case POLICY_RULE_EXACT:
			CHECK(h.kind == rule.host.kind && strcmp(h.name, rule.host.name) == 0);
			break;
		case POLICY_RULE_WILDCARD:
			CHECK(h.kind == POLICY_HOST_NAME && h.len > rule.host.len + 1);
			CHECK(h.name[h.len - rule.host.len - 1] == '.');
			CHECK(strcmp(h.name + h.len - rule.host.len, rule.host.name) == 0);
			break;
		case POLICY_RULE_CIDR:
			CHECK(h.kind != POLICY_HOST_NAME && h.addr.family == rule.net.family);
			CHECK(policy_rule_match_addr(&rule, &h.addr, p));
			break;
		}
	}
	return 0;
}
