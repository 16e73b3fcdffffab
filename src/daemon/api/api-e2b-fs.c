/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's filesystem service, filesystem.Filesystem: the unary Connect RPCs
 * Stat, ListDir, MakeDir, Move and Remove (JSON codec), built on the agent's
 * FILE_OPs (api-files.c); and what /files (api-e2b-files.c) shares with
 * them: paths cleaned, owner names from the guest's account files, stat
 * following symlinks, directories made and given to the user, helpers run
 * in the guest.
 *
 * SECURITY: paths come from the client and name guest paths only; the
 * accounts files come from the guest and are parsed with bounds. Nothing
 * here becomes a host path. */
#include <stdio.h>
#include <string.h>

#include "api-e2b-entry.h"
#include "api-e2b-fs.h"
#include "api-handlers.h"
#include "connect-wire.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "util.h"

#define E2B_FS_OP_TIMEOUT_MS 60000
#define E2B_FS_RUN_STDERR_MAX 2048u
/* SECURITY: what one ListDir may answer, whatever its depth. */
#define E2B_LIST_ENTRIES_MAX 10000
#define E2B_LIST_DEPTH_MAX 64
#define E2B_LIST_HELD_MAX 20000
/* As Linux: at most 40 symlinks followed on the way to a file. */
#define E2B_SYMLINK_HOPS_MAX 40

/* ---- reading small guest files ------------------------------------------------------------------ */

/* The guest file at path whole (NUL-terminated), at most max bytes; a
 * missing file is "". */
static int guest_read_small(struct sandbox *sb, const char *path, size_t max, char **ret, struct al_error *err)
{
	size_t len;
	int r = e2b_guest_file_read(sb, path, max, ret, &len, err);
	if (r < 0 && err->code == AL_ERR_NOT_FOUND) {
		*err = (struct al_error){0};
		*ret = xstrdup("");
		return 0;
	}
	return r;
}

void e2b_fs_accounts_release(struct e2b_fs_accounts *a)
{
	free(a->passwd);
	free(a->group);
	a->passwd = a->group = NULL;
}

int e2b_fs_accounts_read(struct sandbox *sb, struct e2b_fs_accounts *ret, struct al_error *err)
{
	*ret = (struct e2b_fs_accounts){0};
	if (guest_read_small(sb, "/etc/passwd", E2B_FS_ACCOUNTS_MAX, &ret->passwd, err) < 0 ||
	    guest_read_small(sb, "/etc/group", E2B_FS_ACCOUNTS_MAX, &ret->group, err) < 0) {
		e2b_fs_accounts_release(ret);
		return -EIO;
	}
	return 0;
}

/* ---- paths -------------------------------------------------------------------------------------- */

