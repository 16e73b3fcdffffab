/* SPDX-License-Identifier: Apache-2.0 */
/* airlockd's config file, turned into argv elements (daemon-config.h). */
#include "daemon-config.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "util.h"

/* A NULL-terminated argv under construction; every element is owned. */
struct argv_builder {
	char **v;
	size_t n, cap;
};

static void builder_push(struct argv_builder *b, char *s)
{
	if (b->n + 2 > b->cap) {
		b->cap = b->cap ? b->cap * 2 : 16;
		b->v = xrealloc(b->v, b->cap * sizeof(b->v[0]));
	}
	b->v[b->n++] = s;
	b->v[b->n] = NULL;
}

static void builder_release(struct argv_builder *b)
{
	daemon_config_argv_free(b->v);
}

void daemon_config_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Where --config is in argv: its value and the one or two elements it takes
 * (*ret_skip_at, *ret_skip_n; 0 elements when it is not there). An element
 * "--config" is always the flag: a value of another flag spelled "--config"
 * must use that flag's --name=value form. */
static int config_find(int argc, char *const argv[], const char **ret_path, int *ret_skip_at, int *ret_skip_n,
                       struct al_error *err)
{
	const char *path = NULL;
	int skip_at = 0, skip_n = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			break;
		int n;
		const char *value;
		if (!strcmp(a, "--config")) {
			if (i + 1 >= argc)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--config needs a FILE");
			value = argv[i + 1];
			n = 2;
		} else if (!strncmp(a, "--config=", strlen("--config="))) {
			value = a + strlen("--config=");
			n = 1;
		} else {
			continue;
		}
		if (path)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "--config given twice (%s and %s): give one config file", path, value);
		if (!value[0])
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--config needs a FILE");
		path = value;
		skip_at = i;
		skip_n = n;
		i += n - 1;
	}
	*ret_path = path;
	*ret_skip_at = skip_at;
	*ret_skip_n = skip_n;
	return 0;
}

/* SECURITY: the file chooses what airlockd runs as root (--jailer,
 * --egress-bin) and how it confines it (--seccomp-profile): it must be a
 * regular file that only root (or airlockd's own user) can have written. Its
 * size is checked before it is read. */
static int config_read(const char *path, char **ret_buf, size_t *ret_len, struct al_error *err)
{
	/* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below). */
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "%s: cannot open the config file: %m", path);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "%s: fstat: %m", path);
	if (!S_ISREG(st.st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: the config file is not a regular file",
		                    path);
	if (st.st_uid != 0 && st.st_uid != geteuid())
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                    "%s: the config file is owned by uid %u, not by root: chown root %s", path,
		                    (unsigned)st.st_uid, path);
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                    "%s: the config file is writable by group or others (mode %04o): chmod go-w %s",
		                    path, (unsigned)(st.st_mode & 07777), path);
	if (st.st_size > DAEMON_CONFIG_FILE_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG, "%s: the config file is %lld bytes, more than %d",
		                    path, (long long)st.st_size, DAEMON_CONFIG_FILE_MAX);
	/* One byte more than the limit: a file that grew since fstat is caught too. */
	cleanup_free char *buf = xmalloc(DAEMON_CONFIG_FILE_MAX + 2);
	ssize_t n = read_full(fd, buf, DAEMON_CONFIG_FILE_MAX + 1);
	if (n < 0)
		return al_error_set(err, AL_ERR_INTERNAL, (int)-n, "%s: cannot read the config file: %s", path,
		                    strerror((int)-n));
	if (n > DAEMON_CONFIG_FILE_MAX)
		return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG, "%s: the config file is more than %d bytes", path,
		                    DAEMON_CONFIG_FILE_MAX);
	buf[n] = '\0';
	*ret_len = (size_t)n;
	*ret_buf = TAKE_PTR(buf);
	return 0;
}

