/* SPDX-License-Identifier: Apache-2.0 */
/* airlock mcp: the tools and resources, each a call (or a few) to airlockd's
 * API with the CLI's connection, so the token decides what they may do.
 * Every result is bounded (the limits below) and says what it cut. */
#include <ctype.h>

#include "cli-mcp.h"
#include "cli.h"

#define MCP_READ_DEFAULT (64u << 10) /* read_file without max_bytes */
#define MCP_READ_MAX (1u << 20)      /* read_file's max_bytes; resources/read */
#define MCP_DOWNLOAD_MAX (4u << 20)  /* download's tar archive */
#define MCP_LIST_MAX 1000            /* entries listed by list_files, list_sandboxes, resources/list */
#define MCP_PROGRESS_TEXT_MAX 1024   /* output text carried by one progress notification */
#define MCP_STDIN_MAX (1u << 20)     /* run_command's stdin */
#define MCP_WAIT_MAX 300             /* get_output's wait_s */

static const char truncated_fmt[] = "[\u2026 %llu bytes truncated]";

/* ------------------------------------------------------------ results */

static json_t *result_text(bool is_error, const char *text)
{
	return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", text, "isError", is_error);
}

__attribute__((format(printf, 2, 3))) static json_t *result_fmt(bool is_error, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	cleanup_free char *text = NULL;
	if (vasprintf(&text, fmt, ap) < 0)
		abort();
	va_end(ap);
	return result_text(is_error, text);
}

/* Text for a person or a model: valid UTF-8, NUL bytes shown as U+FFFD. */
static char *text_of(const char *data, size_t len)
{
	cleanup_free char *copy = xmalloc(len + 1);
	for (size_t i = 0; i < len; i++)
		copy[i] = data[i] ? data[i] : '\x80'; /* invalid alone: repaired to U+FFFD */
	copy[len] = '\0';
	return utf8_repair(copy);
}

/* A JSON value as indented text, at most MCP_OUTPUT_MAX of it. */
static json_t *result_json(json_t *v)
{
	cleanup_free char *text = json_dumps(v, JSON_INDENT(2));
	size_t len = strlen(text);
	if (len <= MCP_OUTPUT_MAX)
		return result_text(false, text);
	cleanup_free char *head = text_of(text, MCP_OUTPUT_MAX);
	return result_fmt(false, "%s\n[\u2026 %zu bytes truncated]", head, len - MCP_OUTPUT_MAX);
}

/* ------------------------------------------------------------ the daemon */

struct api_fail {
	long status; /* 0: no answer */
	char message[1024];
};

static void fail_from_answer(struct api_fail *f, long status, json_t *body)
{
	json_t *e = json_object_get(body, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *hint = "";
	if (status == 401)
		hint = " Check AIRLOCK_TOKEN: the token may be revoked.";
	else if (status == 404)
		hint = " (An unknown id, a path that does not exist, or another tenant's sandbox.)";
	f->status = status;
	snprintf(f->message, sizeof(f->message), "airlockd refused: %s (HTTP %ld%s%s).%s",
	         msg ? msg : "no reason given", status, code ? ", " : "", code ? code : "", hint);
}

/* One request; 0 with the answer (an empty object for none) when the status
 * is want, else < 0 with *f saying why. */
static int api_call(struct cli_req *req, long want, json_t **ret, struct api_fail *f)
{
	struct al_error err = {0};
	long status = 0;
	cleanup_json json_t *resp = NULL;
	if (cli_request(req, &status, &resp, &err) < 0) {
		f->status = 0;
		snprintf(f->message, sizeof(f->message), "%s", err.message);
		return -EIO;
	}
	if (status != want) {
		fail_from_answer(f, status, resp);
		return -EIO;
	}
	if (ret)
		*ret = resp ? TAKE_PTR(resp) : json_object();
	return 0;
}

static int api_json(const char *method, const char *path, json_t *body, long want, json_t **ret, struct api_fail *f)
{
	struct cli_req req = {.method = method, .path = path, .json = body};
	return api_call(&req, want, ret, f);
}

static json_t *fail_result(const struct api_fail *f)
{
	return result_text(true, f->message);
}

/* ------------------------------------------------------------ arguments */

static const char *arg_str(struct mcp_call *c, const char *name)
{
	return json_string_value(json_object_get(c->args, name));
}

static long long arg_int(struct mcp_call *c, const char *name, long long dflt)
{
	json_t *v = json_object_get(c->args, name);
	return v ? json_integer_value(v) : dflt;
}

/* SECURITY: ids go into the daemon's URL paths: only [A-Za-z0-9_-], 1 to 64
 * bytes, so an id can be neither "../tokens" nor carry a query. */
static bool id_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '-' || s[i] == '_'))
			return false;
	return true;
}

/* The id argument `name`, or NULL with *ret_bad the tool's error. */
static const char *arg_id(struct mcp_call *c, const char *name, json_t **ret_bad)
{
	const char *id = arg_str(c, name);
	if (id_ok(id))
		return id;
	*ret_bad =
	    result_fmt(true, "\"%s\" must be an id such as the ones the tools answer (letters, digits, - and _)", name);
	return NULL;
}

/* SECURITY: a path in a sandbox goes URL-encoded into a query (cli_path_with_query); it must be absolute. */
static const char *arg_path(struct mcp_call *c, const char *name, json_t **ret_bad)
{
	const char *p = arg_str(c, name);
	if (p && p[0] == '/')
		return p;
	*ret_bad = result_fmt(true, "\"%s\" must be an absolute path in the sandbox (starting with /)", name);
	return NULL;
}

/* The "sandbox_id" argument and a second one, `name`: an id, or a path when
 * is_path. NULL with both set, or the tool's error for the first that is wrong. */
static json_t *args_sandbox_and(struct mcp_call *c, const char *name, bool is_path, const char **ret_id,
                                const char **ret_other)
{
	json_t *bad = NULL;
	*ret_id = arg_id(c, "sandbox_id", &bad);
	if (*ret_id)
		*ret_other = is_path ? arg_path(c, name, &bad) : arg_id(c, name, &bad);
	return bad;
}

static char *sandbox_path(const char *id, const char *rest)
{
	return xasprintf("/v1/sandboxes/%s%s", id, rest);
}

static char *sandbox_query(const char *id, const char *rest, const char *path)
{
	cleanup_free char *prefix = sandbox_path(id, rest);
	return cli_path_with_query(prefix, "path", path);
}

