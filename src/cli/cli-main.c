/* SPDX-License-Identifier: Apache-2.0 */
/* airlock: a thin client of airlockd's API with docker-like verbs. */
#include <curl/curl.h>
#include <getopt.h>
#include <jansson.h>

#include "cli-http.h"
#include "json-cleanup.h"
#include "util.h"
#include "version.h"

#define DEFAULT_SOCKET "/run/airlock/airlockd.sock"
#define EXIT_CLIENT 125 /* the request failed (not the command) */
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124
#define CLI_STDIN_MAX (8u << 20)

static const char *sock;
static bool opt_json;

static const char usage_text[] =
	"usage: airlock [--socket PATH] COMMAND ...\n"
	"\n"
	"  run [--template T] [--vcpus N] [--memory MIB] [--env K=V]... [--timeout S] -- CMD [ARG...]\n"
	"                    create a sandbox, run CMD in it, delete it; exits with CMD's status\n"
	"  create [--template T] [--vcpus N] [--memory MIB] [--env K=V]... [--metadata K=V]... [--json]\n"
	"                    create a sandbox and print its id\n"
	"  exec [--env K=V]... [--cwd DIR] [--timeout S] ID -- CMD [ARG...]\n"
	"                    run CMD in a running sandbox\n"
	"  ls [--all] [--json]   list sandboxes\n"
	"  inspect ID [--json]   show one sandbox\n"
	"  rm ID...              delete sandboxes\n"
	"  version\n"
	"\n"
	"The socket is --socket PATH, else $AIRLOCK_SOCKET, else " DEFAULT_SOCKET ".\n";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("airlock: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nRun 'airlock --help' for usage.\n", stderr);
	return EXIT_USAGE;
}

/* Prints the daemon's error (or the transport's) and returns EXIT_CLIENT. */
static int report(long status, json_t *body, const char *transport_err)
{
	if (transport_err) {
		fprintf(stderr, "airlock: %s\n", transport_err);
		return EXIT_CLIENT;
	}
	json_t *e = json_object_get(body, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	const char *code = json_string_value(json_object_get(e, "code"));
	fprintf(stderr, "airlock: %s (HTTP %ld%s%s)\n", msg ? msg : "the daemon refused the request", status,
		code ? ", " : "", code ? code : "");
	return EXIT_CLIENT;
}

/* One call; on any failure reports it and returns EXIT_CLIENT. */
static int call(const char *method, const char *path, json_t *body, long want_status, json_t **ret)
{
	char errbuf[1024];
	long status = 0;
	json_t *resp = NULL;
	if (cli_http(sock, method, path, body, &status, &resp, errbuf, sizeof(errbuf)) < 0)
		return report(0, NULL, errbuf);
	if (status != want_status) {
		int r = report(status, resp, NULL);
		if (resp)
			json_decref(resp);
		return r;
	}
	*ret = resp ? resp : json_object();
	return 0;
}

static int add_kv(json_t *obj, const char *flag, const char *arg)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg)
		return usage_error("%s takes KEY=VALUE, got \"%s\"", flag, arg);
	cleanup_free char *key = xstrndup(arg, (size_t)(eq - arg));
	json_object_set_new(obj, key, json_string(eq + 1));
	return 0;
}

static int parse_uint_flag(const char *flag, const char *arg, long max, json_t *obj, const char *field)
{
	long v;
	if (parse_int_range(arg, 1, max, &v) < 0)
		return usage_error("%s takes a whole number from 1 to %ld, got \"%s\"", flag, max, arg);
	json_object_set_new(obj, field, json_integer(v));
	return 0;
}

enum { OPT_TEMPLATE = 1000, OPT_VCPUS, OPT_MEMORY, OPT_ENV, OPT_METADATA, OPT_TIMEOUT, OPT_CWD, OPT_JSON, OPT_ALL };

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
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

struct verb_args {
	json_t *create; /* body of POST /v1/sandboxes */
	json_t *exec;   /* body of POST .../exec, without cmd */
	bool all;
};

