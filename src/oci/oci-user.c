/* SPDX-License-Identifier: Apache-2.0 */
/* The image's User as ids (oci.h): what a sandbox of the template runs
 * commands as by default. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "oci.h"
#include "util.h"

#define ACCOUNTS_MAX (1024 * 1024) /* of etc/passwd or etc/group read */
#define ID_MAX 4294967294ul

static bool parse_id(const char *s, unsigned long *ret)
{
	if (!s[0] || strlen(s) > 10 || strspn(s, "0123456789") != strlen(s))
		return false;
	unsigned long v = strtoul(s, NULL, 10);
	if (v > ID_MAX)
		return false;
	*ret = v;
	return true;
}

/* SECURITY: the tree is a tenant's: the file is opened inside it (its
 * symlinks resolved there), read up to ACCOUNTS_MAX, and only the third
 * (id) and, for passwd, fourth (group) fields of the line naming `name`
 * are taken, as numbers. */
static bool accounts_find(int root_fd, const char *file, const char *name, unsigned long *ret_id,
                          unsigned long *ret_gid)
{
	cleanup_close int fd = oci_path_open_read(root_fd, file);
	if (fd < 0)
		return false;
	cleanup_free char *buf = xmalloc(ACCOUNTS_MAX + 1);
	ssize_t n = read_full(fd, buf, ACCOUNTS_MAX);
	if (n < 0)
		return false;
	buf[n] = '\0';
	size_t nl = strlen(name);
	for (char *line = buf, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if (strncmp(line, name, nl) || line[nl] != ':')
			continue;
		char *f[4] = {0};
		char *p = line + nl + 1; /* the password field, then the id */
		for (int i = 0; i < 4 && p; i++) {
			f[i] = p;
			p = strchr(p, ':');
			if (p)
				*p++ = '\0';
		}
		if (!f[1] || !parse_id(f[1], ret_id))
			return false;
		return !ret_gid || (f[2] && parse_id(f[2], ret_gid));
	}
	return false;
}

bool oci_user_ids(int root_fd, const char *user, unsigned long *ret_uid, unsigned long *ret_gid)
{
	if (!user || !user[0] || strlen(user) > 255)
		return false;
	cleanup_free char *u = xstrdup(user);
	char *g = strchr(u, ':');
	if (g)
		*g++ = '\0';
	unsigned long uid, gid, pw_gid = 0;
	bool named = !parse_id(u, &uid);
	if (named && !accounts_find(root_fd, "etc/passwd", u, &uid, &pw_gid))
		return false;
	if (!g)
		gid = named ? pw_gid : uid;
	else if (!parse_id(g, &gid) && !accounts_find(root_fd, "etc/group", g, &gid, NULL))
		return false;
	*ret_uid = uid;
	*ret_gid = gid;
	return true;
}
