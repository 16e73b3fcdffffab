/* SPDX-License-Identifier: Apache-2.0 */
/* /v1/sandboxes/{id}/files and /archive: streamed file transfers, filesystem
 * operations and tar streams, all resolved inside the guest.
 *
 * SECURITY: paths come from the client and name guest paths only; they are
 * checked for shape (absolute, bounded, no NUL) and passed to the agent,
 * which resolves them in the guest. No guest-supplied name ever becomes a
 * host path. */
#include "api-handlers.h"
#include "api-request.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "util.h"

#define FILE_OP_TIMEOUT_MS 60000
#define ARCHIVE_STDERR_MAX (64u * 1024u)

static bool guest_path_valid(const char *p)
{
	return p && p[0] == '/' && strlen(p) <= EXEC_CWD_MAX;
}

static const char *path_arg(const struct api_request *req, struct api_response *resp)
{
	const char *p = api_query(req, "path");
	if (!guest_path_valid(p)) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "path: give ?path= an absolute guest path of at most %d bytes", EXEC_CWD_MAX);
		return NULL;
	}
	return p;
}

/* SECURITY: what a list answer may cost the daemon: its entries are held
 * whole until the response is sent. Past a limit the request fails (the
 * rest is read and dropped for at most FILE_LIST_DRAIN_MS, so that the
 * agent's side of the stream ends too) and the guest has used none of the
 * daemon's memory beyond it. */
#define FILE_LIST_ENTRIES_MAX 10000
#define FILE_LIST_BYTES_MAX (8u << 20)
#define FILE_LIST_DRAIN_MS 5000

/* The stat fields of a list entry (proto.h, FILE_OP), type-checked; the
 * rest of a guest's object is dropped. NULL when it is not an entry. */
static json_t *list_entry_copy(json_t *e)
{
	static const char *const strings[] = {"name", "type", "target"};
	static const char *const ints[] = {"size", "mode", "uid", "gid", "mtime_ms"};
	if (!json_is_string(json_object_get(e, "name")))
		return NULL;
	json_t *out = json_object();
	for (size_t i = 0; i < ARRAY_SIZE(strings); i++) {
		json_t *v = json_object_get(e, strings[i]);
		if (json_is_string(v))
			json_object_set_new(out, strings[i], json_stringn(json_string_value(v), json_string_length(v)));
	}
	for (size_t i = 0; i < ARRAY_SIZE(ints); i++) {
		json_t *v = json_object_get(e, ints[i]);
		if (json_is_integer(v))
			json_object_set_new(out, ints[i], json_integer(json_integer_value(v)));
	}
	return out;
}

/* One FILE_DATA chunk of a list into entries: 0, or an error set in err
 * (malformed, or past the limits). */
static int list_chunk_add(const uint8_t *data, size_t len, json_t *entries, size_t *bytes, struct al_error *err)
{
	*bytes += len;
	if (*bytes > FILE_LIST_BYTES_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG,
		                    "the directory's listing is larger than %u MiB, the most a list may answer; list "
		                    "a subdirectory, or run ls through exec",
		                    FILE_LIST_BYTES_MAX >> 20);
	/* SECURITY: each chunk is one bounded JSON object from the guest. */
	cleanup_json json_t *j = json_loadb((const char *)data, len, 0, NULL);
	json_t *arr = json_object_get(j, "entries");
	if (!json_is_array(arr))
		return al_error_set(
		    err, AL_ERR_GUEST, EBADMSG,
		    "the guest agent answered the list with a malformed chunk (not {\"entries\":[...]})");
	size_t i;
	json_t *e;
	json_array_foreach (arr, i, e) {
		if (json_array_size(entries) >= FILE_LIST_ENTRIES_MAX)
			return al_error_set(
			    err, AL_ERR_TOO_LARGE, EFBIG,
			    "the directory has more than %d entries, the most a list may answer; list a "
			    "subdirectory, or run ls through exec",
			    FILE_LIST_ENTRIES_MAX);
		json_t *copy = list_entry_copy(e);
		if (!copy)
			return al_error_set(err, AL_ERR_GUEST, EBADMSG,
			                    "the guest agent answered the list with an entry that has no name");
		json_array_append_new(entries, copy);
	}
	return 0;
}