/* ------------------------------------------------------------ bounded output */

/* One output stream kept to MCP_OUTPUT_MAX: its head (run_command) or its
 * tail (get_output, where the latest lines matter), counting what was cut. */
struct out_buf {
	char *data;
	size_t len;
	unsigned long long dropped;
	bool keep_tail;
};

static void out_release(struct out_buf *b)
{
	free(b->data);
}

static void out_add(struct out_buf *b, const void *p, size_t n)
{
	size_t take = n;
	if (!b->keep_tail) {
		take = MIN(n, MCP_OUTPUT_MAX - b->len);
		b->dropped += n - take;
	}
	b->data = xrealloc(b->data, b->len + take + 1);
	memcpy(b->data + b->len, p, take);
	b->len += take;
	if (b->keep_tail && b->len > 2 * MCP_OUTPUT_MAX) {
		size_t cut = b->len - MCP_OUTPUT_MAX;
		memmove(b->data, b->data + cut, MCP_OUTPUT_MAX);
		b->len = MCP_OUTPUT_MAX;
		b->dropped += cut;
	}
}

/* The kept text with its truncation marker. */
static char *out_text(struct out_buf *b)
{
	if (b->keep_tail && b->len > MCP_OUTPUT_MAX) {
		size_t cut = b->len - MCP_OUTPUT_MAX;
		memmove(b->data, b->data + cut, MCP_OUTPUT_MAX);
		b->len = MCP_OUTPUT_MAX;
		b->dropped += cut;
	}
	cleanup_free char *text = text_of(b->data ? b->data : "", b->len);
	if (!b->dropped)
		return TAKE_PTR(text);
	char marker[64];
	snprintf(marker, sizeof(marker), truncated_fmt, b->dropped);
	return b->keep_tail ? xasprintf("%s\n%s", marker, text) : xasprintf("%s\n%s", text, marker);
}

/* The bytes of an output line's "data" (base64 when "encoding" says so). */
static int chunk_bytes(json_t *line, uint8_t **ret, size_t *ret_len)
{
	json_t *data = json_object_get(line, "data");
	if (!json_is_string(data))
		return -EBADMSG;
	const char *enc = json_string_value(json_object_get(line, "encoding"));
	if (enc && !strcmp(enc, "base64"))
		return base64_decode(json_string_value(data), json_string_length(data), ret, ret_len);
	*ret = (uint8_t *)xstrndup(json_string_value(data), json_string_length(data));
	*ret_len = json_string_length(data);
	return 0;
}

/* An output stream (exec with stream, or a process's output), line by line. */
struct stream_state {
	struct mcp_call *call;
	struct out_buf out[2]; /* stdout, stderr */
	json_t *exit;          /* the exit line */
	json_t *error;         /* the error line */
	double events;
	bool client_gone;
};

static void stream_release(struct stream_state *s)
{
	out_release(&s->out[0]);
	out_release(&s->out[1]);
	json_decref(s->exit);
	json_decref(s->error);
}

static int stream_progress(struct stream_state *s, const char *type, const uint8_t *bytes, size_t len,
                           struct al_error *err)
{
	if (!s->call || !s->call->progress)
		return 0;
	cleanup_free char *text = text_of((const char *)bytes, MIN(len, MCP_PROGRESS_TEXT_MAX));
	cleanup_free char *msg = len > MCP_PROGRESS_TEXT_MAX ? xasprintf("%s: %s[\u2026 %zu bytes truncated]", type,
	                                                                 text, len - MCP_PROGRESS_TEXT_MAX)
	                                                     : xasprintf("%s: %s", type, text);
	if (s->call->progress(s->call->progress_ud, ++s->events, msg) < 0) {
		s->client_gone = true;
		return al_error_set(err, AL_ERR_UNAVAILABLE, EPIPE,
		                    "the MCP client went away; the command was stopped");
	}
	return 0;
}

/* SECURITY: a line relayed by the daemon carries a guest's output: parsed as
 * JSON (bounded by CLI_LINE_MAX in cli-http.c), kept only within out_buf's bound. */
static int stream_on_line(void *ud, char *line, size_t len, struct al_error *err)
{
	struct stream_state *s = ud;
	json_error_t jerr;
	cleanup_json json_t *o = json_loadb(line, len, 0, &jerr);
	const char *type = json_string_value(json_object_get(o, "type"));
	if (!type)
		return 0;
	bool is_out = !strcmp(type, "stdout"), is_err = !strcmp(type, "stderr");
	if (is_out || is_err) {
		cleanup_free uint8_t *bytes = NULL;
		size_t n = 0;
		if (chunk_bytes(o, &bytes, &n) < 0)
			return 0;
		out_add(&s->out[is_err], bytes, n);
		return stream_progress(s, type, bytes, n, err);
	}
	if (!strcmp(type, "exit")) {
		json_decref(s->exit);
		s->exit = json_incref(o);
	} else if (!strcmp(type, "error")) {
		json_decref(s->error);
		s->error = json_incref(o);
	} else if (!strcmp(type, "dropped")) {
		s->out[0].dropped += (unsigned long long)json_integer_value(json_object_get(o, "bytes"));
	}
	return 0;
}

/* "exit code 3", "killed by signal 9", "timed out (killed)" */
static void describe_exit(json_t *e, char *buf, size_t size)
{
	json_t *code = json_object_get(e, "exit_code"), *sig = json_object_get(e, "signal");
	if (json_is_true(json_object_get(e, "timed_out")))
		snprintf(buf, size, "timed out and was killed");
	else if (json_is_integer(code))
		snprintf(buf, size, "exit code %lld", (long long)json_integer_value(code));
	else if (json_is_integer(sig))
		snprintf(buf, size, "killed by signal %lld", (long long)json_integer_value(sig));
	else
		snprintf(buf, size, "ended (the daemon did not say how)");
}

static json_t *stream_result(struct stream_state *s, const char *head)
{
	cleanup_free char *out = out_text(&s->out[0]);
	cleanup_free char *err = out_text(&s->out[1]);
	return result_fmt(false, "%s\n--- stdout ---\n%s\n--- stderr ---\n%s", head, out, err);
}

/* ------------------------------------------------------------ sandboxes */