int e2b_fs_path(const struct e2b_user *u, const char *in, char ret[E2B_PATH_MAX + 1], struct al_error *err)
{
	char full[E2B_PATH_MAX + 1];
	int r = e2b_path_resolve(u, in, full, err);
	if (r < 0)
		return r;
	if (!utf8_valid((const uint8_t *)full, strlen(full)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "path is not UTF-8");
	e2b_path_clean(full, ret);
	return 0;
}

/* ---- helpers run in the guest ------------------------------------------------------------------- */

int e2b_fs_run(struct sandbox *sb, const char *const *argv, unsigned uid, unsigned gid, struct al_error *err)
{
	struct guest_channel *ch = sandbox_channel(sb);
	size_t argc = 0;
	while (argv[argc])
		argc++;
	struct exec_request er = {
	    .argc = argc, .argv = (char **)argv, .cwd = "/", .uid = uid, .gid = gid, .max_output_bytes = 0};
	char *env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
	cleanup_json json_t *msg = guest_exec_message(&er, env, ARRAY_SIZE(env));
	struct guest_stream *s = NULL;
	int r = guest_stream_start(ch, AIRLOCK_FRAME_EXEC, msg, GUEST_STREAM_COLLECT, E2B_FS_RUN_STDERR_MAX, &s, err);
	if (r < 0)
		return r;
	r = guest_stream_wait_done(ch, s, now_ms_monotonic() + E2B_FS_OP_TIMEOUT_MS);
	uint8_t type = 0;
	cleanup_json json_t *result = NULL;
	struct exec_exit ex = {0};
	if (r == 0) {
		guest_stream_done(ch, s, &type, &result);
		r = guest_result_to_exit(type, result, &ex, err);
	} else {
		cleanup_json json_t *sig = json_pack("{s:i}", "signal", 9);
		guest_stream_send_control(ch, s, AIRLOCK_FRAME_SIGNAL, sig); /* not left behind */
		al_error_set(err, AL_ERR_TIMEOUT, -r, "%s in the sandbox did not finish in %d s", argv[0],
		             E2B_FS_OP_TIMEOUT_MS / 1000);
	}
	if (r == 0 && (!ex.exited || ex.exit_code != 0)) {
		struct exec_output out[2] = {0};
		guest_stream_take_output(ch, s, out);
		size_t n = out[1].len;
		while (n > 0 && (out[1].data[n - 1] == '\n' || out[1].data[n - 1] == '\r'))
			n--;
		bool denied = out[1].data && memmem(out[1].data, n, "ermission denied", 16);
		r = al_error_set(err, denied ? AL_ERR_FORBIDDEN : AL_ERR_INVALID_ARGUMENT, EIO, "%s failed: %.*s",
		                 argv[0], (int)MIN(n, (size_t)512), out[1].data ? (const char *)out[1].data : "");
		free(out[0].data);
		free(out[1].data);
	}
	guest_stream_unref(ch, s);
	return r;
}

json_t *e2b_fs_stat(struct sandbox *sb, const char *path, struct al_error *err)
{
	cleanup_json json_t *msg = json_pack("{s:s, s:s}", "op", "stat", "path", path);
	json_t *st = NULL;
	if (api_file_op(sb, msg, "stat", &st, NULL, err) < 0)
		return NULL;
	return st;
}

json_t *e2b_fs_stat_follow(struct sandbox *sb, const char *path, char ret_path[E2B_PATH_MAX + 1], struct al_error *err)
{
	char cur[E2B_PATH_MAX + 1];
	strlcpy_al(cur, path, sizeof(cur));
	for (int hops = 0; hops <= E2B_SYMLINK_HOPS_MAX; hops++) {
		json_t *st = e2b_fs_stat(sb, cur, err);
		const char *type = json_string_value(json_object_get(st, "type"));
		const char *target = json_string_value(json_object_get(st, "target"));
		if (!st || !type || strcmp(type, "symlink")) {
			if (st)
				strlcpy_al(ret_path, cur, E2B_PATH_MAX + 1);
			return st;
		}
		/* SECURITY: the target is the guest's: it only becomes another
		 * guest path to stat, bounded like a client's. */
		char next[2 * E2B_PATH_MAX + 2];
		const char *slash = strrchr(cur, '/');
		if (!target || !target[0]) {
			json_decref(st);
			break;
		}
		if (target[0] == '/')
			snprintf(next, sizeof(next), "%s", target);
		else
			snprintf(next, sizeof(next), "%.*s/%s", (int)(slash - cur), cur, target);
		json_decref(st);
		if (strlen(next) > E2B_PATH_MAX) {
			al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
			             "%s: a symlink on the way leads to a path longer than %d bytes", path,
			             E2B_PATH_MAX);
			return NULL;
		}
		e2b_path_clean(next, cur);
	}
	al_error_set(err, AL_ERR_INVALID_ARGUMENT, ELOOP, "%s: more than %d symlinks on the way (a loop?)", path,
	             E2B_SYMLINK_HOPS_MAX);
	return NULL;
}

/* Is the parent of path missing? 1 and its path in ret_parent if so; 0 if it
 * is there or path has no parent below /; < 0 if the stat failed otherwise. */
static int parent_missing(struct sandbox *sb, const char *path, char ret_parent[E2B_PATH_MAX + 1], struct al_error *err)
{
	strlcpy_al(ret_parent, path, E2B_PATH_MAX + 1);
	char *slash = strrchr(ret_parent, '/');
	if (!slash || slash == ret_parent)
		return 0;
	*slash = '\0';
	struct al_error serr = {0};
	cleanup_json json_t *st = e2b_fs_stat(sb, ret_parent, &serr);
	if (st)
		return 0;
	if (serr.code != AL_ERR_NOT_FOUND) {
		*err = serr;
		return -EIO;
	}
	return 1;
}

