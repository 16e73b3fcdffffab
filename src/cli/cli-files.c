/* SPDX-License-Identifier: Apache-2.0 */
/* cp (host <-> sandbox, like docker cp) and fs (ls, stat, mkdir, rm, mv). */
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include "cli-tar.h"
#include "cli.h"

/* ------------------------------------------------------------ helpers */

struct cp_spec {
	const char *arg;
	char *id;   /* sandbox side: the id, else NULL */
	char *path; /* the path (absolute in a sandbox) */
	bool stdio; /* "-" */
};

static int spec_parse(const char *arg, struct cp_spec *s)
{
	*s = (struct cp_spec){.arg = arg};
	if (!strcmp(arg, "-")) {
		s->stdio = true;
		return 0;
	}
	const char *colon = strchr(arg, ':'), *slash = strchr(arg, '/');
	if (colon && colon != arg && (!slash || colon < slash)) {
		s->id = xstrndup(arg, (size_t)(colon - arg));
		s->path = xstrdup(colon + 1);
		if (s->path[0] != '/')
			return cli_usage_error("cp: the path in a sandbox must be absolute, got \"%s\"", arg);
		return 0;
	}
	s->path = xstrdup(arg);
	return 0;
}

static void spec_release(struct cp_spec *s)
{
	free(s->id);
	free(s->path);
}

/* The last component of a path ("/a/b/" -> "b"; "/" -> ""). */
static char *path_base(const char *p)
{
	size_t len = strlen(p);
	while (len > 1 && p[len - 1] == '/')
		len--;
	size_t start = len;
	while (start > 0 && p[start - 1] != '/')
		start--;
	return xstrndup(p + start, len - start);
}

/* The directory part ("/a/b" -> "/a"; "b" -> "."; "/b" -> "/"). */
static char *path_dir(const char *p)
{
	cleanup_free char *copy = xstrdup(p);
	size_t len = strlen(copy);
	while (len > 1 && copy[len - 1] == '/')
		copy[--len] = '\0';
	return xstrdup(dirname(copy));
}

static char *sandbox_url(const char *id, const char *rest, const char *path)
{
	cleanup_free char *prefix = xasprintf("/v1/sandboxes/%s/%s", id, rest);
	return cli_path_with_query(prefix, "path", path);
}

/* GET files/stat: 0 with the object, -ENOENT on 404, else reports (EXIT_CLIENT). */
static int remote_stat(const char *id, const char *path, json_t **ret)
{
	cleanup_free char *url = sandbox_url(id, "files/stat", path);
	struct al_error err = {0};
	long status = 0;
	cleanup_json json_t *resp = NULL;
	if (cli_http("GET", url, NULL, &status, &resp, &err) < 0)
		return cli_report_error(&err);
	if (status == 404) {
		/* Unknown sandbox or missing path: tell them apart by the sandbox. */
		cleanup_free char *sb = xasprintf("/v1/sandboxes/%s", id);
		cleanup_json json_t *o = NULL;
		int r = cli_call("GET", sb, NULL, 200, &o);
		return r ? r : -ENOENT;
	}
	if (status != 200)
		return cli_report(status, resp);
	*ret = TAKE_PTR(resp);
	return 0;
}

static bool stat_is(json_t *st, const char *type)
{
	const char *t = json_string_value(json_object_get(st, "type"));
	if (!t)
		return false;
	if (!strcmp(type, "file"))
		return !strcmp(t, "file") || !strcmp(t, "regular");
	if (!strcmp(type, "dir"))
		return !strcmp(t, "dir") || !strcmp(t, "directory");
	return !strcmp(t, type);
}

/* ------------------------------------------------------------ sandbox -> host */

/* The limits of one copy from a sandbox (--max-bytes, --max-entries). */
struct cp_limits {
	uint64_t max_bytes, max_entries;
};

/* Bytes from the daemon into an fd, no more than limit (for a file: the size
 * its stat reported; for a raw archive: --max-bytes). */
struct fd_sink {
	int fd;
	uint64_t written, limit;
	bool limit_is_size; /* the limit is the size the sandbox reported */
	const char *what;
};

