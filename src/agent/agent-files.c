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
const char *agent_json_get_path(json_t *o, const char *key, char *err, size_t err_size)
{
	const char *p = agent_json_get_cstring(json_object_get(o, key));
	if (!p || p[0] != '/' || strlen(p) >= PATH_MAX) {
		snprintf(err, err_size, "\"%s\" must be an absolute path shorter than %d bytes, without NUL bytes", key,
		         PATH_MAX);
		return NULL;
	}
	return p;
}

static const char *path_get(json_t *o, char *err, size_t err_size)
{
	return agent_json_get_path(o, "path", err, err_size);
}

static void file_fail(struct agent *a, struct stream *s, int errnum, const char *what)
{
	agent_channel_send_error(a, s->id, errnum, "%s \"%s\": %s", what, s->path, strerror(errnum));
	if (s->tmp_path)
		unlink(s->tmp_path);
	free(s->tmp_path);
	s->tmp_path = NULL;
	if (s->file_fd >= 0)
		close(s->file_fd);
	s->file_fd = -1;
	s->failed = true;
}

void agent_file_write_start(struct agent *a, uint32_t id, const uint8_t *payload, size_t len)
{
	char err[512];
	json_t *o = agent_json_parse_object(payload, len, err, sizeof(err));
	if (!o) {
		agent_channel_send_error(a, id, EINVAL, "FILE_WRITE: %s", err);
		return;
	}
	const char *path = path_get(o, err, sizeof(err));
	json_t *jmode = json_object_get(o, "mode");
	json_t *juid = json_object_get(o, "uid"), *jgid = json_object_get(o, "gid");
	if (!path) {
		agent_channel_send_error(a, id, EINVAL, "FILE_WRITE: %s", err);
	} else if (jmode &&
	           (!json_is_integer(jmode) || json_integer_value(jmode) < 0 || json_integer_value(jmode) > 07777)) {
		agent_channel_send_error(a, id, EINVAL, "FILE_WRITE: \"mode\" must be an integer in 0..4095 (07777)");
	} else if ((juid && (!json_is_integer(juid) || json_integer_value(juid) < 0 ||
	                     json_integer_value(juid) > 4294967294LL)) ||
	           (jgid && (!json_is_integer(jgid) || json_integer_value(jgid) < 0 ||
	                     json_integer_value(jgid) > 4294967294LL))) {
		agent_channel_send_error(a, id, EINVAL,
		                         "FILE_WRITE: \"uid\" and \"gid\" must be integers in 0..4294967294");
	} else {
		struct stream *s = agent_stream_new(a, id, STREAM_FILE_WRITE);
		s->path = xstrdup(path);
		mode_t mode = jmode ? (mode_t)json_integer_value(jmode) : 0644;
		/* Same directory as the target, so rename(2) is atomic. */
		const char *slash = strrchr(path, '/');
		s->tmp_path = xasprintf("%.*s/.%s.airlock-XXXXXX", (int)(slash - path), path, slash + 1);
		s->file_fd =
		    strlen(s->tmp_path) < PATH_MAX ? mkostemp(s->tmp_path, O_CLOEXEC) : (errno = ENAMETOOLONG, -1);
		if (s->file_fd < 0) {
			free(s->tmp_path);
			s->tmp_path = NULL;
			file_fail(a, s, errno, "create");
		} else if (fchmod(s->file_fd, mode) < 0) {
			file_fail(a, s, errno, "chmod");
		} else if ((juid || jgid) && fchown(s->file_fd, juid ? (uid_t)json_integer_value(juid) : (uid_t)-1,
		                                    jgid ? (gid_t)json_integer_value(jgid) : (gid_t)-1) < 0) {
			file_fail(a, s, errno, "chown");
		}
	}
	json_decref(o);
}

void agent_file_write_data(struct agent *a, struct stream *s, const uint8_t *data, size_t len)
{
	if (len == 0) {
		if (!s->failed) {
			if (fsync(s->file_fd) < 0)
				file_fail(a, s, errno, "fsync");
			else if (rename(s->tmp_path, s->path) < 0)
				file_fail(a, s, errno, "rename to");
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
		file_fail(a, s, -r, "write");
		return;
	}
	s->size += len;
}

void agent_file_write_cancel(struct agent *a, struct stream *s)
{
	if (!s->failed)
		file_fail(a, s, ECANCELED, "upload cancelled by the host:");
	agent_stream_free(a, s);
}

void agent_file_read_start(struct agent *a, uint32_t id, const uint8_t *payload, size_t len)
{
	char err[512];
	json_t *o = agent_json_parse_object(payload, len, err, sizeof(err));
	if (!o) {
		agent_channel_send_error(a, id, EINVAL, "FILE_READ: %s", err);
		return;
	}
	const char *path = path_get(o, err, sizeof(err));
	if (!path) {
		agent_channel_send_error(a, id, EINVAL, "FILE_READ: %s", err);
		json_decref(o);
		return;
	}
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		agent_channel_send_error(a, id, errno, "open \"%s\": %s", path, strerror(errno));
	else if (S_ISDIR(st.st_mode))
		agent_channel_send_error(a, id, EISDIR, "read \"%s\": %s", path, strerror(EISDIR));
	else if (!S_ISREG(st.st_mode))
		agent_channel_send_error(a, id, EINVAL, "read \"%s\": not a regular file", path);
	else {
		struct stream *s = agent_stream_new(a, id, STREAM_FILE_READ);
		s->path = xstrdup(path);
		s->file_fd = TAKE_FD(fd);
	}
	json_decref(o);
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
