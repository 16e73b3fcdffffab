/* SPDX-License-Identifier: Apache-2.0 */
/* template ls, inspect, rm, build, import: the templates of docs/api.md
 * ("Templates"), issue 23. Build and import upload a stream (a context tar,
 * an image archive) and show the daemon's ndjson progress (cli-template-view.c). */
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#include "cli-context.h"
#include "cli-template.h"
#include "cli.h"

#define NETWORK_POLICY_MAX (64u << 10) /* --network-policy FILE */
#define AIRLOCK_DOCKERFILE ".airlock-Dockerfile"

/* SECURITY: a name that goes into the request's path: [A-Za-z0-9._-], and
 * not "." or ".." (which would name another path). */
static int template_name_check(const char *verb, const char *name)
{
	if (!cli_id_ok(name) || !strcmp(name, ".") || !strcmp(name, ".."))
		return cli_usage_error("template %s: \"%s\" is not a template name (letters, digits, '.', '_', '-')",
		                       verb, name);
	return 0;
}

/* ------------------------------------------------------------ ls, inspect, rm */

static void print_template_row(json_t *t)
{
	char when[32] = "-";
	json_t *created = json_object_get(t, "created_ms");
	if (json_is_integer(created))
		format_time_rfc3339((uint64_t)json_integer_value(created), when);
	json_t *tenant = json_object_get(t, "tenant"), *parent = json_object_get(t, "parent");
	char size[32];
	snprintf(size, sizeof(size), "%lld MiB", (long long)json_integer_value(json_object_get(t, "size_mib")));
	printf("%-24s %-10s %-16s %10s  %-16s %s\n", cli_esc_json(t, "name"), cli_esc_json(t, "source"),
	       json_is_string(parent) ? cli_esc(json_string_value(parent)) : "-", size,
	       json_is_string(tenant) ? cli_esc(json_string_value(tenant)) : "shared", when);
}

static int template_ls(int argc, char **argv)
{
	int first = 0, r = cli_small_opts(argc, argv, "h", cli_json_only, &first, cli_no_opt, NULL);
	if (r)
		return r;
	if (first != argc)
		return cli_usage_error("template ls takes no operands");
	return cli_print_table("/v1/templates", "templates", print_template_row, "%-24s %-10s %-16s %10s  %-16s %s\n",
	                       "NAME", "SOURCE", "PARENT", "SIZE", "OWNER", "CREATED");
}

static int template_inspect(int argc, char **argv)
{
	int first = 0, r = cli_small_opts(argc, argv, "h", cli_json_only, &first, cli_no_opt, NULL);
	if (r)
		return r;
	if (first + 1 != argc)
		return cli_usage_error("template inspect takes one template name");
	if ((r = template_name_check("inspect", argv[first])))
		return r;
	cleanup_free char *path = xasprintf("/v1/templates/%s", argv[first]);
	cleanup_json json_t *t = NULL;
	if ((r = cli_call("GET", path, NULL, 200, &t)))
		return r;
	cli_print_json(t, cli_opt_json);
	return 0;
}

static int template_rm(int argc, char **argv)
{
	int first = 0, r = cli_small_opts(argc, argv, "h", cli_json_only, &first, cli_no_opt, NULL);
	if (r)
		return r;
	if (first >= argc)
		return cli_usage_error("template rm takes one or more template names");
	for (int i = first; i < argc; i++)
		if ((r = template_name_check("rm", argv[i])))
			return r;
	return cli_call_each("DELETE", "/v1/templates", "", argv + first, argc - first, 204);
}

/* ------------------------------------------------------------ the upload */

/* What build and import share: the view and the request's end. */
struct tpl_upload {
	const char *verb;
	char *path; /* the request, query included */
	const char *content_type;
	struct cli_upload up;
	struct tpl_view view;
	bool quiet;
};

static void tpl_upload_release(struct tpl_upload *t)
{
	free(t->path);
	if (t->up.fd >= 0)
		close(t->up.fd);
}

