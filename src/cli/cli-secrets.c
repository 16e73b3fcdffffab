/* SPDX-License-Identifier: Apache-2.0 */
/* airlock secret (set, ls, inspect, rm), airlock ca, and --secret ENV=NAME
 * for the verbs that create sandboxes.
 *
 * SECURITY: a secret's value never comes from the command line (which other
 * users can read in /proc): it is read from stdin (without echo on a
 * terminal) or a file, sent in a body we encode ourselves, and wiped. */
#include <fcntl.h>
#include <sys/stat.h>
#include <termios.h>

#include "cli.h"
#include "policy-limits.h"

/* ------------------------------------------------------------ --secret */

int cli_secret_grant_add(json_t *body, const char *arg)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg || !eq[1])
		return cli_usage_error(
		    "--secret takes ENV=SECRET_NAME (the variable gets the secret's placeholder), got "
		    "\"%s\"",
		    arg);
	json_t *grants = json_object_get(body, "secrets");
	if (!grants) {
		grants = json_object();
		json_object_set_new(body, "secrets", grants);
	}
	cleanup_free char *env = xstrndup(arg, (size_t)(eq - arg));
	json_object_set_new(grants, env, json_string(eq + 1));
	return 0;
}

/* ------------------------------------------------------------ the value */

static void wipe_free(char *p, size_t len)
{
	if (p) {
		explicit_bzero(p, len);
		free(p);
	}
}

