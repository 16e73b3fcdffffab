/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the parsers of E2B users and paths
 * (src/daemon/api/api-e2b-parse.c):
 *
 *   e2b_passwd_find()      the guest's /etc/passwd (guest input)
 *   e2b_basic_user_name()  the Authorization: Basic header (client input)
 *   e2b_user_name_valid()  ?username= (client input)
 *   e2b_path_resolve()     envd paths (client input)
 *
 * The passwd parser gets a buffer of exactly the input's size (NULs and
 * all); the others the input as a C string (up to its first NUL). Beyond
 * the sanitizers:
 *  - a user found in passwd has the name asked for, ids below UINT32_MAX,
 *    an absolute home of at most E2B_PATH_MAX bytes, and the input has a
 *    line "NAME:PW:UID:GID:GECOS:HOME:…" with those values; a user not found
 *    leaves *ret as it was;
 *  - a name from Basic is a valid user name, the start of the decoded
 *    credentials up to their ':' (or all of them), from a value of at most
 *    E2B_BASIC_MAX bytes beginning "Basic " in any case; a refusal leaves
 *    the name alone and says why;
 *  - a resolved path is absolute, at most E2B_PATH_MAX bytes, the path
 *    itself when absolute, else the home joined to the path (without its
 *    "~" or "~/").
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api-e2b-parse.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-e2b-parse: check failed: %s (line %d)\n", #cond, __LINE__);              \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

/* An id field of digits only whose value is want. */
static bool id_is(const char *f, size_t n, unsigned want)
{
	if (n == 0 || n > 20)
		return false;
	for (size_t i = 0; i < n; i++)
		if (f[i] < '0' || f[i] > '9')
			return false;
	char tmp[21];
	memcpy(tmp, f, n);
	tmp[n] = '\0';
	return strtoull(tmp, NULL, 10) == want;
}

/* Is there a line of text NAME:PW:UID:GID:GECOS:HOME:… for the user u? */
static bool passwd_has(const char *text, size_t len, const struct e2b_user *u)
{
	for (const char *p = text, *end = text + len; p < end;) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		const char *f[6];
		size_t fl[6], k = 0;
		for (const char *q = p; k < 6;) {
			const char *c = memchr(q, ':', (size_t)(eol - q));
			if (!c)
				break;
			f[k] = q;
			fl[k++] = (size_t)(c - q);
			q = c + 1;
		}
		if (k == 6 && fl[0] == strlen(u->name) && !memcmp(f[0], u->name, fl[0]) && id_is(f[2], fl[2], u->uid) &&
		    id_is(f[3], fl[3], u->gid) && fl[5] == strlen(u->home) && !memcmp(f[5], u->home, fl[5]))
			return true;
		p = eol + 1;
	}
	return false;
}

static void fuzz_passwd(const uint8_t *data, size_t size, const char *name)
{
	char *text = xmalloc(size ? size : 1);
	memcpy(text, data, size);
	struct e2b_user u, before;
	memset(&u, 0xa5, sizeof(u));
	before = u;
	int r = e2b_passwd_find(text, size, name, &u);
	if (r < 0) {
		CHECK(r == -ENOENT && !memcmp(&u, &before, sizeof(u)));
		free(text);
		return;
	}
	CHECK(r == 0 && !strcmp(u.name, name));
	CHECK(u.uid < UINT32_MAX && u.gid < UINT32_MAX);
	CHECK(memchr(u.home, '\0', sizeof(u.home)));
	size_t hl = strlen(u.home);
	CHECK(hl >= 1 && hl <= E2B_PATH_MAX && u.home[0] == '/' && !memchr(u.home, '\n', hl) &&
	      !memchr(u.home, ':', hl));
	CHECK(passwd_has(text, size, &u));
	free(text);
}

static void fuzz_basic(const char *value, size_t n)
{
	char name[E2B_USER_NAME_MAX + 1] = "sentinel";
	struct al_error err = {0};
	int r = e2b_basic_user_name(value, name, &err);
	if (r < 0) {
		CHECK(r == -EINVAL && err.code == AL_ERR_INVALID_ARGUMENT && err.message[0]);
		CHECK(!strcmp(name, "sentinel"));
		return;
	}
	CHECK(r == 0 && n <= E2B_BASIC_MAX && n >= 6 && !strncasecmp(value, "basic ", 6));
	size_t nl = strlen(name);
	CHECK(e2b_user_name_valid(name, nl));
	uint8_t *dec = NULL;
	size_t len = 0;
	CHECK(base64_decode(value + 6, n - 6, &dec, &len) == 0);
	CHECK(len >= nl && !memcmp(dec, name, nl) && (len == nl || dec[nl] == ':'));
	free(dec);
}

static void fuzz_path(const char *path, size_t n, const char *home)
{
	struct e2b_user u = {.name = "user", .uid = 1000, .gid = 1000};
	strlcpy_al(u.home, home, sizeof(u.home));
	char out[E2B_PATH_MAX + 1];
	struct al_error err = {0};
	int r = e2b_path_resolve(&u, path, out, &err);
	if (r < 0) {
		CHECK((r == -EINVAL || r == -ENAMETOOLONG) && err.code == AL_ERR_INVALID_ARGUMENT && err.message[0]);
		CHECK(n == 0 || n > E2B_PATH_MAX || (path[0] != '/' && strlen(home) + 1 + n > E2B_PATH_MAX));
		return;
	}
	size_t ol = strlen(out);
	CHECK(r == 0 && n >= 1 && ol >= 1 && ol <= E2B_PATH_MAX && out[0] == '/');
	if (path[0] == '/') {
		CHECK(!strcmp(out, path));
		return;
	}
	const char *rest = path;
	if (path[0] == '~' && (path[1] == '\0' || path[1] == '/'))
		rest = path[1] ? path + 2 : "";
	size_t hl = strlen(home);
	CHECK(ol >= hl && !memcmp(out, home, hl));
	const char *tail = out + hl;
	if (rest[0] && strcmp(home, "/"))
		CHECK(*tail++ == '/');
	CHECK(!strcmp(tail, rest));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The names of the default user, root, and the input's first field. */
	fuzz_passwd(data, size, E2B_DEFAULT_USER);
	fuzz_passwd(data, size, "root");
	const uint8_t *colon = memchr(data, ':', size < E2B_USER_NAME_MAX + 1 ? size : E2B_USER_NAME_MAX + 1);
	if (colon && e2b_user_name_valid((const char *)data, (size_t)(colon - data))) {
		char name[E2B_USER_NAME_MAX + 1];
		memcpy(name, data, (size_t)(colon - data));
		name[colon - data] = '\0';
		fuzz_passwd(data, size, name);
	}

	size_t n = strnlen((const char *)data, size);
	char *text = xmalloc(n + 1);
	memcpy(text, data, n);
	text[n] = '\0';
	/* e2b_user_name_valid reads only n bytes: an exact-size copy. */
	char *exact = xmalloc(n ? n : 1);
	memcpy(exact, data, n);
	if (e2b_user_name_valid(exact, n))
		CHECK(n >= 1 && n <= E2B_USER_NAME_MAX && exact[0] != '-');
	free(exact);
	fuzz_basic(text, n);

	static char long_home[E2B_PATH_MAX + 1];
	if (!long_home[0]) {
		memset(long_home, 'h', E2B_PATH_MAX - 16);
		long_home[0] = '/';
	}
	const char *homes[] = {"/", "/home/user", long_home};
	for (size_t i = 0; i < ARRAY_SIZE(homes); i++)
		fuzz_path(text, n, homes[i]);
	free(text);
	return 0;
}
