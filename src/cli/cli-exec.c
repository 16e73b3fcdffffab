/* SPDX-License-Identifier: Apache-2.0 */
/* exec and run (streaming by default), background processes: ps, logs, kill, wait. */
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>

#include "cli.h"

#define CLI_STDIN_MAX (8u << 20)   /* --no-stream: stdin sent in the request */
#define STDIN_CHUNK_MAX (1u << 20) /* streaming: bytes per POST .../stdin */

/* ------------------------------------------------------------ output lines */

struct exec_stream {
	const char *sandbox;
	char *process_id;
	int status;  /* exit status once the exit line came, else -1 */
	bool failed; /* an error line came */
	/* Streaming stdin. */
	bool stdin_stream;
	bool thread_started;
	pthread_t thread;
	int stop_pipe[2];
};

static int write_chunk(int fd, json_t *line)
{
	json_t *data = json_object_get(line, "data");
	if (!json_is_string(data))
		return 0;
	const char *enc = json_string_value(json_object_get(line, "encoding"));
	if (enc && !strcmp(enc, "base64")) {
		cleanup_free uint8_t *bytes = NULL;
		size_t len;
		if (base64_decode(json_string_value(data), json_string_length(data), &bytes, &len) < 0)
			return -EBADMSG;
		return write_full(fd, bytes, len);
	}
	return write_full(fd, json_string_value(data), json_string_length(data));
}

static void *stdin_pump(void *arg);

/* SECURITY: a line from the daemon is parsed as JSON (bounded by
 * CLI_LINE_MAX in cli-http.c); only its data reaches our fds. */
static int on_output_line(void *ud, char *line, size_t len, struct al_error *err)
{
	(void)err; /* its complaints are printed here: the stream goes on */
	struct exec_stream *s = ud;
	json_error_t jerr;
	cleanup_json json_t *o = json_loadb(line, len, 0, &jerr);
	const char *type = json_string_value(json_object_get(o, "type"));
	if (!type) {
		cli_client_error("ignoring a line from the daemon that is not an output event: %.80s", line);
		return 0;
	}
	if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		int r = write_chunk(!strcmp(type, "stdout") ? 1 : 2, o);
		if (r == -EBADMSG)
			cli_client_error("the daemon sent output that is not valid base64");
		else if (r < 0)
			fprintf(stderr, "airlock: cannot write the command's output: %s\n", strerror(-r));
		return r < 0 ? r : 0;
	}
	if (!strcmp(type, "start")) {
		const char *pid = json_string_value(json_object_get(o, "process_id"));
		if (pid && !s->process_id) {
			s->process_id = xstrdup(pid);
			if (s->stdin_stream) {
				if (pthread_create(&s->thread, NULL, stdin_pump, s) != 0)
					abort();
				s->thread_started = true;
			}
		}
		return 0;
	}
	if (!strcmp(type, "exit")) {
		s->status = cli_exit_status_of(o);
		return 0;
	}
	if (!strcmp(type, "error")) {
		json_t *e = json_object_get(o, "error");
		const char *msg = json_string_value(json_object_get(e, "message"));
		const char *code = json_string_value(json_object_get(e, "code"));
		fprintf(stderr, "airlock: the command failed: %s (%s)\n", cli_esc(msg ? msg : "no reason given"),
		        cli_esc(code ? code : "error"));
		s->failed = true;
		return 0;
	}
	if (!strcmp(type, "dropped")) {
		fprintf(stderr,
		        "airlock: %lld bytes of output were dropped before this reader got them (the daemon "
		        "keeps the last 1 MiB)\n",
		        (long long)json_integer_value(json_object_get(o, "bytes")));
		return 0;
	}
	return 0; /* a newer daemon's event: ignored */
}

/* ------------------------------------------------------------ stdin */

static int post_stdin(struct exec_stream *s, const void *buf, size_t len, bool eof, long *ret_status)
{
	cleanup_free char *path =
	    xasprintf("/v1/sandboxes/%s/processes/%s/stdin?eof=%s", s->sandbox, s->process_id, eof ? "true" : "false");
	struct cli_req req = {.method = "POST", .path = path, .raw = buf ? buf : "", .raw_len = len};
	struct al_error err = {0};
	cleanup_json json_t *body = NULL;
	int r = cli_request(&req, ret_status, &body, &err);
	if (r < 0)
		cli_client_error("cannot pass standard input on: %s", err.message);
	else if (*ret_status != 204 && *ret_status != 404 && *ret_status != 409)
		/* 404/409: the process is gone; its exit line says how. */
		cli_report(*ret_status, body);
	return r;
}

/* Runs on its own thread: our stdin to the process, chunk by chunk, until EOF
 * or until the stream is over (stop_pipe). */
