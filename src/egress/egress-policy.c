/* SPDX-License-Identifier: Apache-2.0 */
#include "egress-policy.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "util.h"

struct egress_rule_list {
	size_t n;
	struct policy_rule *rules;
	char **texts; /* as given, for events */
};

struct egress_policy {
	atomic_uint refs;
	struct egress_rule_list allow;
	struct egress_rule_list deny;
	enum egress_tls_mode tls;
	struct egress_rule_list pinned; /* host patterns, never intercepted */
};

static void rule_list_release(struct egress_rule_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->texts[i]);
	free(l->texts);
	free(l->rules);
	*l = (struct egress_rule_list){0};
}

/* kind "rules" (allow, deny: policy_rule_parse) or "hosts" (pinned:
 * policy_host_pattern_parse). */
static int rule_list_parse(const json_t *arr, const char *key, bool hosts, struct egress_rule_list *ret,
                           struct al_error *err)
{
	if (!json_is_array(arr))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "policy: \"%s\" must be an array of %s", key,
		                    hosts ? "host patterns" : "rules");
	size_t n = json_array_size(arr);
	if (n > POLICY_RULES_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "policy: \"%s\" has %zu rules, at most %d",
		                    key, n, POLICY_RULES_MAX);
	struct egress_rule_list l = {0};
	if (n > 0) {
		l.rules = xcalloc(n, sizeof(*l.rules));
		l.texts = xcalloc(n, sizeof(*l.texts));
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *v = json_array_get(arr, i);
		if (!json_is_string(v)) {
			rule_list_release(&l);
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "policy: %s[%zu] is not a string",
			                    key, i);
		}
		const char *text = json_string_value(v);
		size_t len = json_string_length(v);
		struct al_error e = {0};
		int r = -EINVAL;
		if (memchr(text, '\0', len))
			al_error_set(&e, AL_ERR_INVALID_ARGUMENT, EINVAL, "NUL byte in rule");
		else if (hosts)
			r = policy_host_pattern_parse(text, len, &l.rules[i], &e);
		else
			r = policy_rule_parse(text, len, &l.rules[i], &e);
		if (r < 0) {
			char shown[128];
			egress_text_escape((const uint8_t *)text, len, shown, sizeof(shown));
			rule_list_release(&l);
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "policy: %s[%zu] \"%s\": %s", key, i,
			                    shown, e.message);
		}
		l.texts[i] = xstrndup(text, len);
		l.n = i + 1;
	}
	*ret = l;
	return 0;
}

int egress_policy_parse(const json_t *in, struct egress_policy **ret, struct al_error *err)
{
	if (!json_is_object(in))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "policy must be an object {\"allow\":[...],\"deny\":[...]}");
	const char *key;
	const json_t *v;
	json_object_foreach ((json_t *)in, key, v) {
		if (strcmp(key, "allow") != 0 && strcmp(key, "deny") != 0 && strcmp(key, "tls") != 0 &&
		    strcmp(key, "pinned") != 0) {
			char shown[64];
			egress_text_escape((const uint8_t *)key, strlen(key), shown, sizeof(shown));
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "policy: unknown key \"%s\" (only \"allow\", \"deny\", \"tls\" and "
			                    "\"pinned\")",
			                    shown);
		}
	}
	enum egress_tls_mode tls = EGRESS_TLS_DEFAULT;
	const json_t *tj = json_object_get(in, "tls");
	if (tj && !json_is_null(tj)) {
		const char *t = json_string_value(tj);
		if (t && strcmp(t, "inspect") == 0 && json_string_length(tj) == 7)
			tls = EGRESS_TLS_INSPECT;
		else if (t && strcmp(t, "passthrough") == 0 && json_string_length(tj) == 11)
			tls = EGRESS_TLS_PASSTHROUGH;
		else
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "policy: \"tls\" must be \"passthrough\" or \"inspect\"");
	}
	struct egress_policy *p = xcalloc(1, sizeof(*p));
	atomic_init(&p->refs, 1);
	p->tls = tls;
	const json_t *allow = json_object_get(in, "allow");
	const json_t *deny = json_object_get(in, "deny");
	const json_t *pinned = json_object_get(in, "pinned");
	int r = 0;
	if (allow)
		r = rule_list_parse(allow, "allow", false, &p->allow, err);
	if (r == 0 && deny)
		r = rule_list_parse(deny, "deny", false, &p->deny, err);
	if (r == 0 && pinned)
		r = rule_list_parse(pinned, "pinned", true, &p->pinned, err);
	if (r < 0) {
		egress_policy_unref(p);
		return r;
	}
	*ret = p;
	return 0;
}