/* Bytes a line may not hold anywhere: C0 controls but tab, DEL, NUL. */
static int line_check_bytes(const char *path, unsigned lineno, const char *line, size_t len, struct al_error *err)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)line[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s:%u: control character 0x%02x%s",
			                    path, lineno, c,
			                    c == '\r' ? " (a carriage return: save the file with Unix line ends)"
			                    : c == 0  ? " (a NUL byte: is this a text file?)"
			                              : "");
	}
	if (!utf8_valid((const uint8_t *)line, len))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EILSEQ, "%s:%u: not valid UTF-8", path, lineno);
	return 0;
}

static bool name_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

static int name_check(const char *path, unsigned lineno, const char *name, size_t len, struct al_error *err)
{
	if (name[0] == '-')
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "%s:%u: \"%.*s\": write the option without its leading --", path, lineno,
		                    (int)MIN(len, 64), name);
	if (len > DAEMON_CONFIG_NAME_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "%s:%u: option name \"%.*s...\" is longer than %d bytes", path, lineno, 48, name,
		                    DAEMON_CONFIG_NAME_MAX);
	for (size_t i = 0; i < len; i++)
		if (!name_char_ok(name[i]))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "%s:%u: option name \"%.*s\" may hold only a-z, 0-9 and -", path, lineno,
			                    (int)len, name);
	if (len == strlen("config") && !memcmp(name, "config", len))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "%s:%u: config cannot be set in a config file (no includes)", path, lineno);
	return 0;
}

/* The value's code points: no C1 controls (C0 and DEL were refused for the
 * whole line), and no tab inside it. */
static int value_check(const char *path, unsigned lineno, const char *v, size_t len, struct al_error *err)
{
	if (len > DAEMON_CONFIG_VALUE_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s:%u: the value is %zu bytes, more than %d",
		                    path, lineno, len, DAEMON_CONFIG_VALUE_MAX);
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		int n = utf8_next((const uint8_t *)v + i, len - i, &cp);
		if (n < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EILSEQ, "%s:%u: not valid UTF-8", path,
			                    lineno);
		if (cp == '\t' || (cp >= 0x80 && cp <= 0x9f))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "%s:%u: control character U+%04X in the value", path, lineno, (unsigned)cp);
		i += (size_t)n;
	}
	return 0;
}

/* The value after the name (s: after the blanks and `=` that follow it):
 * *ret_v and *ret_len, or *ret_has = false for none. A quoted value is what is
 * between the quotes; an unquoted one ends at a `#` after a blank. */
static int value_parse(const char *path, unsigned lineno, const char *s, const char **ret_v, size_t *ret_len,
                       bool *ret_has, struct al_error *err)
{
	if (*s == '"') {
		const char *q = strchr(s + 1, '"');
		if (!q)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s:%u: a quote that is not closed",
			                    path, lineno);
		const char *after = q + 1;
		while (is_blank(*after))
			after++;
		if (*after && *after != '#')
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "%s:%u: text after the closing quote (a quoted value cannot hold a \")",
			                    path, lineno);
		*ret_v = s + 1;
		*ret_len = (size_t)(q - (s + 1));
		*ret_has = true;
		return 0;
	}
	const char *e = s;
	/* s[-1] is within the line: the name comes before it. */
	while (*e && !(*e == '#' && is_blank(e[-1])))
		e++;
	while (e > s && is_blank(e[-1]))
		e--;
	*ret_v = s;
	*ret_len = (size_t)(e - s);
	*ret_has = e > s;
	return 0;
}

/* One line (NUL-terminated, without its newline) into b. */
/* The option of the table (getopt's) that name names, if opts is given: it
 * must exist and take a value exactly when the line gives one (else getopt
 * would take the next option as this one's value, or refuse it far from
 * the file's line). */
static int option_check(const char *path, unsigned lineno, const struct option *opts, const char *name, size_t name_len,
                        bool has_value, struct al_error *err)
{
	if (!opts)
		return 0;
	for (const struct option *o = opts; o->name; o++) {
		if (strlen(o->name) != name_len || memcmp(o->name, name, name_len))
			continue;
		if (o->has_arg == required_argument && !has_value)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s:%u: %s needs a value", path,
			                    lineno, o->name);
		if (o->has_arg == no_argument && has_value)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s:%u: %s takes no value", path,
			                    lineno, o->name);
		return 0;
	}
	return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s:%u: no option %.*s (airlockd --help lists them)",
	                    path, lineno, (int)name_len, name);
}

