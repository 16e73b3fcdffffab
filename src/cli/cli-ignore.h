/* SPDX-License-Identifier: Apache-2.0 */
/* .dockerignore for 'airlock template build': which paths of the build
 * context are left out of what is sent. Supported, as in Docker: one pattern
 * a line; '#' at the start of a line a comment; blank lines ignored;
 * surrounding spaces trimmed; a leading '/' or './' ignored (every pattern is
 * relative to the context); '!' an exception (the last pattern that matches
 * decides); '*', '?', '[...]' ('[^...]' or '[!...]' negated) and '\' escapes
 * within one path component (fnmatch(3) without FNM_PATHNAME per component);
 * '**' as a whole component: any number of components, none included; a
 * pattern that matches a directory matches everything under it. Not
 * supported: '**' inside a component ("a**b" acts as "a*b"). */
#ifndef AIRLOCK_CLI_IGNORE_H
#define AIRLOCK_CLI_IGNORE_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define CLI_IGNORE_FILE_MAX (1u << 20) /* a .dockerignore */

struct cli_ignore;

/* The patterns of a .dockerignore's text (never fails; a pattern that can
 * match nothing in the context, like "../x", is dropped). */
struct cli_ignore *cli_ignore_parse(const char *text, size_t len);
/* The patterns of the file at path; none if it does not exist. */
int cli_ignore_load(const char *path, struct cli_ignore **ret, struct al_error *err);
void cli_ignore_free(struct cli_ignore *ig);
void cli_ignore_freep(struct cli_ignore **ig);
#define cleanup_cli_ignore __attribute__((cleanup(cli_ignore_freep)))

/* Whether path ("a/b/c", relative to the context, no "." or ".." components)
 * is left out. */
bool cli_ignore_excludes(const struct cli_ignore *ig, const char *path);
/* Whether any pattern is an exception ('!'): then a directory left out must
 * still be walked, as something under it may be brought back. */
bool cli_ignore_has_exceptions(const struct cli_ignore *ig);

#endif
