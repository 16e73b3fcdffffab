/* SPDX-License-Identifier: Apache-2.0 */
#include "network-policy.h"

#include <string.h>

#include "json-cleanup.h"
#include "json-field.h"
#include "policy-rule.h"
#include "util.h"

/* Set once at start-up (network_policy_set_ceiling); the default holds
 * public addresses only. */
static struct policy_ceiling ceiling;

void network_policy_set_ceiling(const struct policy_ceiling *c)
{
	ceiling = *c;
}

const struct policy_ceiling *network_policy_ceiling(void)
{
	return &ceiling;
}

/* SECURITY: an allow rule is what makes an address dialable; the operator's
 * ceiling bounds it for tenants and the operator alike (issue 17). */
static int check_ceiling(const struct policy_rule *rule, const char *key, size_t i, const char *text, size_t len,
                         struct al_error *err)
{
	struct al_error e = {0};
	if (policy_ceiling_check_rule(&ceiling, rule, &e) == 0)
		return 0;
	char desc[1024];
	policy_ceiling_describe(&ceiling, desc, sizeof(desc));
	return al_error_set(err, AL_ERR_FORBIDDEN, EPERM,
	                    "network.%s[%zu] \"%.*s\": outside the operator's network ceiling (%s); %s", key, i,
	                    (int)MIN(len, 200), text, desc, e.message);
}

/* names_only: "pinned" holds TLS server names, never addresses
 * (policy_host_pattern_parse, as in the gateway). */
static int parse_list(const json_t *in, const char *key, bool names_only, json_t *out, struct al_error *err)
{
	const json_t *list = json_object_get(in, key);
	if (!list)
		return 0;
	if (!json_is_array(list))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "network.%s: must be an array of rules", key);
	if (json_array_size(list) > POLICY_RULES_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG, "network.%s: at most %d rules", key,
		                    POLICY_RULES_MAX);
	size_t i;
	const json_t *v;
	json_array_foreach (list, i, v) {
		if (!json_is_string(v))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "network.%s[%zu]: must be a string",
			                    key, i);
		const char *text = json_string_value(v);
		size_t len = json_string_length(v);
		struct policy_rule rule;
		struct al_error e;
		if (len > POLICY_RULE_TEXT_MAX || json_string_has_nul(v))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "network.%s[%zu]: not a rule (too long)", key, i);
		int r = names_only ? policy_host_pattern_parse(text, len, &rule, &e)
		                   : policy_rule_parse(text, len, &rule, &e);
		if (r < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "network.%s[%zu] \"%.*s\": %s", key,
			                    i, (int)MIN(len, 200), text, e.message);
		if (!strcmp(key, "allow") && (r = check_ceiling(&rule, key, i, text, len, err)) < 0)
			return r;
		json_array_append_new(out, json_stringn(text, len));
	}
	return 0;
}

int network_ceiling_parse(const json_t *in, const char *const *public_cidrs, size_t n_public_cidrs,
                          struct policy_ceiling *ret, struct al_error *err)
{
	struct policy_ceiling c = {0};
	const char *key;
	const json_t *v;
	if (in && !json_is_object(in))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "must be an object {\"allow\": [networks], \"metadata\": false}");
	json_object_foreach ((json_t *)in, key, v) {
		if (strcmp(key, "allow") && strcmp(key, "metadata"))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "unknown field \"%.64s\" (known: allow, metadata)", key);
	}
	const json_t *meta = json_object_get(in, "metadata");
	if (meta && !json_is_boolean(meta))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "metadata: must be true or false");
	c.metadata = json_is_true(meta);
	const json_t *allow = json_object_get(in, "allow");
	if (allow && !json_is_array(allow))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "allow: must be an array of networks");
	size_t i;
	json_array_foreach (allow, i, v) {
		if (!json_is_string(v) || json_string_has_nul(v) || json_string_length(v) > POLICY_RULE_TEXT_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "allow[%zu]: must be a network", i);
		int r = policy_ceiling_add_net(&c, json_string_value(v), json_string_length(v), err);
		if (r < 0) {
			al_error_prefix(err, "allow[%zu]", i);
			return r;
		}
	}
	/* The networks the gateway dials as if public are public here too. */
	for (i = 0; i < n_public_cidrs; i++) {
		int r = policy_ceiling_add_net(&c, public_cidrs[i], strlen(public_cidrs[i]), err);
		if (r < 0) {
			al_error_prefix(err, "--egress-public-cidr");
			return r;
		}
	}
	*ret = c;
	return 0;
}

int network_policy_parse(const json_t *in, char **ret_json, struct al_error *err)
{
	if (!json_is_object(in))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "network: must be an object {\"allow\": [rules], \"deny\": [rules]}");
	const char *key;
	const json_t *v;
	json_object_foreach ((json_t *)in, key, v) {
		if (strcmp(key, "allow") && strcmp(key, "deny") && strcmp(key, "tls") && strcmp(key, "pinned"))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "network: unknown field \"%.64s\" (known: allow, deny, tls, pinned)", key);
	}
	cleanup_json json_t *allow = json_array();
	cleanup_json json_t *deny = json_array();
	cleanup_json json_t *pinned = json_array();
	int r = parse_list(in, "allow", false, allow, err);
	if (r == 0)
		r = parse_list(in, "deny", false, deny, err);
	if (r == 0)
		r = parse_list(in, "pinned", true, pinned, err);
	if (r < 0)
		return r;
	const json_t *tls = json_object_get(in, "tls");
	const char *mode = json_string_value(tls);
	if (tls && !json_is_null(tls) && (!mode || (strcmp(mode, "passthrough") && strcmp(mode, "inspect"))))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "network.tls: \"inspect\" (every allowed TLS host is intercepted: Host = SNI on "
		                    "every request; the default) or \"passthrough\" (only hosts a secret is bound to "
		                    "are; not fronting-proof)");
	cleanup_json json_t *out = json_pack("{sOsO}", "allow", allow, "deny", deny);
	/* Issue 17: absent means the default (inspect). An explicit mode is
	 * kept as given: "inspect" without a CA in the gateway is refused
	 * where the default falls back to splicing (docs/egress.md). */
	if (mode)
		json_object_set_new(out, "tls", json_string(mode));
	if (json_array_size(pinned) > 0)
		json_object_set(out, "pinned", pinned);
	char *text = json_dumps(out, JSON_COMPACT | JSON_SORT_KEYS);
	if (strlen(text) > NETWORK_POLICY_JSON_MAX) {
		free(text);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG, "network: the policy is over %u bytes",
		                    NETWORK_POLICY_JSON_MAX);
	}
	*ret_json = text;
	return 0;
}
