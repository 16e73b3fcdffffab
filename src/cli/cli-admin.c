/* SPDX-License-Identifier: Apache-2.0 */
/* stats, token, tenant and events: metrics and administration. */
#include "cli.h"

/* ------------------------------------------------------------ stats */

int cli_cmd_stats(int argc, char **argv)
{
	const char *id;
	int r = cli_sandbox_operand(argc, argv, &id);
	if (r)
		return r;
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/metrics", id);
	cleanup_json json_t *m = NULL;
	if ((r = cli_call("GET", path, NULL, 200, &m)))
		return r;
	if (cli_opt_json) {
		cli_print_json(m, true);
		return 0;
	}
#define NUM(k) ((long long)json_integer_value(json_object_get(m, k)))
	long long mem_total = NUM("mem_total_kib"), mem_avail = NUM("mem_available_kib");
	long long disk_total = NUM("disk_total_bytes"), disk_used = NUM("disk_used_bytes");
	printf("cpus          %lld\n", NUM("cpus"));
	printf("cpu time      %.3f s\n", (double)NUM("cpu_usage_usec") / 1e6);
	printf("memory used   %lld MiB of %lld MiB\n", (mem_total - mem_avail) / 1024, mem_total / 1024);
	printf("disk used     %lld MiB of %lld MiB\n", disk_used >> 20, disk_total >> 20);
	printf("uptime        %.1f s\n", (double)NUM("uptime_ms") / 1e3);
	printf("processes     %lld\n", NUM("processes"));
#undef NUM
	return 0;
}

/* ------------------------------------------------------------ token */

struct token_opts {
	const char *tenant, *description;
};

static int token_opt(int c, void *ud)
{
	struct token_opts *o = ud;
	if (c == 't')
		o->tenant = optarg;
	else if (c == 'd')
		o->description = optarg;
	return 0;
}

static void print_token_row(json_t *t)
{
	const char *d = json_string_value(json_object_get(t, "description"));
	bool revoked = json_is_string(json_object_get(t, "revoked_at"));
	printf("%-24s %-16s %-8s %-25s %s\n", cli_esc_json(t, "id"), cli_esc_json(t, "tenant"),
	       revoked ? "revoked" : "active", cli_esc_json(t, "created_at"), cli_esc(d ? d : ""));
}