int e2b_fs_make_dirs(struct sandbox *sb, const struct e2b_user *u, const char *dir, struct al_error *err)
{
	/* The topmost missing directory: what is created, and given to u. */
	char first[E2B_PATH_MAX + 1], up[E2B_PATH_MAX + 1];
	strlcpy_al(first, dir, sizeof(first));
	int missing;
	while ((missing = parent_missing(sb, first, up, err)) > 0)
		strlcpy_al(first, up, sizeof(first));
	if (missing < 0)
		return missing;
	size_t depth = 1;
	for (const char *c = dir + strlen(first); *c; c++)
		depth += *c == '/';
	if (depth > E2B_MADE_DIRS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG,
		                    "%s: %zu directories to create; at most %d at once", dir, depth, E2B_MADE_DIRS_MAX);
	cleanup_json json_t *msg =
	    json_pack("{s:s, s:s, s:b, s:i}", "op", "mkdir", "path", dir, "parents", 1, "mode", 0755);
	cleanup_json json_t *ok = NULL;
	int r = api_file_op(sb, msg, "mkdir", &ok, NULL, err);
	if (r < 0 || (u->uid == 0 && u->gid == 0))
		return r;
	char owner[32];
	snprintf(owner, sizeof(owner), "%u:%u", u->uid, u->gid);
	/* The directories made, from first down to dir, each itself: never
	 * what is in them (a parallel write's temporary file may come and go
	 * there, and a recursive chown then fails on it). */
	const char *argv[4 + E2B_MADE_DIRS_MAX + 1] = {"chown", "-h", "--", owner};
	size_t n = 4;
	char chain[E2B_PATH_MAX + 1];
	strlcpy_al(chain, dir, sizeof(chain));
	size_t first_len = strlen(first);
	char *made[E2B_MADE_DIRS_MAX];
	size_t n_made = 0;
	for (;;) {
		made[n_made++] = xstrdup(chain);
		char *slash = strrchr(chain, '/');
		if (strlen(chain) <= first_len || !slash || slash == chain || n_made == E2B_MADE_DIRS_MAX)
			break;
		*slash = '\0';
	}
	for (size_t i = n_made; i-- > 0;)
		argv[n++] = made[i];
	argv[n] = NULL;
	r = e2b_fs_run(sb, argv, 0, 0, err);
	for (size_t i = 0; i < n_made; i++)
		free(made[i]);
	if (r < 0)
		al_error_prefix(err, "giving %s to %s", first, u->name);
	return r;
}

int e2b_fs_make_parents(struct sandbox *sb, const struct e2b_user *u, const char *path, struct al_error *err)
{
	char parent[E2B_PATH_MAX + 1];
	int r = parent_missing(sb, path, parent, err);
	if (r <= 0)
		return r;
	r = e2b_fs_make_dirs(sb, u, parent, err);
	if (r < 0)
		al_error_prefix(err, "creating the parent directories of %s", path);
	return r;
}

/* ---- the RPCs ----------------------------------------------------------------------------------- */

/* What every RPC starts with: the sandbox, the body, the user and the
 * accounts. Answers errors itself; NULL sandbox on failure. */
struct rpc {
	struct sandbox *sb;
	json_t *body;
	struct e2b_user user;
	struct e2b_fs_accounts acc;
};

static void rpc_release(struct rpc *c)
{
	if (c->sb)
		sandbox_release(c->sb);
	json_decref(c->body);
	e2b_fs_accounts_release(&c->acc);
}

static bool rpc_begin(const struct api_request *req, struct api_response *resp, struct rpc *c)
{
	*c = (struct rpc){0};
	c->body = api_parse_json_object(req, resp);
	if (!c->body)
		return false;
	c->sb = api_sandbox_acquire(req, resp);
	if (!c->sb)
		return false;
	if (e2b_user_resolve(req, c->sb, &c->user, resp) < 0)
		return false;
	struct al_error err = {0};
	if (e2b_fs_accounts_read(c->sb, &c->acc, &err) < 0) {
		api_response_error(resp, &err);
		return false;
	}
	return true;
}

/* SECURITY: a string field of the client's message (absent is ""),
 * resolved for the request's user (e2b_fs_path checks it). */
static bool rpc_path(struct rpc *c, struct api_response *resp, const char *field, char out[E2B_PATH_MAX + 1])
{
	json_t *v = json_object_get(c->body, field);
	struct al_error err = {0};
	if (v && !json_is_string(v)) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "%s: must be a string (a path)", field);
		return false;
	}
	if (v && strlen(json_string_value(v)) != json_string_length(v)) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "%s: a path has no NUL byte", field);
		return false;
	}
	if (e2b_fs_path(&c->user, v ? json_string_value(v) : "", out, &err) < 0) {
		al_error_prefix(&err, "%s", field);
		api_response_error(resp, &err);
		return false;
	}
	return true;
}

/* rpc_begin, then the message's "path" (rpc_path): how Stat, ListDir, MakeDir
 * and Remove start. */