static void tpl_view_setup(struct tpl_upload *t, const char *what)
{
	t->view.verb = t->verb;
	t->view.upload_what = what;
	t->view.mode = cli_opt_json ? TPL_VIEW_JSON
	               : t->quiet   ? TPL_VIEW_QUIET
	               : isatty(2)  ? TPL_VIEW_TTY
	                            : TPL_VIEW_PLAIN;
	t->up.on_progress = tpl_view_upload;
	t->up.ud = &t->view;
}

/* POSTs the upload; the answer's lines go to the view. */
static int tpl_upload_run(struct tpl_upload *t)
{
	struct cli_req req = {.method = "POST",
	                      .path = t->path,
	                      .reader = cli_upload_read,
	                      .reader_data = &t->up,
	                      .content_type = t->content_type,
	                      .on_line = tpl_view_line,
	                      .ud = &t->view};
	struct al_error err = {0}, werr = {0};
	long status = 0;
	cleanup_json json_t *resp = NULL;
	int r = cli_request(&req, &status, &resp, &err);
	int wr = cli_upload_finish(&t->up, &werr);
	if (wr < 0 && wr != -EPIPE)
		return cli_client_error("template %s: %s", t->verb, werr.message);
	if (r < 0 && !t->view.started)
		return cli_client_error("template %s: %s", t->verb, err.message);
	if (r == 0 && status != 200)
		return cli_report(status, resp);
	return tpl_view_end(&t->view, r < 0 ? err.message : NULL);
}

/* ------------------------------------------------------------ build */

struct build_opts {
	const char *dockerfile, *network, *tenant;
	char *query; /* "?build_arg=...&no_cache=1...": the flags so far, or "" */
	bool quiet;
};

static void build_opts_release(struct build_opts *o)
{
	free(o->query);
}

static void query_add(char **query, const char *key, const char *value)
{
	char *next = cli_path_with_query(*query, key, value);
	free(*query);
	*query = next;
}

static int build_opt(int c, void *ud)
{
	struct build_opts *o = ud;
	long v;
	switch (c) {
	case 'f':
		o->dockerfile = optarg;
		break;
	case 'a':
		if (!strchr(optarg, '=') || optarg[0] == '=')
			return cli_usage_error("template build: --build-arg takes KEY=VALUE, got \"%s\"", optarg);
		query_add(&o->query, "build_arg", optarg);
		break;
	case 'n':
		o->network = optarg;
		break;
	case 'C':
		query_add(&o->query, "no_cache", "1");
		break;
	case 'S':
		query_add(&o->query, "snapshot", "1");
		break;
	case 'd':
		if (parse_int_range(optarg, 1, 1L << 24, &v) < 0)
			return cli_usage_error("template build: --disk-mib takes a whole number of MiB, got \"%s\"",
			                       optarg);
		query_add(&o->query, "disk_mib", optarg);
		break;
	case 't':
		o->tenant = optarg;
		break;
	case 'q':
		o->quiet = true;
		break;
	}
	return 0;
}

/* --network-policy: JSON text (starts with '{') or a file of it, sent compact. */
static int network_policy_load(const char *arg, char **ret_compact)
{
	const char *p = arg;
	while (*p == ' ' || *p == '\t' || *p == '\n')
		p++;
	cleanup_free char *text = NULL;
	if (*p != '{') {
		int r = read_file_limited(arg, NETWORK_POLICY_MAX, &text, NULL);
		if (r < 0)
			return cli_usage_error("template build: --network-policy: cannot read %s: %s", arg,
			                       r == -EFBIG ? "larger than 64 KiB" : strerror(-r));
	}
	json_error_t jerr;
	cleanup_json json_t *policy = json_loads(text ? text : arg, 0, &jerr);
	if (!json_is_object(policy))
		return cli_usage_error("template build: --network-policy takes a JSON object or a file of one "
		                       "(e.g. '{\"allow\":[\"deb.debian.org\"]}')%s%s",
		                       policy ? "" : ": ", policy ? "" : jerr.text);
	*ret_compact = json_dumps(policy, JSON_COMPACT);
	return 0;
}

/* Where the Dockerfile is for the daemon: its path in the context, or a
 * file added to the context's tar under AIRLOCK_DOCKERFILE. */
