/* SPDX-License-Identifier: Apache-2.0 */
/* .dockerignore patterns (cli-ignore.h). */
#include "cli-ignore.h"

#include <fnmatch.h>

#include "util.h"

#define IGNORE_COMPONENTS_MAX 256 /* of a pattern or a path */

struct pattern {
	char **comps;
	size_t n;
	bool exception;
};

struct cli_ignore {
	struct pattern *patterns;
	size_t n;
	bool has_exceptions;
};

/* Splits text at '/', as a cleaned path: "" and "." dropped, ".." taking the
 * component before it. Returns the number of components, or -1 when the
 * path leaves its root (".." first) or has too many. */
static int split_clean(char *text, char **comps, size_t max)
{
	size_t n = 0;
	for (char *save = NULL, *c = strtok_r(text, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (!strcmp(c, "."))
			continue;
		if (!strcmp(c, "..")) {
			if (n == 0)
				return -1;
			n--;
			continue;
		}
		if (n == max)
			return -1;
		comps[n++] = c;
	}
	return (int)n;
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t len = strlen(s);
	while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\r'))
		s[--len] = '\0';
	return s;
}

static void pattern_add(struct cli_ignore *ig, char *line)
{
	char *p = trim(line);
	if (!*p || *p == '#')
		return;
	bool exception = *p == '!';
	if (exception)
		p = trim(p + 1);
	char *comps[IGNORE_COMPONENTS_MAX];
	int n = split_clean(p, comps, IGNORE_COMPONENTS_MAX);
	if (n <= 0)
		return;
	struct pattern *pat = &ig->patterns[ig->n++];
	pat->comps = xcalloc((size_t)n, sizeof(char *));
	for (int i = 0; i < n; i++)
		pat->comps[i] = xstrdup(comps[i]);
	pat->n = (size_t)n;
	pat->exception = exception;
	ig->has_exceptions |= exception;
}

struct cli_ignore *cli_ignore_parse(const char *text, size_t len)
{
	struct cli_ignore *ig = xcalloc(1, sizeof(*ig));
	cleanup_free char *copy = xstrndup(text, len);
	size_t lines = 1;
	for (const char *c = copy; *c; c++)
		lines += *c == '\n';
	ig->patterns = xcalloc(lines, sizeof(struct pattern));
	for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		pattern_add(ig, line);
	return ig;
}

int cli_ignore_load(const char *path, struct cli_ignore **ret, struct al_error *err)
{
	cleanup_free char *text = NULL;
	size_t len = 0;
	int r = read_file_limited(path, CLI_IGNORE_FILE_MAX, &text, &len);
	if (r == -ENOENT) {
		*ret = cli_ignore_parse("", 0);
		return 0;
	}
	if (r < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, -r, "cannot read %s: %s", path,
		                    r == -EFBIG ? "larger than 1 MiB" : strerror(-r));
	*ret = cli_ignore_parse(text, len);
	return 0;
}

void cli_ignore_free(struct cli_ignore *ig)
{
	if (!ig)
		return;
	for (size_t i = 0; i < ig->n; i++) {
		for (size_t j = 0; j < ig->patterns[i].n; j++)
			free(ig->patterns[i].comps[j]);
		free(ig->patterns[i].comps);
	}
	free(ig->patterns);
	free(ig);
}

void cli_ignore_freep(struct cli_ignore **ig)
{
	cli_ignore_free(*ig);
}

/* Whether the pattern's components match exactly the path's. */
static bool comps_match(char *const *pat, size_t np, char *const *path, size_t ns)
{
	if (np == 0)
		return ns == 0;
	if (!strcmp(pat[0], "**")) {
		for (size_t skip = 0; skip <= ns; skip++)
			if (comps_match(pat + 1, np - 1, path + skip, ns - skip))
				return true;
		return false;
	}
	return ns > 0 && fnmatch(pat[0], path[0], 0) == 0 && comps_match(pat + 1, np - 1, path + 1, ns - 1);
}

/* The path or one of the directories above it. */
static bool pattern_matches(const struct pattern *p, char *const *path, size_t ns)
{
	for (size_t k = 1; k <= ns; k++)
		if (comps_match(p->comps, p->n, path, k))
			return true;
	return false;
}

bool cli_ignore_excludes(const struct cli_ignore *ig, const char *path)
{
	if (ig->n == 0)
		return false;
	cleanup_free char *copy = xstrdup(path);
	char *comps[IGNORE_COMPONENTS_MAX];
	int n = split_clean(copy, comps, IGNORE_COMPONENTS_MAX);
	if (n <= 0)
		return false;
	bool excluded = false;
	for (size_t i = 0; i < ig->n; i++)
		if (ig->patterns[i].exception == excluded && pattern_matches(&ig->patterns[i], comps, (size_t)n))
			excluded = !ig->patterns[i].exception;
	return excluded;
}

bool cli_ignore_has_exceptions(const struct cli_ignore *ig)
{
	return ig->has_exceptions;
}
