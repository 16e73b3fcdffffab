/* SPDX-License-Identifier: Apache-2.0 */
/* The console's request paths (src/daemon/api/api-ui-path.c), as any client
 * of the TCP listener sends them, without a token. Whatever the input: no
 * crash, and what is accepted names a file strictly under the ui dir (no
 * empty name, none starting with '.', only [A-Za-z0-9._-] and '/'), with a
 * Content-Type. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api-ui-path.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[4096];
	if (size >= sizeof(path))
		return 0;
	memcpy(path, data, size);
	path[size] = '\0';
	enum ui_target t;
	char rel[UI_PATH_MAX + 16];
	const char *type = NULL;
	struct al_error err = {0};
	if (ui_path_parse(path, &t, rel, sizeof(rel), &type, &err) < 0) {
		if (err.code != AL_ERR_NOT_FOUND || !err.message[0])
			abort();
		return 0;
	}
	if (!ui_path_is_ui(path))
		abort();
	if (t == UI_TARGET_REDIRECT)
		return 0;
	if (!type || !rel[0] || rel[0] == '/' || strlen(rel) > UI_PATH_MAX + strlen(UI_INDEX))
		abort();
	for (const char *s = rel;; s++) {
		if (*s == '.' && (s == rel || s[-1] == '/'))
			abort();
		if (*s == '/' && (s[1] == '/' || s[1] == '\0'))
			abort();
		if (*s == '\0')
			break;
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/", *s))
			abort();
	}
	return 0;
}
