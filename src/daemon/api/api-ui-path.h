/* SPDX-License-Identifier: Apache-2.0 */
/* The web console's static files (api-ui.c, docs/console.md): which request
 * path names which file under --ui-dir, and what it is. Pure: no file is
 * touched here. */
#ifndef AIRLOCK_API_UI_PATH_H
#define AIRLOCK_API_UI_PATH_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define UI_PREFIX "/ui"
#define UI_PATH_MAX 256         /* bytes of the file's path under the ui dir */
#define UI_PATH_DEPTH_MAX 8     /* directories deep */
#define UI_SEGMENT_MAX 128      /* bytes of one name */
#define UI_FILE_MAX (16u << 20) /* largest file served */
#define UI_INDEX "index.html"

/* What the request path asks for. */
enum ui_target {
	UI_TARGET_REDIRECT, /* "/ui": answer 308 to "/ui/" */
	UI_TARGET_FILE,     /* a file under the ui dir */
};

/* True for "/ui" and every path under "/ui/" (and nothing else: "/uix"). */
bool ui_path_is_ui(const char *path);

/* Checks path ("/ui", "/ui/", "/ui/assets/app.js", already percent-decoded)
 * and on success writes the file's path relative to the ui dir into ret_rel
 * ("index.html" for "/ui/" and for a path ending in "/") and its
 * Content-Type into *ret_content_type. Refused (404, err says why): a name
 * that is empty, starts with '.' (so no "..", no hidden files), or has a
 * byte outside [A-Za-z0-9._-]; too long or too deep; a file type not in the
 * table (no Content-Type guessed). */
int ui_path_parse(const char *path, enum ui_target *ret_target, char *ret_rel, size_t rel_size,
                  const char **ret_content_type, struct al_error *err);

#endif
