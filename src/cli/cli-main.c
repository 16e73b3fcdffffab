/* SPDX-License-Identifier: Apache-2.0 */
/* airlock: a thin client of airlockd's API with docker-like verbs. This file:
 * global options, the sandbox verbs (create, ls, inspect, rm, pause, resume) and the helpers
 * the topic files share (cli.h). */
#include <curl/curl.h>
#include <jansson.h>

#include "cli-mcp.h"
#include "cli.h"
#include "version.h"

#define DEFAULT_SOCKET "/run/airlock/airlockd.sock"

bool cli_opt_json;

static const char usage_text[] =
    "usage: airlock [--socket PATH | --host tcp://ADDR:PORT [--token TOKEN]] COMMAND ...\n"
    "\n"
    "Sandboxes:\n"
    "  run [--template T] [--vcpus N] [--memory MIB] [--env K=V]... [--timeout S] [--no-stream] [--cold]\n"
    "      [--allow RULE]... [--deny RULE]... [--secret ENV=NAME]... -- CMD [ARG...]\n"
    "                    create a sandbox, run CMD in it, delete it; exits with CMD's status\n"
    "  create [--template T] [--vcpus N] [--memory MIB] [--env K=V]... [--metadata K=V]... [--cold]\n"
    "      [--allow RULE]... [--deny RULE]... [--secret ENV=NAME]... [--auto-resume] [--json]\n"
    "                    create a sandbox and print its id; RULE: example.com, *.example.com,\n"
    "                    host:port, 203.0.113.0/24[:port] (no --allow: the daemon's default, deny all);\n"
    "                    --secret ENV=NAME: ENV holds a placeholder the egress gateway swaps for secret NAME;\n"
    "                    --cold: boot the kernel (default: restore the template's snapshot);\n"
    "                    --auto-resume: traffic to its ports resumes it when paused\n"
    "  ls [--all] [--filter K=V]... [--json]   list sandboxes\n"
    "  inspect ID [--json]   show one sandbox\n"
    "  rm ID...              delete sandboxes\n"
    "  pause ID... / resume ID...   freeze sandboxes (no CPU, memory kept) / thaw them\n"
    "  stats ID [--json]     the sandbox's CPU, memory and disk figures\n"
    "Lifecycle:\n"
    "  snapshot ID NAME [--json]   snapshot a running or paused sandbox; prints the snapshot id\n"
    "  snapshots [ls] [--sandbox ID] [--json]; snapshots inspect SNAP [--json]; snapshots rm SNAP...\n"
    "  restore SNAP [--secret ENV=NAME]... [--json]   a new sandbox from a snapshot; prints its id\n"
    "  fork ID [-n N] [--secret ENV=NAME]... [--json]  N (1-16, default 1) copies of a running sandbox\n"
    "                    (restores and forks get only the secrets granted here, with new placeholders)\n"
    "  recover ID [--no-memory]    bring back a sandbox in state error (latest snapshot, else its disk)\n"
    "  timeout ID [SECONDS] [--on-timeout kill|pause] [--idle S] [--auto-resume on|off]\n"
    "                    limit running time (0 = none); whether traffic to its ports resumes it\n"
    "Processes:\n"
    "  exec [-i] [-t] [-d] [--tag T] [--env K=V]... [--cwd DIR] [--timeout S] [--no-stream] ID -- CMD [ARG...]\n"
    "                    run CMD in a running sandbox (-it: with a terminal; -d: in the background)\n"
    "  ps ID [--json]        list processes\n"
    "  logs ID PID [-f] [--from start|now]   a process's output\n"
    "Network:\n"
    "  network ID [--json]                   the sandbox's egress policy and dropped packets\n"
    "  network ID --allow RULE... [--deny RULE...] | --deny-all   replace the policy (atomic)\n"
    "  logs --network ID [-f] [--json]       the egress gateway's decisions for the sandbox\n"
    "  kill ID PID [-s SIGNAL]               signal a process (default TERM)\n"
    "  wait ID PID [--timeout S]             wait for a process; exits with its status\n"
    "Ports (docs/api.md, \"Ports\"):\n"
    "  expose ID PORT [--public] [--json]    make the guest's PORT reachable; prints its URLs on the\n"
    "                    daemon's proxy (--public: without the traffic token)\n"
    "  unexpose ID PORT                      take it back\n"
    "  ports ID [--json]                     exposed ports, their URLs and traffic; the traffic token\n"
    "  port-forward ID [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT...\n"
    "                    listen on LOCAL_ADDR (default 127.0.0.1):LOCAL_PORT (0: any free port) and\n"
    "                    carry each connection to the guest's REMOTE_PORT, until Ctrl-C\n"
    "Secrets (values never on the command line: stdin, or --value-file):\n"
    "  secret set NAME --host H [--host H]... [--path P]... [--method M]... [--header NAME [--format FMT] | "
    "--in-header NAME...]\n"
    "      [--value-stdin | --value-file F] [--tenant T] [--json]   create or rotate a secret\n"
    "  secret ls [--tenant T] [--json]; secret inspect NAME [--json]; secret rm NAME...\n"
    "  ca                    print the Airlock CA certificate (PEM) that sandboxes trust\n"
    "Templates (docs/cli.md, \"Templates\"):\n"
    "  template ls [--json]; template inspect NAME; template rm NAME...\n"
    "  template build NAME [-f DOCKERFILE] [--build-arg K=V]... [--network-policy FILE|JSON] [--no-cache]\n"
    "      [--snapshot] [--disk-mib N] [--tenant T] [--json | --quiet] [CONTEXT]\n"
    "                    build a template from a Dockerfile (default CONTEXT/Dockerfile; CONTEXT default .,\n"
    "                    sent as a tar minus its .dockerignore); progress on stderr, the name on stdout\n"
    "  template import NAME PATH [--tenant T] [--json | --quiet]\n"
    "                    a template from an image: a docker save or OCI archive (maybe gzip), or an OCI\n"
    "                    layout directory\n"
    "Files:\n"
    "  cp [--max-bytes N] [--max-entries N] SRC DST\n"
    "                        copy between host and sandbox; one side is ID:/path, '-' is a tar stream\n"
    "  fs ls|stat ID PATH [--json]; fs mkdir [-p] ID PATH; fs rm [-r] ID PATH; fs mv ID FROM TO\n"
    "Administration (unix socket):\n"
    "  token create --tenant NAME [--description D]; token ls [--json]; token rm ID\n"
    "  tenant quota NAME [--max-sandboxes N] [--max-vcpus N] [--max-memory MIB] [--json]\n"
    "  events [--sandbox ID] [--type PREFIX] [--since SEQ] [-f] [--json]\n"
    "Warm pools (docs/api.md, \"Warm pools\"):\n"
    "  pool ls [--json]      the pools: shape, owner (a tenant or shared), size, VMs ready, memory, hits\n"
    "  pool set TEMPLATE[:VCPUS:MiB] N [--tenant T] [--json]\n"
    "                    keep N VMs of that shape (default 1 vCPU, 256 MiB) ready for creates; 0 removes\n"
    "                    the pool (a tenant token sets its own pool; the socket, shared ones or --tenant's)\n"
    "  info [--json]         the daemon (version, backend, accelerator), its pools' and the host's memory\n"
    "  version\n"
    "Agents:\n"
    "  mcp [--http 127.0.0.1:PORT]   a Model Context Protocol server (stdio, or streamable HTTP at /mcp)\n"
    "\n"
    "The daemon is --host / $AIRLOCK_HOST (TCP, with --token / $AIRLOCK_TOKEN), else --socket PATH,\n"
    "else $AIRLOCK_SOCKET, else " DEFAULT_SOCKET ".\n";

