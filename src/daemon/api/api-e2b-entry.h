/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's filesystem, the pure part (no I/O; tests/unit/test-api-e2b-entry.c,
 * tests/fuzz/fuzz-e2b-entry.c): envd's EntryInfo made from the agent's stat
 * object, owner and group names from the guest's account files, and the
 * lexical cleaning of paths. */
#ifndef AIRLOCK_API_E2B_ENTRY_H
#define AIRLOCK_API_E2B_ENTRY_H

#include <jansson.h>
#include <stddef.h>

/* SECURITY: a resolved absolute path (the client's, bounded and checked by
 * e2b_path_resolve). Writes into out (room for strlen(path) + 2 bytes) the
 * path with "." and empty components dropped and ".." taking back one
 * component ("/.." is "/"); the result is never longer than path, or "/". */
void e2b_path_clean(const char *path, char *out);

/* SECURITY: text is a guest's /etc/passwd or /etc/group (NUL-terminated,
 * bounded by the reader; NULL is none): hostile. The name of uid or gid id
 * (the first line whose third field is id), cut to out_size; the number
 * itself when no line names it, or its name is empty or not UTF-8. */
void e2b_accounts_name(const char *text, unsigned id, char *out, size_t out_size);

/* Go's os.FileMode.String() of an agent type ("file", "dir", "symlink",
 * anything else) and mode bits, as envd's "permissions": "-rw-r--r--",
 * "drwxr-xr-x", "Lrwxrwxrwx", "dtrwxrwxrwx". */
void e2b_permissions_string(const char *type, unsigned mode, char out[16]);

/* SECURITY: st is the agent's stat object (guest input; only its typed
 * fields are read, anything missing is zero), path the entry's absolute path
 * (UTF-8). envd's EntryInfo in proto JSON: name, type (FILE_TYPE_*), path,
 * size (a string), mode, permissions, owner, group, modifiedTime (RFC 3339),
 * symlinkTarget. Never NULL. */
json_t *e2b_entry_info(json_t *st, const char *path, const char *passwd, const char *group);

#endif