static bool rpc_begin_path(const struct api_request *req, struct api_response *resp, struct rpc *c,
                           char path[E2B_PATH_MAX + 1])
{
	return rpc_begin(req, resp, c) && rpc_path(c, resp, "path", path);
}

static json_t *rpc_entry(struct rpc *c, struct api_response *resp, const char *path)
{
	struct al_error err = {0};
	cleanup_json json_t *st = e2b_fs_stat(c->sb, path, &err);
	if (!st) {
		api_response_error(resp, &err);
		return NULL;
	}
	return e2b_entry_info(st, path, c->acc.passwd, c->acc.group);
}

/* The answer of Stat, MakeDir and Move: {"entry": the entry at path}. */
static void rpc_answer_entry(struct rpc *c, struct api_response *resp, const char *path)
{
	json_t *e = rpc_entry(c, resp, path);
	if (e)
		resp->body = json_pack("{s:o}", "entry", e);
}

API_HANDLER(api_e2b_fs_stat)
{
	struct rpc c;
	char path[E2B_PATH_MAX + 1];
	if (rpc_begin_path(req, resp, &c, path))
		rpc_answer_entry(&c, resp, path);
	rpc_release(&c);
}

static int entry_name_cmp(const void *a, const void *b)
{
	const char *x = json_string_value(json_object_get(*(json_t *const *)a, "name"));
	const char *y = json_string_value(json_object_get(*(json_t *const *)b, "name"));
	return strcmp(x ? x : "", y ? y : "");
}

/* One directory's entries, listed by the agent, sorted by name (envd walks
 * in lexical order). */
static int list_one(struct rpc *c, const char *dir, json_t ***ret, size_t *ret_n, struct al_error *err)
{
	cleanup_json json_t *msg = json_pack("{s:s, s:s}", "op", "list", "path", dir);
	cleanup_json json_t *entries = json_array();
	cleanup_json json_t *ok = NULL;
	int r = api_file_op(c->sb, msg, "list", &ok, entries, err);
	if (r < 0)
		return r;
	size_t n = json_array_size(entries);
	json_t **v = xcalloc(n ? n : 1, sizeof(*v));
	for (size_t i = 0; i < n; i++)
		v[i] = json_incref(json_array_get(entries, i));
	qsort(v, n, sizeof(*v), entry_name_cmp);
	*ret = v;
	*ret_n = n;
	return 0;
}

static void entries_free(json_t **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		json_decref(v[i]);
	free(v);
}

/* One directory of a ListDir into out, and below it while depth lasts
 * (depth first, as envd's walk). SECURITY: *held counts the entries of
 * every directory still being walked, so a deep tree of wide directories
 * costs the daemon at most E2B_LIST_HELD_MAX of them at once. */
static int list_dir(struct rpc *c, const char *dir, unsigned depth, json_t *out, size_t *held, struct al_error *err)
{
	json_t **v = NULL;
	size_t n = 0;
	int r = list_one(c, dir, &v, &n, err);
	if (r < 0)
		return r;
	*held += n;
	if (*held > E2B_LIST_HELD_MAX)
		r = al_error_set(err, AL_ERR_TOO_LARGE, EFBIG,
		                 "the directories being listed hold more than %d entries: list with a smaller depth, "
		                 "or a subdirectory",
		                 E2B_LIST_HELD_MAX);
	for (size_t i = 0; r == 0 && i < n; i++) {
		const char *name = json_string_value(json_object_get(v[i], "name"));
		char path[E2B_PATH_MAX + 1];
		/* SECURITY: a guest's name must be one path component. */
		if (!name || !name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", name) >=
		    sizeof(path))
			continue;
		if (json_array_size(out) >= E2B_LIST_ENTRIES_MAX) {
			r = al_error_set(err, AL_ERR_TOO_LARGE, EFBIG,
			                 "the listing has more than %d entries, the most one ListDir answers: list "
			                 "with a smaller depth, or a subdirectory",
			                 E2B_LIST_ENTRIES_MAX);
			break;
		}
		json_array_append_new(out, e2b_entry_info(v[i], path, c->acc.passwd, c->acc.group));
		const char *type = json_string_value(json_object_get(v[i], "type"));
		if (depth > 1 && type && !strcmp(type, "dir"))
			r = list_dir(c, path, depth - 1, out, held, err);
	}
	*held -= n;
	entries_free(v, n);
	return r;
}