static int sink_fd(void *ud, const void *buf, size_t len, struct al_error *err)
{
	struct fd_sink *f = ud;
	/* SECURITY: the guest serves the bytes: a file that grows past the size it
	 * reported (or a stream past --max-bytes) is cut off, not followed. */
	if (len > f->limit - f->written) {
		if (f->limit_is_size)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EFBIG,
			                    "%s sent more than the %llu bytes its size said; the copy is not kept",
			                    f->what, (unsigned long long)f->limit);
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EFBIG,
		                    "%s is larger than %llu bytes; stopped (raise the limit with --max-bytes)", f->what,
		                    (unsigned long long)f->limit);
	}
	f->written += len;
	int r = write_full(f->fd, buf, len);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot write the copy: %s", strerror(-r));
	return 0;
}

static int sink_tar(void *ud, const void *buf, size_t len, struct al_error *err)
{
	return cli_tar_reader_feed(ud, buf, len, err);
}

static int get_streamed(const char *url, int (*sink)(void *, const void *, size_t, struct al_error *), void *ud)
{
	struct cli_req req = {.method = "GET", .path = url, .on_bytes = sink, .ud = ud};
	return cli_call_streamed(&req);
}

static int copy_file_from(const char *id, const char *src, json_t *st, int dirfd, const char *dir, const char *name,
                          const struct cp_limits *lim)
{
	json_int_t size = json_integer_value(json_object_get(st, "size"));
	if (size < 0 || !json_is_integer(json_object_get(st, "size")))
		return cli_client_error("the sandbox did not say how large %s is; not copying it", src);
	if ((uint64_t)size > lim->max_bytes)
		return cli_client_error("%s is %lld bytes, more than the limit of %llu; raise it with --max-bytes", src,
		                        (long long)size, (unsigned long long)lim->max_bytes);
	cleanup_free char *tmp = xasprintf(".%s.airlock-cp", name);
	if (strlen(tmp) > 255)
		tmp[255] = '\0';
	mode_t mode = (mode_t)(json_integer_value(json_object_get(st, "mode")) & 0777);
	unlinkat(dirfd, tmp, 0);
	cleanup_close int fd =
	    openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode ? mode : 0644);
	if (fd < 0)
		return cli_client_error("cannot create a file in %s: %s", dir, strerror(errno));
	cleanup_free char *url = sandbox_url(id, "files", src);
	struct fd_sink fs = {.fd = fd, .limit = (uint64_t)size, .limit_is_size = true, .what = src};
	int r = get_streamed(url, sink_fd, &fs);
	if (r == 0 && fsync(fd) < 0)
		r = cli_client_error("cannot write %s/%s: %s", dir, name, strerror(errno));
	if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
		r = cli_client_error("cannot create %s/%s: %s", dir, name, strerror(errno));
	if (r)
		unlinkat(dirfd, tmp, 0);
	return r;
}

static int extract_from(const char *id, const char *src, int dirfd, const char *dir, const char *rename,
                        const struct cp_limits *lim)
{
	cleanup_free char *url = sandbox_url(id, "archive", src);
	cleanup_cli_tar_reader struct tar_reader *t = cli_tar_reader_new(dirfd, rename);
	cli_tar_reader_set_limits(t, lim->max_bytes, lim->max_entries);
	int r = get_streamed(url, sink_tar, t);
	if (r)
		return r;
	struct al_error err = {0};
	int skipped = cli_tar_reader_finish(t, &err);
	if (skipped < 0)
		return cli_client_error("extracting into %s: %s", dir, err.message);
	if (skipped > 0)
		fprintf(stderr, "airlock: skipped %d entries that are not files, directories or symlinks\n", skipped);
	return 0;
}

/* Whether the last component of a path is "." or ".." (or the path ends in "/" after one). */
static bool path_ends_in_dots(const char *p)
{
	cleanup_free char *base = path_base(p);
	return !strcmp(base, ".") || !strcmp(base, "..");
}

