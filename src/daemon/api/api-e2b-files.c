/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's file transfer, /e2b/envd/files (docs/e2b.md "Files (envd)"):
 * GET ?path=&username= answers the file's bytes; POST writes files from an
 * application/octet-stream body (one file, ?path=) or a multipart/form-data
 * body (one part named "file" per file, at ?path= or else the part's
 * filename), and answers [{"name","type":"file","path"}] for them.
 *
 * Both stream: a download is Airlock's file download (api_file_send), an
 * upload goes to the agent's FILE_WRITE (a temp file renamed into place,
 * removed when the upload fails or is cut). As envd, missing parents are
 * created and they and the file are then given to the request's user. The
 * whole body is bounded by --max-file-bytes.
 *
 * SECURITY: paths and user names come from the client (api-e2b-fs.h checks
 * them); multipart bodies are parsed by libmicrohttpd's post processor,
 * whose buffer (E2B_MULTIPART_BUFFER) bounds a part's headers. */
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api-e2b-fs.h"
#include "api-handlers.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "util.h"

#define E2B_UPLOAD_TIMEOUT_MS 60000
#define E2B_MULTIPART_BUFFER (16u * 1024u)
#define E2B_FILE_MODE 0644

struct e2b_upload {
	struct sandbox *sb;
	struct e2b_user user;
	char query_path[E2B_PATH_MAX + 1]; /* resolved ?path=, "" when absent */
	struct MHD_PostProcessor *pp;      /* multipart; NULL for octet-stream */
	/* The file being written. */
	struct guest_stream *s;
	char path[E2B_PATH_MAX + 1];
	char part_name[E2B_PATH_MAX + 1]; /* the part's filename as sent */
	uint64_t part_bytes;
	json_t *written; /* [{"name","type","path"}] */
	struct al_error err;
	bool failed;
};

static int upload_fail(struct e2b_upload *u, const struct al_error *err)
{
	if (!u->failed)
		u->err = *err;
	u->failed = true;
	return -EIO;
}

/* Starts writing path (resolved): missing parents first, given to the user. */
static int file_begin(struct e2b_upload *u, const char *path)
{
	struct al_error err = {0};
	strlcpy_al(u->path, path, sizeof(u->path));
	u->part_bytes = 0;
	if (e2b_fs_make_parents(u->sb, &u->user, path, &err) < 0)
		return upload_fail(u, &err);
	/* The agent gives the temp file to the user before it is renamed into place. */
	cleanup_json json_t *msg = json_pack("{s:s, s:i, s:I, s:I}", "path", path, "mode", E2B_FILE_MODE, "uid",
	                                     (json_int_t)u->user.uid, "gid", (json_int_t)u->user.gid);
	if (guest_stream_start(sandbox_channel(u->sb), AIRLOCK_FRAME_FILE_WRITE, msg, GUEST_STREAM_COLLECT, 0, &u->s,
	                       &err) < 0)
		return upload_fail(u, &err);
	return 0;
}

static int file_data(struct e2b_upload *u, const void *buf, size_t len)
{
	struct guest_channel *ch = sandbox_channel(u->sb);
	struct al_error err = {0};
	int r = guest_stream_send_data(ch, u->s, AIRLOCK_FRAME_FILE_DATA, buf, len,
	                               now_ms_monotonic() + E2B_UPLOAD_TIMEOUT_MS);
	if (r == -EPIPE) {
		uint8_t type = 0;
		cleanup_json json_t *result = NULL;
		guest_stream_done(ch, u->s, &type, &result);
		guest_result_to_error(result, "the upload", &err);
		return upload_fail(u, &err);
	}
	if (r < 0) {
		al_error_set(&err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_GUEST, -r,
		             "the sandbox stopped taking the upload of %s: %s", u->path, strerror(-r));
		return upload_fail(u, &err);
	}
	u->part_bytes += len;
	return 0;
}

/* Ends the file being written: the agent renames it (already the user's)
 * into place; it is listed in the answer. */
static int file_end(struct e2b_upload *u)
{
	struct guest_channel *ch = sandbox_channel(u->sb);
	struct al_error err = {0};
	guest_stream_send_data(ch, u->s, AIRLOCK_FRAME_FILE_DATA, NULL, 0, now_ms_monotonic() + E2B_UPLOAD_TIMEOUT_MS);
	if (guest_stream_wait_done(ch, u->s, now_ms_monotonic() + E2B_UPLOAD_TIMEOUT_MS) < 0) {
		al_error_set(&err, AL_ERR_GUEST, EIO, "the sandbox did not confirm the upload of %s", u->path);
		return upload_fail(u, &err);
	}
	uint8_t type = 0;
	cleanup_json json_t *result = NULL;
	guest_stream_done(ch, u->s, &type, &result);
	guest_stream_unref(ch, u->s);
	u->s = NULL;
	if (type != AIRLOCK_FRAME_OK) {
		guest_result_to_error(result, "the upload", &err);
		return upload_fail(u, &err);
	}
	const char *name = strrchr(u->path, '/');
	json_array_append_new(u->written, json_pack("{s:s, s:s, s:s}", "name", name ? name + 1 : u->path, "type",
	                                            "file", "path", u->path));
	return 0;
}