struct egress_policy *egress_policy_ref(struct egress_policy *p)
{
	if (p)
		atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
	return p;
}

void egress_policy_unref(struct egress_policy *p)
{
	if (!p || atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1)
		return;
	rule_list_release(&p->allow);
	rule_list_release(&p->deny);
	rule_list_release(&p->pinned);
	free(p);
}

size_t egress_policy_allow_count(const struct egress_policy *p)
{
	return p ? p->allow.n : 0;
}

size_t egress_policy_deny_count(const struct egress_policy *p)
{
	return p ? p->deny.n : 0;
}

static const char *list_match_host(const struct egress_rule_list *l, const struct policy_host *host, uint16_t port)
{
	for (size_t i = 0; i < l->n; i++)
		if (policy_rule_match(&l->rules[i], host, port))
			return l->texts[i];
	return NULL;
}

enum egress_tls_mode egress_policy_tls_mode(const struct egress_policy *p)
{
	return p ? p->tls : EGRESS_TLS_DEFAULT;
}

size_t egress_policy_pinned_count(const struct egress_policy *p)
{
	return p ? p->pinned.n : 0;
}

bool egress_policy_pinned(const struct egress_policy *p, const struct policy_host *host, const char **ret_pattern)
{
	const char *pattern = p ? list_match_host(&p->pinned, host, POLICY_PORT_TLS) : NULL;
	if (ret_pattern)
		*ret_pattern = pattern;
	return pattern != NULL;
}

static const char *list_match_addr(const struct egress_rule_list *l, const struct policy_addr *addr, uint16_t port)
{
	for (size_t i = 0; i < l->n; i++)
		if (policy_rule_match_addr(&l->rules[i], addr, port))
			return l->texts[i];
	return NULL;
}

static bool verdict(const char *deny_rule, const char *allow_rule, const char **ret_rule)
{
	/* SECURITY: deny wins; nothing matched is a deny (default deny). */
	const char *rule = deny_rule ? deny_rule : allow_rule;
	if (ret_rule)
		*ret_rule = rule;
	return !deny_rule && allow_rule;
}

bool egress_policy_decide_host(const struct egress_policy *p, const struct policy_host *host, uint16_t port,
                               const char **ret_rule)
{
	if (!p || port == 0)
		return verdict(NULL, NULL, ret_rule);
	return verdict(list_match_host(&p->deny, host, port), list_match_host(&p->allow, host, port), ret_rule);
}

bool egress_policy_decide_addr(const struct egress_policy *p, const struct policy_addr *addr, uint16_t port,
                               const char **ret_rule)
{
	if (!p || port == 0)
		return verdict(NULL, NULL, ret_rule);
	return verdict(list_match_addr(&p->deny, addr, port), list_match_addr(&p->allow, addr, port), ret_rule);
}