static int cp_from_sandbox(const struct cp_spec *src, const struct cp_spec *dst, const struct cp_limits *lim)
{
	/* SECURITY: the archive of /dir/.. is named "..": extracted under a new
	 * name it would land beside the destination, not in it. Refused, as for
	 * copies into a sandbox; name the directory itself instead. */
	if (path_ends_in_dots(src->path))
		return cli_client_error("cannot copy %s: a source must end with a name, not \".\" or \"..\" "
		                        "(name the directory itself)",
		                        src->path);
	if (dst->stdio) {
		cleanup_free char *url = sandbox_url(src->id, "archive", src->path);
		struct fd_sink fs = {.fd = 1, .limit = lim->max_bytes, .what = "the archive"};
		return get_streamed(url, sink_fd, &fs);
	}
	cleanup_json json_t *st = NULL;
	int r = remote_stat(src->id, src->path, &st);
	if (r == -ENOENT)
		return cli_client_error("%s does not exist in sandbox %s", src->path, src->id);
	if (r)
		return r;
	cleanup_free char *src_base = path_base(src->path);
	cleanup_free char *dir = NULL, *name = NULL;
	struct stat lst;
	if (stat(dst->path, &lst) == 0 && S_ISDIR(lst.st_mode)) {
		dir = xstrdup(dst->path);
		name = xstrdup(*src_base ? src_base : "root");
	} else if (stat(dst->path, &lst) == 0 && stat_is(st, "dir")) {
		return cli_client_error("cannot copy the directory %s onto the file %s", src->path, dst->path);
	} else {
		if (dst->path[strlen(dst->path) - 1] == '/')
			return cli_client_error("the directory %s does not exist; create it first", dst->path);
		dir = path_dir(dst->path);
		name = path_base(dst->path);
	}
	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return cli_client_error("cannot name a copy \"%s\"; give a destination path that ends with a name",
		                        name);
	cleanup_close int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return cli_client_error("cannot open the directory %s: %s", dir, strerror(errno));
	if (stat_is(st, "file"))
		return copy_file_from(src->id, src->path, st, dirfd, dir, name, lim);
	return extract_from(src->id, src->path, dirfd, dir, name, lim);
}

/* ------------------------------------------------------------ host -> sandbox */

struct tar_gen {
	int fd; /* write end of the pipe */
	const char *src, *name;
	struct al_error err;
	volatile int failed;
};

static void *tar_gen_run(void *arg)
{
	struct tar_gen *g = arg;
	unsigned skipped = 0;
	int r = cli_tar_write_path(g->fd, g->src, g->name, &skipped, &g->err);
	if (r == 0)
		r = cli_tar_write_end(g->fd, &g->err);
	if (r < 0)
		__atomic_store_n(&g->failed, 1, __ATOMIC_SEQ_CST);
	else if (skipped)
		fprintf(stderr, "airlock: skipped %u entries that are not files, directories or symlinks\n", skipped);
	close(g->fd);
	return NULL;
}

struct pipe_reader {
	int fd;
	struct tar_gen *gen; /* NULL for stdin */
};

static size_t read_pipe(char *buf, size_t size, size_t nitems, void *ud)
{
	struct pipe_reader *p = ud;
	for (;;) {
		ssize_t n = read(p->fd, buf, size * nitems);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return CURL_READFUNC_ABORT;
		/* A tree that failed half-way must not reach the guest as a shorter archive. */
		if (n == 0 && p->gen && __atomic_load_n(&p->gen->failed, __ATOMIC_SEQ_CST))
			return CURL_READFUNC_ABORT;
		return (size_t)n;
	}
}

static int put_archive(const char *id, const char *dir, int fd, struct tar_gen *gen)
{
	cleanup_free char *url = sandbox_url(id, "archive", dir);
	struct pipe_reader pr = {.fd = fd, .gen = gen};
	struct cli_req req = {
	    .method = "PUT", .path = url, .reader = read_pipe, .reader_data = &pr, .content_type = "application/x-tar"};
	struct al_error err = {0};
	long status = 0;
	cleanup_json json_t *resp = NULL;
	int r = cli_request(&req, &status, &resp, &err);
	if (gen && __atomic_load_n(&gen->failed, __ATOMIC_SEQ_CST))
		return -1; /* the generator's error is the one to show */
	if (r < 0)
		return cli_report_error(&err);
	if (status != 204 && status != 200 && status != 201)
		return cli_report(status, resp);
	return 0;
}