/* The arguments several tools share. */
/* clang-format off */
#define SANDBOX_ID_ARG {"sandbox_id", MCP_ARG_STRING, true, 0, 64, NULL, "the sandbox's id"}
#define PATH_ARG(desc) {"path", MCP_ARG_STRING, true, 0, 4096, NULL, desc}
/* run_command's and start_process's: what exec_body reads. */
#define EXEC_ARGS \
	{"command", MCP_ARG_STRING, false, 0, 65536, NULL, "a shell command line, run as /bin/sh -c COMMAND"}, \
	{"argv", MCP_ARG_STRING_ARRAY, false, 0, 1024, NULL, "or the program and its arguments, without a shell"}, \
	{"cwd", MCP_ARG_STRING, false, 0, 4096, NULL, "working directory (absolute; default /)"}, \
	{"env", MCP_ARG_STRING_MAP, false, 0, 256, NULL, "extra environment"}
/* clang-format on */

static const char *const on_timeout_choices[] = {"kill", "pause", NULL};

static const struct mcp_arg create_args[] = {
    {"template", MCP_ARG_STRING, false, 0, 63, NULL,
     "the template (default \"minimal\"; \"base\" has python3, bash, curl, git)"},
    {"vcpus", MCP_ARG_INTEGER, false, 1, 16, NULL, "virtual CPUs (default 1)"},
    {"memory_mib", MCP_ARG_INTEGER, false, 128, 16384, NULL, "memory in MiB (default 256)"},
    {"env", MCP_ARG_STRING_MAP, false, 0, 256, NULL, "environment of every command"},
    {"metadata", MCP_ARG_STRING_MAP, false, 0, 64, NULL, "labels, shown by list_sandboxes"},
    {"timeout_s", MCP_ARG_INTEGER, false, 0, 2592000, NULL, "seconds of running time before on_timeout (0: none)"},
    {"on_timeout", MCP_ARG_STRING, false, 0, 8, on_timeout_choices, "what the timeout does (default kill)"},
    {"allow", MCP_ARG_STRING_ARRAY, false, 0, 512, NULL,
     "egress rules the sandbox may reach (example.com, *.example.com, host:port, CIDR); default: none"},
    {"secrets", MCP_ARG_STRING_MAP, false, 0, 32, NULL,
     "ENV_NAME -> secret name: the env var holds a placeholder the egress gateway swaps for the secret"},
};

/* What an agent needs of a sandbox, not the whole record. */
static json_t *sandbox_summary(json_t *sb)
{
	static const char *const keys[] = {"id",         "state",    "template", "vcpus",   "memory_mib",
	                                   "created_at", "metadata", "error",    "boot_ms", "timeout_s"};
	json_t *o = json_object();
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		json_t *v = json_object_get(sb, keys[i]);
		if (v)
			json_object_set(o, keys[i], v);
	}
	return o;
}

/* POST /v1/sandboxes (create_sandbox, restore): the new sandbox's summary. */
static json_t *new_sandbox(json_t *body)
{
	struct api_fail f;
	cleanup_json json_t *sb = NULL;
	if (api_json("POST", "/v1/sandboxes", body, 201, &sb, &f) < 0)
		return fail_result(&f);
	cleanup_json json_t *sum = sandbox_summary(sb);
	return result_json(sum);
}

static json_t *tool_create_sandbox(struct mcp_call *c)
{
	cleanup_json json_t *body = json_object();
	const char *key;
	json_t *v;
	json_object_foreach (c->args, key, v) {
		if (!strcmp(key, "allow"))
			json_object_set_new(body, "network", json_pack("{s:O}", "allow", v));
		else
			json_object_set(body, key, v);
	}
	return new_sandbox(body);
}

static const struct mcp_arg sandbox_only_args[] = {
    {"sandbox_id", MCP_ARG_STRING, true, 0, 64, NULL, "the sandbox's id (sb-...)"},
};

static json_t *tool_delete_sandbox(struct mcp_call *c)
{
	json_t *bad = NULL;
	const char *id = arg_id(c, "sandbox_id", &bad);
	if (!id)
		return bad;
	cleanup_free char *path = sandbox_path(id, "");
	struct api_fail f;
	if (api_json("DELETE", path, NULL, 200, NULL, &f) < 0)
		return fail_result(&f);
	return result_fmt(false, "deleted sandbox %s", id);
}

static const struct mcp_arg list_sandboxes_args[] = {
    {"all", MCP_ARG_BOOLEAN, false, 0, 0, NULL, "include deleted sandboxes"},
};

static json_t *tool_list_sandboxes(struct mcp_call *c)
{
	struct api_fail f;
	cleanup_json json_t *resp = NULL;
	bool all = json_is_true(json_object_get(c->args, "all"));
	if (api_json("GET", all ? "/v1/sandboxes?all=true" : "/v1/sandboxes", NULL, 200, &resp, &f) < 0)
		return fail_result(&f);
	json_t *list = json_object_get(resp, "sandboxes");
	cleanup_json json_t *out = json_array();
	size_t i;
	json_t *sb;
	json_array_foreach (list, i, sb) {
		if (i == MCP_LIST_MAX)
			break;
		json_array_append_new(out, sandbox_summary(sb));
	}
	cleanup_json json_t *answer = json_pack("{s:O}", "sandboxes", out);
	if (json_array_size(list) > MCP_LIST_MAX)
		json_object_set_new(
		    answer, "truncated",
		    json_sprintf("[\u2026 %zu more sandboxes not listed]", json_array_size(list) - MCP_LIST_MAX));
	return result_json(answer);
}

/* The templates a create_sandbox may name: what each is, not its steps. */
static json_t *tool_list_templates(struct mcp_call *c)
{
	(void)c;
	struct api_fail f;
	cleanup_json json_t *resp = NULL;
	if (api_json("GET", "/v1/templates", NULL, 200, &resp, &f) < 0)
		return fail_result(&f);
	cleanup_json json_t *out = json_array();
	size_t i;
	json_t *t;
	json_array_foreach (json_object_get(resp, "templates"), i, t) {
		if (i == MCP_LIST_MAX)
			break;
		json_t *config = json_object_get(t, "config");
		json_array_append_new(
		    out, json_pack("{s:O?, s:O?, s:O?, s:O?, s:O?, s:O?, s:O?}", "name", json_object_get(t, "name"),
		                   "source", json_object_get(t, "source"), "parent", json_object_get(t, "parent"),
		                   "description", json_object_get(t, "description"), "size_mib",
		                   json_object_get(t, "size_mib"), "workdir", json_object_get(config, "workdir"), "cmd",
		                   json_object_get(config, "cmd")));
	}
	cleanup_json json_t *answer = json_pack("{s:O}", "templates", out);
	return result_json(answer);
}