static int dockerfile_place(const char *ctx_dir, const char *dockerfile, struct cli_context *ctx, char **ret_real,
                            const char **ret_param)
{
	char rctx[PATH_MAX], rdf[PATH_MAX];
	struct stat st;
	if (!realpath(ctx_dir, rctx) || stat(rctx, &st) < 0 || !S_ISDIR(st.st_mode))
		return cli_usage_error("template build: the context %s is not a directory", ctx_dir);
	if (!realpath(dockerfile, rdf) || stat(rdf, &st) < 0 || !S_ISREG(st.st_mode))
		return cli_usage_error("template build: cannot read the Dockerfile %s%s", dockerfile,
		                       errno == ENOENT ? " (name one with -f)" : "");
	size_t n = strlen(rctx);
	bool inside = !strncmp(rdf, rctx, n) && (rdf[n] == '/' || (n == 1 && rctx[0] == '/'));
	*ret_real = xstrdup(inside ? rdf + n + (rdf[n] == '/') : rdf);
	if (inside) {
		ctx->keep = *ret_real;
		*ret_param = *ret_real;
	} else {
		ctx->extra_src = *ret_real;
		ctx->extra_name = AIRLOCK_DOCKERFILE;
		*ret_param = AIRLOCK_DOCKERFILE;
	}
	return 0;
}

static void warn_skipped(const char *verb, const struct cli_context *c)
{
	if (!c->skipped)
		return;
	fprintf(stderr, "airlock: template %s: warning: left out %u devices, sockets or fifos:", verb, c->skipped);
	for (unsigned i = 0; i < c->skipped && i < CONTEXT_SKIPPED_NAMES; i++)
		fprintf(stderr, " %s", cli_esc(c->skipped_names[i]));
	fprintf(stderr, "%s\n", c->skipped > CONTEXT_SKIPPED_NAMES ? " ..." : "");
}

/* The request's path: name, dockerfile, the options, network, tenant. */
static char *build_path(const char *name, const char *df_param, const struct build_opts *o, const char *network)
{
	cleanup_free char *path = cli_path_with_query("/v1/templates", "name", name);
	query_add(&path, "dockerfile", df_param);
	if (o->query[0]) {
		char *joined = xasprintf("%s&%s", path, o->query + 1); /* o->query starts with '?' */
		free(path);
		path = joined;
	}
	if (network)
		query_add(&path, "network", network);
	if (o->tenant)
		query_add(&path, "tenant", o->tenant);
	return TAKE_PTR(path);
}

static int build_run(const char *name, const char *ctx_dir, struct build_opts *o)
{
	cleanup_free char *network = NULL, *df_real = NULL, *df_default = NULL, *ignore_path = NULL;
	int r;
	if (o->network && (r = network_policy_load(o->network, &network)))
		return r;
	struct cli_context ctx = {.dir = ctx_dir};
	const char *df_param = NULL;
	df_default = xasprintf("%s/Dockerfile", ctx_dir);
	if ((r = dockerfile_place(ctx_dir, o->dockerfile ? o->dockerfile : df_default, &ctx, &df_real, &df_param)))
		return r;
	ignore_path = xasprintf("%s/.dockerignore", ctx_dir);
	cleanup_cli_ignore struct cli_ignore *ignore = NULL;
	struct al_error err = {0};
	if (cli_ignore_load(ignore_path, &ignore, &err) < 0)
		return cli_client_error("template build: %s", err.message);
	ctx.ignore = ignore;
	__attribute__((cleanup(tpl_upload_release))) struct tpl_upload t = {
	    .verb = "build", .content_type = "application/x-tar", .quiet = o->quiet, .up.fd = -1};
	t.path = build_path(name, df_param, o, network);
	tpl_view_setup(&t, "build context");
	if (cli_upload_start(&t.up, &ctx, &err) < 0)
		return cli_client_error("template build: %s", err.message);
	r = tpl_upload_run(&t);
	warn_skipped("build", &ctx);
	cli_context_release(&ctx);
	return r;
}

