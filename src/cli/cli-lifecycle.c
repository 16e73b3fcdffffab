/* SPDX-License-Identifier: Apache-2.0 */
/* The lifecycle verbs: snapshot, snapshots (ls, inspect, rm), restore, fork,
 * recover and timeout. */
#include "cli.h"

#define FORK_MAX 16

/* ------------------------------------------------------------ snapshot */

int cli_cmd_snapshot(int argc, char **argv)
{
	int first = 0, r = cli_small_opts(argc, argv, "h", cli_json_only, &first, cli_no_opt, NULL);
	if (r)
		return r;
	int n = argc - first;
	if (n < 1 || n > 2)
		return cli_usage_error("snapshot takes a sandbox id and a name: snapshot ID NAME");
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/snapshots", argv[first]);
	cleanup_json json_t *body = json_object();
	if (n == 2)
		json_object_set_new(body, "name", json_string(argv[first + 1]));
	cleanup_json json_t *snap = NULL;
	if ((r = cli_call("POST", path, body, 201, &snap)))
		return r;
	return cli_print_answer_id(snap, "snapshot");
}

/* ------------------------------------------------------------ snapshots */

static int snapshots_opt(int c, void *ud)
{
	const char **sandbox = ud;
	if (c == 's')
		*sandbox = optarg;
	return 0;
}

static void print_size(long long bytes, char *out, size_t size)
{
	if (bytes >= 1LL << 30)
		snprintf(out, size, "%.1fG", (double)bytes / (double)(1LL << 30));
	else
		snprintf(out, size, "%.1fM", (double)bytes / (double)(1LL << 20));
}

static void print_snapshot_row(json_t *s)
{
	char size[32];
	print_size((long long)json_integer_value(json_object_get(s, "size_bytes")), size, sizeof(size));
	printf("%-22s %-20s %-12s %5lldM %8s %-25s %s\n", cli_esc_json(s, "id"), cli_esc_json(s, "sandbox_id"),
	       cli_esc_json(s, "template"), (long long)json_integer_value(json_object_get(s, "memory_mib")), size,
	       cli_esc_json(s, "created_at"), cli_esc_json(s, "name"));
}

static int snapshots_ls(const char *sandbox)
{
	cleanup_free char *path =
	    sandbox ? cli_path_with_query("/v1/snapshots", "sandbox", sandbox) : xstrdup("/v1/snapshots");
	return cli_print_table(path, "snapshots", print_snapshot_row, "%-22s %-20s %-12s %6s %8s %-25s %s\n", "ID",
	                       "SANDBOX", "TEMPLATE", "MEMORY", "SIZE", "CREATED", "NAME");
}

