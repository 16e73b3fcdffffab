/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The limits of the policy grammar (policy-host.h, policy-rule.h): what
 * airlockd accepts from a client, what airlock-egress accepts from airlockd
 * and what the CLI checks before it sends anything. One definition each, so
 * that the three never disagree about what fits.
 */
#ifndef AIRLOCK_POLICY_LIMITS_H
#define AIRLOCK_POLICY_LIMITS_H

/* Host names (policy_host_canonicalize). */
#define POLICY_HOST_NAME_MAX 253   /* canonical name, bytes, without trailing dot */
#define POLICY_HOST_LABEL_MAX 63   /* bytes of one (A-)label */
#define POLICY_HOST_INPUT_MAX 1024 /* raw input bytes (UTF-8 labels are longer than their A-labels) */

/* Rules (policy_rule_parse). */
#define POLICY_RULE_TEXT_MAX 1100 /* a rule's text: "*." + host input + "/128:65535" */
#define POLICY_RULES_MAX 512      /* rules of one list of a policy ("allow", "deny", "pinned") */

/* A secret's value, bytes; no control characters but HT, no space at either
 * end (it goes into a header): with the longest format airlockd accepts
 * (256 bytes) it still fits one header value of the gateway's rewriter
 * (EGRESS_HTTP1_VALUE_MAX, 8064). */
#define POLICY_SECRET_VALUE_MAX 7680

/* What a sandbox holds in place of a secret: the prefix and 64 lower-case
 * hex digits (airlockd makes them; the gateway finds and replaces them). */
#define POLICY_PLACEHOLDER_PREFIX "airlock-ph-"
#define POLICY_PLACEHOLDER_LEN (sizeof(POLICY_PLACEHOLDER_PREFIX) - 1 + 64)
/* Where a header binding's format puts the value ("Bearer {value}"). */
#define POLICY_FORMAT_VALUE "{value}"

#endif
