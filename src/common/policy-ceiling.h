/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operator's network ceiling (issue 17): what a policy's rules may name.
 * By default only public addresses; the operator adds networks
 * ({"allow":["10.20.0.0/16"]}) and may open the cloud metadata service
 * ({"metadata":true}). airlockd checks every policy it accepts against it,
 * and the gateway bounds the dial-time exception of an explicit rule by it.
 *
 * SECURITY: a tenant's policy is client input; the gateway dials from the
 * host's network namespace, so an unbounded IP or CIDR rule would reach the
 * host's LAN, container networks and the instance metadata service.
 */
#ifndef AIRLOCK_POLICY_CEILING_H
#define AIRLOCK_POLICY_CEILING_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "policy-rule.h"

#define POLICY_CEILING_NETS_MAX 64

struct policy_ceiling {
	/* Networks beyond the public space (CIDR rules without a port). */
	struct policy_rule nets[POLICY_CEILING_NETS_MAX];
	size_t n_nets;
	bool metadata; /* the metadata addresses and names may be named */
};

/* Adds a network ("10.20.0.0/16", "192.0.2.7"; one already there is not
 * added twice), or -EINVAL/-E2BIG with a message. */
int policy_ceiling_add_net(struct policy_ceiling *c, const char *text, size_t len, struct al_error *err);

/* Is the address within the ceiling (public, or in one of its networks;
 * metadata only with "metadata": true)? The gateway's dial-time check. */
bool policy_ceiling_allows_addr(const struct policy_ceiling *c, const struct policy_addr *a);

/* Is the host name one of the cloud metadata services' names
 * (metadata.google.internal ...)? */
bool policy_ceiling_is_metadata_name(const char *name);

/*
 * Is an allow rule within the ceiling? IP and CIDR rules: their whole range
 * public, or inside one of the ceiling's networks, and no metadata address
 * unless c->metadata. Name rules: not a metadata name (nor a wildcard over
 * one) unless c->metadata. Returns 0, or -EPERM with a message saying why
 * (the caller names the rule).
 */
int policy_ceiling_check_rule(const struct policy_ceiling *c, const struct policy_rule *rule, struct al_error *err);

/* "public addresses, 10.20.0.0/16, metadata" for messages. */
void policy_ceiling_describe(const struct policy_ceiling *c, char *buf, size_t size);

#endif