static bool already_written(const struct e2b_upload *u, const char *path)
{
	size_t i;
	json_t *e;
	json_array_foreach (u->written, i, e)
		if (!strcmp(json_string_value(json_object_get(e, "path")), path))
			return true;
	return false;
}

/* The path of a new part: ?path= when given (as envd), else the part's
 * filename; never one this request wrote already. */
static int part_path(struct e2b_upload *u, const char *filename, char path[E2B_PATH_MAX + 1])
{
	struct al_error err = {0};
	if (u->query_path[0]) {
		strlcpy_al(path, u->query_path, E2B_PATH_MAX + 1);
	} else if (!filename[0]) {
		al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		             "a multipart part has no filename and the request no ?path=: name the file");
		return upload_fail(u, &err);
	} else if (e2b_fs_path(&u->user, filename, path, &err) < 0) {
		al_error_prefix(&err, "the filename of a multipart part");
		return upload_fail(u, &err);
	}
	if (already_written(u, path)) {
		al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EEXIST,
		             "%s: one upload writes a path once (the parts before this one were written)", path);
		return upload_fail(u, &err);
	}
	return 0;
}

/* SECURITY: libmicrohttpd parsed the part (its headers within the
 * processor's buffer); filename is the client's and goes through
 * e2b_fs_path like every path. As envd, only the parts named "file" are
 * files; others are ignored. A part begins at offset 0 (an empty part may
 * come once with size 0). */
static enum MHD_Result multipart_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                                      const char *content_type, const char *transfer_encoding, const char *data,
                                      uint64_t off, size_t size)
{
	(void)kind;
	(void)content_type;
	(void)transfer_encoding;
	struct e2b_upload *u = cls;
	if (u->failed)
		return MHD_NO;
	if (!key || strcmp(key, "file"))
		return MHD_YES;
	const char *name = filename ? filename : "";
	if (off == 0 && (!u->s || u->part_bytes > 0 || strcmp(name, u->part_name))) {
		char path[E2B_PATH_MAX + 1];
		if ((u->s && file_end(u) < 0) || part_path(u, name, path) < 0)
			return MHD_NO;
		strlcpy_al(u->part_name, name, sizeof(u->part_name));
		if (file_begin(u, path) < 0)
			return MHD_NO;
	}
	if (size > 0 && file_data(u, data, size) < 0)
		return MHD_NO;
	return MHD_YES;
}

static int upload_data(void *ctx, const uint8_t *buf, size_t len, struct al_error *err)
{
	struct e2b_upload *u = ctx;
	int r = 0;
	if (u->failed)
		r = -EIO;
	else if (!u->pp)
		r = file_data(u, buf, len);
	else if (MHD_post_process(u->pp, (const char *)buf, len) != MHD_YES && !u->failed)
		r = upload_fail(u, &(struct al_error){.code = AL_ERR_INVALID_ARGUMENT,
		                                      .message = "the multipart/form-data body is malformed"});
	if (r < 0)
		*err = u->err;
	return r;
}

static void upload_end(void *ctx, bool failed, const struct al_error *data_err, struct api_response *resp)
{
	struct e2b_upload *u = ctx;
	if (failed) {
		api_response_error(resp, data_err);
		return;
	}
	if (u->pp && MHD_destroy_post_processor(u->pp) != MHD_YES && !u->failed)
		upload_fail(
		    u, &(struct al_error){.code = AL_ERR_INVALID_ARGUMENT,
		                          .message = "the multipart/form-data body ended in the middle of a part"});
	u->pp = NULL;
	if (!u->failed && u->s)
		file_end(u);
	if (!u->failed && json_array_size(u->written) == 0)
		upload_fail(u, &(struct al_error){.code = AL_ERR_INVALID_ARGUMENT,
		                                  .message = "the multipart/form-data body has no file part"});
	if (u->failed) {
		api_response_error(resp, &u->err);
		return;
	}
	resp->status = 200;
	resp->body = json_incref(u->written);
}

static void upload_release(void *ctx)
{
	struct e2b_upload *u = ctx;
	struct guest_channel *ch = sandbox_channel(u->sb);
	if (u->pp)
		MHD_destroy_post_processor(u->pp);
	if (u->s) {
		if (!guest_stream_done(ch, u->s, NULL, NULL)) {
			/* Cut or failed: the agent removes its temp file. */
			cleanup_json json_t *sig = json_pack("{s:i}", "signal", 9);
			guest_stream_send_control(ch, u->s, AIRLOCK_FRAME_SIGNAL, sig);
		}
		guest_stream_unref(ch, u->s);
	}
	json_decref(u->written);
	sandbox_release(u->sb);
	free(u);
}

