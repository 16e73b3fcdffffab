/* SPDX-License-Identifier: Apache-2.0 */
/* E2B compatibility: the user an envd request acts as, and its paths
 * (api-e2b.h; the parsers of names, the Basic header, /etc/passwd and paths
 * are in api-e2b-parse.c). E2B runs every command and file operation as a user of the
 * guest, `user` unless the request names another. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "api-e2b.h"
#include "api-handlers.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "util.h"

#define PASSWD_PATH "/etc/passwd"
#define PASSWD_MAX (256u * 1024u) /* bytes of the guest's /etc/passwd read at most */
#define PASSWD_READ_TIMEOUT_MS 10000

static int request_user_name(const struct api_request *req, char ret[E2B_USER_NAME_MAX + 1], struct al_error *err)
{
	const char *q = api_query(req, "username");
	if (q && q[0]) {
		if (!e2b_user_name_valid(q, strlen(q)))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "username must be a user of [A-Za-z0-9._-] of at most %d bytes",
			                    E2B_USER_NAME_MAX);
		strlcpy_al(ret, q, E2B_USER_NAME_MAX + 1);
		return 0;
	}
	const char *basic = api_header(req, "Authorization");
	if (basic)
		return e2b_basic_user_name(basic, ret, err);
	strlcpy_al(ret, E2B_DEFAULT_USER, E2B_USER_NAME_MAX + 1);
	return 0;
}

/* Reads a small guest file whole (at most max bytes, else -EFBIG). */
static int guest_file_slurp(struct sandbox *sb, const char *path, size_t max, char **ret, size_t *ret_len,
                            struct al_error *err)
{
	struct guest_channel *ch = sandbox_channel(sb);
	cleanup_json json_t *msg = json_pack("{s:s}", "path", path);
	struct guest_stream *s = NULL;
	int r = guest_stream_start(ch, AIRLOCK_FRAME_FILE_READ, msg, GUEST_STREAM_LOG, 0, &s, err);
	if (r < 0)
		return r;
	uint64_t deadline = now_ms_monotonic() + PASSWD_READ_TIMEOUT_MS;
	struct guest_cursor cur = {0};
	cleanup_free char *buf = xmalloc(max + 1);
	size_t len = 0;
	bool too_big = false;
	if (guest_cursor_open(ch, s, true, &cur) == 0) {
		for (;;) {
			uint8_t type, *data = NULL;
			size_t n;
			uint64_t dropped;
			if (guest_cursor_read(ch, &cur, deadline, &type, &data, &n, &dropped) != 1)
				break;
			if (type == AIRLOCK_FRAME_FILE_DATA && !too_big) {
				if (n > max - len)
					too_big = true;
				else
					memcpy(buf + len, data, n);
				len += too_big ? 0 : n;
			}
			free(data);
			if (too_big)
				break;
		}
		guest_cursor_close(ch, &cur);
	}
	if (too_big) {
		guest_stream_unref(ch, s); /* given up on: what still comes is dropped */
		return al_error_set(err, AL_ERR_GUEST, EFBIG, "the guest's %s is larger than %zu bytes", path, max);
	}
	r = guest_stream_finish(ch, s, deadline, "read", NULL, err);
	if (r < 0)
		return r;
	buf[len] = '\0';
	*ret = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}

int e2b_user_resolve(const struct api_request *req, struct sandbox *sb, struct e2b_user *ret, struct api_response *resp)
{
	struct al_error err = {0};
	char name[E2B_USER_NAME_MAX + 1];
	if (request_user_name(req, name, &err) < 0) {
		api_response_error(resp, &err);
		return -EINVAL;
	}
	cleanup_free char *text = NULL;
	size_t len = 0;
	int r = guest_file_slurp(sb, PASSWD_PATH, PASSWD_MAX, &text, &len, &err);
	if (r < 0) {
		api_response_error(resp, &err);
		return r;
	}
	if (e2b_passwd_find(text, len, name, ret) < 0) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "user \"%s\" is not in the guest's %s (E2B's default user is \"%s\"; the `base` "
		                    "template has it)",
		                    name, PASSWD_PATH, E2B_DEFAULT_USER);
		return -ENOENT;
	}
	return 0;
}
