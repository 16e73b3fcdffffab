/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's egress policy inside airlock-egress: {"allow":[RULE...],
 * "deny":[RULE...]} parsed once into an immutable, reference-counted object,
 * and the decisions the gateway takes with it (docs/egress.md, "Decision
 * rules").
 *
 * A sandbox holds its current policy in an egress_policy_slot; every
 * decision first takes a reference from the slot (egress_policy_slot_get)
 * and decides everything about one connection or DNS query with that one
 * object, so a policy update is atomic: a decision sees the old policy or
 * the new one, never a mix.
 *
 * SECURITY: the policy comes from airlockd, which validated it with the same
 * rule parser; it is parsed again here and refused whole if anything is
 * wrong (fail closed: the previous policy, or no sandbox, stays). Hosts and
 * addresses passed to the decision functions are canonical values
 * (policy_host_canonicalize) taken from guest input.
 */
#ifndef AIRLOCK_EGRESS_POLICY_H
#define AIRLOCK_EGRESS_POLICY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"
#include "policy-rule.h"

struct egress_policy;

/* How TLS connections the policy allows are handled (docs/egress.md,
 * "TLS interception"). */
enum egress_tls_mode {
	/* No "tls" (issue 17): inspect, the default, when airlockd has sent
	 * the Airlock CA; without one nothing can be intercepted, and hosts no
	 * binding names are spliced (tls_reason "no-ca"). */
	EGRESS_TLS_DEFAULT = 0,
	EGRESS_TLS_PASSTHROUGH, /* "passthrough": spliced, unless a secret binding names the host */
	EGRESS_TLS_INSPECT,     /* "inspect": every allowed TLS host is intercepted (except pinned ones); no CA: deny */
};

/*
 * Parses a policy object: keys "allow" and "deny" (each optional, an array
 * of at most POLICY_RULES_MAX strings), "tls" ("passthrough" or "inspect";
 * absent or null: EGRESS_TLS_DEFAULT), "pinned" (host patterns, never intercepted:
 * policy_host_pattern_parse), no other key. Any invalid rule refuses the
 * whole policy; the message names the list, the index and the rule
 * (escaped). Returns 0 or -EINVAL (AL_ERR_INVALID_ARGUMENT).
 * An empty allow list denies everything.
 */
int egress_policy_parse(const json_t *in, struct egress_policy **ret, struct al_error *err);

/* Reference counting; unref accepts NULL. Thread-safe. */
struct egress_policy *egress_policy_ref(struct egress_policy *p);
void egress_policy_unref(struct egress_policy *p);
static inline void egress_policy_unrefp(struct egress_policy **p)
{
	egress_policy_unref(*p);
}
#define cleanup_egress_policy __attribute__((cleanup(egress_policy_unrefp)))

size_t egress_policy_allow_count(const struct egress_policy *p);
size_t egress_policy_deny_count(const struct egress_policy *p);
size_t egress_policy_pinned_count(const struct egress_policy *p);

/* "tls" (NULL: EGRESS_TLS_DEFAULT). */
enum egress_tls_mode egress_policy_tls_mode(const struct egress_policy *p);
/* Is this canonical host pinned (never intercepted)? *ret_pattern (may be
 * NULL): the matching pattern's text, living as long as the policy. */
bool egress_policy_pinned(const struct egress_policy *p, const struct policy_host *host, const char **ret_pattern);

/*
 * May a connection to this canonical host (a name or an IP literal) on this
 * port go out? Deny rules win over allow rules; a rule without a port
 * matches ports 80 and 443 only (policy_rule_match). *ret_rule (may be NULL)
 * is the text of the deciding rule (the deny rule that matched, or the
 * allow rule), or NULL when no rule matched (denied by default); it lives as
 * long as the policy.
 */
bool egress_policy_decide_host(const struct egress_policy *p, const struct policy_host *host, uint16_t port,
                               const char **ret_rule);

/* The same for a connection known only by its address (IP and CIDR rules,
 * policy_rule_match_addr): the other-ports case without a DNS name. */
bool egress_policy_decide_addr(const struct egress_policy *p, const struct policy_addr *addr, uint16_t port,
                               const char **ret_rule);

/*
 * May the DNS listener answer this name? True when
 *  - no port-less deny rule matches the name ("deny example.com" takes the
 *    name away on every port), and
 *  - some port exists on which a connection to the name would be allowed:
 *    an allow rule matches it (on the rule's port, or on 80 or 443 for a
 *    rule without one) and egress_policy_decide_host() allows the name on
 *    that port (a deny rule for that same port takes that port away).
 * Only names (POLICY_HOST_NAME) can be allowed. *ret_rule as above: the
 * allow rule, or the deny rule that took the name away, or NULL.
 */
bool egress_policy_name_allowed(const struct egress_policy *p, const struct policy_host *host, const char **ret_rule);

/*
 * Does an allow rule name this address explicitly (an exact IP or a CIDR)
 * for this port (0: for any port)? Then the address may be dialled even if
 * it is private, loopback, ...: policy_addr_is_forbidden(addr, explicit).
 */
bool egress_policy_addr_explicit(const struct egress_policy *p, const struct policy_addr *addr, uint16_t port);

/* ------------------------------------------------------------ the slot */

/* Where a sandbox keeps its current policy: a pointer swapped under a mutex. */
struct egress_policy_slot {
	pthread_mutex_t lock;
	struct egress_policy *policy;
};

/* initial: a reference, taken over (may be NULL: deny everything). */
void egress_policy_slot_init(struct egress_policy_slot *slot, struct egress_policy *initial);
/* A new reference to the current policy (NULL if there is none). */
struct egress_policy *egress_policy_slot_get(struct egress_policy_slot *slot);
/* Replaces the policy; p is a reference, taken over. The old one is
 * released (decisions that hold it finish with it). */
void egress_policy_slot_set(struct egress_policy_slot *slot, struct egress_policy *p);
void egress_policy_slot_release(struct egress_policy_slot *slot);

/* ------------------------------------------------------------ text */

/*
 * Guest or client bytes made safe for a log line, a message or an event:
 * printable ASCII except '\\' is copied, everything else becomes \xHH. If
 * the result does not fit in out_size - 1 bytes it is cut (never inside an
 * escape) and ends with "...". out_size >= 4; out is always terminated.
 * Returns the length written.
 */
size_t egress_text_escape(const uint8_t *in, size_t len, char *out, size_t out_size);

#endif