static int config_parse_line(const char *path, unsigned lineno, const char *line, size_t len, const struct option *opts,
                             size_t *n_options, struct argv_builder *b, struct al_error *err)
{
	int r = line_check_bytes(path, lineno, line, len, err);
	if (r < 0)
		return r;
	const char *s = line;
	while (is_blank(*s))
		s++;
	if (!*s || *s == '#')
		return 0;
	const char *name = s;
	while (*s && !is_blank(*s) && *s != '=')
		s++;
	size_t name_len = (size_t)(s - name);
	if (name_len == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s:%u: a value without an option name", path,
		                    lineno);
	if ((r = name_check(path, lineno, name, name_len, err)) < 0)
		return r;
	while (is_blank(*s))
		s++;
	bool eq = *s == '=';
	if (eq) {
		s++;
		while (is_blank(*s))
			s++;
	}
	const char *v = NULL;
	size_t v_len = 0;
	bool has = false;
	if ((r = value_parse(path, lineno, s, &v, &v_len, &has, err)) < 0)
		return r;
	if (eq && !has)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s:%u: %.*s: no value after =", path, lineno,
		                    (int)name_len, name);
	if (has && (r = value_check(path, lineno, v, v_len, err)) < 0)
		return r;
	if ((r = option_check(path, lineno, opts, name, name_len, has, err)) < 0)
		return r;
	if (++*n_options > DAEMON_CONFIG_OPTIONS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG, "%s:%u: more than %d options", path, lineno,
		                    DAEMON_CONFIG_OPTIONS_MAX);
	builder_push(b, xasprintf("--%.*s", (int)name_len, name));
	if (has)
		builder_push(b, xstrndup(v, v_len));
	return 0;
}

/* SECURITY: the file is the operator's, but it is parsed as untrusted text:
 * every limit is checked before anything is kept, and nothing in it can name
 * another file to read. */
static int config_parse(const char *path, char *buf, size_t len, const struct option *opts, struct argv_builder *b,
                        struct al_error *err)
{
	size_t n_options = 0;
	unsigned lineno = 0;
	for (size_t at = 0; at < len;) {
		lineno++;
		char *line = buf + at;
		char *nl = memchr(line, '\n', len - at);
		size_t line_len = nl ? (size_t)(nl - line) : len - at;
		line[line_len] = '\0'; /* the newline, or buf's terminator */
		int r = config_parse_line(path, lineno, line, line_len, opts, &n_options, b, err);
		if (r < 0)
			return r;
		at += line_len + 1;
	}
	return 0;
}

int daemon_config_argv(const char *default_path, const struct option *opts, int argc, char *const argv[], int *ret_argc,
                       char ***ret_argv, struct al_error *err)
{
	const char *path = NULL;
	int skip_at = 0, skip_n = 0;
	int r = config_find(argc, argv, &path, &skip_at, &skip_n, err);
	if (r < 0)
		return r;
	if (!path)
		path = default_path;

	__attribute__((cleanup(builder_release))) struct argv_builder b = {0};
	builder_push(&b, xstrdup(argc > 0 && argv[0] ? argv[0] : "airlockd"));
	if (path) {
		cleanup_free char *buf = NULL;
		size_t len = 0;
		if ((r = config_read(path, &buf, &len, err)) < 0 ||
		    (r = config_parse(path, buf, len, opts, &b, err)) < 0)
			return r;
	}
	for (int i = 1; i < argc; i++)
		if (!(skip_n && i >= skip_at && i < skip_at + skip_n))
			builder_push(&b, xstrdup(argv[i]));
	*ret_argc = (int)b.n;
	*ret_argv = TAKE_PTR(b.v);
	return 0;
}