/* A list: gathers the FILE_DATA chunks of {"entries": [...]} it answers with
 * into entries, within the limits above; *ret_result is the OK payload. */
static int run_list(struct guest_channel *ch, json_t *msg, uint64_t deadline, json_t **ret_result, json_t *entries,
                    struct al_error *err)
{
	struct guest_stream *s = NULL;
	int r = guest_stream_start(ch, AIRLOCK_FRAME_FILE_OP, msg, GUEST_STREAM_LOG, 0, &s, err);
	if (r < 0)
		return r;
	struct guest_cursor cur = {0};
	size_t bytes = 0;
	int failed = 0;
	if (guest_cursor_open(ch, s, true, &cur) == 0) {
		for (;;) {
			uint8_t type, *data = NULL;
			size_t len;
			uint64_t dropped;
			if (guest_cursor_read(ch, &cur, deadline, &type, &data, &len, &dropped) != 1)
				break;
			if (failed == 0 && (failed = list_chunk_add(data, len, entries, &bytes, err)) < 0) {
				/* Keep nothing more; drain briefly so a real agent's side ends. */
				json_array_clear(entries);
				deadline = MIN(deadline, now_ms_monotonic() + FILE_LIST_DRAIN_MS);
			}
			free(data);
		}
		guest_cursor_close(ch, &cur);
	}
	if (failed < 0) {
		guest_stream_unref(ch, s); /* given up on: what still comes is dropped */
		return failed;
	}
	return guest_stream_finish(ch, s, deadline, "list", ret_result, err);
}

/* Runs one FILE_OP; *ret_result is the OK payload. A list also gathers its
 * entries (run_list). */
int api_file_op(struct sandbox *sb, json_t *msg, const char *what, json_t **ret_result, json_t *entries,
                struct al_error *err)
{
	struct guest_channel *ch = sandbox_channel(sb);
	uint64_t deadline = now_ms_monotonic() + FILE_OP_TIMEOUT_MS;
	if (!entries)
		return guest_channel_call(ch, AIRLOCK_FRAME_FILE_OP, msg, deadline, what, ret_result, err);
	return run_list(ch, msg, deadline, ret_result, entries, err);
}

/* A FILE_OP for a handler: answers errors itself; NULL on failure. */
static json_t *file_op(const struct api_request *req, struct api_response *resp, struct sandbox *sb, json_t *msg,
                       const char *what, json_t *entries)
{
	struct al_error err = {0};
	json_t *result = NULL;
	if (api_file_op(sb, msg, what, &result, entries, &err) < 0) {
		api_response_error(resp, &err);
		return NULL;
	}
	(void)req;
	return result;
}

static json_t *stat_path(const struct api_request *req, struct api_response *resp, struct sandbox *sb, const char *path)
{
	cleanup_json json_t *msg = json_pack("{s:s, s:s}", "op", "stat", "path", path);
	return file_op(req, resp, sb, msg, "stat", NULL);
}

/* ---- stat, list, mkdir, remove, rename ---------------------------------------------------------- */

API_HANDLER(api_file_stat)
{
	const char *path = path_arg(req, resp);
	struct sandbox *sb = path ? api_sandbox_acquire(req, resp) : NULL;
	if (!sb)
		return;
	json_t *st = stat_path(req, resp, sb, path);
	if (st)
		resp->body = st;
	sandbox_release(sb);
}

API_HANDLER(api_file_list)
{
	const char *path = path_arg(req, resp);
	struct sandbox *sb = path ? api_sandbox_acquire(req, resp) : NULL;
	if (!sb)
		return;
	cleanup_json json_t *msg = json_pack("{s:s, s:s}", "op", "list", "path", path);
	json_t *entries = json_array();
	json_t *ok = file_op(req, resp, sb, msg, "list", entries);
	if (ok) {
		json_decref(ok);
		resp->body = json_pack("{s:o}", "entries", entries);
	} else {
		json_decref(entries);
	}
	sandbox_release(sb);
}