/* The user (?username=) and the resolved ?path= ("" when absent) of a
 * /files request, for the sandbox sb. */
static int files_target(const struct api_request *req, struct sandbox *sb, struct e2b_user *ret_user,
                        char path[E2B_PATH_MAX + 1], struct al_error *err)
{
	struct api_response tmp = {0};
	if (e2b_user_resolve(req, sb, ret_user, &tmp) < 0)
		return api_response_to_error(&tmp, err);
	const char *p = api_query(req, "path");
	path[0] = '\0';
	int r = 0;
	if (p && p[0] && (r = e2b_fs_path(ret_user, p, path, err)) < 0)
		al_error_prefix(err, "?path=");
	return r;
}

static enum MHD_Result header_is_metadata(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	(void)kind;
	(void)value;
	if (!strncasecmp(key, "X-Metadata-", 11))
		*(bool *)cls = true;
	return MHD_YES;
}

/* What the request asks for, checked, and the first file begun (for an
 * octet-stream body). */
static int upload_setup(const struct api_request *req, struct e2b_upload *u, struct al_error *err)
{
	bool metadata = false;
	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, header_is_metadata, &metadata);
	if (metadata)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOTSUP,
		                    "file metadata (X-Metadata-* headers, the SDK's metadata option) is not kept by "
		                    "Airlock: write without it");
	const char *ct = api_header(req, "Content-Type");
	const char *ce = api_header(req, "Content-Encoding");
	bool multipart = ct && !strncasecmp(ct, "multipart/form-data", 19);
	if (ce && strcasecmp(ce, "identity"))
		return al_error_set(err, AL_ERR_UNSUPPORTED_MEDIA, ENOTSUP,
		                    "Content-Encoding %.32s is not supported: upload without gzip (leave out the "
		                    "SDK's gzip option)",
		                    ce);
	if (ct && !multipart && strncasecmp(ct, "application/octet-stream", 24))
		return al_error_set(err, AL_ERR_UNSUPPORTED_MEDIA, ENOTSUP,
		                    "Content-Type must be application/octet-stream (one file, ?path=) or "
		                    "multipart/form-data (one part per file)");
	int r = files_target(req, u->sb, &u->user, u->query_path, err);
	if (r < 0)
		return r;
	if (multipart) {
		u->pp = MHD_create_post_processor(req->conn, E2B_MULTIPART_BUFFER, multipart_part, u);
		if (!u->pp)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "the multipart/form-data Content-Type has no usable boundary");
		return 0;
	}
	if (!u->query_path[0])
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "?path=: required for an application/octet-stream upload (the file to write)");
	if (file_begin(u, u->query_path) < 0) {
		*err = u->err;
		return -EIO;
	}
	return 0;
}

API_UPLOAD(api_e2b_files_post)
{
	struct api_response tmp = {0};
	struct sandbox *sb = api_sandbox_acquire(req, &tmp);
	if (!sb)
		return api_response_to_error(&tmp, err);
	struct e2b_upload *u = xcalloc(1, sizeof(*u));
	u->sb = sb;
	u->written = json_array();
	*ret = (struct api_upload){.data = upload_data, .end = upload_end, .release = upload_release, .ctx = u};
	/* A refusal is answered once the body is in (the server reads and drops
	 * it, within the limit): a client still sending its body, as fetch does,
	 * would see its connection reset rather than the answer. */
	struct al_error refusal = {0};
	if (upload_setup(req, u, &refusal) < 0)
		upload_fail(u, &refusal);
	return 0;
}

API_HANDLER(api_e2b_files_get)
{
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	if (!sb)
		return;
	struct e2b_user user;
	char path[E2B_PATH_MAX + 1], real[E2B_PATH_MAX + 1];
	struct al_error err = {0};
	cleanup_json json_t *st = NULL;
	const char *type = NULL;
	/* As envd's os.Stat: a symlink is read through; a directory is 400. */
	if (files_target(req, sb, &user, path, &err) < 0 ||
	    (!path[0] && al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "?path=: required (the file to read)")) ||
	    !(st = e2b_fs_stat_follow(sb, path, real, &err)) ||
	    ((type = json_string_value(json_object_get(st, "type"))) && !strcmp(type, "dir") &&
	     al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EISDIR, "%s is a directory: read a file", path))) {
		api_response_error(resp, &err);
		sandbox_release(sb);
		return;
	}
	api_file_send(req, resp, sb, real);
}
