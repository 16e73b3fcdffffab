/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File streams.
 *   FILE_WRITE {"path":"/abs","mode":420[,"uid":N,"gid":N]} then FILE_DATA
 *   chunks and a zero-length FILE_DATA: the data goes to a temporary file in
 *   the same directory, which is fsync'd and renamed over the path at the end,
 *   so a failed or abandoned write never leaves a half file. Answer: OK
 *   {"size":N} or ERROR. After an ERROR the rest of the stream's FILE_DATA is
 *   dropped quietly up to its zero-length end. Every FILE_DATA byte is
 *   credited back (CREDIT) as it is written to the file, so the host keeps
 *   at most AIRLOCK_STDIN_WINDOW in flight (not enforced: nothing is
 *   buffered, each chunk is written at once).
 *   FILE_READ {"path":"/abs"}: FILE_DATA chunks then a zero-length FILE_DATA,
 *   or ERROR. Only regular files (no FIFOs or devices, which could block).
 *   Chunks are sent only within the stream's output credit
 *   (AIRLOCK_OUTPUT_WINDOW).
 * Parent directories are not created.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/* SECURITY: paths come from the host; they must be absolute, bounded and
 * NUL-free. The agent runs as root and the host is entitled to any path in the
 * guest, so there is no confinement beyond that. */
int agent_json_get_path(json_t *o, const char *key, const char **ret, struct al_error *err)
{
	const char *p = agent_json_get_cstring(json_object_get(o, key));
	if (!p || p[0] != '/' || strlen(p) >= PATH_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"%s\" must be an absolute path shorter than %d bytes, without NUL bytes", key,
		                    PATH_MAX);
	*ret = p;
	return 0;
}

/* The request's "path"; an error names the frame. */
static int request_path(json_t *req, const char *frame, const char **ret, struct al_error *err)
{
	int r = agent_json_get_path(req, "path", ret, err);
	if (r < 0)
		al_error_prefix(err, "%s", frame);
	return r;
}

/* The upload failed: its temporary file goes, its FILE_DATA is dropped up to
 * the end of the stream. */
static int file_write_fail(struct stream *s, int errnum, const char *what, struct al_error *err)
{
	int r = al_error_set(err, AL_ERR_INTERNAL, errnum, "%s \"%s\": %s", what, s->path, strerror(errnum));
	if (s->tmp_path)
		unlink(s->tmp_path);
	free(s->tmp_path);
	s->tmp_path = NULL;
	if (s->file_fd >= 0)
		close(s->file_fd);
	s->file_fd = -1;
	s->failed = true;
	return r;
}

/* The same while the stream is under way: its ERROR is sent here. */
static void file_write_fail_send(struct agent *a, struct stream *s, int errnum, const char *what)
{
	struct al_error err = {0};
	int r = file_write_fail(s, errnum, what, &err);
	agent_channel_send_error(a, s->id, -r, "%s", err.message);
}

static bool json_id_valid(json_t *v)
{
	return !v || (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= 4294967294LL);
}