/* Checks a JSON body against the fields it may have; path fields must be guest paths. */
static json_t *op_body(const struct api_request *req, struct api_response *resp, const char *const *fields,
                       const char *const *paths)
{
	json_t *body = api_parse_json_object(req, resp);
	if (!body)
		return NULL;
	const char *key;
	json_t *v;
	json_object_foreach (body, key, v) {
		bool known = false;
		for (size_t i = 0; fields[i]; i++)
			known |= !strcmp(key, fields[i]);
		if (!known) {
			api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "unknown field \"%.64s\"", key);
			json_decref(body);
			return NULL;
		}
	}
	for (size_t i = 0; paths[i]; i++) {
		json_t *p = json_object_get(body, paths[i]);
		if (!json_is_string(p) || !guest_path_valid(json_string_value(p)) ||
		    strlen(json_string_value(p)) != json_string_length(p)) {
			api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
			                    "%s: required, an absolute guest path of at most %d bytes", paths[i],
			                    EXEC_CWD_MAX);
			json_decref(body);
			return NULL;
		}
	}
	return body;
}

static bool optional_bool(json_t *body, const char *field, struct api_response *resp, bool *ret)
{
	json_t *v = json_object_get(body, field);
	*ret = false;
	if (!v || json_is_null(v))
		return true;
	if (!json_is_boolean(v)) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "%s: must be true or false", field);
		return false;
	}
	*ret = json_is_true(v);
	return true;
}

static void simple_op(const struct api_request *req, struct api_response *resp, json_t *msg, const char *what,
                      int ok_status)
{
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	if (!sb)
		return;
	json_t *ok = file_op(req, resp, sb, msg, what, NULL);
	if (ok) {
		json_decref(ok);
		resp->status = ok_status;
	}
	sandbox_release(sb);
}

API_HANDLER(api_file_mkdir)
{
	static const char *const fields[] = {"path", "parents", "mode", NULL}, *const paths[] = {"path", NULL};
	cleanup_json json_t *body = op_body(req, resp, fields, paths);
	bool parents;
	if (!body || !optional_bool(body, "parents", resp, &parents))
		return;
	json_t *mode = json_object_get(body, "mode");
	if (mode && (!json_is_integer(mode) || json_integer_value(mode) < 0 || json_integer_value(mode) > 07777)) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "mode: an integer from 0 to 4095 (0o7777)");
		return;
	}
	cleanup_json json_t *msg =
	    json_pack("{s:s, s:O, s:b, s:I}", "op", "mkdir", "path", json_object_get(body, "path"), "parents", parents,
	              "mode", mode ? json_integer_value(mode) : (json_int_t)0755);
	simple_op(req, resp, msg, "mkdir", 201);
}

API_HANDLER(api_file_remove)
{
	static const char *const fields[] = {"path", "recursive", NULL}, *const paths[] = {"path", NULL};
	cleanup_json json_t *body = op_body(req, resp, fields, paths);
	bool recursive;
	if (!body || !optional_bool(body, "recursive", resp, &recursive))
		return;
	cleanup_json json_t *msg =
	    json_pack("{s:s, s:O, s:b}", "op", "remove", "path", json_object_get(body, "path"), "recursive", recursive);
	simple_op(req, resp, msg, "remove", 204);
}

API_HANDLER(api_file_rename)
{
	static const char *const fields[] = {"path", "to", NULL}, *const paths[] = {"path", "to", NULL};
	cleanup_json json_t *body = op_body(req, resp, fields, paths);
	if (!body)
		return;
	cleanup_json json_t *msg = json_pack("{s:s, s:O, s:O}", "op", "rename", "path", json_object_get(body, "path"),
	                                     "to", json_object_get(body, "to"));
	simple_op(req, resp, msg, "rename", 204);
}

/* ---- streamed downloads: a file, or a tar archive ------------------------------------------------ */

struct download {
	struct sandbox *sb;
	struct guest_stream *s;
	struct guest_cursor cur;
	int conn_fd;
	uint8_t data_type; /* FILE_DATA for a file, STDOUT for tar */
	uint8_t *pending;
	size_t pending_len, pending_off;
};