/* SECURITY: a message may carry names from a guest (an archive's entry, a
 * path) or a relayed error: the whole of it is escaped for the terminal. */
__attribute__((format(printf, 1, 0))) static void print_error_v(const char *fmt, va_list ap)
{
	cleanup_free char *msg = NULL;
	if (vasprintf(&msg, fmt, ap) < 0)
		abort();
	fprintf(stderr, "airlock: %s", cli_esc(msg));
}

int cli_usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	print_error_v(fmt, ap);
	va_end(ap);
	fputs("\nRun 'airlock --help' for usage.\n", stderr);
	return EXIT_USAGE;
}

int cli_client_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	print_error_v(fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_CLIENT;
}

int cli_report_error(const struct al_error *err)
{
	return cli_client_error("%s", err->message);
}

int cli_report(long status, json_t *body)
{
	json_t *e = json_object_get(body, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *hint = "";
	if (status == 401)
		hint = cli_conn.token ? "; check the token (--token / AIRLOCK_TOKEN): it may be revoked"
		                      : "; the TCP listener needs a token: pass --token or set AIRLOCK_TOKEN";
	else if (status == 404 && !msg)
		hint = "; this daemon may be older than the CLI and not have this endpoint";
	/* SECURITY: the message may relay a guest's words (an agent's error). */
	fprintf(stderr, "airlock: %s (HTTP %ld%s%s)%s\n", cli_esc(msg ? msg : "the daemon refused the request"), status,
	        code ? ", " : "", cli_esc(code ? code : ""), hint);
	return EXIT_CLIENT;
}

int cli_call(const char *method, const char *path, json_t *body, long want_status, json_t **ret)
{
	struct al_error err = {0};
	long status = 0;
	cleanup_json json_t *resp = NULL;
	if (cli_http(method, path, body, &status, &resp, &err) < 0)
		return cli_report_error(&err);
	if (status != want_status)
		return cli_report(status, resp);
	*ret = resp ? TAKE_PTR(resp) : json_object();
	return 0;
}

int cli_call_list(const char *method, const char *path, json_t *body, long want_status, const char *key,
                  json_t **ret_list)
{
	cleanup_json json_t *resp = NULL;
	int r = cli_call(method, path, body, want_status, &resp);
	if (r)
		return r;
	json_t *list = json_object_get(resp, key);
	if (cli_opt_json) {
		cli_print_json(list, true);
		*ret_list = NULL;
		return 0;
	}
	*ret_list = list ? json_incref(list) : json_array();
	return 0;
}

int cli_print_table(const char *path, const char *key, void (*print_row)(json_t *row), const char *header_fmt, ...)
{
	cleanup_json json_t *list = NULL;
	int r = cli_call_list("GET", path, NULL, 200, key, &list);
	if (r || !list)
		return r;
	va_list ap;
	va_start(ap, header_fmt);
	vprintf(header_fmt, ap);
	va_end(ap);
	size_t i;
	json_t *row;
	json_array_foreach (list, i, row)
		print_row(row);
	return 0;
}

int cli_call_streamed(struct cli_req *req)
{
	struct al_error err = {0};
	long status = 0;
	cleanup_json json_t *resp = NULL;
	if (cli_request(req, &status, &resp, &err) < 0)
		return cli_report_error(&err);
	if (status != 200)
		return cli_report(status, resp);
	return 0;
}

int cli_print_answer_id(json_t *answer, const char *what)
{
	const char *id = json_string_value(json_object_get(answer, "id"));
	if (!id)
		return cli_client_error("the daemon's answer has no %s id", what);
	if (cli_opt_json)
		cli_print_json(answer, true);
	else
		printf("%s\n", id);
	return 0;
}

void cli_print_word_list(const char *label, int width, json_t *words, const char *if_empty)
{
	printf("%-*s", width, label);
	if (json_array_size(words) == 0)
		printf(" %s", if_empty);
	size_t i;
	json_t *v;
	json_array_foreach (words, i, v)
		printf(" %s", cli_esc(json_string_value(v)));
	printf("\n");
}

int cli_add_kv(json_t *obj, const char *flag, const char *arg)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg)
		return cli_usage_error("%s takes KEY=VALUE, got \"%s\"", flag, arg);
	cleanup_free char *key = xstrndup(arg, (size_t)(eq - arg));
	json_object_set_new(obj, key, json_string(eq + 1));
	return 0;
}