/* Reads at most max bytes from fd into buf; -E2BIG if there is more. */
static int read_bounded(int fd, char *buf, size_t max, size_t *ret_len)
{
	size_t len = 0;
	for (;;) {
		if (len > max)
			return -E2BIG;
		ssize_t n = read(fd, buf + len, max + 1 - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*ret_len = len;
	return 0;
}

/* One line from the terminal, not echoed. */
static int read_tty(const char *name, char *buf, size_t max, size_t *ret_len)
{
	struct termios old, quiet;
	bool restore = tcgetattr(0, &old) == 0;
	fprintf(stderr, "value of secret %s (not echoed; end with Enter): ", name);
	fflush(stderr);
	if (restore) {
		quiet = old;
		quiet.c_lflag &= ~(tcflag_t)ECHO;
		quiet.c_lflag |= ECHONL;
		tcsetattr(0, TCSAFLUSH, &quiet);
	}
	size_t len = 0;
	int r = 0;
	while (len <= max) {
		ssize_t n = read(0, buf + len, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || buf[len] == '\n') {
			if (n > 0)
				len++;
			break;
		}
		len++;
	}
	if (len > max)
		r = -E2BIG;
	if (restore)
		tcsetattr(0, TCSAFLUSH, &old);
	*ret_len = len;
	return r;
}

/* The buffer of a value: the value, a "\r\n" and room to spare. */
#define VALUE_BUF_SIZE (POLICY_SECRET_VALUE_MAX + 4)

static void value_wipep(char **p)
{
	wipe_free(*p, VALUE_BUF_SIZE);
}

/* The value from --value-file, or stdin (a terminal is asked without echo),
 * without one trailing newline ("\n" or "\r\n"); *ret is VALUE_BUF_SIZE
 * bytes (value_wipep). */
static int read_value(const char *name, const char *file, char **ret, size_t *ret_len, struct al_error *err)
{
	size_t cap = POLICY_SECRET_VALUE_MAX + 2; /* the value and a "\r\n" */
	__attribute__((cleanup(value_wipep))) char *buf = xmalloc(VALUE_BUF_SIZE);
	size_t len = 0;
	int r;
	if (file) {
		cleanup_close int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (fd < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "--value-file %s: %m", file);
		r = read_bounded(fd, buf, cap, &len);
	} else if (isatty(0)) {
		r = read_tty(name, buf, cap, &len);
	} else {
		r = read_bounded(0, buf, cap, &len);
	}
	if (r == 0 && len > 0 && buf[len - 1] == '\n') {
		len--;
		if (len > 0 && buf[len - 1] == '\r')
			len--;
	}
	if (r == -E2BIG || (r == 0 && len > POLICY_SECRET_VALUE_MAX))
		return al_error_set(err, AL_ERR_TOO_LARGE, E2BIG, "the secret's value is longer than %d bytes",
		                    POLICY_SECRET_VALUE_MAX);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read the secret's value: %s", strerror(-r));
	if (len == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "the secret's value is empty (give it on stdin or with --value-file FILE)");
	if (memchr(buf, '\0', len) || memchr(buf, '\n', len) || memchr(buf, '\r', len))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "the secret's value must be one line (no NUL, CR or LF inside)");
	buf[len] = '\0';
	*ret = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}

/* ------------------------------------------------------------ set */

struct set_opts {
	json_t *body;
	const char *value_file;
	bool value_stdin;
	const char *tenant;
};

enum {
	OPT_HOST = 1,
	OPT_PATH,
	OPT_METHOD,
	OPT_HEADER,
	OPT_FORMAT,
	OPT_VALUE_STDIN,
	OPT_VALUE_FILE,
	OPT_TENANT,
	OPT_IN_HEADER
};

static int set_opt(int c, void *ud)
{
	struct set_opts *o = ud;
	static const char *const lists[] = {[OPT_HOST] = "hosts", [OPT_PATH] = "paths", [OPT_METHOD] = "methods"};
	switch (c) {
	case OPT_HOST:
	case OPT_PATH:
	case OPT_METHOD:
		json_array_append_new(json_object_get(o->body, lists[c]), json_string(optarg));
		break;
	case OPT_HEADER:
		json_object_set_new(o->body, "header", json_string(optarg));
		break;
	case OPT_FORMAT:
		json_object_set_new(o->body, "format", json_string(optarg));
		break;
	case OPT_IN_HEADER:
		/* Placeholder mode: a header the placeholder is replaced in. */
		if (!json_object_get(o->body, "headers"))
			json_object_set_new(o->body, "headers", json_array());
		json_array_append_new(json_object_get(o->body, "headers"), json_string(optarg));
		break;
	case OPT_VALUE_STDIN:
		o->value_stdin = true;
		break;
	case OPT_VALUE_FILE:
		o->value_file = optarg;
		break;
	case OPT_TENANT:
		o->tenant = optarg;
		break;
	}
	return 0;
}

static const struct option secret_longs[] = {{"host", required_argument, NULL, OPT_HOST},
                                             {"path", required_argument, NULL, OPT_PATH},
                                             {"method", required_argument, NULL, OPT_METHOD},
                                             {"header", required_argument, NULL, OPT_HEADER},
                                             {"format", required_argument, NULL, OPT_FORMAT},
                                             {"in-header", required_argument, NULL, OPT_IN_HEADER},
                                             {"value-stdin", no_argument, NULL, OPT_VALUE_STDIN},
                                             {"value-file", required_argument, NULL, OPT_VALUE_FILE},
                                             {"tenant", required_argument, NULL, OPT_TENANT},
                                             {"json", no_argument, NULL, 'j'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};

/* Wipes, in place, the text of the body's "value". */
static void wipe_value(json_t *body)
{
	json_t *v = json_object_get(body, "value");
	if (json_is_string(v))
		explicit_bzero((char *)json_string_value(v), json_string_length(v));
}

static void print_secret(json_t *s)
{
	const char *header = json_string_value(json_object_get(s, "header"));
	const char *format = json_string_value(json_object_get(s, "format"));
	printf("name     %s\n", cli_esc_json(s, "name"));
	printf("tenant   %s\n", cli_esc_json(s, "tenant"));
	printf("id       %s\n", cli_esc_json(s, "id"));
	cli_print_word_list("hosts", 8, json_object_get(s, "hosts"), "(any)");
	cli_print_word_list("paths", 8, json_object_get(s, "paths"), "(any)");
	cli_print_word_list("methods", 8, json_object_get(s, "methods"), "(any)");
	if (header)
		printf("applied  header %s: %s\n", cli_esc(header), cli_esc(format ? format : "{value}"));
	else
		cli_print_word_list("applied  the placeholder is replaced in", 0, json_object_get(s, "headers"),
		                    "Authorization");
	printf("created  %s\n", cli_esc_json(s, "created_at"));
	printf("updated  %s\n", cli_esc_json(s, "updated_at"));
}

static int secret_set(const char *name, struct set_opts *o)
{
	if (o->value_file && o->value_stdin)
		return cli_usage_error("secret set: --value-stdin and --value-file name two values; give one");
	if (json_array_size(json_object_get(o->body, "hosts")) == 0)
		return cli_usage_error("secret set: at least one --host HOST the secret may be sent to");
	if (json_object_get(o->body, "format") && !json_object_get(o->body, "header"))
		return cli_usage_error("secret set: --format needs --header");
	if (json_object_get(o->body, "headers") && json_object_get(o->body, "header"))
		return cli_usage_error("secret set: --in-header is for placeholder mode, without --header");
	__attribute__((cleanup(value_wipep))) char *value = NULL;
	size_t len = 0;
	struct al_error err = {0};
	if (read_value(name, o->value_file, &value, &len, &err) < 0)
		return cli_report_error(&err);
	json_object_set_new(o->body, "name", json_string(name));
	if (o->tenant)
		json_object_set_new(o->body, "tenant", json_string(o->tenant));
	json_t *v = json_stringn(value, len);
	wipe_free(TAKE_PTR(value), VALUE_BUF_SIZE); /* now, not at the end: the request takes a while */
	if (!v)
		return cli_client_error("the secret's value must be UTF-8 text");
	json_object_set_new(o->body, "value", v);
	/* Encoded here (not by cli_http) so that the text can be wiped. */
	size_t tlen = json_dumpb(o->body, NULL, 0, JSON_COMPACT);
	char *text = tlen ? xmalloc(tlen) : NULL;
	if (!text || json_dumpb(o->body, text, tlen, JSON_COMPACT) != tlen) {
		wipe_value(o->body);
		free(text);
		return cli_client_error("cannot encode the request");
	}
	wipe_value(o->body);
	struct cli_req req = {
	    .method = "POST", .path = "/v1/secrets", .raw = text, .raw_len = tlen, .content_type = "application/json"};
	long status = 0;
	cleanup_json json_t *resp = NULL;
	int r = cli_request(&req, &status, &resp, &err);
	wipe_free(text, tlen);
	if (r < 0)
		return cli_report_error(&err);
	if (status != 200 && status != 201)
		return cli_report(status, resp);
	if (cli_opt_json)
		cli_print_json(resp, true);
	else
		printf("%s %s\n", cli_esc_json(resp, "name"), status == 201 ? "created" : "replaced");
	return 0;
}

/* ------------------------------------------------------------ ls, inspect, rm */

static char *secret_path(const char *name, const char *tenant)
{
	char *esc = curl_easy_escape(NULL, name, 0);
	if (!esc)
		abort();
	char *p = xasprintf("/v1/secrets/%s", esc);
	curl_free(esc);
	if (tenant) {
		char *q = cli_path_with_query(p, "tenant", tenant);
		free(p);
		p = q;
	}
	return p;
}

static void print_secret_row(json_t *s)
{
	const char *header = json_string_value(json_object_get(s, "header"));
	cleanup_free char *applied = header ? xasprintf("header %s", header) : xstrdup("placeholder");
	printf("%-24s %-16s %-26s %-25s", cli_esc_json(s, "name"), cli_esc_json(s, "tenant"), cli_esc(applied),
	       cli_esc_json(s, "updated_at"));
	size_t k;
	json_t *h;
	json_array_foreach (json_object_get(s, "hosts"), k, h)
		printf("%s%s", k ? "," : " ", cli_esc(json_string_value(h)));
	printf("\n");
}

static int secret_ls(const char *tenant)
{
	cleanup_free char *path =
	    tenant ? cli_path_with_query("/v1/secrets", "tenant", tenant) : xstrdup("/v1/secrets");
	return cli_print_table(path, "secrets", print_secret_row, "%-24s %-16s %-26s %-25s %s\n", "NAME", "TENANT",
	                       "APPLIED", "UPDATED", "HOSTS");
}

int cli_cmd_secret(int argc, char **argv)
{
	if (argc < 2)
		return cli_usage_error("secret takes set, ls, inspect or rm");
	const char *sub = argv[1];
	cleanup_json json_t *body = json_pack("{s:[], s:[], s:[]}", "hosts", "paths", "methods");
	struct set_opts o = {.body = body};
	int first = 0, r = cli_small_opts(argc - 1, argv + 1, "h", secret_longs, &first, set_opt, &o);
	if (r)
		return r;
	char **ops = argv + 1 + first;
	int n = argc - 1 - first;
	bool set_only =
	    json_array_size(json_object_get(body, "hosts")) || json_array_size(json_object_get(body, "paths")) ||
	    json_array_size(json_object_get(body, "methods")) || json_object_get(body, "header") ||
	    json_object_get(body, "format") || json_object_get(body, "headers") || o.value_file || o.value_stdin;
	if (!strcmp(sub, "set")) {
		if (n != 1)
			return cli_usage_error(
			    "secret set takes one name: secret set NAME --host HOST... (the value on stdin)");
		return secret_set(ops[0], &o);
	}
	if (set_only)
		return cli_usage_error("secret %s: --host, --path, --method, --header, --format and --value-* are for "
		                       "secret set",
		                       sub);
	if (!strcmp(sub, "ls")) {
		if (n != 0)
			return cli_usage_error("secret ls takes no operands");
		return secret_ls(o.tenant);
	}
	if (!strcmp(sub, "inspect")) {
		if (n != 1)
			return cli_usage_error("secret inspect takes one name");
		cleanup_free char *path = secret_path(ops[0], o.tenant);
		cleanup_json json_t *resp = NULL;
		if ((r = cli_call("GET", path, NULL, 200, &resp)))
			return r;
		if (cli_opt_json)
			cli_print_json(resp, true);
		else
			print_secret(resp);
		return 0;
	}
	if (!strcmp(sub, "rm")) {
		if (n < 1)
			return cli_usage_error("secret rm takes one or more names");
		int status = 0;
		for (int i = 0; i < n; i++) {
			cleanup_free char *path = secret_path(ops[i], o.tenant);
			cleanup_json json_t *resp = NULL;
			if (cli_call("DELETE", path, NULL, 204, &resp))
				status = EXIT_CLIENT;
			else
				printf("%s\n", ops[i]);
		}
		return status;
	}
	return cli_usage_error("secret: unknown subcommand \"%s\" (set, ls, inspect, rm)", sub);
}

/* ------------------------------------------------------------ ca */

static int write_out(void *ud, const void *buf, size_t len, struct al_error *err)
{
	(void)ud;
	(void)err; /* the transfer's own error says it */
	return write_full(1, buf, len);
}

int cli_cmd_ca(int argc, char **argv)
{
	static const struct option longs[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
	int first = 0, r = cli_small_opts(argc, argv, "h", longs, &first, cli_no_opt, NULL);
	if (r)
		return r;
	if (first != argc)
		return cli_usage_error("ca takes no operands");
	struct cli_req req = {.method = "GET", .path = "/v1/ca", .on_bytes = write_out};
	return cli_call_streamed(&req);
}
