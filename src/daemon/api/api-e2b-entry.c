/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's filesystem, the pure part: EntryInfo, account names, paths
 * (api-e2b-entry.h). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api-e2b-entry.h"
#include "util.h"

/* 9999-12-31T23:59:59.999Z */
#define RFC3339_MS_MAX INT64_C(253402300799999)

void e2b_path_clean(const char *path, char *ret)
{
	size_t o = 0;
	for (const char *p = path; *p;) {
		while (*p == '/')
			p++;
		const char *e = strchrnul(p, '/');
		size_t n = (size_t)(e - p);
		if (n == 0 || (n == 1 && p[0] == '.')) {
			/* nothing */
		} else if (n == 2 && p[0] == '.' && p[1] == '.') {
			while (o > 0 && ret[o - 1] != '/')
				o--;
			if (o > 0)
				o--;
		} else {
			ret[o++] = '/';
			memcpy(ret + o, p, n);
			o += n;
		}
		p = e;
	}
	if (o == 0)
		ret[o++] = '/';
	ret[o] = '\0';
}

/* SECURITY: text is a guest's passwd or group file (bounded, NUL-terminated).
 * Finds the first line whose field key_idx equals key and copies its field
 * want_idx into out (cut at out_size). Lines are split on ':' only. */
static bool accounts_find(const char *text, unsigned key_idx, const char *key, unsigned want_idx, char *out,
                          size_t out_size)
{
	size_t key_len = strlen(key);
	for (const char *line = text; line && *line;) {
		const char *end = strchrnul(line, '\n');
		const char *f[8] = {0}, *fe[8] = {0};
		unsigned n = 0;
		for (const char *p = line; n < ARRAY_SIZE(f) && p <= end;) {
			const char *q = p;
			while (q < end && *q != ':')
				q++;
			f[n] = p;
			fe[n++] = q;
			p = q + 1;
		}
		if (key_idx < n && want_idx < n && (size_t)(fe[key_idx] - f[key_idx]) == key_len &&
		    !memcmp(f[key_idx], key, key_len)) {
			snprintf(out, out_size, "%.*s", (int)(fe[want_idx] - f[want_idx]), f[want_idx]);
			return true;
		}
		line = *end ? end + 1 : NULL;
	}
	return false;
}

void e2b_accounts_name(const char *text, unsigned id, char *out, size_t out_size)
{
	char num[16];
	snprintf(num, sizeof(num), "%u", id);
	if (!text || !accounts_find(text, 2, num, 0, out, out_size) || !out[0] ||
	    !utf8_valid((const uint8_t *)out, strlen(out)))
		strlcpy_al(out, num, out_size);
}

/* Go's os.FileMode.String(), which envd answers: type letters, then rwx. */
void e2b_permissions_string(const char *type, unsigned mode, char out[16])
{
	size_t o = 0;
	if (!strcmp(type, "dir"))
		out[o++] = 'd';
	else if (!strcmp(type, "symlink"))
		out[o++] = 'L';
	else if (strcmp(type, "file"))
		out[o++] = '?';
	if (mode & 04000)
		out[o++] = 'u';
	if (mode & 02000)
		out[o++] = 'g';
	if (mode & 01000)
		out[o++] = 't';
	if (o == 0)
		out[o++] = '-';
	static const char rwx[] = "rwxrwxrwx";
	for (int i = 0; i < 9; i++)
		out[o++] = (mode & (0400u >> i)) ? rwx[i] : '-';
	out[o] = '\0';
}

/* SECURITY: ms is the guest's: outside 1970 to 9999 it is clamped. */
static void rfc3339_ms(int64_t ms, char out[40])
{
	ms = ms < 0 ? 0 : MIN(ms, RFC3339_MS_MAX);
	time_t sec = (time_t)(ms / 1000);
	int frac = (int)(ms % 1000);
	struct tm tm;
	if (!gmtime_r(&sec, &tm))
		memset(&tm, 0, sizeof(tm));
	size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, 40 - n, ".%03dZ", frac);
}

json_t *e2b_entry_info(json_t *st, const char *path, const char *passwd, const char *group_text)
{
	const char *type = json_string_value(json_object_get(st, "type"));
	const char *name = strrchr(path, '/');
	name = name && name[1] ? name + 1 : path;
	if (!type)
		type = "other";
	unsigned mode = (unsigned)json_integer_value(json_object_get(st, "mode")) & 07777;
	char perms[16], mtime[40], owner[64], group[64];
	e2b_permissions_string(type, mode, perms);
	rfc3339_ms(json_integer_value(json_object_get(st, "mtime_ms")), mtime);
	e2b_accounts_name(passwd, (unsigned)json_integer_value(json_object_get(st, "uid")), owner, sizeof(owner));
	e2b_accounts_name(group_text, (unsigned)json_integer_value(json_object_get(st, "gid")), group, sizeof(group));
	char size[24];
	snprintf(size, sizeof(size), "%" JSON_INTEGER_FORMAT, json_integer_value(json_object_get(st, "size")));
	const char *ft = !strcmp(type, "file")      ? "FILE_TYPE_FILE"
	                 : !strcmp(type, "dir")     ? "FILE_TYPE_DIRECTORY"
	                 : !strcmp(type, "symlink") ? "FILE_TYPE_SYMLINK"
	                                            : "FILE_TYPE_UNSPECIFIED";
	json_t *e = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:s, s:s}", "name", name, "type", ft, "path", path,
	                      "size", size, "mode", (int)(mode & 0777), "permissions", perms, "owner", owner, "group",
	                      group, "modifiedTime", mtime);
	json_t *target = json_object_get(st, "target");
	if (json_is_string(target))
		json_object_set(e, "symlinkTarget", target);
	return e;
}
