/* SPDX-License-Identifier: Apache-2.0 */
/* E2B compatibility: the pure parsers of who an envd request acts as and of
 * its paths (api-e2b-parse.c). No I/O: api-e2b-user.c reads the request and
 * the guest's /etc/passwd and hands them here; tests/unit/test-e2b-parse.c
 * and tests/fuzz/fuzz-e2b-parse.c feed them directly. */
#ifndef AIRLOCK_API_E2B_PARSE_H
#define AIRLOCK_API_E2B_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define E2B_USER_NAME_MAX 32
#define E2B_DEFAULT_USER "user"
#define E2B_PATH_MAX 4096
#define E2B_BASIC_MAX 128 /* bytes of the Authorization header's value */

/* Who an envd request acts as: a user of the guest's /etc/passwd. */
struct e2b_user {
	char name[E2B_USER_NAME_MAX + 1];
	unsigned uid, gid;
	char home[E2B_PATH_MAX + 1];
};

/* A user name E2B may name: 1 to E2B_USER_NAME_MAX bytes of [A-Za-z0-9._-],
 * not starting with '-'. s need not be NUL-terminated. */
bool e2b_user_name_valid(const char *s, size_t n);

/* SECURITY: the client's Authorization header, "Basic base64(NAME:)" (at
 * most E2B_BASIC_MAX bytes; the scheme in any case; a password, if any, is
 * ignored: the envd access token is the credential). NAME must pass
 * e2b_user_name_valid. -EINVAL with err saying what to send. */
int e2b_basic_user_name(const char *value, char ret[E2B_USER_NAME_MAX + 1], struct al_error *err);

/* SECURITY: text is the guest's /etc/passwd (len bytes, NULs allowed),
 * hostile: each line is NAME:PW:UID:GID:GECOS:HOME:SHELL, taken only when
 * every field checks out (ids of at most 10 digits below UINT32_MAX, an
 * absolute home without NUL of at most E2B_PATH_MAX bytes); malformed lines
 * are skipped. The first good line of name fills ret; else -ENOENT. */
int e2b_passwd_find(const char *text, size_t len, const char *name, struct e2b_user *ret);

/* SECURITY: an envd path: absolute, or relative to the user's home ("~"
 * and "~/…" too, as envd does); at most E2B_PATH_MAX bytes, no NUL, not
 * empty. The guest resolves it (no host path is ever made of it). */
int e2b_path_resolve(const struct e2b_user *u, const char *path, char ret[E2B_PATH_MAX + 1], struct al_error *err);

#endif