static int cp_to_sandbox(const struct cp_spec *src, const struct cp_spec *dst)
{
	if (src->stdio)
		return put_archive(dst->id, dst->path, 0, NULL);
	struct stat lst;
	if (lstat(src->path, &lst) < 0)
		return cli_client_error("cannot copy %s: %s", src->path, strerror(errno));
	cleanup_json json_t *st = NULL;
	int r = remote_stat(dst->id, dst->path, &st);
	if (r > 0)
		return r;
	cleanup_free char *dir = NULL, *name = NULL;
	if (r == 0 && stat_is(st, "dir")) {
		dir = xstrdup(dst->path);
		name = path_base(src->path);
	} else if (r == 0 && S_ISDIR(lst.st_mode)) {
		return cli_client_error("cannot copy the directory %s onto the file %s in sandbox %s", src->path,
		                        dst->path, dst->id);
	} else {
		dir = path_dir(dst->path);
		name = path_base(dst->path);
	}
	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return cli_client_error("cannot name a copy \"%s\"; give a destination path that ends with a name",
		                        name);
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0)
		return cli_client_error("cannot create a pipe: %s", strerror(errno));
	signal(SIGPIPE, SIG_IGN); /* a refused upload stops the generator with EPIPE */
	struct tar_gen gen = {.fd = fds[1], .src = src->path, .name = name};
	pthread_t th;
	if (pthread_create(&th, NULL, tar_gen_run, &gen) != 0)
		abort();
	r = put_archive(dst->id, dir, fds[0], &gen);
	close(fds[0]);
	pthread_join(th, NULL);
	if (gen.failed)
		return cli_report_error(&gen.err);
	return r;
}

static int cp_local_only(void)
{
	return cli_usage_error("cp: one side must be in a sandbox (ID:/path)");
}

static int cp_opt(int c, void *ud)
{
	struct cp_limits *lim = ud;
	uint64_t v;
	if (parse_u64(optarg, &v) < 0 || v == 0)
		return cli_usage_error("cp: --max-%s takes a positive number, got \"%s\"",
		                       c == 'b' ? "bytes" : "entries", optarg);
	if (c == 'b')
		lim->max_bytes = v;
	else
		lim->max_entries = v;
	return 0;
}