static ssize_t download_read(void *ctx, uint8_t *buf, size_t max)
{
	struct download *d = ctx;
	struct guest_channel *ch = sandbox_channel(d->sb);
	for (;;) {
		if (d->pending_off < d->pending_len) {
			size_t n = MIN(max, d->pending_len - d->pending_off);
			memcpy(buf, d->pending + d->pending_off, n);
			d->pending_off += n;
			return (ssize_t)n;
		}
		free(d->pending);
		d->pending = NULL;
		d->pending_len = d->pending_off = 0;
		uint8_t type;
		uint64_t dropped;
		int r = guest_cursor_read(ch, &d->cur, now_ms_monotonic() + 500, &type, &d->pending, &d->pending_len,
		                          &dropped);
		if (r == -ETIMEDOUT) {
			if (api_client_gone(d->conn_fd))
				return -1;
			continue;
		}
		if (r == 1) {
			if (type != d->data_type) {
				free(d->pending);
				d->pending = NULL;
				d->pending_len = 0;
			}
			continue;
		}
		/* The end: a clean end finishes the body, a failure cuts it (the client sees a broken transfer). */
		uint8_t rtype = 0;
		cleanup_json json_t *result = NULL;
		guest_stream_done(ch, d->s, &rtype, &result);
		if (rtype == AIRLOCK_FRAME_OK)
			return 0;
		struct exec_exit ex;
		if (rtype == AIRLOCK_FRAME_EXIT && guest_result_to_exit(rtype, result, &ex, NULL) == 0 && ex.exited &&
		    ex.exit_code == 0)
			return 0;
		return -1;
	}
}

static void download_free(void *ctx)
{
	struct download *d = ctx;
	struct guest_channel *ch = sandbox_channel(d->sb);
	if (d->data_type == AIRLOCK_FRAME_STDOUT && !guest_stream_done(ch, d->s, NULL, NULL)) {
		cleanup_json json_t *sig = json_pack("{s:i}", "signal", 9);
		guest_stream_send_control(ch, d->s, AIRLOCK_FRAME_SIGNAL, sig);
	}
	guest_cursor_close(ch, &d->cur);
	guest_stream_unref(ch, d->s);
	free(d->pending);
	sandbox_release(d->sb);
	free(d);
}

static void start_download(const struct api_request *req, struct api_response *resp, struct sandbox *sb,
                           struct guest_stream *s, uint8_t data_type, const char *content_type)
{
	struct download *d = xcalloc(1, sizeof(*d));
	d->sb = sb;
	d->s = s;
	d->conn_fd = req->conn_fd;
	d->data_type = data_type;
	if (guest_cursor_open(sandbox_channel(sb), s, true, &d->cur) < 0) {
		api_response_errorf(resp, AL_ERR_CONFLICT, "too many readers; try again");
		d->cur.s = NULL;
		download_free(d);
		return;
	}
	resp->status = 200;
	resp->reader = download_read;
	resp->reader_free = download_free;
	resp->reader_ctx = d;
	resp->content_type = content_type;
	resp->content_length = -1;
}

void api_file_send(const struct api_request *req, struct api_response *resp, struct sandbox *sb, const char *path)
{
	cleanup_json json_t *st = stat_path(req, resp, sb, path);
	const char *type = json_string_value(json_object_get(st, "type"));
	if (st && (!type || strcmp(type, "file"))) {
		api_response_errorf(
		    resp, AL_ERR_INVALID_ARGUMENT,
		    "%s is a %s, not a regular file: use GET /v1/sandboxes/{id}/archive for directories", path,
		    type ? type : "special file");
	} else if (st) {
		struct al_error err = {0};
		struct guest_stream *s = NULL;
		cleanup_json json_t *msg = json_pack("{s:s}", "path", path);
		if (guest_stream_start(sandbox_channel(sb), AIRLOCK_FRAME_FILE_READ, msg, GUEST_STREAM_LOG, 0, &s,
		                       &err) < 0) {
			api_response_error(resp, &err);
		} else {
			start_download(req, resp, sb, s, AIRLOCK_FRAME_FILE_DATA, "application/octet-stream");
			return;
		}
	}
	sandbox_release(sb);
}

API_HANDLER(api_file_get)
{
	const char *path = path_arg(req, resp);
	struct sandbox *sb = path ? api_sandbox_acquire(req, resp) : NULL;
	if (sb)
		api_file_send(req, resp, sb, path);
}

/* dirname and basename of a guest path, for tar -C DIR NAME. */
static void split_path(const char *path, char *dir, size_t dir_size, const char **ret_base)
{
	const char *slash = strrchr(path, '/');
	size_t dlen = (size_t)(slash - path);
	snprintf(dir, dir_size, "%.*s", (int)(dlen ? dlen : 1), path);
	*ret_base = slash[1] ? slash + 1 : ".";
}

