/* SPDX-License-Identifier: Apache-2.0 */
/* E2B compatibility: user names, the Authorization: Basic header, the
 * guest's /etc/passwd and envd paths (api-e2b-parse.h). Pure: no I/O. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api-e2b-parse.h"
#include "util.h"

bool e2b_user_name_valid(const char *s, size_t n)
{
	if (n == 0 || n > E2B_USER_NAME_MAX || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '_' || s[i] == '-' || s[i] == '.'))
			return false;
	return true;
}

/* SECURITY: client input (api-e2b-parse.h); the length is checked before
 * anything is decoded. */
int e2b_basic_user_name(const char *value, char ret[E2B_USER_NAME_MAX + 1], struct al_error *err)
{
	size_t n = strlen(value);
	if (n > E2B_BASIC_MAX || strncasecmp(value, "Basic ", 6) != 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "Authorization must be \"Basic base64(USER:)\" naming the guest user to act as");
	cleanup_free uint8_t *dec = NULL;
	size_t len = 0;
	if (base64_decode(value + 6, n - 6, &dec, &len) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "Authorization: Basic is not base64");
	const uint8_t *colon = memchr(dec, ':', len);
	size_t name_len = colon ? (size_t)(colon - dec) : len;
	if (!e2b_user_name_valid((const char *)dec, name_len))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "Authorization: Basic must name a user of [A-Za-z0-9._-] of at most %d bytes",
		                    E2B_USER_NAME_MAX);
	memcpy(ret, dec, name_len);
	ret[name_len] = '\0';
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

/* SECURITY: guest input (api-e2b-parse.h): every field is measured within
 * its line before it is used, and only a line whose fields all check out
 * is taken. */
int e2b_passwd_find(const char *text, size_t len, const char *name, struct e2b_user *ret)
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

/* SECURITY: client input (api-e2b-parse.h): measured before it is joined. */
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
	size_t home_len = strlen(u->home), sep = rest[0] && strcmp(u->home, "/") ? 1 : 0, rest_len = strlen(rest);
	if (home_len + sep + rest_len > E2B_PATH_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
		                    "path is longer than %d bytes once joined to the home directory %.256s",
		                    E2B_PATH_MAX, u->home);
	memcpy(ret, u->home, home_len);
	if (sep)
		ret[home_len] = '/';
	memcpy(ret + home_len + sep, rest, rest_len + 1);
	return 0;
}