/* ------------------------------------------------------------ commands */

static const struct mcp_arg run_args[] = {
    SANDBOX_ID_ARG,
    EXEC_ARGS,
    {"stdin", MCP_ARG_STRING, false, 0, MCP_STDIN_MAX, NULL, "text given to the command's standard input"},
    {"timeout_s", MCP_ARG_INTEGER, false, 1, 3600, NULL, "kill the command after this many seconds (default 60)"},
};

/* The exec body of run_command and start_process: cmd from command or argv
 * (exactly one), cwd, env. NULL with *ret_bad the tool's error. */
static json_t *exec_body(struct mcp_call *c, json_t **ret_bad)
{
	const char *command = arg_str(c, "command");
	json_t *argv = json_object_get(c->args, "argv");
	if (!command == !argv || (argv && json_array_size(argv) == 0)) {
		*ret_bad = result_text(true, "give either \"command\" (a shell command line) or \"argv\" (a non-empty "
		                             "array), not both");
		return NULL;
	}
	json_t *body = json_object();
	if (command)
		json_object_set_new(body, "cmd", json_pack("[s, s, s]", "/bin/sh", "-c", command));
	else
		json_object_set(body, "cmd", argv);
	static const char *const pass[] = {"cwd", "env", "tag"};
	for (size_t i = 0; i < ARRAY_SIZE(pass); i++) {
		json_t *v = json_object_get(c->args, pass[i]);
		if (v)
			json_object_set(body, pass[i], v);
	}
	return body;
}

static json_t *tool_run_command(struct mcp_call *c)
{
	json_t *bad = NULL;
	const char *id = arg_id(c, "sandbox_id", &bad);
	cleanup_json json_t *body = id ? exec_body(c, &bad) : NULL;
	if (!body)
		return bad;
	json_object_set_new(body, "timeout_s", json_integer(arg_int(c, "timeout_s", 60)));
	json_object_set_new(body, "stream", json_true());
	if (arg_str(c, "stdin"))
		json_object_set(body, "stdin", json_object_get(c->args, "stdin"));
	cleanup_free char *path = sandbox_path(id, "/exec");
	__attribute__((cleanup(stream_release))) struct stream_state s = {.call = c};
	struct cli_req req = {.method = "POST", .path = path, .json = body, .on_line = stream_on_line, .ud = &s};
	struct api_fail f;
	if (api_call(&req, 200, NULL, &f) < 0)
		return fail_result(&f);
	if (s.error) {
		const char *msg = json_string_value(json_object_get(json_object_get(s.error, "error"), "message"));
		return result_fmt(true, "the command failed: %s", msg ? msg : "no reason given");
	}
	if (!s.exit)
		return result_text(true, "the output stream ended before the command did (the daemon went away?)");
	char how[96];
	describe_exit(s.exit, how, sizeof(how));
	cleanup_free char *head =
	    xasprintf("%s (%lld ms)", how, (long long)json_integer_value(json_object_get(s.exit, "duration_ms")));
	return stream_result(&s, head);
}

static const struct mcp_arg start_args[] = {
    SANDBOX_ID_ARG,
    EXEC_ARGS,
    {"tag", MCP_ARG_STRING, false, 0, 64, NULL, "a label for the process"},
};

static json_t *tool_start_process(struct mcp_call *c)
{
	json_t *bad = NULL;
	const char *id = arg_id(c, "sandbox_id", &bad);
	cleanup_json json_t *body = id ? exec_body(c, &bad) : NULL;
	if (!body)
		return bad;
	cleanup_free char *path = sandbox_path(id, "/processes");
	struct api_fail f;
	cleanup_json json_t *proc = NULL;
	if (api_json("POST", path, body, 201, &proc, &f) < 0)
		return fail_result(&f);
	const char *pid = json_string_value(json_object_get(proc, "id"));
	return result_fmt(false, "started process %s in sandbox %s; read its output with get_output", pid ? pid : "?",
	                  id);
}

static const struct mcp_arg output_args[] = {
    SANDBOX_ID_ARG,
    {"process_id", MCP_ARG_STRING, true, 0, 64, NULL, "the process's id (from start_process)"},
    {"wait_s", MCP_ARG_INTEGER, false, 0, MCP_WAIT_MAX, NULL,
     "first wait up to this many seconds for the process to exit (default 0: do not wait)"},
};

static json_t *tool_get_output(struct mcp_call *c)
{
	const char *id = NULL, *pid = NULL;
	json_t *bad = args_sandbox_and(c, "process_id", false, &id, &pid);
	if (bad)
		return bad;
	struct api_fail f;
	cleanup_free char *base = sandbox_path(id, "/processes/");
	long long wait_s = arg_int(c, "wait_s", 0);
	if (wait_s > 0) {
		cleanup_free char *wpath = xasprintf("%s%s/wait?timeout_s=%lld", base, pid, wait_s);
		struct cli_req req = {.method = "GET", .path = wpath};
		if (api_call(&req, 200, NULL, &f) < 0 && f.status != 408)
			return fail_result(&f);
	}
	cleanup_free char *ppath = xasprintf("%s%s", base, pid);
	cleanup_json json_t *proc = NULL;
	if (api_json("GET", ppath, NULL, 200, &proc, &f) < 0)
		return fail_result(&f);
	cleanup_free char *opath = xasprintf("%s%s/output?from=start&follow=false", base, pid);
	__attribute__((cleanup(stream_release))) struct stream_state s = {
	    .out = {{.keep_tail = true}, {.keep_tail = true}}};
	struct cli_req req = {.method = "GET", .path = opath, .on_line = stream_on_line, .ud = &s};
	if (api_call(&req, 200, NULL, &f) < 0)
		return fail_result(&f);
	const char *state = json_string_value(json_object_get(proc, "state"));
	char how[96] = "still running";
	if (!state || strcmp(state, "running"))
		describe_exit(proc, how, sizeof(how));
	cleanup_free char *head = xasprintf("process %s: %s", pid, how);
	return stream_result(&s, head);
}

static const struct mcp_arg kill_args[] = {
    SANDBOX_ID_ARG,
    {"process_id", MCP_ARG_STRING, true, 0, 64, NULL, "the process's id"},
    {"signal", MCP_ARG_STRING, false, 0, 8, NULL, "TERM (default), KILL, INT, HUP, ..."},
};