API_HANDLER(api_archive_get)
{
	const char *path = path_arg(req, resp);
	struct sandbox *sb = path ? api_sandbox_acquire(req, resp) : NULL;
	if (!sb)
		return;
	char dir[EXEC_CWD_MAX + 1];
	const char *base;
	split_path(path, dir, sizeof(dir), &base);
	/* SECURITY: the archive of /dir/.. names its entries "../x": a client
	 * that extracts it (or renames its first component) writes beside its
	 * destination. Refused here, before the guest is asked anything (its
	 * answers are not to be relied on), as airlock cp refuses it. */
	if (!strcmp(base, "..")) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "path: %s ends in \"..\": name the directory itself",
		                    path);
		sandbox_release(sb);
		return;
	}
	cleanup_json json_t *st = stat_path(req, resp, sb, path);
	if (!st) {
		sandbox_release(sb);
		return;
	}
	if (!strcmp(path, "/")) {
		strlcpy_al(dir, "/", sizeof(dir));
		base = ".";
	}
	char *argv[] = {"tar", "-C", dir, "-cf", "-", "--", (char *)base, NULL};
	struct exec_request er = {.argc = 7, .argv = argv, .cwd = "/", .max_output_bytes = 0};
	char pid[32];
	struct guest_stream *s = NULL;
	if (api_start_process(req, resp, sb, &er, pid, &s) < 0) {
		sandbox_release(sb);
		return;
	}
	start_download(req, resp, sb, s, AIRLOCK_FRAME_STDOUT, "application/x-tar");
}

/* ---- streamed uploads: a file, or a tar archive --------------------------------------------------- */

struct upload {
	struct sandbox *sb;
	struct guest_stream *s;
	uint8_t data_type; /* FILE_DATA or STDIN */
	char path[EXEC_CWD_MAX + 1];
	uint64_t size;
	bool finished;
};

static int upload_data(void *ctx, const uint8_t *buf, size_t len, struct al_error *err)
{
	struct upload *u = ctx;
	int r = guest_stream_send_data(sandbox_channel(u->sb), u->s, u->data_type, buf, len,
	                               now_ms_monotonic() + FILE_OP_TIMEOUT_MS);
	if (r == -EPIPE) {
		/* The guest refused early: its reason is the answer. */
		uint8_t type = 0;
		cleanup_json json_t *result = NULL;
		guest_stream_done(sandbox_channel(u->sb), u->s, &type, &result);
		return guest_result_to_error(result, "the upload", err);
	}
	if (r < 0)
		return al_error_set(err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_GUEST, -r,
		                    "the guest stopped taking the upload: %s", strerror(-r));
	u->size += len;
	return 0;
}

