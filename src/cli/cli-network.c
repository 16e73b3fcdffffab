/* SPDX-License-Identifier: Apache-2.0 */
/* airlock network (show / replace a sandbox's egress policy) and
 * airlock logs --network (the gateway's decisions, from the event stream). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"
#include "json-cleanup.h"
#include "util.h"

void cli_network_add_rule(json_t *create_body, const char *list, const char *rule)
{
	json_t *net = json_object_get(create_body, "network");
	if (!net) {
		net = json_pack("{s:[], s:[]}", "allow", "deny");
		json_object_set_new(create_body, "network", net);
	}
	json_array_append_new(json_object_get(net, list), json_string(rule));
}

static void print_network(json_t *n)
{
	if (cli_opt_json) {
		cli_print_json(n, true);
		return;
	}
	json_t *policy = json_object_get(n, "policy"), *guest = json_object_get(n, "guest");
	cli_print_word_list("allow:", 0, json_object_get(policy, "allow"), "(none)");
	cli_print_word_list("deny:", 0, json_object_get(policy, "deny"), "(none)");
	printf("guest: %s, gateway %s, dns %s\n", cli_esc_json(guest, "address"), cli_esc_json(guest, "gateway"),
	       cli_esc_json(guest, "dns"));
	json_t *d = json_object_get(n, "dropped");
	if (json_is_object(d))
		printf("dropped: %lld packets, %lld bytes\n",
		       (long long)json_integer_value(json_object_get(d, "packets")),
		       (long long)json_integer_value(json_object_get(d, "bytes")));
}

struct network_opts {
	json_t *policy;
	bool set;
};

static int network_opt(int c, void *ud)
{
	struct network_opts *o = ud;
	if (c == 'a' || c == 'd') {
		json_array_append_new(json_object_get(o->policy, c == 'a' ? "allow" : "deny"), json_string(optarg));
		o->set = true;
	} else if (c == 'D') {
		o->set = true;
	}
	return 0;
}

int cli_cmd_network(int argc, char **argv)
{
	static const struct option longs[] = {
	    {"allow", required_argument, NULL, 'a'}, {"deny", required_argument, NULL, 'd'},
	    {"deny-all", no_argument, NULL, 'D'},    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0}};
	cleanup_json json_t *policy = json_pack("{s:[], s:[]}", "allow", "deny");
	struct network_opts o = {.policy = policy};
	int first = 0, r = cli_small_opts(argc, argv, "h", longs, &first, network_opt, &o);
	if (r)
		return r;
	if (first + 1 != argc)
		return cli_usage_error("network takes one sandbox id");
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/network", argv[first]);
	cleanup_json json_t *resp = NULL;
	if ((r = cli_call(o.set ? "PUT" : "GET", path, o.set ? policy : NULL, 200, &resp)))
		return r;
	print_network(resp);
	return 0;
}

/* One decision per line: time, verdict, what was asked, what was decided. */
static int on_network_event(void *ud, char *line, size_t len, struct al_error *err)
{
	(void)ud;
	(void)err; /* a write error is the transfer's */
	if (cli_opt_json) {
		int r = write_full(1, line, len);
		return r == 0 ? write_full(1, "\n", 1) : r;
	}
	cleanup_json json_t *e = json_loadb(line, len, 0, NULL);
	json_t *d = json_object_get(e, "data");
	if (!json_is_object(d))
		return 0;
	const char *type = json_string_value(json_object_get(e, "type"));
	const char *what = type && !strncmp(type, "network.", 8) ? type + 8 : "?";
	/* SECURITY: names the guest asked for (DNS names may hold any byte) are escaped. */
#define S(k) cli_esc(json_string_value(json_object_get(d, k)) ?: "-")
	printf("%s %-6s %-5s %-21s host=%s", cli_esc(json_string_value(json_object_get(e, "time")) ?: "-"),
	       cli_esc(what), S("proto"), S("dst"), S("host"));
	if (json_object_get(d, "addr") && !json_is_null(json_object_get(d, "addr")))
		printf(" addr=%s", S("addr"));
	if (!strcmp(what, "dns")) {
		cleanup_free char *answers = json_dumps(json_object_get(d, "answers"), JSON_COMPACT);
		printf(" qtype=%s answers=%s", S("qtype"), cli_esc(answers ? answers : "[]"));
	}
	if (json_is_string(json_object_get(d, "rule")))
		printf(" rule=%s", S("rule"));
	if (json_is_string(json_object_get(d, "reason")))
		printf(" reason=\"%s\"", S("reason"));
	if (!strcmp(what, "close"))
		printf(" up=%lld down=%lld", (long long)json_integer_value(json_object_get(d, "bytes_up")),
		       (long long)json_integer_value(json_object_get(d, "bytes_down")));
#undef S
	printf("\n");
	fflush(stdout);
	return 0;
}

int cli_network_logs(const char *sandbox, bool follow)
{
	cleanup_free char *base = xstrdup(follow ? "/v1/events?type=network.&follow=true" : "/v1/events?type=network.");
	cleanup_free char *path = cli_path_with_query(base, "sandbox", sandbox);
	return cli_get_lines(path, on_network_event);
}