static void *stdin_pump(void *arg)
{
	struct exec_stream *s = arg;
	cleanup_free uint8_t *buf = xmalloc(STDIN_CHUNK_MAX);
	for (;;) {
		struct pollfd p[2] = {{.fd = 0, .events = POLLIN}, {.fd = s->stop_pipe[0], .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		ssize_t n = read(0, buf, STDIN_CHUNK_MAX);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		long status = 0;
		if (post_stdin(s, buf, n > 0 ? (size_t)n : 0, n <= 0, &status) < 0 || status != 204 || n <= 0)
			break;
	}
	return NULL;
}

/* Whether our stdin has something to pass: not a terminal (unless -i), not /dev/null. */
static bool stdin_wanted(bool force)
{
	if (force)
		return true;
	if (isatty(0))
		return false;
	struct stat st;
	if (fstat(0, &st) < 0)
		return false; /* closed */
	if (S_ISCHR(st.st_mode)) {
		struct stat null;
		if (stat("/dev/null", &null) == 0 && null.st_rdev == st.st_rdev)
			return false;
	}
	return true;
}

static int read_stdin_all(uint8_t **ret, size_t *ret_len, struct al_error *err)
{
	size_t cap = 64 * 1024, len = 0;
	cleanup_free uint8_t *b = xmalloc(cap);
	for (;;) {
		if (len == cap) {
			if (cap > CLI_STDIN_MAX)
				return al_error_set(
				    err, AL_ERR_TOO_LARGE, EFBIG,
				    "standard input is larger than %u bytes; drop --no-stream to stream "
				    "it, or copy big inputs into the sandbox with 'airlock cp'",
				    CLI_STDIN_MAX);
			cap *= 2;
			b = xrealloc(b, cap);
		}
		ssize_t n = read(0, b + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot read standard input: %m");
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > CLI_STDIN_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG,
		                    "standard input is larger than %u bytes; drop --no-stream to stream it",
		                    CLI_STDIN_MAX);
	*ret = TAKE_PTR(b);
	*ret_len = len;
	return 0;
}

/* ------------------------------------------------------------ exec */

static int write_output(int fd, json_t *resp, const char *field, const char *enc_field)
{
	json_t *v = json_object_get(resp, field);
	if (!json_is_string(v))
		return 0;
	const char *enc = json_string_value(json_object_get(resp, enc_field));
	if (enc && !strcmp(enc, "base64")) {
		cleanup_free uint8_t *data = NULL;
		size_t len;
		if (base64_decode(json_string_value(v), json_string_length(v), &data, &len) < 0)
			return -EBADMSG;
		return write_full(fd, data, len);
	}
	return write_full(fd, json_string_value(v), json_string_length(v));
}

static int exec_buffered(const char *id, json_t *body, bool force_stdin)
{
	if (stdin_wanted(force_stdin)) {
		cleanup_free uint8_t *in = NULL;
		size_t len = 0;
		struct al_error err = {0};
		if (read_stdin_all(&in, &len, &err) < 0)
			return cli_report_error(&err);
		cleanup_free char *b64 = base64_encode(in, len, NULL);
		json_object_set_new(body, "stdin", json_string(b64));
		json_object_set_new(body, "stdin_encoding", json_string("base64"));
	}
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/exec", id);
	cleanup_json json_t *resp = NULL;
	int r = cli_call("POST", path, body, 200, &resp);
	if (r)
		return r;
	if (write_output(1, resp, "stdout", "stdout_encoding") < 0 ||
	    write_output(2, resp, "stderr", "stderr_encoding") < 0)
		fprintf(stderr, "airlock: cannot write the command's output\n");
	if (json_is_true(json_object_get(resp, "stdout_truncated")) ||
	    json_is_true(json_object_get(resp, "stderr_truncated")))
		fprintf(stderr, "airlock: output was truncated at the daemon's limit\n");
	return cli_exit_status_of(resp);
}

/* Stops the stdin thread and frees the rest; may be called again. */
static void exec_stream_release(struct exec_stream *s)
{
	if (s->thread_started) {
		ssize_t w = write(s->stop_pipe[1], "x", 1);
		(void)w;
		pthread_join(s->thread, NULL);
		s->thread_started = false;
	}
	closep(&s->stop_pipe[0]);
	closep(&s->stop_pipe[1]);
	s->stop_pipe[0] = s->stop_pipe[1] = -1;
	free(TAKE_PTR(s->process_id));
}

/* A daemon from before streaming exec rejects the unknown field "stream". */
static bool daemon_lacks_streaming(json_t *resp)
{
	const char *msg = json_string_value(json_object_get(json_object_get(resp, "error"), "message"));
	return msg && strstr(msg, "stream") && (strstr(msg, "unknown") || strstr(msg, "not allowed"));
}

static int exec_streaming(const char *id, json_t *body, bool force_stdin)
{
	__attribute__((cleanup(exec_stream_release))) struct exec_stream s = {
	    .sandbox = id, .status = -1, .stop_pipe = {-1, -1}};
	s.stdin_stream = stdin_wanted(force_stdin);
	json_object_set_new(body, "stream", json_true());
	if (s.stdin_stream) {
		json_object_set_new(body, "stdin_stream", json_true());
		if (pipe2(s.stop_pipe, O_CLOEXEC) < 0)
			return cli_client_error("cannot create a pipe: %s", strerror(errno));
	}
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/exec", id);
	struct cli_req req = {.method = "POST", .path = path, .json = body, .on_line = on_output_line, .ud = &s};
	struct al_error err = {0};
	long status = 0;
	cleanup_json json_t *resp = NULL;
	int r = cli_request(&req, &status, &resp, &err);
	exec_stream_release(&s); /* now: the stdin thread says nothing after what follows */
	if (r < 0)
		return cli_report_error(&err);
	if (status == 400 && daemon_lacks_streaming(resp)) {
		/* An older daemon: run it buffered (stdin is still unread). */
		json_object_del(body, "stream");
		json_object_del(body, "stdin_stream");
		return exec_buffered(id, body, force_stdin);
	}
	if (status != 200)
		return cli_report(status, resp);
	if (s.failed)
		return EXIT_CLIENT;
	if (s.status < 0)
		return cli_client_error("the output stream ended before the command did (the daemon went away?); "
		                        "the command was killed");
	return s.status;
}

void cli_exec_set_cmd(json_t *body, char **cmd, int n_cmd)
{
	json_t *arr = json_array();
	for (int i = 0; i < n_cmd; i++)
		json_array_append_new(arr, json_string(cmd[i]));
	json_object_set_new(body, "cmd", arr);
}

int cli_exec_run(const char *id, json_t *body, bool stream, bool force_stdin)
{
	return stream ? exec_streaming(id, body, force_stdin) : exec_buffered(id, body, force_stdin);
}

int cli_process_start(const char *id, json_t *body, json_t **ret_proc)
{
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/processes", id);
	return cli_call("POST", path, body, 201, ret_proc);
}

/* ------------------------------------------------------------ processes */

static void format_exit(json_t *p, char *buf, size_t size)
{
	json_t *code = json_object_get(p, "exit_code"), *sig = json_object_get(p, "signal");
	const char *state = json_string_value(json_object_get(p, "state"));
	if (state && !strcmp(state, "running"))
		snprintf(buf, size, "-");
	else if (json_is_true(json_object_get(p, "timed_out")))
		snprintf(buf, size, "timeout");
	else if (json_is_integer(code))
		snprintf(buf, size, "%lld", (long long)json_integer_value(code));
	else if (json_is_integer(sig))
		snprintf(buf, size, "sig%lld", (long long)json_integer_value(sig));
	else
		snprintf(buf, size, "?");
}

static void print_process_row(json_t *p)
{
	char exitbuf[32];
	format_exit(p, exitbuf, sizeof(exitbuf));
	const char *tag = json_string_value(json_object_get(p, "tag"));
	printf("%-10s %-8s %-7s %-16s", cli_esc_json(p, "id"), cli_esc_json(p, "state"), exitbuf,
	       cli_esc(tag && *tag ? tag : "-"));
	size_t j;
	json_t *arg;
	json_array_foreach (json_object_get(p, "cmd"), j, arg) {
		printf(" %s", cli_esc(json_string_value(arg)));
	}
	putchar('\n');
}

int cli_cmd_ps(int argc, char **argv)
{
	const char *id;
	int r = cli_sandbox_operand(argc, argv, &id);
	if (r)
		return r;
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/processes", id);
	return cli_print_table(path, "processes", print_process_row, "%-10s %-8s %-7s %-16s %s\n", "ID", "STATE",
	                       "EXIT", "TAG", "CMD");
}

struct logs_opts {
	bool follow, network;
	const char *from;
};

static int logs_opt(int c, void *ud)
{
	struct logs_opts *o = ud;
	if (c == 'f') {
		o->follow = true;
	} else if (c == 'n') {
		o->network = true;
	} else if (c == 'F') {
		if (strcmp(optarg, "start") && strcmp(optarg, "now"))
			return cli_usage_error("logs: --from takes start or now, got \"%s\"", optarg);
		o->from = optarg;
	}
	return 0;
}

int cli_cmd_logs(int argc, char **argv)
{
	static const struct option longs[] = {
	    {"follow", no_argument, NULL, 'f'},  {"from", required_argument, NULL, 'F'},
	    {"network", no_argument, NULL, 'n'}, {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},    {NULL, 0, NULL, 0}};
	struct logs_opts o = {.from = "start"};
	int first = 0, r = cli_small_opts(argc, argv, "hf", longs, &first, logs_opt, &o);
	if (r)
		return r;
	if (o.network) {
		if (first + 1 != argc)
			return cli_usage_error("logs --network takes a sandbox id");
		return cli_network_logs(argv[first], o.follow);
	}
	if (first + 2 != argc)
		return cli_usage_error("logs takes a sandbox id and a process id");
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/processes/%s/output?from=%s&follow=%s", argv[first],
	                                    argv[first + 1], o.from, o.follow ? "true" : "false");
	__attribute__((cleanup(exec_stream_release))) struct exec_stream s = {
	    .sandbox = argv[first], .status = -1, .stop_pipe = {-1, -1}};
	struct cli_req req = {.method = "GET", .path = path, .on_line = on_output_line, .ud = &s};
	struct al_error err = {0};
	long status = 0;
	cleanup_json json_t *resp = NULL;
	r = cli_request(&req, &status, &resp, &err);
	if (r < 0)
		return cli_report_error(&err);
	if (status != 200)
		return cli_report(status, resp);
	return s.failed ? EXIT_CLIENT : 0;
}

static const char *const signal_names[] = {
    "HUP",  "INT",  "QUIT", "ILL",   "TRAP", "ABRT", "BUS",  "FPE",    "KILL",   "USR1", "SEGV",
    "USR2", "PIPE", "ALRM", "TERM",  "CHLD", "CONT", "STOP", "TSTP",   "TTIN",   "TTOU", "URG",
    "XCPU", "XFSZ", "PROF", "WINCH", "IO",   "PWR",  "SYS",  "VTALRM", "STKFLT",
};

/* "TERM", "SIGTERM", "term" or "15" to the signal field of the API. */
static json_t *parse_signal(const char *arg)
{
	long n;
	if (parse_int_range(arg, 1, 64, &n) == 0)
		return json_integer(n);
	const char *name = strncasecmp(arg, "SIG", 3) ? arg : arg + 3;
	for (size_t i = 0; i < ARRAY_SIZE(signal_names); i++)
		if (!strcasecmp(name, signal_names[i]))
			return json_string(signal_names[i]);
	return NULL;
}

static int kill_opt(int c, void *ud)
{
	json_t **sig = ud;
	if (c == 's') {
		json_decref(*sig);
		*sig = parse_signal(optarg);
		if (!*sig)
			return cli_usage_error(
			    "kill: unknown signal \"%s\" (use a name like TERM, KILL, INT or a number)", optarg);
	}
	return 0;
}

int cli_cmd_kill(int argc, char **argv)
{
	static const struct option longs[] = {
	    {"signal", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
	cleanup_json json_t *sig = json_string("TERM");
	int first = 0, r = cli_small_opts(argc, argv, "hs:", longs, &first, kill_opt, &sig);
	if (r)
		return r;
	if (first + 2 != argc)
		return cli_usage_error("kill takes a sandbox id and a process id");
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/processes/%s/signal", argv[first], argv[first + 1]);
	cleanup_json json_t *body = json_pack("{s:O}", "signal", sig);
	cleanup_json json_t *resp = NULL;
	return cli_call("POST", path, body, 204, &resp);
}

static int wait_opt(int c, void *ud)
{
	long *timeout_s = ud;
	if (c == 'T' && parse_int_range(optarg, 1, 3600, timeout_s) < 0)
		return cli_usage_error("wait: --timeout takes seconds from 1 to 3600, got \"%s\"", optarg);
	return 0;
}

int cli_cmd_wait(int argc, char **argv)
{
	static const struct option longs[] = {
	    {"timeout", required_argument, NULL, 'T'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
	long timeout_s = 0;
	int first = 0, r = cli_small_opts(argc, argv, "h", longs, &first, wait_opt, &timeout_s);
	if (r)
		return r;
	if (first + 2 != argc)
		return cli_usage_error("wait takes a sandbox id and a process id");
	/* Without --timeout: wait as long as it takes, an hour per request. */
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/processes/%s/wait?timeout_s=%ld", argv[first],
	                                    argv[first + 1], timeout_s ? timeout_s : 3600);
	for (;;) {
		struct al_error err = {0};
		long status = 0;
		cleanup_json json_t *resp = NULL;
		if (cli_http("GET", path, NULL, &status, &resp, &err) < 0)
			return cli_report_error(&err);
		if (status == 200)
			return cli_exit_status_of(resp);
		if (status != 408)
			return cli_report(status, resp);
		if (timeout_s) {
			fprintf(stderr, "airlock: process %s is still running after %ld s\n", cli_esc(argv[first + 1]),
			        timeout_s);
			return EXIT_TIMEOUT;
		}
	}
}
