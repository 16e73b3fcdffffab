/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Egress policies as airlockd stores and hands them to airlock-egress:
 * {"allow":[RULE...],"deny":[RULE...]}, RULE as policy_rule_parse() reads it
 * ("example.com", "*.example.com", "api.example.com:8443", "203.0.113.0/24",
 * "203.0.113.7:22", "[2001:db8::1]:443"). Deny wins over allow; an empty
 * allow list denies everything (the default). Optional (issue 6):
 * "tls":"passthrough"|"inspect" and "pinned":[host patterns never
 * intercepted]. docs/egress.md has the decision rules.
 */
#ifndef AIRLOCK_NETWORK_POLICY_H
#define AIRLOCK_NETWORK_POLICY_H

#include <jansson.h>

#include "error.h"
#include "policy-ceiling.h"
#include "policy-limits.h"

#define NETWORK_POLICY_JSON_MAX (256u * 1024u) /* canonical text; fits a control message */

/*
 * Validates a policy object from a client or the operator's default and
 * returns its canonical JSON text (keys sorted, both lists present, rules
 * as given). Unknown keys, non-string rules, more than
 * POLICY_RULES_MAX rules in a list, any rule policy_rule_parse() refuses
 * and a "pinned" entry that is not a host pattern (policy_host_pattern_parse)
 * are errors (AL_ERR_INVALID_ARGUMENT) naming the rule. An allow rule
 * outside the operator's ceiling (network_policy_set_ceiling) is
 * AL_ERR_FORBIDDEN (403), its message naming the rule and the ceiling.
 * SECURITY: client input; every rule is parsed with the policy grammar
 * airlock-egress enforces with (src/common/policy-rule.c), so what airlockd
 * accepts is exactly what the gateway enforces.
 */
int network_policy_parse(const json_t *in, char **ret_json, struct al_error *err);

/*
 * The operator's ceiling from --network-ceiling's JSON (NULL: the default,
 * public addresses only): {"allow": [networks or addresses without a port],
 * "metadata": bool}, unknown fields refused; the --egress-public-cidr
 * networks are added to its networks.
 */
int network_ceiling_parse(const json_t *in, const char *const *public_cidrs, size_t n_public_cidrs,
                          struct policy_ceiling *ret, struct al_error *err);

/* The operator's ceiling (--network-ceiling, plus the --egress-public-cidr
 * networks), copied; set once at start-up before any policy is parsed.
 * Until then: public addresses only. */
void network_policy_set_ceiling(const struct policy_ceiling *c);
const struct policy_ceiling *network_policy_ceiling(void);

#endif