int agent_file_write_start(struct agent *a, uint32_t id, json_t *req, struct al_error *err)
{
	const char *path;
	int r = request_path(req, "FILE_WRITE", &path, err);
	if (r < 0)
		return r;
	json_t *jmode = json_object_get(req, "mode");
	json_t *juid = json_object_get(req, "uid"), *jgid = json_object_get(req, "gid");
	if (jmode && (!json_is_integer(jmode) || json_integer_value(jmode) < 0 || json_integer_value(jmode) > 07777))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "FILE_WRITE: \"mode\" must be an integer in 0..4095 (07777)");
	if (!json_id_valid(juid) || !json_id_valid(jgid))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "FILE_WRITE: \"uid\" and \"gid\" must be integers in 0..4294967294");
	struct stream *s = agent_stream_new(a, id, STREAM_FILE_WRITE);
	s->path = xstrdup(path);
	mode_t mode = jmode ? (mode_t)json_integer_value(jmode) : 0644;
	/* Same directory as the target, so rename(2) is atomic. */
	const char *slash = strrchr(path, '/');
	s->tmp_path = xasprintf("%.*s/.%s.airlock-XXXXXX", (int)(slash - path), path, slash + 1);
	s->file_fd = strlen(s->tmp_path) < PATH_MAX ? mkostemp(s->tmp_path, O_CLOEXEC) : (errno = ENAMETOOLONG, -1);
	if (s->file_fd < 0) {
		int e = errno;
		free(TAKE_PTR(s->tmp_path));
		return file_write_fail(s, e, "create", err);
	}
	if (fchmod(s->file_fd, mode) < 0)
		return file_write_fail(s, errno, "chmod", err);
	if ((juid || jgid) && fchown(s->file_fd, juid ? (uid_t)json_integer_value(juid) : (uid_t)-1,
	                             jgid ? (gid_t)json_integer_value(jgid) : (gid_t)-1) < 0)
		return file_write_fail(s, errno, "chown", err);
	return 0;
}

void agent_file_write_data(struct agent *a, struct stream *s, const uint8_t *data, size_t len)
{
	if (len == 0) {
		if (!s->failed) {
			if (fsync(s->file_fd) < 0)
				file_write_fail_send(a, s, errno, "fsync");
			else if (rename(s->tmp_path, s->path) < 0)
				file_write_fail_send(a, s, errno, "rename to");
			else {
				free(s->tmp_path);
				s->tmp_path = NULL;
				agent_channel_send_json(a, AIRLOCK_FRAME_OK, s->id,
				                        json_pack("{s:I}", "size", (json_int_t)s->size));
			}
		}
		agent_stream_free(a, s);
		return;
	}
	/* After an ERROR (the stream's last frame) the data is dropped unanswered. */
	if (s->failed)
		return;
	/* Written synchronously below (or failed, and then ERROR follows). */
	agent_channel_send_credit(a, s->id, len);
	int r = write_full(s->file_fd, data, len);
	if (r < 0) {
		file_write_fail_send(a, s, -r, "write");
		return;
	}
	s->size += len;
}

void agent_file_write_cancel(struct agent *a, struct stream *s)
{
	if (!s->failed)
		file_write_fail_send(a, s, ECANCELED, "upload cancelled by the host:");
	agent_stream_free(a, s);
}

int agent_file_read_start(struct agent *a, uint32_t id, json_t *req, struct al_error *err)
{
	const char *path;
	int r = request_path(req, "FILE_READ", &path, err);
	if (r < 0)
		return r;
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "open \"%s\": %m", path);
	if (S_ISDIR(st.st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EISDIR, "read \"%s\": %s", path, strerror(EISDIR));
	if (!S_ISREG(st.st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "read \"%s\": not a regular file", path);
	struct stream *s = agent_stream_new(a, id, STREAM_FILE_READ);
	s->path = xstrdup(path);
	s->file_fd = TAKE_FD(fd);
	return 0;
}

bool agent_file_read_pump(struct agent *a, struct stream *s)
{
	static uint8_t buf[AIRLOCK_FRAME_MAX_PAYLOAD];
	size_t room = agent_stream_output_room(a, s);
	if (room == 0)
		return false; /* the caller checks; wait for CREDIT */
	ssize_t n;
	do
		n = read(s->file_fd, buf, room);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		agent_channel_send_error(a, s->id, errno, "read \"%s\": %s", s->path, strerror(errno));
		agent_stream_free(a, s);
		return true;
	}
	agent_channel_send(a, AIRLOCK_FRAME_FILE_DATA, s->id, buf, (size_t)n);
	agent_stream_output_sent(s, (size_t)n);
	if (n == 0) {
		agent_stream_free(a, s);
		return true;
	}
	s->size += (uint64_t)n;
	return false;
}