int cli_exit_status_of(json_t *o)
{
	if (json_is_true(json_object_get(o, "timed_out"))) {
		fprintf(stderr, "airlock: the command timed out and was killed\n");
		return EXIT_TIMEOUT;
	}
	json_t *code = json_object_get(o, "exit_code");
	if (json_is_integer(code))
		return (int)json_integer_value(code);
	json_t *sig = json_object_get(o, "signal");
	if (json_is_integer(sig))
		return 128 + (int)json_integer_value(sig);
	fprintf(stderr, "airlock: the daemon did not say how the command ended\n");
	return EXIT_CLIENT;
}

void cli_print_json(json_t *v, bool compact)
{
	if (compact) {
		json_dumpf(v, stdout, JSON_COMPACT);
		putchar('\n');
		return;
	}
	/* SECURITY: for a person: JSON escapes C0 controls but not DEL, C1 or
	 * bidirectional overrides; each line (newlines in strings are escaped,
	 * so every newline is the layout's) goes through cli_esc. */
	cleanup_free char *text = json_dumps(v, JSON_INDENT(2));
	for (char *line = text, *nl; line; line = nl ? nl + 1 : NULL) {
		if ((nl = strchr(line, '\n')))
			*nl = '\0';
		printf("%s\n", cli_esc(line));
	}
}