static json_t *tool_kill_process(struct mcp_call *c)
{
	const char *id = NULL, *pid = NULL;
	json_t *bad = args_sandbox_and(c, "process_id", false, &id, &pid);
	if (bad)
		return bad;
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/processes/%s/signal", id, pid);
	const char *sig = arg_str(c, "signal");
	cleanup_json json_t *body = json_pack("{s:s}", "signal", sig ? sig : "TERM");
	struct api_fail f;
	if (api_json("POST", path, body, 204, NULL, &f) < 0)
		return fail_result(&f);
	return result_fmt(false, "sent %s to process %s", sig ? sig : "TERM", pid);
}

/* ------------------------------------------------------------ files */

/* Bytes from the daemon, at most max kept; the transfer is cut there. */
struct byte_sink {
	char *data;
	size_t len, max;
	bool full;
};

static int byte_sink_add(void *ud, const void *buf, size_t len, struct al_error *err)
{
	struct byte_sink *b = ud;
	size_t take = MIN(len, b->max - b->len);
	b->data = xrealloc(b->data, b->len + take + 1);
	memcpy(b->data + b->len, buf, take);
	b->len += take;
	b->data[b->len] = '\0';
	if (take < len) {
		b->full = true;
		return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG, "enough");
	}
	return 0;
}

/* GET the bytes of a URL into *b (at most b->max); a cut at the bound is not a failure. */
static int fetch_bounded(const char *path, struct byte_sink *b, struct api_fail *f)
{
	struct cli_req req = {.method = "GET", .path = path, .on_bytes = byte_sink_add, .ud = b};
	if (api_call(&req, 200, NULL, f) < 0 && !b->full)
		return -EIO;
	return 0;
}

static json_t *get_stat(const char *id, const char *path, struct api_fail *f)
{
	cleanup_free char *url = sandbox_query(id, "/files/stat", path);
	json_t *st = NULL;
	if (api_json("GET", url, NULL, 200, &st, f) < 0)
		return NULL;
	return st;
}

static bool stat_is_dir(json_t *st)
{
	const char *t = json_string_value(json_object_get(st, "type"));
	return t && (!strcmp(t, "dir") || !strcmp(t, "directory"));
}

/* A file's first max bytes: text, or base64 when they are not UTF-8; with the
 * truncation marker. 0 with *ret_text and *ret_is_text, or < 0 with *f. */
static int read_file_text(const char *id, const char *path, size_t max, char **ret_text, bool *ret_base64,
                          struct api_fail *f)
{
	cleanup_json json_t *st = get_stat(id, path, f);
	if (!st)
		return -EIO;
	if (stat_is_dir(st)) {
		f->status = 400;
		snprintf(f->message, sizeof(f->message), "%s is a directory: list it with list_files", path);
		return -EISDIR;
	}
	unsigned long long size = (unsigned long long)json_integer_value(json_object_get(st, "size"));
	cleanup_free char *url = sandbox_query(id, "/files", path);
	struct byte_sink b = {.max = max};
	cleanup_free char *data = NULL;
	int r = fetch_bounded(url, &b, f);
	data = b.data;
	if (r < 0)
		return r;
	bool text = utf8_valid((const uint8_t *)(data ? data : ""), b.len) && (!b.len || !memchr(data, 0, b.len));
	cleanup_free char *body = text ? xstrdup(data ? data : "") : base64_encode((const uint8_t *)data, b.len, NULL);
	unsigned long long cut = size > b.len ? size - b.len : 0;
	char marker[64] = "";
	if (cut)
		snprintf(marker, sizeof(marker), truncated_fmt, cut);
	*ret_text = cut ? xasprintf("%s\n%s", body, marker) : TAKE_PTR(body);
	*ret_base64 = !text;
	return 0;
}

static const struct mcp_arg read_args[] = {
    SANDBOX_ID_ARG,
    PATH_ARG("absolute path of the file"),
    {"max_bytes", MCP_ARG_INTEGER, false, 1, MCP_READ_MAX, NULL, "bytes to read at most (default 65536)"},
};

static json_t *tool_read_file(struct mcp_call *c)
{
	const char *id = NULL, *path = NULL;
	json_t *bad = args_sandbox_and(c, "path", true, &id, &path);
	if (bad)
		return bad;
	cleanup_free char *text = NULL;
	bool b64 = false;
	struct api_fail f;
	if (read_file_text(id, path, (size_t)arg_int(c, "max_bytes", MCP_READ_DEFAULT), &text, &b64, &f) < 0)
		return fail_result(&f);
	if (b64)
		return result_fmt(false, "(binary file, base64)\n%s", text);
	return result_text(false, text);
}

/* PUT len bytes to a sandbox's route with ?path= (write_file, upload). */
static int put_bytes(const char *id, const char *route, const char *path, const uint8_t *bytes, size_t len,
                     const char *content_type, long want, struct api_fail *f)
{
	cleanup_free char *url = sandbox_query(id, route, path);
	struct cli_req req = {.method = "PUT",
	                      .path = url,
	                      .raw = bytes ? (const void *)bytes : "",
	                      .raw_len = len,
	                      .content_type = content_type};
	return api_call(&req, want, NULL, f);
}

static const char *const encoding_choices[] = {"utf8", "base64", NULL};

static const struct mcp_arg write_args[] = {
    SANDBOX_ID_ARG,
    PATH_ARG("absolute path of the file (replaced whole)"),
    {"content", MCP_ARG_STRING, true, 0, MCP_MESSAGE_MAX, NULL, "the file's content"},
    {"encoding", MCP_ARG_STRING, false, 0, 8, encoding_choices, "utf8 (default) or base64 for binary content"},
};

static json_t *tool_write_file(struct mcp_call *c)
{
	const char *id = NULL, *path = NULL;
	json_t *bad = args_sandbox_and(c, "path", true, &id, &path);
	if (bad)
		return bad;
	json_t *content = json_object_get(c->args, "content");
	const char *enc = arg_str(c, "encoding");
	cleanup_free uint8_t *bytes = NULL;
	size_t len = json_string_length(content);
	if (enc && !strcmp(enc, "base64")) {
		if (base64_decode(json_string_value(content), len, &bytes, &len) < 0)
			return result_text(true, "\"content\" is not valid base64");
	} else {
		bytes = (uint8_t *)xstrndup(json_string_value(content), len);
	}
	struct api_fail f;
	if (put_bytes(id, "/files", path, bytes, len, NULL, 201, &f) < 0)
		return fail_result(&f);
	return result_fmt(false, "wrote %zu bytes to %s", len, path);
}