static void upload_end(void *ctx, bool failed, const struct al_error *data_err, struct api_response *resp)
{
	struct upload *u = ctx;
	struct guest_channel *ch = sandbox_channel(u->sb);
	if (failed) {
		api_response_error(resp, data_err);
		return;
	}
	struct al_error err = {0};
	guest_stream_send_data(ch, u->s, u->data_type, NULL, 0, now_ms_monotonic() + FILE_OP_TIMEOUT_MS);
	if (guest_stream_wait_done(ch, u->s, now_ms_monotonic() + FILE_OP_TIMEOUT_MS) < 0) {
		api_response_errorf(resp, AL_ERR_GUEST, "the guest did not confirm the upload");
		return;
	}
	u->finished = true;
	uint8_t type = 0;
	cleanup_json json_t *result = NULL;
	guest_stream_done(ch, u->s, &type, &result);
	if (u->data_type == AIRLOCK_FRAME_FILE_DATA) {
		if (type != AIRLOCK_FRAME_OK) {
			guest_result_to_error(result, "the upload", &err);
			api_response_error(resp, &err);
			return;
		}
		resp->status = 201;
		resp->body = json_pack("{s:s, s:I}", "path", u->path, "size", (json_int_t)u->size);
		return;
	}
	struct exec_exit ex;
	if (guest_result_to_exit(type, result, &ex, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	if (!ex.exited || ex.exit_code != 0) {
		struct exec_output out[2];
		guest_stream_take_output(ch, u->s, out);
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "tar in the guest could not extract the archive: %.*s",
		                    (int)MIN(out[1].len, (size_t)512), out[1].data ? (const char *)out[1].data : "");
		free(out[0].data);
		free(out[1].data);
		return;
	}
	resp->status = 204;
}

static void upload_release(void *ctx)
{
	struct upload *u = ctx;
	struct guest_channel *ch = sandbox_channel(u->sb);
	if (!u->finished && !guest_stream_done(ch, u->s, NULL, NULL)) {
		/* The client went away: stop the writer in the guest (tar is killed;
		 * a file write is cancelled and its temp file removed). */
		cleanup_json json_t *sig = json_pack("{s:i}", "signal", 9);
		guest_stream_send_control(ch, u->s, AIRLOCK_FRAME_SIGNAL, sig);
	}
	guest_stream_unref(ch, u->s);
	sandbox_release(u->sb);
	free(u);
}

API_UPLOAD(api_file_put)
{
	struct api_response tmp = {0};
	const char *path = path_arg(req, &tmp);
	const char *mode_arg = api_query(req, "mode");
	long mode = 0644;
	if (path && mode_arg) {
		char *end = NULL;
		errno = 0;
		mode = strtol(mode_arg, &end, 8);
		if (errno || !end || *end || !*mode_arg || mode < 0 || mode > 07777) {
			api_response_errorf(&tmp, AL_ERR_INVALID_ARGUMENT, "mode: octal, e.g. 0644");
			path = NULL;
		}
	}
	struct sandbox *sb = path ? api_sandbox_acquire(req, &tmp) : NULL;
	if (!sb)
		return api_response_to_error(&tmp, err);
	struct guest_stream *s = NULL;
	cleanup_json json_t *msg = json_pack("{s:s, s:I}", "path", path, "mode", (json_int_t)mode);
	if (guest_stream_start(sandbox_channel(sb), AIRLOCK_FRAME_FILE_WRITE, msg, GUEST_STREAM_COLLECT, 0, &s, err) <
	    0) {
		sandbox_release(sb);
		return -EIO;
	}
	struct upload *u = xcalloc(1, sizeof(*u));
	u->sb = sb;
	u->s = s;
	u->data_type = AIRLOCK_FRAME_FILE_DATA;
	strlcpy_al(u->path, path, sizeof(u->path));
	*ret = (struct api_upload){.data = upload_data, .end = upload_end, .release = upload_release, .ctx = u};
	return 0;
}

API_UPLOAD(api_archive_put)
{
	struct api_response tmp = {0};
	const char *path = path_arg(req, &tmp);
	struct sandbox *sb = path ? api_sandbox_acquire(req, &tmp) : NULL;
	if (!sb)
		return api_response_to_error(&tmp, err);
	cleanup_json json_t *st = stat_path(req, &tmp, sb, path);
	const char *type = json_string_value(json_object_get(st, "type"));
	if (!st || !type || strcmp(type, "dir")) {
		if (st)
			api_response_errorf(&tmp, AL_ERR_CONFLICT, "%s is not a directory: extract archives into one",
			                    path);
		sandbox_release(sb);
		return api_response_to_error(&tmp, err);
	}
	char *argv[] = {"tar", "-C", (char *)path, "-xf", "-", NULL};
	struct exec_request er = {
	    .argc = 5, .argv = argv, .cwd = "/", .max_output_bytes = ARCHIVE_STDERR_MAX, .stdin_stream = true};
	size_t n_env = 0;
	struct kv_list none = {0};
	char **env = sandbox_env_merge(sb, &none, &n_env);
	cleanup_json json_t *msg = guest_exec_message(&er, env, n_env);
	sandbox_env_free(env, n_env);
	struct guest_stream *s = NULL;
	if (guest_stream_start(sandbox_channel(sb), AIRLOCK_FRAME_EXEC, msg, GUEST_STREAM_COLLECT, ARCHIVE_STDERR_MAX,
	                       &s, err) < 0) {
		sandbox_release(sb);
		return -EIO;
	}
	struct upload *u = xcalloc(1, sizeof(*u));
	u->sb = sb;
	u->s = s;
	u->data_type = AIRLOCK_FRAME_STDIN;
	strlcpy_al(u->path, path, sizeof(u->path));
	*ret = (struct api_upload){.data = upload_data, .end = upload_end, .release = upload_release, .ctx = u};
	return 0;
}