char *cli_path_with_query(const char *prefix, const char *key, const char *value)
{
	char *esc = curl_easy_escape(NULL, value, 0);
	if (!esc)
		abort();
	char *s = xasprintf("%s%s%s=%s", prefix, strchr(prefix, '?') ? "&" : "?", key, esc);
	curl_free(esc);
	return s;
}

int cli_small_opts(int argc, char **argv, const char *shorts, const struct option *longs, int *ret_first,
                   int (*on_opt)(int c, void *ud), void *ud)
{
	optind = 0;
	int c;
	while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
		if (c == '?')
			return cli_usage_error("%s: unknown option or missing value", argv[0]);
		if (c == 'h') {
			fprintf(stdout, "See 'airlock --help' and docs/cli.md.\n");
			exit(0);
		}
		if (c == 'j') {
			cli_opt_json = true;
			continue;
		}
		int r = on_opt(c, ud);
		if (r)
			return r;
	}
	*ret_first = optind;
	return 0;
}

int cli_no_opt(int c, void *ud)
{
	(void)c;
	(void)ud;
	return 0;
}

const struct option cli_json_only[] = {
    {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};

int cli_sandbox_operand(int argc, char **argv, const char **ret_id)
{
	int first = 0, r = cli_small_opts(argc, argv, "h", cli_json_only, &first, cli_no_opt, NULL);
	if (r)
		return r;
	if (first + 1 != argc)
		return cli_usage_error("%s takes one sandbox id", argv[0]);
	*ret_id = argv[first];
	return 0;
}

static int parse_uint_flag(const char *flag, const char *arg, long max, json_t *obj, const char *field)
{
	long v;
	if (parse_int_range(arg, 1, max, &v) < 0)
		return cli_usage_error("%s takes a whole number from 1 to %ld, got \"%s\"", flag, max, arg);
	json_object_set_new(obj, field, json_integer(v));
	return 0;
}

enum {
	OPT_TEMPLATE = 1000,
	OPT_VCPUS,
	OPT_MEMORY,
	OPT_ENV,
	OPT_METADATA,
	OPT_TIMEOUT,
	OPT_CWD,
	OPT_JSON,
	OPT_ALL,
	OPT_NO_STREAM,
	OPT_FILTER,
	OPT_TAG,
	OPT_ALLOW,
	OPT_DENY,
	OPT_SECRET,
	OPT_COLD,
	OPT_AUTO_RESUME,
};

static const struct option verb_opts[] = {
    {"template", required_argument, NULL, OPT_TEMPLATE},
    {"vcpus", required_argument, NULL, OPT_VCPUS},
    {"memory", required_argument, NULL, OPT_MEMORY},
    {"env", required_argument, NULL, OPT_ENV},
    {"metadata", required_argument, NULL, OPT_METADATA},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"cwd", required_argument, NULL, OPT_CWD},
    {"json", no_argument, NULL, OPT_JSON},
    {"all", no_argument, NULL, OPT_ALL},
    {"no-stream", no_argument, NULL, OPT_NO_STREAM},
    {"filter", required_argument, NULL, OPT_FILTER},
    {"tag", required_argument, NULL, OPT_TAG},
    {"allow", required_argument, NULL, OPT_ALLOW},
    {"deny", required_argument, NULL, OPT_DENY},
    {"secret", required_argument, NULL, OPT_SECRET},
    {"cold", no_argument, NULL, OPT_COLD},
    {"auto-resume", no_argument, NULL, OPT_AUTO_RESUME},
    {"interactive", no_argument, NULL, 'i'},
    {"tty", no_argument, NULL, 't'},
    {"detach", no_argument, NULL, 'd'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

struct verb_args {
	json_t *create;  /* body of POST /v1/sandboxes */
	json_t *exec;    /* body of POST .../exec, without cmd */
	json_t *filters; /* ls --filter: object */
	bool all, no_stream, interactive, tty, detach;
};

/* Parses the options shared by the sandbox verbs; `allowed` lists the OPT_*
 * (or short option letters) a verb takes. Verbs that run a command stop at the
 * first operand (the rest is the command); the others take options anywhere
 * ("inspect ID --json"). */
static int parse_verb_opts(int argc, char **argv, const int *allowed, struct verb_args *a)
{
	bool runs = !strcmp(argv[0], "run") || !strcmp(argv[0], "exec");
	optind = 0; /* 0, not 1: glibc then re-reads the ordering from optstring */
	int c;
	while ((c = getopt_long(argc, argv, runs ? "+hitd" : "h", verb_opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage_text, stdout);
			exit(0);
		}
		bool ok = false;
		for (const int *p = allowed; *p; p++)
			ok |= *p == c;
		if (!ok || c == '?')
			return cli_usage_error("%s: unknown or misplaced option", argv[0]);
		int r = 0;
		json_t *env = json_object_get(a->create ? a->create : a->exec, "env");
		switch (c) {
		case OPT_TEMPLATE:
			json_object_set_new(a->create, "template", json_string(optarg));
			break;
		case OPT_COLD:
			json_object_set_new(a->create, "boot", json_string("cold"));
			break;
		case OPT_AUTO_RESUME:
			json_object_set_new(a->create, "auto_resume", json_true());
			break;
		case OPT_VCPUS:
			r = parse_uint_flag("--vcpus", optarg, 1024, a->create, "vcpus");
			break;
		case OPT_MEMORY:
			r = parse_uint_flag("--memory", optarg, 1 << 24, a->create, "memory_mib");
			break;
		case OPT_ENV:
			r = cli_add_kv(env, "--env", optarg);
			break;
		case OPT_METADATA:
			r = cli_add_kv(json_object_get(a->create, "metadata"), "--metadata", optarg);
			break;
		case OPT_TIMEOUT:
			r = parse_uint_flag("--timeout", optarg, 86400, a->exec, "timeout_s");
			break;
		case OPT_CWD:
			json_object_set_new(a->exec, "cwd", json_string(optarg));
			break;
		case OPT_TAG:
			json_object_set_new(a->exec, "tag", json_string(optarg));
			break;
		case OPT_ALLOW:
		case OPT_DENY:
			cli_network_add_rule(a->create, c == OPT_ALLOW ? "allow" : "deny", optarg);
			break;
		case OPT_FILTER:
			r = cli_add_kv(a->filters, "--filter", optarg);
			break;
		case OPT_SECRET:
			r = cli_secret_grant_add(a->create, optarg);
			break;
		case OPT_JSON:
			cli_opt_json = true;
			break;
		case OPT_ALL:
			a->all = true;
			break;
		case OPT_NO_STREAM:
			a->no_stream = true;
			break;
		case 'i':
			a->interactive = true;
			break;
		case 't':
			a->tty = true;
			break;
		case 'd':
			a->detach = true;
			break;
		}
		if (r)
			return r;
	}
	return 0;
}

static json_t *new_create_body(void)
{
	return json_pack("{s:{}, s:{}}", "env", "metadata");
}

static int split_cmd(int argc, char **argv, int *ret_first)
{
	/* getopt stops at "--" (consumed) or at the first operand. */
	if (optind >= argc)
		return cli_usage_error("%s: missing the command to run (put it after --)", argv[0]);
	*ret_first = optind;
	return 0;
}

int cli_cmd_run(int argc, char **argv)
{
	static const int allowed[] = {OPT_TEMPLATE,  OPT_VCPUS, OPT_MEMORY, OPT_ENV,    OPT_TIMEOUT, OPT_CWD,
	                              OPT_NO_STREAM, OPT_ALLOW, OPT_DENY,   OPT_SECRET, OPT_COLD,    0};
	cleanup_json json_t *create = new_create_body();
	cleanup_json json_t *exec = json_object();
	struct verb_args a = {.create = create, .exec = exec};
	int r = parse_verb_opts(argc, argv, allowed, &a), first = 0;
	if (r || (r = split_cmd(argc, argv, &first)))
		return r;
	cleanup_json json_t *sb = NULL;
	if ((r = cli_call("POST", "/v1/sandboxes", create, 201, &sb)))
		return r;
	const char *id = json_string_value(json_object_get(sb, "id"));
	if (!id)
		return cli_client_error("the daemon's answer has no sandbox id");
	cli_exec_set_cmd(exec, argv + first, argc - first);
	int status = cli_exec_run(id, exec, !a.no_stream, false);
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s", id);
	cleanup_json json_t *del = NULL;
	if (cli_call("DELETE", path, NULL, 200, &del)) {
		fprintf(stderr, "airlock: sandbox %s was left behind; remove it with 'airlock rm %s'\n", id, id);
		if (status == 0)
			status = EXIT_CLIENT;
	}
	return status;
}

static int cmd_create(int argc, char **argv)
{
	static const int allowed[] = {OPT_TEMPLATE, OPT_VCPUS, OPT_MEMORY, OPT_ENV,  OPT_METADATA,    OPT_JSON,
	                              OPT_ALLOW,    OPT_DENY,  OPT_SECRET, OPT_COLD, OPT_AUTO_RESUME, 0};
	cleanup_json json_t *create = new_create_body();
	struct verb_args a = {.create = create};
	int r = parse_verb_opts(argc, argv, allowed, &a);
	if (r)
		return r;
	if (optind != argc)
		return cli_usage_error("create takes no operands");
	cleanup_json json_t *sb = NULL;
	if ((r = cli_call("POST", "/v1/sandboxes", create, 201, &sb)))
		return r;
	return cli_print_answer_id(sb, "sandbox");
}

/* Starts body's command as a background process and prints its id. */
static int exec_detached(const char *id, json_t *body)
{
	cleanup_json json_t *proc = NULL;
	int r = cli_process_start(id, body, &proc);
	if (r)
		return r;
	const char *pid = json_string_value(json_object_get(proc, "id"));
	if (!pid)
		return cli_client_error("the daemon's answer has no process id");
	printf("%s\n", pid);
	return 0;
}

int cli_cmd_exec(int argc, char **argv)
{
	static const int allowed[] = {OPT_ENV, OPT_CWD, OPT_TIMEOUT, OPT_NO_STREAM, OPT_TAG, 'i', 't', 'd', 0};
	cleanup_json json_t *exec = json_pack("{s:{}}", "env");
	struct verb_args a = {.exec = exec};
	int r = parse_verb_opts(argc, argv, allowed, &a);
	if (r)
		return r;
	if (optind >= argc)
		return cli_usage_error("exec: missing the sandbox id");
	const char *id = argv[optind++];
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	int first = 0;
	if ((r = split_cmd(argc, argv, &first)))
		return r;
	if (a.detach && (a.tty || a.interactive))
		return cli_usage_error("exec: -d does not combine with -i or -t (attach later with 'airlock logs -f')");
	if (json_object_get(exec, "tag") && !a.detach)
		return cli_usage_error("exec: --tag is for background processes (-d)");
	if (a.no_stream && (a.tty || a.detach))
		return cli_usage_error("exec: --no-stream does not combine with -t or -d");
	cli_exec_set_cmd(exec, argv + first, argc - first);
	if (a.detach)
		return exec_detached(id, exec);
	if (a.tty)
		return cli_pty_exec(id, exec, a.interactive);
	return cli_exec_run(id, exec, !a.no_stream, a.interactive);
}

static void print_sandbox_row(json_t *sb)
{
	printf("%-20s %-9s %-12s %5lld %6lldM  %s\n", cli_esc_json(sb, "id"), cli_esc_json(sb, "state"),
	       cli_esc_json(sb, "template"), (long long)json_integer_value(json_object_get(sb, "vcpus")),
	       (long long)json_integer_value(json_object_get(sb, "memory_mib")), cli_esc_json(sb, "created_at"));
}

static int cmd_ls(int argc, char **argv)
{
	static const int allowed[] = {OPT_ALL, OPT_JSON, OPT_FILTER, 0};
	cleanup_json json_t *filters = json_object();
	struct verb_args a = {.filters = filters};
	int r = parse_verb_opts(argc, argv, allowed, &a);
	if (r)
		return r;
	if (optind != argc)
		return cli_usage_error("ls takes no operands (filter with --filter KEY=VALUE)");
	cleanup_free char *path = xstrdup(a.all ? "/v1/sandboxes?all=true" : "/v1/sandboxes");
	const char *key;
	json_t *v;
	json_object_foreach (filters, key, v) {
		char *esc = curl_easy_escape(NULL, key, 0);
		if (!esc)
			abort();
		cleanup_free char *k = xasprintf("metadata.%s", esc);
		curl_free(esc);
		char *next = cli_path_with_query(path, k, json_string_value(v));
		free(path);
		path = next;
	}
	return cli_print_table(path, "sandboxes", print_sandbox_row, "%-20s %-9s %-12s %5s %7s  %s\n", "ID", "STATE",
	                       "TEMPLATE", "VCPUS", "MEMORY", "CREATED");
}

static int cmd_inspect(int argc, char **argv)
{
	static const int allowed[] = {OPT_JSON, 0};
	struct verb_args a = {0};
	int r = parse_verb_opts(argc, argv, allowed, &a);
	if (r)
		return r;
	if (optind + 1 != argc)
		return cli_usage_error("inspect takes one sandbox id");
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s", argv[optind]);
	cleanup_json json_t *resp = NULL;
	if ((r = cli_call("GET", path, NULL, 200, &resp)))
		return r;
	cli_print_json(resp, cli_opt_json);
	return 0;
}

/* METHOD /v1/sandboxes/{id}SUFFIX for each id (rm, pause, resume); prints each id done. */
static int each_id(int argc, char **argv, const char *method, const char *suffix)
{
	static const int allowed[] = {0};
	struct verb_args a = {0};
	int r = parse_verb_opts(argc, argv, allowed, &a);
	if (r)
		return r;
	if (optind >= argc)
		return cli_usage_error("%s takes one or more sandbox ids", argv[0]);
	return cli_call_each(method, "/v1/sandboxes", suffix, argv + optind, argc - optind, 200);
}

int cli_call_each(const char *method, const char *prefix, const char *suffix, char **ids, int n, long want_status)
{
	int status = 0;
	for (int i = 0; i < n; i++) {
		cleanup_free char *path = xasprintf("%s/%s%s", prefix, ids[i], suffix);
		cleanup_json json_t *resp = NULL;
		if (cli_call(method, path, NULL, want_status, &resp))
			status = EXIT_CLIENT;
		else
			printf("%s\n", ids[i]);
	}
	return status;
}

static int cmd_rm(int argc, char **argv)
{
	return each_id(argc, argv, "DELETE", "");
}

static int cmd_pause(int argc, char **argv)
{
	return each_id(argc, argv, "POST", "/pause");
}

static int cmd_resume(int argc, char **argv)
{
	return each_id(argc, argv, "POST", "/resume");
}

/* --host / --socket / --token, then the environment for what is not given. */
static int setup_connection(const char *socket_opt, const char *host_opt, const char *token_opt)
{
	if (socket_opt && host_opt)
		return cli_usage_error("--socket and --host name two daemons; give one");
	const char *host = host_opt;
	if (!host && !socket_opt)
		host = getenv("AIRLOCK_HOST");
	if (host && *host) {
		if (cli_conn_set_host(host) < 0)
			return cli_usage_error("--host takes tcp://ADDR:PORT (e.g. tcp://127.0.0.1:7070), got \"%s\"",
			                       host);
	} else {
		const char *s = socket_opt ? socket_opt : getenv("AIRLOCK_SOCKET");
		cli_conn.socket_path = s && *s ? s : DEFAULT_SOCKET;
	}
	const char *token = token_opt ? token_opt : getenv("AIRLOCK_TOKEN");
	cli_conn.token = token && *token ? token : NULL;
	if (cli_conn.token && strpbrk(cli_conn.token, "\r\n"))
		return cli_usage_error("the token must be one line");
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"socket", required_argument, NULL, 's'}, {"host", required_argument, NULL, 'H'},
	    {"token", required_argument, NULL, 'T'},  {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0},
	};
	const char *socket_opt = NULL, *host_opt = NULL, *token_opt = NULL;
	int c;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			socket_opt = optarg;
			break;
		case 'H':
			host_opt = optarg;
			break;
		case 'T':
			token_opt = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'V':
			printf("airlock %s\n", AIRLOCK_VERSION);
			return 0;
		default:
			return cli_usage_error("unknown option");
		}
	}
	int r = setup_connection(socket_opt, host_opt, token_opt);
	if (r)
		return r;
	if (optind >= argc)
		return cli_usage_error("missing a command");
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} verbs[] = {
	    {"run", cli_cmd_run},
	    {"create", cmd_create},
	    {"exec", cli_cmd_exec},
	    {"ls", cmd_ls},
	    {"inspect", cmd_inspect},
	    {"rm", cmd_rm},
	    {"ps", cli_cmd_ps},
	    {"logs", cli_cmd_logs},
	    {"kill", cli_cmd_kill},
	    {"wait", cli_cmd_wait},
	    {"cp", cli_cmd_cp},
	    {"fs", cli_cmd_fs},
	    {"stats", cli_cmd_stats},
	    {"token", cli_cmd_token},
	    {"tenant", cli_cmd_tenant},
	    {"events", cli_cmd_events},
	    {"pause", cmd_pause},
	    {"resume", cmd_resume},
	    {"snapshot", cli_cmd_snapshot},
	    {"snapshots", cli_cmd_snapshots},
	    {"restore", cli_cmd_restore},
	    {"fork", cli_cmd_fork},
	    {"recover", cli_cmd_recover},
	    {"timeout", cli_cmd_timeout},
	    {"network", cli_cmd_network},
	    {"secret", cli_cmd_secret},
	    {"ca", cli_cmd_ca},
	    {"pool", cli_cmd_pool},
	    {"info", cli_cmd_info},
	    {"expose", cli_cmd_expose},
	    {"unexpose", cli_cmd_unexpose},
	    {"ports", cli_cmd_ports},
	    {"port-forward", cli_cmd_port_forward},
	    {"template", cli_cmd_template},
	    {"mcp", cli_cmd_mcp},
	};
	const char *verb = argv[optind];
	if (!strcmp(verb, "version")) {
		printf("airlock %s\n", AIRLOCK_VERSION);
		return 0;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
		if (!strcmp(verb, verbs[i].name)) {
			r = verbs[i].fn(argc - optind, argv + optind);
			if (fflush(stdout) != 0 && r == 0)
				r = cli_client_error("cannot write to standard output: %s", strerror(errno));
			return r;
		}
	return cli_usage_error("unknown command \"%s\"", verb);
}
