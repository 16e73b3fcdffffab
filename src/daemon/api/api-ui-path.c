/* SPDX-License-Identifier: Apache-2.0 */
/* Request paths of the web console's static files (api-ui-path.h). */
#include <string.h>

#include "api-ui-path.h"
#include "util.h"

/* The only file types served: anything else under the ui dir is 404, so a
 * stray file is never sent with a type a browser would sniff or run. */
static const struct {
	const char *ext;
	const char *type;
} ui_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".map", "application/json; charset=utf-8"},
    {".json", "application/json; charset=utf-8"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".ico", "image/x-icon"},
    {".woff2", "font/woff2"},
    {".txt", "text/plain; charset=utf-8"},
};

bool ui_path_is_ui(const char *path)
{
	size_t n = strlen(UI_PREFIX);
	return path && strncmp(path, UI_PREFIX, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static bool ui_name_byte(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
	       c == '-';
}

static const char *ui_content_type(const char *rel)
{
	const char *slash = strrchr(rel, '/');
	const char *dot = strrchr(slash ? slash + 1 : rel, '.');
	for (size_t i = 0; dot && i < ARRAY_SIZE(ui_types); i++)
		if (!strcmp(dot, ui_types[i].ext))
			return ui_types[i].type;
	return NULL;
}

/* SECURITY: the path comes from any client of the TCP listener, without a
 * token. What passes names a file strictly under the ui dir: every name is
 * [A-Za-z0-9._-]+ and does not start with '.', so "..", "." and hidden files
 * cannot be named, nor can '/' doubled, '\\', NUL or a percent sign (MHD
 * decoded the path before). Symlinks and non-regular files are refused where
 * the file is opened (api-ui.c), not here. */
int ui_path_parse(const char *path, enum ui_target *ret_target, char *ret_rel, size_t rel_size,
                  const char **ret_content_type, struct al_error *err)
{
	if (!ui_path_is_ui(path))
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "not a path of the console");
	const char *p = path + strlen(UI_PREFIX);
	if (*p == '\0') {
		*ret_target = UI_TARGET_REDIRECT;
		return 0;
	}
	p++; /* the '/' */
	size_t len = strlen(p);
	if (len > UI_PATH_MAX)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENAMETOOLONG, "the path is longer than %d bytes",
		                    UI_PATH_MAX);
	char rel[UI_PATH_MAX + sizeof(UI_INDEX) + 1];
	memcpy(rel, p, len + 1);
	if (len == 0 || rel[len - 1] == '/')
		memcpy(rel + len, UI_INDEX, sizeof(UI_INDEX));
	unsigned depth = 0;
	for (const char *s = rel; *s;) {
		const char *e = strchrnul(s, '/');
		size_t n = (size_t)(e - s);
		if (n == 0 || s[0] == '.')
			return al_error_set(err, AL_ERR_NOT_FOUND, EINVAL, "an empty name, or one starting with '.'");
		if (n > UI_SEGMENT_MAX)
			return al_error_set(err, AL_ERR_NOT_FOUND, ENAMETOOLONG, "a name is longer than %d bytes",
			                    UI_SEGMENT_MAX);
		for (size_t i = 0; i < n; i++)
			if (!ui_name_byte(s[i]))
				return al_error_set(err, AL_ERR_NOT_FOUND, EINVAL,
				                    "a name may hold only A-Z a-z 0-9 . _ -");
		if (*e == '/' && ++depth > UI_PATH_DEPTH_MAX)
			return al_error_set(err, AL_ERR_NOT_FOUND, EINVAL, "more than %d directories deep",
			                    UI_PATH_DEPTH_MAX);
		s = *e ? e + 1 : e;
	}
	const char *type = ui_content_type(rel);
	if (!type)
		return al_error_set(err, AL_ERR_NOT_FOUND, EINVAL, "not a file type the console serves");
	if (strlcpy_al(ret_rel, rel, rel_size) >= rel_size)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENAMETOOLONG, "the path is too long");
	*ret_target = UI_TARGET_FILE;
	*ret_content_type = type;
	return 0;
}