API_HANDLER(api_e2b_fs_list_dir)
{
	struct rpc c;
	char path[E2B_PATH_MAX + 1];
	if (!rpc_begin_path(req, resp, &c, path)) {
		rpc_release(&c);
		return;
	}
	json_t *jd = json_object_get(c.body, "depth");
	json_int_t depth = json_is_integer(jd) && json_integer_value(jd) != 0 ? json_integer_value(jd) : 1;
	size_t held = 0;
	struct al_error err = {0};
	cleanup_json json_t *st = NULL;
	cleanup_json json_t *out = json_array();
	const char *type = NULL;
	if (jd && !json_is_integer(jd)) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "depth: must be an integer");
	} else if (depth < 1 || depth > E2B_LIST_DEPTH_MAX) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "depth: from 1 (the directory's entries) to %d",
		                    E2B_LIST_DEPTH_MAX);
	} else if (!(st = e2b_fs_stat(c.sb, path, &err))) {
		api_response_error(resp, &err);
	} else if (!(type = json_string_value(json_object_get(st, "type"))) ||
	           (strcmp(type, "dir") && strcmp(type, "symlink"))) {
		/* A symlink is followed (the agent's list opens it), as envd does. */
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "path %s is not a directory", path);
	} else if (list_dir(&c, path, (unsigned)depth, out, &held, &err) < 0) {
		api_response_error(resp, &err);
	} else {
		resp->body = json_pack("{s:O}", "entries", out);
	}
	rpc_release(&c);
}

/* Connect's already_exists, which no Airlock error code maps to: written
 * here as the unary error body (e2b_error_render leaves it alone). */
static void answer_already_exists(struct api_response *resp, const char *path)
{
	char msg[EXEC_CWD_MAX + 64];
	snprintf(msg, sizeof(msg), "%s already exists", path);
	resp->status = connect_code_http_status("already_exists");
	resp->body = json_pack("{s:s, s:s}", "code", "already_exists", "message", msg);
}

API_HANDLER(api_e2b_fs_make_dir)
{
	struct rpc c;
	char path[E2B_PATH_MAX + 1];
	if (!rpc_begin_path(req, resp, &c, path)) {
		rpc_release(&c);
		return;
	}
	struct al_error err = {0};
	cleanup_json json_t *st = e2b_fs_stat(c.sb, path, &err);
	const char *type = json_string_value(json_object_get(st, "type"));
	if (st && type && (!strcmp(type, "dir") || !strcmp(type, "symlink"))) {
		answer_already_exists(resp, path);
	} else if (st) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "%s already exists and is not a directory", path);
	} else if (err.code != AL_ERR_NOT_FOUND) {
		api_response_error(resp, &err);
	} else if (e2b_fs_make_dirs(c.sb, &c.user, path, &err) < 0) {
		al_error_prefix(&err, "creating %s", path);
		api_response_error(resp, &err);
	} else {
		rpc_answer_entry(&c, resp, path);
	}
	rpc_release(&c);
}

API_HANDLER(api_e2b_fs_move)
{
	struct rpc c;
	char from[E2B_PATH_MAX + 1], to[E2B_PATH_MAX + 1];
	if (!rpc_begin(req, resp, &c) || !rpc_path(&c, resp, "source", from) ||
	    !rpc_path(&c, resp, "destination", to)) {
		rpc_release(&c);
		return;
	}
	struct al_error err = {0};
	cleanup_json json_t *msg = json_pack("{s:s, s:s, s:s}", "op", "rename", "path", from, "to", to);
	cleanup_json json_t *ok = NULL;
	cleanup_json json_t *st = e2b_fs_stat(c.sb, from, &err);
	if (!st || e2b_fs_make_parents(c.sb, &c.user, to, &err) < 0 ||
	    api_file_op(c.sb, msg, "rename", &ok, NULL, &err) < 0) {
		api_response_error(resp, &err);
	} else {
		rpc_answer_entry(&c, resp, to);
	}
	rpc_release(&c);
}

API_HANDLER(api_e2b_fs_remove)
{
	struct rpc c;
	char path[E2B_PATH_MAX + 1];
	if (!rpc_begin_path(req, resp, &c, path)) {
		rpc_release(&c);
		return;
	}
	struct al_error err = {0};
	cleanup_json json_t *msg = json_pack("{s:s, s:s, s:b}", "op", "remove", "path", path, "recursive", 1);
	cleanup_json json_t *ok = NULL;
	/* As envd's RemoveAll: a path that is not there is removed already. */
	if (api_file_op(c.sb, msg, "remove", &ok, NULL, &err) < 0 && err.code != AL_ERR_NOT_FOUND)
		api_response_error(resp, &err);
	else
		resp->body = json_object();
	rpc_release(&c);
}