static const struct mcp_arg list_args[] = {
    SANDBOX_ID_ARG,
    PATH_ARG("absolute path of the directory"),
};

static json_t *tool_list_files(struct mcp_call *c)
{
	const char *id = NULL, *path = NULL;
	json_t *bad = args_sandbox_and(c, "path", true, &id, &path);
	if (bad)
		return bad;
	cleanup_free char *url = sandbox_query(id, "/files/list", path);
	struct api_fail f;
	cleanup_json json_t *resp = NULL;
	if (api_json("GET", url, NULL, 200, &resp, &f) < 0)
		return fail_result(&f);
	json_t *entries = json_object_get(resp, "entries");
	size_t n = json_array_size(entries);
	cleanup_free char *text = xstrdup("");
	for (size_t i = 0; i < n && i < MCP_LIST_MAX; i++) {
		json_t *e = json_array_get(entries, i);
		const char *raw = json_string_value(json_object_get(e, "name"));
		cleanup_free char *name = text_of(raw ? raw : "", raw ? strlen(raw) : 0);
		char *next =
		    xasprintf("%s%-9s %12lld  %s\n", text, json_string_value(json_object_get(e, "type")) ?: "?",
		              (long long)json_integer_value(json_object_get(e, "size")), name);
		free(text);
		text = next;
	}
	if (n > MCP_LIST_MAX) {
		char *next = xasprintf("%s[\u2026 %zu more entries not listed]\n", text, n - MCP_LIST_MAX);
		free(text);
		text = next;
	}
	return result_fmt(false, "%s: %zu entries\n%s", path, n, text);
}

static const struct mcp_arg upload_args[] = {
    SANDBOX_ID_ARG,
    PATH_ARG("absolute path of the directory to extract into"),
    {"archive_base64", MCP_ARG_STRING, true, 0, MCP_MESSAGE_MAX, NULL, "a tar archive, base64"},
};

static json_t *tool_upload(struct mcp_call *c)
{
	const char *id = NULL, *path = NULL;
	json_t *bad = args_sandbox_and(c, "path", true, &id, &path);
	if (bad)
		return bad;
	json_t *b64 = json_object_get(c->args, "archive_base64");
	cleanup_free uint8_t *tar = NULL;
	size_t len = 0;
	if (base64_decode(json_string_value(b64), json_string_length(b64), &tar, &len) < 0)
		return result_text(true, "\"archive_base64\" is not valid base64");
	struct api_fail f;
	if (put_bytes(id, "/archive", path, tar, len, "application/x-tar", 204, &f) < 0)
		return fail_result(&f);
	return result_fmt(false, "extracted a %zu-byte archive into %s", len, path);
}

static const struct mcp_arg download_args[] = {
    SANDBOX_ID_ARG,
    PATH_ARG("absolute path of the file or directory"),
};

static json_t *tool_download(struct mcp_call *c)
{
	const char *id = NULL, *path = NULL;
	json_t *bad = args_sandbox_and(c, "path", true, &id, &path);
	if (bad)
		return bad;
	cleanup_free char *url = sandbox_query(id, "/archive", path);
	struct byte_sink b = {.max = MCP_DOWNLOAD_MAX};
	struct api_fail f;
	int r = fetch_bounded(url, &b, &f);
	cleanup_free char *data = b.data;
	if (r < 0)
		return fail_result(&f);
	if (b.full)
		return result_fmt(true,
		                  "the archive of %s is larger than %u bytes: download a subdirectory, or read files "
		                  "one by one",
		                  path, MCP_DOWNLOAD_MAX);
	cleanup_free char *b64 = base64_encode((const uint8_t *)data, b.len, NULL);
	cleanup_free char *uri = xasprintf("airlock://sandboxes/%s/archive%s", id, path);
	return json_pack("{s:[{s:s, s:s}, {s:s, s:{s:s, s:s, s:s}}], s:b}", "content", "type", "text", "text",
	                 "a tar archive of the path (base64 in the resource that follows)", "type", "resource",
	                 "resource", "uri", uri, "mimeType", "application/x-tar", "blob", b64, "isError", 0);
}

/* ------------------------------------------------------------ lifecycle */

static const struct mcp_arg snapshot_args[] = {
    SANDBOX_ID_ARG,
    {"name", MCP_ARG_STRING, false, 0, 64, NULL, "a name for the snapshot"},
};

static json_t *tool_snapshot(struct mcp_call *c)
{
	json_t *bad = NULL;
	const char *id = arg_id(c, "sandbox_id", &bad);
	if (!id)
		return bad;
	cleanup_free char *path = sandbox_path(id, "/snapshots");
	cleanup_json json_t *body = json_object();
	if (arg_str(c, "name"))
		json_object_set(body, "name", json_object_get(c->args, "name"));
	struct api_fail f;
	cleanup_json json_t *snap = NULL;
	if (api_json("POST", path, body, 201, &snap, &f) < 0)
		return fail_result(&f);
	cleanup_json json_t *sum = json_pack(
	    "{s:O?, s:O?, s:O?, s:O?}", "id", json_object_get(snap, "id"), "name", json_object_get(snap, "name"),
	    "sandbox_id", json_object_get(snap, "sandbox_id"), "created_at", json_object_get(snap, "created_at"));
	return result_json(sum);
}

static const struct mcp_arg restore_args[] = {
    {"snapshot_id", MCP_ARG_STRING, true, 0, 64, NULL, "the snapshot's id (snap-...)"},
};

static json_t *tool_restore(struct mcp_call *c)
{
	json_t *bad = NULL;
	const char *snap = arg_id(c, "snapshot_id", &bad);
	if (!snap)
		return bad;
	cleanup_json json_t *body = json_pack("{s:s}", "snapshot", snap);
	return new_sandbox(body);
}

static const struct mcp_arg expose_args[] = {
    SANDBOX_ID_ARG,
    {"port", MCP_ARG_INTEGER, true, 1, 65535, NULL, "the TCP port a server in the sandbox listens on (0.0.0.0)"},
    {"public", MCP_ARG_BOOLEAN, false, 0, 0, NULL,
     "reachable by anyone with the URL (default false: the link carries the sandbox's traffic token)"},
};