int cli_cmd_snapshots(int argc, char **argv)
{
	static const struct option longs[] = {{"sandbox", required_argument, NULL, 's'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	/* The subcommand is optional: "snapshots" and "snapshots --json" list. */
	const char *sub = "ls";
	int shift = 0;
	if (argc >= 2 && argv[1][0] != '-') {
		sub = argv[1];
		shift = 1;
	}
	const char *sandbox = NULL;
	int first = 0, r = cli_small_opts(argc - shift, argv + shift, "h", longs, &first, snapshots_opt, &sandbox);
	if (r)
		return r;
	char **ops = argv + shift + first;
	int n = argc - shift - first;
	if (sandbox && strcmp(sub, "ls"))
		return cli_usage_error("snapshots %s: --sandbox is for snapshots ls", sub);
	if (!strcmp(sub, "ls")) {
		if (n != 0)
			return cli_usage_error("snapshots ls takes no operands (filter with --sandbox ID)");
		return snapshots_ls(sandbox);
	}
	if (!strcmp(sub, "inspect")) {
		if (n != 1)
			return cli_usage_error("snapshots inspect takes one snapshot id");
		cleanup_free char *path = xasprintf("/v1/snapshots/%s", ops[0]);
		cleanup_json json_t *resp = NULL;
		if ((r = cli_call("GET", path, NULL, 200, &resp)))
			return r;
		cli_print_json(resp, cli_opt_json);
		return 0;
	}
	if (!strcmp(sub, "rm")) {
		if (n < 1)
			return cli_usage_error("snapshots rm takes one or more snapshot ids");
		return cli_call_each("DELETE", "/v1/snapshots", "", ops, n, 204);
	}
	return cli_usage_error("snapshots: unknown subcommand \"%s\" (ls, inspect, rm)", sub);
}

/* ------------------------------------------------------------ restore */

/* --secret ENV=NAME (restore, fork): grants into the body. */
static int grant_opt(int c, void *ud)
{
	return c == 'S' ? cli_secret_grant_add(ud, optarg) : 0;
}

int cli_cmd_restore(int argc, char **argv)
{
	static const struct option longs[] = {{"secret", required_argument, NULL, 'S'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	cleanup_json json_t *body = json_object();
	int first = 0, r = cli_small_opts(argc, argv, "h", longs, &first, grant_opt, body);
	if (r)
		return r;
	if (argc - first != 1)
		return cli_usage_error("restore takes one snapshot id");
	json_object_set_new(body, "snapshot", json_string(argv[first]));
	cleanup_json json_t *sb = NULL;
	if ((r = cli_call("POST", "/v1/sandboxes", body, 201, &sb)))
		return r;
	return cli_print_answer_id(sb, "sandbox");
}

/* ------------------------------------------------------------ fork */

struct fork_opts {
	long count;
	json_t *body;
};

static int fork_opt(int c, void *ud)
{
	struct fork_opts *o = ud;
	if (c == 'n' && parse_int_range(optarg, 1, FORK_MAX, &o->count) < 0)
		return cli_usage_error("fork: -n takes a whole number from 1 to %d, got \"%s\"", FORK_MAX, optarg);
	return c == 'S' ? cli_secret_grant_add(o->body, optarg) : 0;
}

int cli_cmd_fork(int argc, char **argv)
{
	static const struct option longs[] = {{"count", required_argument, NULL, 'n'},
	                                      {"secret", required_argument, NULL, 'S'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	cleanup_json json_t *body = json_object();
	struct fork_opts o = {.count = 1, .body = body};
	int first = 0, r = cli_small_opts(argc, argv, "hn:", longs, &first, fork_opt, &o);
	if (r)
		return r;
	if (argc - first != 1)
		return cli_usage_error("fork takes one sandbox id");
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/fork", argv[first]);
	json_object_set_new(body, "count", json_integer(o.count));
	cleanup_json json_t *list = NULL;
	if ((r = cli_call_list("POST", path, body, 201, "sandboxes", &list)) || !list)
		return r;
	size_t i;
	json_t *sb;
	json_array_foreach (list, i, sb)
		printf("%s\n", json_string_value(json_object_get(sb, "id")));
	return 0;
}

/* ------------------------------------------------------------ recover */

static int recover_opt(int c, void *ud)
{
	bool *no_memory = ud;
	if (c == 'M')
		*no_memory = true;
	return 0;
}

int cli_cmd_recover(int argc, char **argv)
{
	static const struct option longs[] = {{"no-memory", no_argument, NULL, 'M'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	bool no_memory = false;
	int first = 0, r = cli_small_opts(argc, argv, "h", longs, &first, recover_opt, &no_memory);
	if (r)
		return r;
	if (argc - first != 1)
		return cli_usage_error("recover takes one sandbox id");
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/recover", argv[first]);
	cleanup_json json_t *body = json_pack("{s:b}", "memory", !no_memory);
	cleanup_json json_t *sb = NULL;
	if ((r = cli_call("POST", path, body, 200, &sb)))
		return r;
	return cli_print_answer_id(sb, "sandbox");
}

/* ------------------------------------------------------------ timeout */

struct timeout_opts {
	json_t *body;
};

static int timeout_opt(int c, void *ud)
{
	struct timeout_opts *o = ud;
	long v;
	if (c == 'o') {
		if (strcmp(optarg, "kill") && strcmp(optarg, "pause"))
			return cli_usage_error("timeout: --on-timeout takes kill or pause, got \"%s\"", optarg);
		json_object_set_new(o->body, "on_timeout", json_string(optarg));
	} else if (c == 'i') {
		if (parse_int_range(optarg, 0, 2592000, &v) < 0)
			return cli_usage_error("timeout: --idle takes a number of seconds (0 = none), got \"%s\"",
			                       optarg);
		json_object_set_new(o->body, "idle_timeout_s", json_integer(v));
	} else if (c == 'a') {
		if (strcmp(optarg, "on") && strcmp(optarg, "off"))
			return cli_usage_error("timeout: --auto-resume takes on or off, got \"%s\"", optarg);
		json_object_set_new(o->body, "auto_resume", json_boolean(!strcmp(optarg, "on")));
	}
	return 0;
}

int cli_cmd_timeout(int argc, char **argv)
{
	static const struct option longs[] = {{"on-timeout", required_argument, NULL, 'o'},
	                                      {"idle", required_argument, NULL, 'i'},
	                                      {"auto-resume", required_argument, NULL, 'a'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	cleanup_json json_t *body = json_object();
	struct timeout_opts o = {.body = body};
	int first = 0, r = cli_small_opts(argc, argv, "h", longs, &first, timeout_opt, &o);
	if (r)
		return r;
	/* SECONDS may be left out when only the other settings change. */
	bool others = json_object_size(body) > 0;
	if (argc - first != 2 && !(others && argc - first == 1))
		return cli_usage_error(
		    "timeout takes a sandbox id and a number of seconds (0 = none): timeout ID SECONDS "
		    "(SECONDS may be left out with --on-timeout, --idle or --auto-resume)");
	long secs;
	if (argc - first == 2 && parse_int_range(argv[first + 1], 0, 2592000, &secs) < 0)
		return cli_usage_error("timeout: SECONDS must be a whole number of seconds (0 = none), got \"%s\"",
		                       argv[first + 1]);
	if (argc - first == 2)
		json_object_set_new(body, "timeout_s", json_integer(secs));
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/timeout", argv[first]);
	cleanup_json json_t *sb = NULL;
	if ((r = cli_call("POST", path, body, 200, &sb)))
		return r;
	if (cli_opt_json) {
		cli_print_json(sb, true);
		return 0;
	}
	long long t = json_integer_value(json_object_get(sb, "timeout_s"));
	long long idle = json_integer_value(json_object_get(sb, "idle_timeout_s"));
	const char *on = json_string_value(json_object_get(sb, "on_timeout"));
	printf("%s: ", cli_esc_json(sb, "id"));
	if (t > 0)
		printf("timeout %lld s of running time, then %s", t, cli_esc(on ? on : "kill"));
	else
		printf("no timeout");
	if (idle > 0)
		printf("; paused after %lld s idle", idle);
	else
		printf("; no idle timeout");
	printf("; auto-resume %s\n", json_is_true(json_object_get(sb, "auto_resume")) ? "on" : "off");
	return 0;
}