bool egress_policy_name_allowed(const struct egress_policy *p, const struct policy_host *host, const char **ret_rule)
{
	const char *blocked_by = NULL;
	if (!p || host->kind != POLICY_HOST_NAME)
		return verdict(NULL, NULL, ret_rule);
	/* A port-less deny rule takes the name away entirely, as one expects
	 * of "deny example.com", even if an allow rule opens another port. */
	for (size_t i = 0; i < p->deny.n; i++) {
		if (p->deny.rules[i].port == 0 && policy_rule_match(&p->deny.rules[i], host, POLICY_PORT_HTTP)) {
			if (ret_rule)
				*ret_rule = p->deny.texts[i];
			return false;
		}
	}
	/* The name is answered if a connection to it could be allowed on some
	 * port: try each port an allow rule that names it opens. */
	for (size_t i = 0; i < p->allow.n; i++) {
		const struct policy_rule *a = &p->allow.rules[i];
		const uint16_t portless[] = {POLICY_PORT_HTTP, POLICY_PORT_TLS};
		const uint16_t *ports = a->port ? &a->port : portless;
		size_t nports = a->port ? 1 : ARRAY_SIZE(portless);
		for (size_t k = 0; k < nports; k++) {
			if (!policy_rule_match(a, host, ports[k]))
				continue;
			const char *deny = list_match_host(&p->deny, host, ports[k]);
			if (!deny) {
				if (ret_rule)
					*ret_rule = p->allow.texts[i];
				return true;
			}
			if (!blocked_by)
				blocked_by = deny;
		}
	}
	if (ret_rule)
		*ret_rule = blocked_by;
	return false;
}

bool egress_policy_addr_explicit(const struct egress_policy *p, const struct policy_addr *addr, uint16_t port)
{
	if (!p)
		return false;
	for (size_t i = 0; i < p->allow.n; i++) {
		const struct policy_rule *a = &p->allow.rules[i];
		/* port 0: any port the rule opens (its own, or 80 for a
		 * port-less rule, which opens 80 and 443 alike). */
		uint16_t q = port ? port : (a->port ? a->port : POLICY_PORT_HTTP);
		if (policy_rule_match_addr(a, addr, q))
			return true;
	}
	return false;
}

/* ------------------------------------------------------------ the slot */

void egress_policy_slot_init(struct egress_policy_slot *slot, struct egress_policy *initial)
{
	pthread_mutex_init(&slot->lock, NULL);
	slot->policy = initial;
}

struct egress_policy *egress_policy_slot_get(struct egress_policy_slot *slot)
{
	pthread_mutex_lock(&slot->lock);
	struct egress_policy *p = egress_policy_ref(slot->policy);
	pthread_mutex_unlock(&slot->lock);
	return p;
}

void egress_policy_slot_set(struct egress_policy_slot *slot, struct egress_policy *p)
{
	pthread_mutex_lock(&slot->lock);
	struct egress_policy *old = slot->policy;
	slot->policy = p;
	pthread_mutex_unlock(&slot->lock);
	egress_policy_unref(old);
}

void egress_policy_slot_release(struct egress_policy_slot *slot)
{
	egress_policy_unref(slot->policy);
	slot->policy = NULL;
	pthread_mutex_destroy(&slot->lock);
}

/* ------------------------------------------------------------ text */

static bool escape_plain(uint8_t b)
{
	return b >= 0x20 && b < 0x7f && b != '\\';
}

size_t egress_text_escape(const uint8_t *in, size_t len, char *out, size_t out_size)
{
	static const char hex[] = "0123456789abcdef";
	if (out_size < 4) {
		if (out_size > 0)
			out[0] = '\0';
		return 0;
	}
	size_t cap = out_size - 1, full = 0;
	for (size_t i = 0; i < len && full <= cap; i++)
		full += escape_plain(in[i]) ? 1 : 4;
	/* When it does not all fit, keep room for "..." (cap >= 3). */
	size_t limit = full <= cap ? cap : cap - 3;
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		uint8_t b = in[i];
		if (o + (escape_plain(b) ? 1 : 4) > limit)
			break;
		if (escape_plain(b)) {
			out[o++] = (char)b;
		} else {
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[b >> 4];
			out[o++] = hex[b & 15];
		}
	}
	if (full > cap) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
	return o;
}
