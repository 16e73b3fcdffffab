/* SPDX-License-Identifier: Apache-2.0 */
/* E2B compatibility: the user an envd request acts as, and its paths
 * (api-e2b.h). E2B runs every command and file operation as a user of the
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
#define BASIC_MAX 128 /* the Authorization header's value */

static bool user_name_valid(const char *s, size_t n)
{
	if (n == 0 || n > E2B_USER_NAME_MAX || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '_' || s[i] == '-' || s[i] == '.'))
			return false;
	return true;
}

/* SECURITY: the client's "Basic base64(NAME:)" (a password, if any, is
 * ignored: the envd access token is the credential). */
static int name_from_basic(const char *value, char ret[E2B_USER_NAME_MAX + 1], struct al_error *err)
{
	size_t n = strlen(value);
	if (n > BASIC_MAX || strncasecmp(value, "Basic ", 6) != 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "Authorization must be \"Basic base64(USER:)\" naming the guest user to act as");
	cleanup_free uint8_t *dec = NULL;
	size_t len = 0;
	if (base64_decode(value + 6, n - 6, &dec, &len) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "Authorization: Basic is not base64");
	const uint8_t *colon = memchr(dec, ':', len);
	size_t name_len = colon ? (size_t)(colon - dec) : len;
	if (!user_name_valid((const char *)dec, name_len))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "Authorization: Basic must name a user of [A-Za-z0-9._-] of at most %d bytes",
		                    E2B_USER_NAME_MAX);
	memcpy(ret, dec, name_len);
	ret[name_len] = '\0';
	return 0;
}

static int request_user_name(const struct api_request *req, char ret[E2B_USER_NAME_MAX + 1], struct al_error *err)
{
	const char *q = api_query(req, "username");
	if (q && q[0]) {
		if (!user_name_valid(q, strlen(q)))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "username must be a user of [A-Za-z0-9._-] of at most %d bytes",
			                    E2B_USER_NAME_MAX);
		strlcpy_al(ret, q, E2B_USER_NAME_MAX + 1);
		return 0;
	}
	const char *basic = api_header(req, "Authorization");
	if (basic)
		return name_from_basic(basic, ret, err);
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

static int parse_id(const char *s, size_t n, unsigned *ret)
{
	if (n == 0 || n > 10)
		return -EINVAL;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > UINT32_MAX - 1)
		return -EINVAL;
	*ret = (unsigned)v;
	return 0;
}

/* SECURITY: text is the guest's /etc/passwd, hostile: each line is
 * NAME:PW:UID:GID:GECOS:HOME:SHELL, taken only when every field checks out
 * (numeric ids, an absolute home without NUL of at most E2B_PATH_MAX);
 * malformed lines are skipped. */
static int passwd_find(const char *text, size_t len, const char *name, struct e2b_user *ret)
{
	size_t name_len = strlen(name);
	const char *p = text, *end = text + len;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		const char *f[7];
		size_t fl[7], k = 0;
		const char *q = p;
		while (k < 7) {
			const char *c = memchr(q, ':', (size_t)(eol - q));
			f[k] = q;
			fl[k] = (size_t)((c ? c : eol) - q);
			k++;
			if (!c)
				break;
			q = c + 1;
		}
		unsigned uid, gid;
		if (k == 7 && fl[0] == name_len && !memcmp(f[0], name, name_len) && parse_id(f[2], fl[2], &uid) == 0 &&
		    parse_id(f[3], fl[3], &gid) == 0 && fl[5] > 0 && fl[5] <= E2B_PATH_MAX && f[5][0] == '/' &&
		    !memchr(f[5], '\0', fl[5])) {
			strlcpy_al(ret->name, name, sizeof(ret->name));
			ret->uid = uid;
			ret->gid = gid;
			memcpy(ret->home, f[5], fl[5]);
			ret->home[fl[5]] = '\0';
			return 0;
		}
		p = eol + 1;
	}
	return -ENOENT;
}

int e2b_user_resolve(const struct api_request *req, struct sandbox *sb, struct e2b_user *ret,
                     struct api_response *resp)
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
	if (passwd_find(text, len, name, ret) < 0) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "user \"%s\" is not in the guest's %s (E2B's default user is \"%s\"; the `base` "
		                    "template has it)",
		                    name, PASSWD_PATH, E2B_DEFAULT_USER);
		return -ENOENT;
	}
	return 0;
}

int e2b_path_resolve(const struct e2b_user *u, const char *path, char ret[E2B_PATH_MAX + 1], struct al_error *err)
{
	size_t n = path ? strlen(path) : 0;
	if (n == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "path is empty");
	if (n > E2B_PATH_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "path is longer than %d bytes",
		                    E2B_PATH_MAX);
	const char *rest = path;
	if (path[0] == '/') {
		strlcpy_al(ret, path, E2B_PATH_MAX + 1);
		return 0;
	}
	if (path[0] == '~' && (path[1] == '\0' || path[1] == '/'))
		rest = path[1] ? path + 2 : "";
	int m = snprintf(ret, E2B_PATH_MAX + 1, "%s%s%s", u->home, rest[0] && strcmp(u->home, "/") ? "/" : "", rest);
	if (m < 0 || (size_t)m > E2B_PATH_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
		                    "path is longer than %d bytes once joined to the home directory %s", E2B_PATH_MAX,
		                    u->home);
	return 0;
}