int cli_cmd_cp(int argc, char **argv)
{
	static const struct option longs[] = {{"json", no_argument, NULL, 'j'},
	                                      {"max-bytes", required_argument, NULL, 'b'},
	                                      {"max-entries", required_argument, NULL, 'e'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	struct cp_limits lim = {.max_bytes = CP_MAX_BYTES_DEFAULT, .max_entries = CP_MAX_ENTRIES_DEFAULT};
	int first = 0, r = cli_small_opts(argc, argv, "h", longs, &first, cp_opt, &lim);
	if (r)
		return r;
	if (first + 2 != argc)
		return cli_usage_error("cp takes a source and a destination (one of them ID:/path)");
	__attribute__((cleanup(spec_release))) struct cp_spec src = {0}, dst = {0};
	if ((r = spec_parse(argv[first], &src)) || (r = spec_parse(argv[first + 1], &dst)))
		return r;
	if (src.id && dst.id)
		return cli_usage_error("cp: copy between two sandboxes through the host: cp ID1:/p - | cp - ID2:/dir");
	if (src.id)
		return cp_from_sandbox(&src, &dst, &lim);
	if (dst.id)
		return cp_to_sandbox(&src, &dst);
	return cp_local_only();
}

/* ------------------------------------------------------------ fs */

static void format_mode(json_t *st, char out[11])
{
	const char *t = json_string_value(json_object_get(st, "type"));
	long long m = json_integer_value(json_object_get(st, "mode"));
	out[0] = stat_is(st, "dir") ? 'd' : stat_is(st, "file") ? '-' : (t && !strcmp(t, "symlink")) ? 'l' : '?';
	static const char rwx[] = "rwxrwxrwx";
	for (int i = 0; i < 9; i++)
		out[1 + i] = (m & (0400 >> i)) ? rwx[i] : '-';
	out[10] = '\0';
}

static void print_stat_line(json_t *st)
{
	char mode[11], when[32] = "-";
	format_mode(st, mode);
	json_t *mt = json_object_get(st, "mtime_ms");
	if (json_is_integer(mt))
		format_time_rfc3339((uint64_t)json_integer_value(mt), when);
	const char *target = json_string_value(json_object_get(st, "target"));
	/* SECURITY: names and targets are the guest's: escaped for the terminal. */
	printf("%s %5lld %5lld %10lld %s %s%s%s\n", mode, (long long)json_integer_value(json_object_get(st, "uid")),
	       (long long)json_integer_value(json_object_get(st, "gid")),
	       (long long)json_integer_value(json_object_get(st, "size")), when, cli_esc_json(st, "name"),
	       target ? " -> " : "", target ? cli_esc(target) : "");
}

struct fs_flags {
	bool parents, recursive;
};

static int fs_opt(int c, void *ud)
{
	struct fs_flags *f = ud;
	if (c == 'p')
		f->parents = true;
	if (c == 'r')
		f->recursive = true;
	return 0;
}

int cli_cmd_fs(int argc, char **argv)
{
	static const struct option longs[] = {{"json", no_argument, NULL, 'j'},
	                                      {"parents", no_argument, NULL, 'p'},
	                                      {"recursive", no_argument, NULL, 'r'},
	                                      {"help", no_argument, NULL, 'h'},
	                                      {NULL, 0, NULL, 0}};
	if (argc < 2)
		return cli_usage_error("fs takes ls, stat, mkdir, rm or mv");
	const char *sub = argv[1];
	struct fs_flags f = {0};
	int first = 0, r = cli_small_opts(argc - 1, argv + 1, "hpr", longs, &first, fs_opt, &f);
	if (r)
		return r;
	char **ops = argv + 1 + first;
	int n = argc - 1 - first;
	bool is_mv = !strcmp(sub, "mv");
	if (n != (is_mv ? 3 : 2))
		return cli_usage_error("fs %s takes a sandbox id and %s", sub, is_mv ? "two paths" : "a path");
	const char *id = ops[0], *path = ops[1];
	if ((f.parents && strcmp(sub, "mkdir")) || (f.recursive && strcmp(sub, "rm")))
		return cli_usage_error("fs %s: -p is for mkdir, -r for rm", sub);
	cleanup_json json_t *resp = NULL;
	if (!strcmp(sub, "ls") || !strcmp(sub, "stat")) {
		bool ls = !strcmp(sub, "ls");
		cleanup_free char *url = sandbox_url(id, ls ? "files/list" : "files/stat", path);
		if (!ls) {
			if ((r = cli_call("GET", url, NULL, 200, &resp)))
				return r;
			cli_print_json(resp, cli_opt_json);
			return 0;
		}
		cleanup_json json_t *entries = NULL;
		if ((r = cli_call_list("GET", url, NULL, 200, "entries", &entries)) || !entries)
			return r;
		size_t i;
		json_t *e;
		json_array_foreach (entries, i, e) {
			print_stat_line(e);
		}
		return 0;
	}
	cleanup_free char *url = NULL;
	cleanup_json json_t *body = NULL;
	long want = 204;
	if (!strcmp(sub, "mkdir")) {
		url = xasprintf("/v1/sandboxes/%s/files/mkdir", id);
		body = json_pack("{s:s, s:b}", "path", path, "parents", f.parents);
		want = 201;
	} else if (!strcmp(sub, "rm")) {
		url = xasprintf("/v1/sandboxes/%s/files/remove", id);
		body = json_pack("{s:s, s:b}", "path", path, "recursive", f.recursive);
	} else if (is_mv) {
		url = xasprintf("/v1/sandboxes/%s/files/rename", id);
		body = json_pack("{s:s, s:s}", "path", path, "to", ops[2]);
	} else {
		return cli_usage_error("fs: unknown subcommand \"%s\" (ls, stat, mkdir, rm, mv)", sub);
	}
	return cli_call("POST", url, body, want, &resp);
}
