/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's filesystem (docs/e2b.md "Files (envd)"): what the Connect service
 * filesystem.Filesystem (api-e2b-fs.c) and /files (api-e2b-files.c) share.
 * E2B runs its file operations as a user of the sandbox (api-e2b.h:
 * e2b_user_resolve) and resolves relative paths against its home. */
#ifndef AIRLOCK_API_E2B_FS_H
#define AIRLOCK_API_E2B_FS_H

#include <jansson.h>
#include <stddef.h>

#include "api.h"
#include "error.h"
#include "api-e2b.h"
#include "sandbox-model.h"

/* SECURITY: the most of a guest's /etc/passwd or /etc/group that is read
 * for owner and group names. */
#define E2B_FS_ACCOUNTS_MAX (256u * 1024u)

struct sandbox;

/* The guest's account files, for the owner and group names of entries;
 * the text is owned ("" when the guest has no such file). */
struct e2b_fs_accounts {
	char *passwd;
	char *group;
};
int e2b_fs_accounts_read(struct sandbox *sb, struct e2b_fs_accounts *ret, struct al_error *err);
void e2b_fs_accounts_release(struct e2b_fs_accounts *a);

/* SECURITY: a client's path (e2b_path_resolve: no NUL, bounded, relative to
 * u's home), then cleaned lexically: "." and repeated or trailing slashes
 * dropped, ".." taken back ("/.." is "/"). */
int e2b_fs_path(const struct e2b_user *u, const char *in, char ret[E2B_PATH_MAX + 1], struct al_error *err);

/* Runs argv in the guest as uid:gid and waits for it (60 s at most); a
 * failure carries its stderr. */
int e2b_fs_run(struct sandbox *sb, const char *const *argv, unsigned uid, unsigned gid, struct al_error *err);
/* Creates dir and its missing parents (the agent's mkdir, as root, as
 * E2B's envd does) and gives the ones it created to u (chown -h of each,
 * never of what is in them); at most E2B_MADE_DIRS_MAX at once. */
#define E2B_MADE_DIRS_MAX 64
int e2b_fs_make_dirs(struct sandbox *sb, const struct e2b_user *u, const char *dir, struct al_error *err);
/* The same for the parent directory of path, when it is missing. */
int e2b_fs_make_parents(struct sandbox *sb, const struct e2b_user *u, const char *path, struct al_error *err);
/* The agent's stat of path (a FILE_OP): NULL with err on failure
 * (AL_ERR_NOT_FOUND when it does not exist). */
json_t *e2b_fs_stat(struct sandbox *sb, const char *path, struct al_error *err);
/* The same, following a final symlink (and the symlinks it leads to) as
 * stat(2) does; ret_path is the path it ends at. */
json_t *e2b_fs_stat_follow(struct sandbox *sb, const char *path, char ret_path[E2B_PATH_MAX + 1], struct al_error *err);

#endif