int cli_cmd_token(int argc, char **argv)
{
	static const struct option longs[] = {{"tenant", required_argument, NULL, 't'},
	                                      {"description", required_argument, NULL, 'd'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	if (argc < 2)
		return cli_usage_error("token takes create, ls or rm");
	const char *sub = argv[1];
	struct token_opts o = {0};
	int first = 0, r = cli_small_opts(argc - 1, argv + 1, "h", longs, &first, token_opt, &o);
	if (r)
		return r;
	char **ops = argv + 1 + first;
	int n = argc - 1 - first;
	cleanup_json json_t *resp = NULL;
	if (!strcmp(sub, "create")) {
		if (n != 0 || !o.tenant)
			return cli_usage_error("token create takes --tenant NAME [--description D] and no operands");
		cleanup_json json_t *body = json_pack("{s:s}", "tenant", o.tenant);
		if (o.description)
			json_object_set_new(body, "description", json_string(o.description));
		if ((r = cli_call("POST", "/v1/tokens", body, 201, &resp)))
			return r;
		const char *tok = json_string_value(json_object_get(resp, "token"));
		if (!tok)
			return cli_client_error("the daemon's answer has no token");
		if (cli_opt_json) {
			cli_print_json(resp, true);
			return 0;
		}
		/* The secret alone on stdout (for $(...)); the id for 'token rm' on stderr. */
		printf("%s\n", tok);
		fprintf(stderr, "token id: %s (shown once; revoke with 'airlock token rm %s')\n",
		        json_string_value(json_object_get(resp, "id")), json_string_value(json_object_get(resp, "id")));
		return 0;
	}
	if (o.tenant || o.description)
		return cli_usage_error("token %s: --tenant and --description are for token create", sub);
	if (!strcmp(sub, "ls")) {
		if (n != 0)
			return cli_usage_error("token ls takes no operands");
		return cli_print_table("/v1/tokens", "tokens", print_token_row, "%-24s %-16s %-8s %-25s %s\n", "ID",
		                       "TENANT", "STATE", "CREATED", "DESCRIPTION");
	}
	if (!strcmp(sub, "rm")) {
		if (n < 1)
			return cli_usage_error("token rm takes one or more token ids");
		return cli_call_each("DELETE", "/v1/tokens", "", ops, n, 204);
	}
	return cli_usage_error("token: unknown subcommand \"%s\" (create, ls, rm)", sub);
}

/* ------------------------------------------------------------ tenant */

static int tenant_opt(int c, void *ud)
{
	json_t *q = ud;
	static const char *const fields[] = {"max_sandboxes", "max_vcpus", "max_memory_mib"};
	static const char *const flags[] = {"--max-sandboxes", "--max-vcpus", "--max-memory"};
	if (c < 1 || c > 3)
		return 0;
	long v;
	if (parse_int_range(optarg, 0, 1L << 40, &v) < 0)
		return cli_usage_error("%s takes a whole number (0 = unlimited), got \"%s\"", flags[c - 1], optarg);
	json_object_set_new(q, fields[c - 1], json_integer(v));
	return 0;
}

int cli_cmd_tenant(int argc, char **argv)
{
	static const struct option longs[] = {{"max-sandboxes", required_argument, NULL, 1},
	                                      {"max-vcpus", required_argument, NULL, 2},
	                                      {"max-memory", required_argument, NULL, 3},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	if (argc < 2 || strcmp(argv[1], "quota"))
		return cli_usage_error(
		    "tenant takes quota NAME [--max-sandboxes N] [--max-vcpus N] [--max-memory MIB]");
	cleanup_json json_t *q = json_object();
	int first = 0, r = cli_small_opts(argc - 1, argv + 1, "h", longs, &first, tenant_opt, q);
	if (r)
		return r;
	if (argc - 1 - first != 1)
		return cli_usage_error("tenant quota takes one tenant name");
	cleanup_free char *path = xasprintf("/v1/tenants/%s", argv[1 + first]);
	cleanup_json json_t *resp = NULL;
	if (json_object_size(q) > 0) {
		/* A PUT sets all three: keep the ones not given. */
		cleanup_json json_t *cur = NULL;
		struct al_error err = {0};
		long status = 0;
		if (cli_http("GET", path, NULL, &status, &cur, &err) < 0)
			return cli_report_error(&err);
		json_t *quotas = status == 200 ? json_object_get(cur, "quotas") : NULL;
		const char *k;
		json_t *v;
		json_object_foreach (quotas, k, v) {
			if (!json_object_get(q, k) && json_is_integer(v))
				json_object_set(q, k, v);
		}
		cleanup_json json_t *put = NULL;
		if ((r = cli_call("PUT", path, q, 200, &put)))
			return r;
	}
	if ((r = cli_call("GET", path, NULL, 200, &resp)))
		return r;
	if (cli_opt_json) {
		cli_print_json(resp, true);
		return 0;
	}
	json_t *quotas = json_object_get(resp, "quotas"), *usage = json_object_get(resp, "usage");
	printf("tenant %s\n", cli_esc_json(resp, "name"));
	printf("%-10s %8s %10s\n", "", "USAGE", "QUOTA");
	static const char *const rows[][3] = {{"sandboxes", "sandboxes", "max_sandboxes"},
	                                      {"vcpus", "vcpus", "max_vcpus"},
	                                      {"memory", "memory_mib", "max_memory_mib"}};
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		long long lim = json_integer_value(json_object_get(quotas, rows[i][2]));
		char limbuf[32];
		if (lim > 0)
			snprintf(limbuf, sizeof(limbuf), "%lld%s", lim, i == 2 ? "M" : "");
		else
			snprintf(limbuf, sizeof(limbuf), "unlimited");
		printf("%-10s %7lld%s %10s\n", rows[i][0],
		       (long long)json_integer_value(json_object_get(usage, rows[i][1])), i == 2 ? "M" : " ", limbuf);
	}
	return 0;
}

/* ------------------------------------------------------------ events */

struct events_opts {
	const char *sandbox, *type, *since;
	bool follow;
};

static int events_opt(int c, void *ud)
{
	struct events_opts *o = ud;
	uint64_t seq;
	switch (c) {
	case 's':
		o->sandbox = optarg;
		break;
	case 't':
		o->type = optarg;
		break;
	case 'S':
		if (parse_u64(optarg, &seq) < 0)
			return cli_usage_error("events: --since takes a sequence number, got \"%s\"", optarg);
		o->since = optarg;
		break;
	case 'f':
		o->follow = true;
		break;
	}
	return 0;
}

/* SECURITY: each line from the daemon is bounded (CLI_LINE_MAX) and parsed as JSON. */
static int on_event(void *ud, char *line, size_t len, struct al_error *err)
{
	(void)ud;
	(void)err; /* a write error is the transfer's */
	if (cli_opt_json) {
		int r = write_full(1, line, len);
		if (r == 0)
			r = write_full(1, "\n", 1);
		return r;
	}
	cleanup_json json_t *e = json_loadb(line, len, 0, NULL);
	if (!json_is_object(e))
		return 0;
	cleanup_free char *data = json_dumps(json_object_get(e, "data"), JSON_COMPACT);
	const char *sb = json_string_value(json_object_get(e, "sandbox"));
	printf("%-8lld %s %-16s %-12s %-20s %s\n", (long long)json_integer_value(json_object_get(e, "seq")),
	       cli_esc_json(e, "time"), cli_esc_json(e, "type"), cli_esc_json(e, "tenant"), cli_esc(sb ? sb : "-"),
	       cli_esc(data ? data : ""));
	fflush(stdout);
	return 0;
}

int cli_cmd_events(int argc, char **argv)
{
	static const struct option longs[] = {{"sandbox", required_argument, NULL, 's'},
	                                      {"type", required_argument, NULL, 't'},
	                                      {"since", required_argument, NULL, 'S'},
	                                      {"follow", no_argument, NULL, 'f'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	struct events_opts o = {0};
	int first = 0, r = cli_small_opts(argc, argv, "hf", longs, &first, events_opt, &o);
	if (r)
		return r;
	if (first != argc)
		return cli_usage_error("events takes no operands");
	cleanup_free char *path = xstrdup(o.follow ? "/v1/events?follow=true" : "/v1/events");
	const char *keys[] = {"sandbox", "type", "since"}, *vals[] = {o.sandbox, o.type, o.since};
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		if (!vals[i])
			continue;
		char *next = cli_path_with_query(path, keys[i], vals[i]);
		free(path);
		path = next;
	}
	return cli_get_lines(path, on_event);
}

int cli_get_lines(const char *path, int (*on_line)(void *ud, char *line, size_t len, struct al_error *err))
{
	struct cli_req req = {.method = "GET", .path = path, .on_line = on_line};
	return cli_call_streamed(&req);
}