/* The port's entry of a ports answer, with the link a person can open: a
 * private port's carries the traffic token once (the proxy makes it a
 * cookie). */
static json_t *port_summary(const json_t *ports, long long port)
{
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(ports, "ports"), i, p) {
		if (json_integer_value(json_object_get(p, "port")) != port)
			continue;
		const char *url = json_string_value(json_object_get(p, "url"));
		const char *token = json_string_value(json_object_get(ports, "traffic_token"));
		bool pub = json_is_true(json_object_get(p, "public"));
		cleanup_free char *link = url && !pub && token ? xasprintf("%s?airlock_token=%s", url, token)
		                          : url                ? xstrdup(url)
		                                               : NULL;
		json_t *out =
		    json_pack("{s:I, s:b, s:O?, s:O?, s:s?}", "port", (json_int_t)port, "public", pub, "url",
		              json_object_get(p, "url"), "path_url", json_object_get(p, "path_url"), "link", link);
		if (!url)
			json_object_set_new(
			    out, "note",
			    json_string("airlockd runs no ports proxy (--proxy-listen): the port is listed, "
			                "but reached only with `airlock port-forward`"));
		return out;
	}
	return json_pack("{s:I}", "port", (json_int_t)port);
}

static json_t *tool_expose_port(struct mcp_call *c)
{
	json_t *bad = NULL;
	const char *id = arg_id(c, "sandbox_id", &bad);
	if (!id)
		return bad;
	long long port = arg_int(c, "port", 0);
	char rest[32];
	snprintf(rest, sizeof(rest), "/ports/%lld", port);
	cleanup_free char *path = sandbox_path(id, rest);
	cleanup_json json_t *body =
	    json_pack("{s:b}", "public", json_is_true(json_object_get(c->args, "public")) ? 1 : 0);
	struct api_fail f;
	cleanup_json json_t *ports = NULL;
	if (api_json("PUT", path, body, 200, &ports, &f) < 0)
		return fail_result(&f);
	cleanup_json json_t *sum = port_summary(ports, port);
	return result_json(sum);
}

static json_t *tool_list_ports(struct mcp_call *c)
{
	json_t *bad = NULL;
	const char *id = arg_id(c, "sandbox_id", &bad);
	if (!id)
		return bad;
	cleanup_free char *path = sandbox_path(id, "/ports");
	struct api_fail f;
	cleanup_json json_t *ports = NULL;
	if (api_json("GET", path, NULL, 200, &ports, &f) < 0)
		return fail_result(&f);
	cleanup_json json_t *list = json_array();
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(ports, "ports"), i, p) {
		if (json_is_true(json_object_get(p, "exposed")))
			json_array_append_new(list,
			                      port_summary(ports, json_integer_value(json_object_get(p, "port"))));
	}
	return result_json(list);
}

/* ------------------------------------------------------------ the table */

#define ARGS(a) a, ARRAY_SIZE(a)

const struct mcp_tool mcp_tools[] = {
    {"create_sandbox", "Create a sandbox",
     "Boot a new sandbox (a microVM) and answer its id. Delete it with delete_sandbox when done.", ARGS(create_args),
     false, false, tool_create_sandbox},
    {"delete_sandbox", "Delete a sandbox", "Stop a sandbox and remove everything it had.", ARGS(sandbox_only_args),
     false, true, tool_delete_sandbox},
    {"list_sandboxes", "List sandboxes", "The token's sandboxes: id, state, template, metadata.",
     ARGS(list_sandboxes_args), true, false, tool_list_sandboxes},
    {"list_templates", "List templates",
     "The templates create_sandbox can start from: built-in ones and those built or imported ('airlock template').",
     NULL, 0, true, false, tool_list_templates},
    {"run_command", "Run a command",
     "Run a command in a sandbox to its end: exit code, stdout and stderr (each at most 65536 bytes, then "
     "a truncation marker). With a progressToken, output is also sent as it comes in progress notifications.",
     ARGS(run_args), false, false, tool_run_command},
    {"start_process", "Start a background process",
     "Start a command that outlives the call (a server, a long build); read it with get_output.", ARGS(start_args),
     false, false, tool_start_process},
    {"get_output", "Read a background process",
     "A background process's state and output so far (the last 65536 bytes of each stream).", ARGS(output_args), true,
     false, tool_get_output},
    {"kill_process", "Signal a background process", "Send a signal (default TERM) to a background process.",
     ARGS(kill_args), false, true, tool_kill_process},
    {"write_file", "Write a file", "Create or replace a file in a sandbox (parents must exist).", ARGS(write_args),
     false, true, tool_write_file},
    {"read_file", "Read a file",
     "A file's content (at most max_bytes, default 65536, then a truncation marker); base64 when binary.",
     ARGS(read_args), true, false, tool_read_file},
    {"list_files", "List a directory", "A directory's entries: type, size, name (at most 1000).", ARGS(list_args), true,
     false, tool_list_files},
    {"upload", "Upload a tree", "Extract a tar archive (base64) into a directory of a sandbox.", ARGS(upload_args),
     false, true, tool_upload},
    {"download", "Download a tree",
     "A file or directory as a tar archive (an embedded resource, base64; at most 4 MiB).", ARGS(download_args), true,
     false, tool_download},
    {"snapshot", "Snapshot a sandbox", "Save a sandbox's memory and disk; restore it later with restore.",
     ARGS(snapshot_args), false, false, tool_snapshot},
    {"restore", "Restore a snapshot", "A new sandbox from a snapshot, running where the snapshot was taken.",
     ARGS(restore_args), false, false, tool_restore},
    {"expose_port", "Expose a port",
     "Make a server in a sandbox reachable from outside through airlockd's proxy: its URL, and a link a person "
     "can open (a private port's carries the sandbox's traffic token).",
     ARGS(expose_args), false, false, tool_expose_port},
    {"list_ports", "List exposed ports", "A sandbox's exposed ports with their URLs and links.",
     ARGS(sandbox_only_args), true, false, tool_list_ports},
};
const size_t mcp_tools_count = ARRAY_SIZE(mcp_tools);

const struct mcp_tool *mcp_tool_find(const char *name)
{
	for (size_t i = 0; name && i < mcp_tools_count; i++)
		if (!strcmp(mcp_tools[i].name, name))
			return &mcp_tools[i];
	return NULL;
}

/* ------------------------------------------------------------ resources */

#define RES_PREFIX "airlock://sandboxes/"

