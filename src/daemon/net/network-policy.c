/* SPDX-License-Identifier: Apache-2.0 */
#include "network-policy.h"

#include <string.h>

#include "json-cleanup.h"
#include "json-field.h"
#include "policy-rule.h"
#include "util.h"

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
		json_array_append_new(out, json_stringn(text, len));
	}
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
		                    "network.tls: \"passthrough\" (default: only hosts a secret is bound to are "
		                    "intercepted) or \"inspect\" (every allowed TLS host is)");
	cleanup_json json_t *out = json_pack("{sOsO}", "allow", allow, "deny", deny);
	/* Defaults are left out, so that a policy has one spelling. */
	if (mode && !strcmp(mode, "inspect"))
		json_object_set_new(out, "tls", json_string("inspect"));
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