/* Parses the options shared by the verbs; `allowed` lists the OPT_* a verb
 * takes. Verbs that run a command stop at the first operand (the rest is the
 * command); the others take options anywhere ("inspect ID --json"). */
static int parse_verb_opts(int argc, char **argv, const int *allowed, struct verb_args *a)
{
	bool stop_at_operand = !strcmp(argv[0], "run") || !strcmp(argv[0], "exec");
	optind = 0; /* 0, not 1: glibc then re-reads the ordering from optstring */
	int c;
	while ((c = getopt_long(argc, argv, stop_at_operand ? "+h" : "h", verb_opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(usage_text, stdout);
			exit(0);
		}
		bool ok = false;
		for (const int *p = allowed; *p; p++)
			ok |= *p == c;
		if (!ok || c == '?')
			return usage_error("%s: unknown or misplaced option", argv[0]);
		int r = 0;
		json_t *env = json_object_get(a->create ? a->create : a->exec, "env");
		switch (c) {
		case OPT_TEMPLATE:
			json_object_set_new(a->create, "template", json_string(optarg));
			break;
		case OPT_VCPUS:
			r = parse_uint_flag("--vcpus", optarg, 1024, a->create, "vcpus");
			break;
		case OPT_MEMORY:
			r = parse_uint_flag("--memory", optarg, 1 << 24, a->create, "memory_mib");
			break;
		case OPT_ENV:
			r = add_kv(env, "--env", optarg);
			break;
		case OPT_METADATA:
			r = add_kv(json_object_get(a->create, "metadata"), "--metadata", optarg);
			break;
		case OPT_TIMEOUT:
			r = parse_uint_flag("--timeout", optarg, 86400, a->exec, "timeout_s");
			break;
		case OPT_CWD:
			json_object_set_new(a->exec, "cwd", json_string(optarg));
			break;
		case OPT_JSON:
			opt_json = true;
			break;
		case OPT_ALL:
			a->all = true;
			break;
		}
		if (r)
			return r;
	}
	return 0;
}

static int read_stdin_all(uint8_t **ret, size_t *ret_len)
{
	size_t cap = 64 * 1024, len = 0;
	uint8_t *b = xmalloc(cap);
	for (;;) {
		if (len == cap) {
			if (cap > CLI_STDIN_MAX) {
				free(b);
				fprintf(stderr, "airlock: standard input is larger than %u bytes; write big inputs "
						"to a file in the sandbox instead\n",
					CLI_STDIN_MAX);
				return EXIT_CLIENT;
			}
			cap *= 2;
			b = xrealloc(b, cap);
		}
		ssize_t n = read(0, b + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	if (len > CLI_STDIN_MAX) {
		free(b);
		fprintf(stderr, "airlock: standard input is larger than %u bytes\n", CLI_STDIN_MAX);
		return EXIT_CLIENT;
	}
	*ret = b;
	*ret_len = len;
	return 0;
}

static int write_output(int fd, json_t *resp, const char *field, const char *enc_field)
{
	json_t *v = json_object_get(resp, field);
	if (!json_is_string(v))
		return 0;
	const char *enc = json_string_value(json_object_get(resp, enc_field));
	if (enc && !strcmp(enc, "base64")) {
		uint8_t *data;
		size_t len;
		if (base64_decode(json_string_value(v), json_string_length(v), &data, &len) < 0)
			return -EBADMSG;
		int r = write_full(fd, data, len);
		free(data);
		return r;
	}
	return write_full(fd, json_string_value(v), json_string_length(v));
}

/* Runs the exec body in sandbox id, relays output, returns the command's status. */
static int run_exec(const char *id, json_t *body, char **cmd, int n_cmd)
{
	json_t *arr = json_array();
	for (int i = 0; i < n_cmd; i++)
		json_array_append_new(arr, json_string(cmd[i]));
	json_object_set_new(body, "cmd", arr);
	if (!isatty(0)) {
		uint8_t *in;
		size_t len;
		int r = read_stdin_all(&in, &len);
		if (r)
			return r;
		cleanup_free char *b64 = base64_encode(in, len, NULL);
		free(in);
		json_object_set_new(body, "stdin", json_string(b64));
		json_object_set_new(body, "stdin_encoding", json_string("base64"));
	}
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/exec", id);
	cleanup_json json_t *resp = NULL;
	int r = call("POST", path, body, 200, &resp);
	if (r)
		return r;
	if (write_output(1, resp, "stdout", "stdout_encoding") < 0 ||
	    write_output(2, resp, "stderr", "stderr_encoding") < 0)
		fprintf(stderr, "airlock: cannot write the command's output\n");
	if (json_is_true(json_object_get(resp, "stdout_truncated")) ||
	    json_is_true(json_object_get(resp, "stderr_truncated")))
		fprintf(stderr, "airlock: output was truncated at the daemon's limit\n");
	if (json_is_true(json_object_get(resp, "timed_out"))) {
		fprintf(stderr, "airlock: the command timed out and was killed\n");
		return EXIT_TIMEOUT;
	}
	json_t *code = json_object_get(resp, "exit_code");
	if (json_is_integer(code))
		return (int)json_integer_value(code);
	json_t *sig = json_object_get(resp, "signal");
	return json_is_integer(sig) ? 128 + (int)json_integer_value(sig) : EXIT_CLIENT;
}

static json_t *new_create_body(void)
{
	return json_pack("{s:{}, s:{}}", "env", "metadata");
}

static int split_cmd(int argc, char **argv, int *ret_first)
{
	/* getopt stops at "--" (consumed) or at the first operand. */
	if (optind >= argc)
		return usage_error("%s: missing the command to run (put it after --)", argv[0]);
	*ret_first = optind;
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	static const int allowed[] = {OPT_TEMPLATE, OPT_VCPUS, OPT_MEMORY, OPT_ENV, OPT_TIMEOUT, OPT_CWD, 0};
	cleanup_json json_t *create = new_create_body();
	cleanup_json json_t *exec = json_object();
	struct verb_args a = {.create = create, .exec = exec};
	int r = parse_verb_opts(argc, argv, allowed, &a), first = 0;
	if (r || (r = split_cmd(argc, argv, &first)))
		return r;
	cleanup_json json_t *sb = NULL;
	if ((r = call("POST", "/v1/sandboxes", create, 201, &sb)))
		return r;
	const char *id = json_string_value(json_object_get(sb, "id"));
	if (!id)
		return report(201, NULL, "the daemon's answer has no sandbox id");
	int status = run_exec(id, exec, argv + first, argc - first);
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s", id);
	cleanup_json json_t *del = NULL;
	if (call("DELETE", path, NULL, 200, &del)) {
		fprintf(stderr, "airlock: sandbox %s was left behind; remove it with 'airlock rm %s'\n", id, id);
		if (status == 0)
			status = EXIT_CLIENT;
	}
	return status;
}

static int cmd_create(int argc, char **argv)
{
	static const int allowed[] = {OPT_TEMPLATE, OPT_VCPUS, OPT_MEMORY, OPT_ENV, OPT_METADATA, OPT_JSON, 0};
	cleanup_json json_t *create = new_create_body();
	struct verb_args a = {.create = create};
	int r = parse_verb_opts(argc, argv, allowed, &a);
	if (r)
		return r;
	if (optind != argc)
		return usage_error("create takes no operands");
	cleanup_json json_t *sb = NULL;
	if ((r = call("POST", "/v1/sandboxes", create, 201, &sb)))
		return r;
	if (opt_json) {
		json_dumpf(sb, stdout, JSON_COMPACT);
		putchar('\n');
	} else {
		printf("%s\n", json_string_value(json_object_get(sb, "id")));
	}
	return 0;
}

static int cmd_exec(int argc, char **argv)
{
	static const int allowed[] = {OPT_ENV, OPT_CWD, OPT_TIMEOUT, 0};
	cleanup_json json_t *exec = json_pack("{s:{}}", "env");
	struct verb_args a = {.exec = exec};
	int r = parse_verb_opts(argc, argv, allowed, &a);
	if (r)
		return r;
	if (optind >= argc)
		return usage_error("exec: missing the sandbox id");
	const char *id = argv[optind++];
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	int first = 0;
	if ((r = split_cmd(argc, argv, &first)))
		return r;
	return run_exec(id, exec, argv + first, argc - first);
}

static int cmd_ls(int argc, char **argv)
{
	static const int allowed[] = {OPT_ALL, OPT_JSON, 0};
	struct verb_args a = {0};
	int r = parse_verb_opts(argc, argv, allowed, &a);
	if (r)
		return r;
	cleanup_json json_t *resp = NULL;
	if ((r = call("GET", a.all ? "/v1/sandboxes?all=true" : "/v1/sandboxes", NULL, 200, &resp)))
		return r;
	json_t *list = json_object_get(resp, "sandboxes");
	if (opt_json) {
		json_dumpf(list, stdout, JSON_COMPACT);
		putchar('\n');
		return 0;
	}
	printf("%-20s %-9s %-12s %5s %7s  %s\n", "ID", "STATE", "TEMPLATE", "VCPUS", "MEMORY", "CREATED");
	size_t i;
	json_t *sb;
	json_array_foreach(list, i, sb)
	{
		printf("%-20s %-9s %-12s %5lld %6lldM  %s\n", json_string_value(json_object_get(sb, "id")),
		       json_string_value(json_object_get(sb, "state")), json_string_value(json_object_get(sb, "template")),
		       (long long)json_integer_value(json_object_get(sb, "vcpus")),
		       (long long)json_integer_value(json_object_get(sb, "memory_mib")),
		       json_string_value(json_object_get(sb, "created_at")));
	}
	return 0;
}

static int cmd_inspect(int argc, char **argv)
{
	static const int allowed[] = {OPT_JSON, 0};
	struct verb_args a = {0};
	int r = parse_verb_opts(argc, argv, allowed, &a);
	if (r)
		return r;
	if (optind + 1 != argc)
		return usage_error("inspect takes one sandbox id");
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s", argv[optind]);
	cleanup_json json_t *resp = NULL;
	if ((r = call("GET", path, NULL, 200, &resp)))
		return r;
	json_dumpf(resp, stdout, opt_json ? JSON_COMPACT : JSON_INDENT(2));
	putchar('\n');
	return 0;
}

static int cmd_rm(int argc, char **argv)
{
	static const int allowed[] = {0};
	struct verb_args a = {0};
	int r = parse_verb_opts(argc, argv, allowed, &a);
	if (r)
		return r;
	if (optind >= argc)
		return usage_error("rm takes one or more sandbox ids");
	int status = 0;
	for (int i = optind; i < argc; i++) {
		cleanup_free char *path = xasprintf("/v1/sandboxes/%s", argv[i]);
		cleanup_json json_t *resp = NULL;
		if (call("DELETE", path, NULL, 200, &resp))
			status = EXIT_CLIENT;
		else
			printf("%s\n", argv[i]);
	}
	return status;
}

int main(int argc, char **argv)
{
	sock = getenv("AIRLOCK_SOCKET");
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			sock = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'V':
			printf("airlock %s\n", AIRLOCK_VERSION);
			return 0;
		default:
			return usage_error("unknown option");
		}
	}
	if (!sock || !*sock)
		sock = DEFAULT_SOCKET;
	if (optind >= argc)
		return usage_error("missing a command");
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} verbs[] = {
		{"run", cmd_run}, {"create", cmd_create}, {"exec", cmd_exec}, {"ls", cmd_ls},
		{"inspect", cmd_inspect}, {"rm", cmd_rm},
	};
	const char *verb = argv[optind];
	if (!strcmp(verb, "version")) {
		printf("airlock %s\n", AIRLOCK_VERSION);
		return 0;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
		if (!strcmp(verb, verbs[i].name)) {
			int r = verbs[i].fn(argc - optind, argv + optind);
			fflush(stdout);
			curl_global_cleanup();
			return r;
		}
	return usage_error("unknown command \"%s\"", verb);
}