json_t *mcp_resources_list(void)
{
	json_t *resources = json_array();
	struct api_fail f;
	cleanup_json json_t *resp = NULL;
	if (api_json("GET", "/v1/sandboxes", NULL, 200, &resp, &f) == 0) {
		size_t i;
		json_t *sb;
		json_array_foreach (json_object_get(resp, "sandboxes"), i, sb) {
			const char *id = json_string_value(json_object_get(sb, "id"));
			if (i == MCP_LIST_MAX || !id_ok(id))
				continue;
			cleanup_free char *uri = xasprintf(RES_PREFIX "%s", id);
			cleanup_free char *desc =
			    xasprintf("sandbox %s (%s); its files: " RES_PREFIX "%s/files/{path}", id,
			              json_string_value(json_object_get(sb, "state")) ?: "?", id);
			json_array_append_new(resources,
			                      json_pack("{s:s, s:s, s:s, s:s}", "uri", uri, "name", id, "description",
			                                desc, "mimeType", "application/json"));
		}
	}
	return json_pack("{s:o}", "resources", resources);
}

json_t *mcp_resource_templates(void)
{
	return json_pack("{s:[{s:s, s:s, s:s}, {s:s, s:s, s:s}]}", "resourceTemplates", "uriTemplate",
	                 RES_PREFIX "{sandbox_id}", "name", "sandbox", "description", "a sandbox's record (JSON)",
	                 "uriTemplate", RES_PREFIX "{sandbox_id}/files/{+path}", "name", "sandbox-file", "description",
	                 "a file of a sandbox (at most 1 MiB, then a truncation marker), or a "
	                 "directory's listing (JSON)");
}

/* "%2F" and the like in a URI's path (percent-decoding). NULL if malformed. */
static char *uri_decode(const char *s)
{
	size_t n = strlen(s), o = 0;
	cleanup_free char *out = xmalloc(n + 1);
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '%') {
			out[o++] = s[i];
			continue;
		}
		if (i + 2 >= n + 0 || !isxdigit((unsigned char)s[i + 1]) || !isxdigit((unsigned char)s[i + 2]))
			return NULL;
		char hex[3] = {s[i + 1], s[i + 2], 0};
		out[o++] = (char)strtol(hex, NULL, 16);
		i += 2;
	}
	out[o] = '\0';
	if (strlen(out) != o)
		return NULL; /* %00 */
	return TAKE_PTR(out);
}

/* A resources/read result of one content: key is "text" or "blob". */
static json_t *resource_contents(const char *uri, const char *mime, const char *key, const char *value)
{
	return json_pack("{s:[{s:s, s:s, s:s}]}", "contents", "uri", uri, "mimeType", mime, key, value);
}

/* The daemon's refusal as the fault of a resources/read: not found for its 404. */
static int fault_from(struct mcp_fault *fault, const struct api_fail *f)
{
	return mcp_fault_set(fault, f->status == 404 ? MCP_RESOURCE_NOT_FOUND : MCP_INTERNAL_ERROR, "%s", f->message);
}

static int read_sandbox_resource(const char *uri, const char *id, json_t **ret, struct mcp_fault *fault)
{
	cleanup_free char *path = sandbox_path(id, "");
	struct api_fail f;
	cleanup_json json_t *sb = NULL;
	if (api_json("GET", path, NULL, 200, &sb, &f) < 0)
		return fault_from(fault, &f);
	cleanup_free char *text = json_dumps(sb, JSON_INDENT(2));
	*ret = resource_contents(uri, "application/json", "text", text);
	return 0;
}

static int read_file_resource(const char *uri, const char *id, const char *path, json_t **ret, struct mcp_fault *fault)
{
	struct api_fail f;
	cleanup_json json_t *st = get_stat(id, path, &f);
	if (!st)
		return fault_from(fault, &f);
	if (stat_is_dir(st)) {
		cleanup_free char *url = sandbox_query(id, "/files/list", path);
		cleanup_json json_t *list = NULL;
		if (api_json("GET", url, NULL, 200, &list, &f) < 0)
			return mcp_fault_set(fault, MCP_INTERNAL_ERROR, "%s", f.message);
		cleanup_free char *text = json_dumps(list, JSON_INDENT(2));
		if (strlen(text) > MCP_READ_MAX)
			return mcp_fault_set(fault, MCP_INTERNAL_ERROR,
			                     "the listing of %.200s is larger than %u bytes: use list_files", path,
			                     MCP_READ_MAX);
		*ret = resource_contents(uri, "application/json", "text", text);
		return 0;
	}
	cleanup_free char *text = NULL;
	bool b64 = false;
	if (read_file_text(id, path, MCP_READ_MAX, &text, &b64, &f) < 0)
		return mcp_fault_set(fault, MCP_INTERNAL_ERROR, "%s", f.message);
	*ret = resource_contents(uri, b64 ? "application/octet-stream" : "text/plain", b64 ? "blob" : "text", text);
	return 0;
}

int mcp_resource_read(const char *uri, json_t **ret_result, struct mcp_fault *fault)
{
	/* SECURITY: the URI is the client's: the id is checked like a tool's, the
	 * path percent-decoded (no NUL) and sent URL-encoded in a query. */
	if (strncmp(uri, RES_PREFIX, strlen(RES_PREFIX)))
		return mcp_fault_set(fault, MCP_RESOURCE_NOT_FOUND, "unknown resource: URIs start with " RES_PREFIX);
	const char *rest = uri + strlen(RES_PREFIX);
	const char *slash = strchr(rest, '/');
	cleanup_free char *id = slash ? xstrndup(rest, (size_t)(slash - rest)) : xstrdup(rest);
	if (!id_ok(id))
		return mcp_fault_set(fault, MCP_RESOURCE_NOT_FOUND, "unknown resource: no sandbox id in the URI");
	if (!slash)
		return read_sandbox_resource(uri, id, ret_result, fault);
	if (strncmp(slash, "/files/", 7))
		return mcp_fault_set(fault, MCP_RESOURCE_NOT_FOUND,
		                     "unknown resource: a sandbox's files are " RES_PREFIX "ID/files/PATH");
	cleanup_free char *decoded = uri_decode(slash + 7);
	if (!decoded)
		return mcp_fault_set(fault, MCP_INVALID_PARAMS, "the URI's path has a malformed %% escape");
	cleanup_free char *path = xasprintf("/%s", decoded);
	return read_file_resource(uri, id, path, ret_result, fault);
}