static int template_build(int argc, char **argv)
{
	static const struct option longs[] = {{"file", required_argument, NULL, 'f'},
	                                      {"build-arg", required_argument, NULL, 'a'},
	                                      {"network-policy", required_argument, NULL, 'n'},
	                                      {"no-cache", no_argument, NULL, 'C'},
	                                      {"snapshot", no_argument, NULL, 'S'},
	                                      {"disk-mib", required_argument, NULL, 'd'},
	                                      {"tenant", required_argument, NULL, 't'},
	                                      {"quiet", no_argument, NULL, 'q'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	__attribute__((cleanup(build_opts_release))) struct build_opts o = {.query = xstrdup("")};
	int first = 0, r = cli_small_opts(argc, argv, "hf:q", longs, &first, build_opt, &o);
	if (r)
		return r;
	if (argc - first < 1 || argc - first > 2)
		return cli_usage_error("template build takes a NAME and at most one CONTEXT directory (default .)");
	if (cli_opt_json && o.quiet)
		return cli_usage_error("template build: --json and --quiet do not combine");
	return build_run(argv[first], argc - first == 2 ? argv[first + 1] : ".", &o);
}

/* ------------------------------------------------------------ import */

struct import_opts {
	const char *tenant;
	bool quiet;
};

static int import_opt(int c, void *ud)
{
	struct import_opts *o = ud;
	if (c == 't')
		o->tenant = optarg;
	if (c == 'q')
		o->quiet = true;
	return 0;
}

/* A file is sent as it is (its type from its first bytes); a directory, an
 * OCI layout, as a tar of it. */
static int import_source(const char *src, struct tpl_upload *t, struct cli_context *ctx, struct al_error *err)
{
	struct stat st;
	if (stat(src, &st) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "cannot read %s: %m", src);
	if (S_ISDIR(st.st_mode)) {
		*ctx = (struct cli_context){.dir = src};
		t->content_type = "application/x-tar";
		return cli_upload_start(&t->up, ctx, err);
	}
	t->up.fd = open(src, O_RDONLY | O_CLOEXEC);
	if (t->up.fd < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "cannot open %s: %m", src);
	unsigned char magic[2] = {0};
	if (pread(t->up.fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b)
		t->content_type = "application/gzip";
	else
		t->content_type = "application/x-tar";
	t->view.upload_total = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
	return 0;
}

static int template_import(int argc, char **argv)
{
	static const struct option longs[] = {{"tenant", required_argument, NULL, 't'},
	                                      {"quiet", no_argument, NULL, 'q'},
	                                      {"json", no_argument, NULL, 'j'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	struct import_opts o = {0};
	int first = 0, r = cli_small_opts(argc, argv, "hq", longs, &first, import_opt, &o);
	if (r)
		return r;
	if (argc - first != 2)
		return cli_usage_error("template import takes a NAME and a PATH (an image archive or an OCI layout "
		                       "directory)");
	if (cli_opt_json && o.quiet)
		return cli_usage_error("template import: --json and --quiet do not combine");
	__attribute__((cleanup(tpl_upload_release))) struct tpl_upload t = {
	    .verb = "import", .quiet = o.quiet, .up.fd = -1};
	t.path = cli_path_with_query("/v1/templates/import", "name", argv[first]);
	if (o.tenant)
		query_add(&t.path, "tenant", o.tenant);
	tpl_view_setup(&t, "image");
	struct cli_context ctx = {0};
	struct al_error err = {0};
	if (import_source(argv[first + 1], &t, &ctx, &err) < 0)
		return cli_client_error("template import: %s", err.message);
	r = tpl_upload_run(&t);
	warn_skipped("import", &ctx);
	cli_context_release(&ctx);
	return r;
}

int cli_cmd_template(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} subs[] = {
	    {"ls", template_ls},       {"inspect", template_inspect}, {"rm", template_rm},
	    {"build", template_build}, {"import", template_import},
	};
	if (argc < 2)
		return cli_usage_error("template takes ls, inspect, rm, build or import");
	for (size_t i = 0; i < ARRAY_SIZE(subs); i++)
		if (!strcmp(argv[1], subs[i].name))
			return subs[i].fn(argc - 1, argv + 1);
	return cli_usage_error("template: unknown subcommand \"%s\" (ls, inspect, rm, build, import)", argv[1]);
}
