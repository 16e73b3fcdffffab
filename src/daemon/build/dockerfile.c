/* SPDX-License-Identifier: Apache-2.0 */
/* The Dockerfile parser of template builds (dockerfile.h).
 *
 * SECURITY: the text is a client's. Every size is checked against a named
 * limit before it is allocated: the file, the logical line, the number of
 * instructions, sources, ARGs and ENV names, one word after substitution and
 * the substitution output of the whole file (ENV A=$A$A doubles at each
 * step). Substitution nests at most DOCKERFILE_MAX_SUBST_DEPTH deep. No value
 * is interpreted here beyond its syntax: paths are resolved against the
 * context by build-context.c, users by the guest. */
#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>

#include "dockerfile.h"
#include "json-cleanup.h"
#include "util.h"

/* A growable string with a bound. */
struct sbuf {
	char *s;
	size_t n, cap, max;
};

static void sbuf_release(struct sbuf *b)
{
	free(b->s);
	*b = (struct sbuf){0};
}

static int sbuf_add(struct sbuf *b, const char *s, size_t n)
{
	if (n > b->max || b->n > b->max - n)
		return -E2BIG;
	if (b->n + n + 1 > b->cap) {
		size_t cap = MAX(b->cap * 2, b->n + n + 1);
		b->s = xrealloc(b->s, MAX(cap, (size_t)64));
		b->cap = MAX(cap, (size_t)64);
	}
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = '\0';
	return 0;
}

static int sbuf_addc(struct sbuf *b, char c)
{
	return sbuf_add(b, &c, 1);
}

/* The result, never NULL ("" when nothing was added); the buffer is empty after. */
static char *sbuf_take(struct sbuf *b)
{
	char *s = b->s ? TAKE_PTR(b->s) : xstrdup("");
	*b = (struct sbuf){0};
	return s;
}

struct parser {
	char escape;
	const struct kv_list *build_args;
	struct kv_list env;  /* ENV in effect */
	struct kv_list args; /* ARGs in effect after FROM (values may be NULL) */
	struct kv_list meta; /* ARGs before FROM */
	size_t n_declared;
	size_t expanded; /* substitution output of the whole file so far */
	char *workdir;
	unsigned line;
	struct dockerfile *df;
	struct al_error *err;
};

static int perr_code(struct parser *p, enum al_error_code code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int perr_code(struct parser *p, enum al_error_code code, int errnum, const char *fmt, ...)
{
	char msg[AL_ERROR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (p->line)
		return al_error_set(p->err, code, errnum, "Dockerfile line %u: %s", p->line, msg);
	return al_error_set(p->err, code, errnum, "Dockerfile: %s", msg);
}
#define perr(p, ...) perr_code(p, AL_ERR_INVALID_ARGUMENT, EINVAL, __VA_ARGS__)
#define perr_big(p, ...) perr_code(p, AL_ERR_TOO_LARGE, E2BIG, __VA_ARGS__)

/* ---------------------------------------------------------------- kv helpers */

static ssize_t kv_find(const struct kv_list *l, const char *key)
{
	for (size_t i = 0; l && i < l->n; i++)
		if (!strcmp(l->keys[i], key))
			return (ssize_t)i;
	return -1;
}

static void kv_append(struct kv_list *l, const char *key, const char *value)
{
	l->keys = xrealloc(l->keys, (l->n + 1) * sizeof(*l->keys));
	l->values = xrealloc(l->values, (l->n + 1) * sizeof(*l->values));
	l->keys[l->n] = xstrdup(key);
	l->values[l->n] = value ? xstrdup(value) : NULL;
	l->n++;
}

static void kv_set(struct kv_list *l, const char *key, const char *value)
{
	ssize_t i = kv_find(l, key);
	if (i < 0) {
		kv_append(l, key, value);
		return;
	}
	free(l->values[i]);
	l->values[i] = value ? xstrdup(value) : NULL;
}

/* ENV wins over ARG (Docker); before FROM only the ARGs declared there count. */
static const char *parser_lookup(const struct parser *p, const char *name)
{
	if (!p->df->from) {
		ssize_t i = kv_find(&p->meta, name);
		return i < 0 ? NULL : p->meta.values[i];
	}
	ssize_t i = kv_find(&p->env, name);
	if (i >= 0)
		return p->env.values[i];
	i = kv_find(&p->args, name);
	return i < 0 ? NULL : p->args.values[i];
}

/* ---------------------------------------------------------------- substitution */

static bool is_name_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

static int word_process(struct parser *p, const char *s, size_t n, size_t *pos, char stop, int depth, struct sbuf *out);

static int out_add(struct parser *p, struct sbuf *out, const char *s, size_t n)
{
	if (sbuf_add(out, s, n) < 0)
		return perr_big(p, "a word is longer than %d bytes after substitution", DOCKERFILE_MAX_WORD);
	return 0;
}

static int add_value(struct parser *p, struct sbuf *out, const char *v)
{
	size_t n = strlen(v);
	if (n > DOCKERFILE_MAX_EXPANDED - p->expanded)
		return perr_big(p, "variable substitution makes more than %d bytes in all", DOCKERFILE_MAX_EXPANDED);
	p->expanded += n;
	return out_add(p, out, v, n);
}

/* ${NAME}, ${NAME:-word}, ${NAME:+word}, ${NAME-word}, ${NAME+word},
 * ${NAME:?msg}, ${NAME?msg}; *pos is just after the '{'. */
static int expand_braced(struct parser *p, const char *s, size_t n, size_t *pos, int depth, struct sbuf *out)
{
	size_t i = *pos, start = i;
	while (i < n && is_name_char(s[i]))
		i++;
	if (i == start || i >= n)
		return perr(p, "bad substitution: ${ must be followed by a name and }");
	char name[256];
	if (i - start >= sizeof(name))
		return perr(p, "a variable name is longer than %zu bytes", sizeof(name) - 1);
	memcpy(name, s + start, i - start);
	name[i - start] = '\0';
	const char *v = parser_lookup(p, name);
	if (s[i] == '}') {
		*pos = i + 1;
		return v ? add_value(p, out, v) : 0;
	}
	bool colon = s[i] == ':';
	if (colon)
		i++;
	char op = i < n ? s[i] : '\0';
	if (op != '-' && op != '+' && op != '?')
		return perr(p, "bad substitution in ${%s...}: only :- :+ :? - + ? are supported", name);
	i++;
	if (depth >= DOCKERFILE_MAX_SUBST_DEPTH)
		return perr(p, "substitutions nest more than %d deep", DOCKERFILE_MAX_SUBST_DEPTH);
	struct sbuf word = {.max = DOCKERFILE_MAX_WORD};
	int r = word_process(p, s, n, &i, '}', depth + 1, &word);
	if (r < 0) {
		sbuf_release(&word);
		return r;
	}
	*pos = i;
	bool set = v && (!colon || v[0]);
	if (op == '?' && !set) {
		r = perr(p, "%s is not set: %s", name, word.s ? word.s : "a value is required");
	} else if (op == '-') {
		r = set ? add_value(p, out, v) : add_value(p, out, word.s ? word.s : "");
	} else if (op == '+') {
		r = set ? add_value(p, out, word.s ? word.s : "") : 0;
	} else {
		r = add_value(p, out, v);
	}
	sbuf_release(&word);
	return r;
}

/* At s[*pos] == '$'. */
static int expand_dollar(struct parser *p, const char *s, size_t n, size_t *pos, int depth, struct sbuf *out)
{
	size_t i = *pos + 1;
	if (i < n && s[i] == '{') {
		*pos = i + 1;
		return expand_braced(p, s, n, pos, depth, out);
	}
	size_t start = i;
	while (i < n && is_name_char(s[i]))
		i++;
	*pos = i;
	if (i == start)
		return out_add(p, out, "$", 1);
	char name[256];
	if (i - start >= sizeof(name))
		return perr(p, "a variable name is longer than %zu bytes", sizeof(name) - 1);
	memcpy(name, s + start, i - start);
	name[i - start] = '\0';
	const char *v = parser_lookup(p, name);
	return v ? add_value(p, out, v) : 0;
}

static int process_double_quoted(struct parser *p, const char *s, size_t n, size_t *pos, int depth, struct sbuf *out)
{
	size_t i = *pos + 1;
	int r = 0;
	while (r == 0 && i < n && s[i] != '"') {
		if (s[i] == p->escape && i + 1 < n && strchr("\"$`", s[i + 1]) && s[i + 1] != '\0') {
			r = out_add(p, out, s + i + 1, 1);
			i += 2;
		} else if (s[i] == p->escape && i + 1 < n && s[i + 1] == p->escape) {
			r = out_add(p, out, s + i, 1);
			i += 2;
		} else if (s[i] == '$') {
			r = expand_dollar(p, s, n, &i, depth, out);
		} else {
			r = out_add(p, out, s + i, 1);
			i++;
		}
	}
	if (r < 0)
		return r;
	if (i >= n)
		return perr(p, "unterminated double quote");
	*pos = i + 1;
	return 0;
}

/* Docker's word processing: quotes removed, the escape character escapes the
 * next one, $ expanded; up to `stop` (not quoted or escaped) if it is not 0. */
static int word_process(struct parser *p, const char *s, size_t n, size_t *pos, char stop, int depth, struct sbuf *out)
{
	size_t i = *pos;
	int r = 0;
	while (r == 0 && i < n && !(stop && s[i] == stop)) {
		char c = s[i];
		if (c == '\'') {
			const char *end = memchr(s + i + 1, '\'', n - i - 1);
			if (!end)
				return perr(p, "unterminated single quote");
			r = out_add(p, out, s + i + 1, (size_t)(end - s) - i - 1);
			i = (size_t)(end - s) + 1;
		} else if (c == '"') {
			r = process_double_quoted(p, s, n, &i, depth, out);
		} else if (c == p->escape) {
			r = i + 1 < n ? out_add(p, out, s + i + 1, 1) : 0;
			i += 2;
		} else if (c == '$') {
			r = expand_dollar(p, s, n, &i, depth, out);
		} else {
			r = out_add(p, out, s + i, 1);
			i++;
		}
	}
	if (r < 0)
		return r;
	if (stop && i >= n)
		return perr(p, "bad substitution: missing }");
	*pos = stop ? i + 1 : MIN(i, n);
	return 0;
}

/* A whole word processed into a new string. */
static int word_expand(struct parser *p, const char *s, char **ret)
{
	struct sbuf out = {.max = DOCKERFILE_MAX_WORD};
	size_t pos = 0;
	int r = word_process(p, s, strlen(s), &pos, 0, 0, &out);
	if (r < 0) {
		sbuf_release(&out);
		return r;
	}
	*ret = sbuf_take(&out);
	return 0;
}

/* ---------------------------------------------------------------- words */

struct words {
	size_t n;
	char **w;
};

static void words_release(struct words *w)
{
	for (size_t i = 0; i < w->n; i++)
		free(w->w[i]);
	free(w->w);
	*w = (struct words){0};
}

/* Splits on blanks outside quotes (the escape character escapes the next
 * byte); quotes and escapes stay in the words for word_expand. */
static int words_split(struct parser *p, const char *s, size_t max, struct words *ret)
{
	struct words w = {0};
	size_t i = 0, n = strlen(s);
	while (i < n) {
		while (i < n && isspace((unsigned char)s[i]))
			i++;
		if (i >= n)
			break;
		size_t start = i;
		char quote = 0;
		while (i < n && (quote || !isspace((unsigned char)s[i]))) {
			if (s[i] == p->escape && quote != '\'' && i + 1 < n)
				i++;
			else if (!quote && (s[i] == '\'' || s[i] == '"'))
				quote = s[i];
			else if (quote && s[i] == quote)
				quote = 0;
			i++;
		}
		if (w.n >= max) {
			words_release(&w);
			return perr_big(p, "more than %zu arguments", max);
		}
		w.w = xrealloc(w.w, (w.n + 1) * sizeof(*w.w));
		w.w[w.n++] = xstrndup(s + start, i - start);
	}
	*ret = w;
	return 0;
}

/* ---------------------------------------------------------------- logical lines */

struct reader {
	const char *text;
	size_t len, pos;
	unsigned lineno; /* of the physical line at pos, from 1 */
};

/* The next physical line without its newline (and a \r before it). */
static bool reader_line(struct reader *rd, const char **ret, size_t *ret_n)
{
	if (rd->pos >= rd->len)
		return false;
	const char *s = rd->text + rd->pos;
	const char *nl = memchr(s, '\n', rd->len - rd->pos);
	size_t n = nl ? (size_t)(nl - s) : rd->len - rd->pos;
	rd->pos += n + (nl ? 1 : 0);
	rd->lineno++;
	if (n > 0 && s[n - 1] == '\r')
		n--;
	*ret = s;
	*ret_n = n;
	return true;
}

static size_t skip_blank(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n && (s[i] == ' ' || s[i] == '\t'))
		i++;
	return i;
}

/* Whether the line ends with the escape character (blanks after it allowed);
 * *ret_n is the length before it. */
static bool line_continues(const char *s, size_t n, char escape, size_t *ret_n)
{
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (n == 0 || s[n - 1] != escape)
		return false;
	*ret_n = n - 1;
	return true;
}

/* The next instruction with its continuation lines joined (comment and blank
 * lines skipped, inside a continuation too); 0 at the end. */
static int next_instruction(struct parser *p, struct reader *rd, char **ret)
{
	struct sbuf line = {.max = DOCKERFILE_MAX_LINE};
	const char *s;
	size_t n;
	bool more = false;
	while (reader_line(rd, &s, &n)) {
		size_t b = skip_blank(s, n);
		if (b == n || s[b] == '#')
			continue;
		if (!more) {
			p->line = rd->lineno;
			s += b;
			n -= b;
		}
		size_t keep;
		more = line_continues(s, n, p->escape, &keep);
		if (sbuf_add(&line, s, more ? keep : n) < 0) {
			sbuf_release(&line);
			return perr_big(p, "the instruction is longer than %d bytes", DOCKERFILE_MAX_LINE);
		}
		if (!more)
			break;
	}
	if (!line.s)
		return 0;
	*ret = sbuf_take(&line);
	return 1;
}

/* Parser directives (`# escape=`` `) at the very top, before anything else. */
static int read_directives(struct parser *p, struct reader *rd)
{
	struct reader at = *rd;
	const char *s;
	size_t n;
	while (reader_line(&at, &s, &n)) {
		size_t i = skip_blank(s, n);
		if (i >= n || s[i] != '#')
			break;
		i += 1 + skip_blank(s + i + 1, n - i - 1);
		size_t k = i;
		while (i < n && isalpha((unsigned char)s[i]))
			i++;
		size_t klen = i - k;
		i += skip_blank(s + i, n - i);
		if (klen == 0 || i >= n || s[i] != '=')
			break;
		i += 1 + skip_blank(s + i + 1, n - i - 1);
		size_t vend = n;
		while (vend > i && (s[vend - 1] == ' ' || s[vend - 1] == '\t'))
			vend--;
		if (klen == 6 && !strncasecmp(s + k, "escape", 6)) {
			p->line = at.lineno;
			if (vend - i != 1 || (s[i] != '\\' && s[i] != '`'))
				return perr(p, "the escape directive takes \\ or `");
			p->escape = s[i];
		}
		*rd = at;
	}
	p->line = 0;
	return 0;
}

/* ---------------------------------------------------------------- instruction helpers */

static void argv_add(struct dockerfile_argv *a, const char *s)
{
	a->argv = xrealloc(a->argv, (a->argc + 2) * sizeof(*a->argv));
	a->argv[a->argc++] = xstrdup(s);
	a->argv[a->argc] = NULL;
}

static void argv_release(struct dockerfile_argv *a)
{
	for (size_t i = 0; i < a->argc; i++)
		free(a->argv[i]);
	free(a->argv);
	*a = (struct dockerfile_argv){0};
}

/* A JSON array of strings (the exec form); false for anything else (Docker
 * then takes the text as the shell form). */
static bool json_array_parse(const char *rest, size_t max, struct dockerfile_argv *ret)
{
	if (rest[0] != '[')
		return false;
	cleanup_json json_t *j = json_loads(rest, JSON_REJECT_DUPLICATES, NULL);
	if (!j || !json_is_array(j) || json_array_size(j) > max)
		return false;
	struct dockerfile_argv a = {0};
	size_t i;
	json_t *v;
	json_array_foreach (j, i, v) {
		if (!json_is_string(v)) {
			argv_release(&a);
			return false;
		}
		argv_add(&a, json_string_value(v));
	}
	*ret = a;
	return true;
}

/* RUN, CMD, ENTRYPOINT: no substitution (the shell does it). */
static int parse_command(struct parser *p, const char *name, const char *rest, struct dockerfile_step *st)
{
	if (json_array_parse(rest, SIZE_MAX, &st->argv)) {
		if (st->argv.argc == 0 && st->kind == DOCKERFILE_RUN)
			return perr(p, "RUN needs a command");
		return 0;
	}
	if (!rest[0])
		return perr(p, "%s needs a command", name);
	/* RUN <<EOF takes the lines after it as a script (BuildKit); here
	 * they would be read as instructions. */
	if (!strncmp(rest, "<<", 2))
		return perr(p,
		            "%s with a here-document (<<) is not supported: put the script in the context and "
		            "COPY it, or use one line",
		            name);
	st->shell_form = true;
	argv_add(&st->argv, "/bin/sh");
	argv_add(&st->argv, "-c");
	argv_add(&st->argv, rest);
	return 0;
}

/* Leading --name[=value] flags; *rest moves past them. */
struct flag {
	char name[32];
	char *value; /* NULL for a bare --name */
};

static int next_flag(struct parser *p, const char **rest, struct flag *f)
{
	const char *s = *rest;
	if (strncmp(s, "--", 2))
		return 0;
	size_t n = strcspn(s, " \t");
	const char *eq = memchr(s, '=', n);
	size_t nlen = (eq ? (size_t)(eq - s) : n) - 2;
	if (nlen >= sizeof(f->name))
		return perr(p, "unknown flag %.40s", s);
	memcpy(f->name, s + 2, nlen);
	f->name[nlen] = '\0';
	f->value = eq ? xstrndup(eq + 1, n - (size_t)(eq + 1 - s)) : NULL;
	s += n;
	s += skip_blank(s, strlen(s));
	*rest = s;
	return 1;
}

static int parse_chmod(struct parser *p, const char *v, int *ret)
{
	if (!v[0] || strlen(v) > 5 || strspn(v, "01234567") != strlen(v))
		return perr(p, "--chmod=%.40s: an octal mode is needed (e.g. 755)", v);
	long m = strtol(v, NULL, 8);
	if (m > 07777)
		return perr(p, "--chmod=%.40s: an octal mode is needed (e.g. 755)", v);
	*ret = (int)m;
	return 0;
}

static int copy_flag(struct parser *p, const char *name, struct flag *f, struct dockerfile_step *st)
{
	if (!strcmp(f->name, "from"))
		return perr(p, "%s --from is not supported (multi-stage builds are not supported)", name);
	if (strcmp(f->name, "chown") && strcmp(f->name, "chmod"))
		return perr(p, "%s --%s is not supported (only --chown and --chmod are)", name, f->name);
	if (!f->value || !f->value[0])
		return perr(p, "%s --%s needs a value", name, f->name);
	char *v;
	int r = word_expand(p, f->value, &v);
	if (r < 0)
		return r;
	if (!strcmp(f->name, "chmod")) {
		r = parse_chmod(p, v, &st->chmod);
		free(v);
		return r;
	}
	if (!v[0]) {
		free(v);
		return perr(p, "%s --chown needs a user", name);
	}
	free(st->chown);
	st->chown = v;
	return 0;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcasecmp(s + n - m, suffix);
}

static int add_source_check(struct parser *p, const char *src)
{
	if (strstr(src, "://") || !strncmp(src, "git@", 4))
		return perr(p, "ADD of a URL or git source (%.100s) is not supported: fetch it in a RUN step", src);
	static const char *const tars[] = {".tar",  ".tar.gz", ".tgz", ".tar.bz2",
	                                   ".tbz2", ".tar.xz", ".txz", ".tar.zst"};
	for (size_t i = 0; i < ARRAY_SIZE(tars); i++)
		if (ends_with(src, tars[i]))
			return perr(p,
			            "ADD of a local tar archive (%.100s) is not supported (Docker would extract it): "
			            "COPY it and RUN tar -x",
			            src);
	return 0;
}

static int copy_words(struct parser *p, const char *rest, struct words *ret)
{
	struct dockerfile_argv json = {0};
	if (json_array_parse(rest, DOCKERFILE_MAX_SOURCES + 1, &json)) {
		/* The exec form's strings are taken as they are, then substituted
		 * like words (Docker does both). */
		ret->n = json.argc;
		ret->w = json.argv;
		return 0;
	}
	return words_split(p, rest, DOCKERFILE_MAX_SOURCES + 1, ret);
}

static int parse_copy(struct parser *p, const char *name, const char *rest, struct dockerfile_step *st)
{
	struct flag f;
	int r;
	st->chmod = -1;
	while ((r = next_flag(p, &rest, &f)) > 0) {
		r = copy_flag(p, name, &f, st);
		free(f.value);
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	struct words w = {0};
	r = copy_words(p, rest, &w);
	if (r < 0)
		return r;
	if (w.n < 2) {
		words_release(&w);
		return perr(p, "%s needs a source and a destination", name);
	}
	st->sources = xcalloc(w.n - 1, sizeof(*st->sources));
	for (size_t i = 0; r == 0 && i < w.n; i++) {
		char *v = NULL;
		r = word_expand(p, w.w[i], &v);
		if (r == 0 && !v[0])
			r = perr(p, "%s: an empty %s", name, i + 1 < w.n ? "source" : "destination");
		if (r == 0 && i + 1 < w.n && st->kind == DOCKERFILE_ADD)
			r = add_source_check(p, v);
		if (r < 0)
			free(v);
		else if (i + 1 < w.n)
			st->sources[st->n_sources++] = v;
		else
			st->dest = v;
	}
	words_release(&w);
	return r;
}

static int env_pair_add(struct parser *p, struct dockerfile_step *st, const char *key, const char *value, bool env)
{
	if (!key[0])
		return perr(p, "%s: an empty name", env ? "ENV" : "LABEL");
	if (env && strlen(value) > DOCKERFILE_MAX_ENV_VALUE)
		return perr_big(p, "ENV %.64s: the value is longer than %d bytes", key, DOCKERFILE_MAX_ENV_VALUE);
	if (env && kv_find(&p->env, key) < 0 && p->env.n >= DOCKERFILE_MAX_ENV)
		return perr_big(p, "more than %d ENV names", DOCKERFILE_MAX_ENV);
	kv_append(&st->pairs, key, value);
	if (env)
		kv_set(&p->env, key, value);
	return 0;
}

/* ENV (env true) and LABEL: K=V ... or the legacy ENV K V. Every value is
 * substituted with the values before this instruction (Docker). */
static int parse_pairs(struct parser *p, const char *rest, struct dockerfile_step *st, bool env)
{
	struct words w = {0};
	int r = words_split(p, rest, SIZE_MAX, &w);
	if (r < 0)
		return r;
	if (w.n == 0)
		r = perr(p, "%s needs a name and a value", env ? "ENV" : "LABEL");
	bool legacy = w.n > 0 && !strchr(w.w[0], '=');
	if (r == 0 && legacy) {
		const char *v = rest + strcspn(rest, " \t");
		v += skip_blank(v, strlen(v));
		char *key = NULL, *value = NULL;
		if (!v[0])
			r = perr(p, "%s %.64s needs a value (%s NAME=VALUE)", env ? "ENV" : "LABEL", w.w[0],
			         env ? "ENV" : "LABEL");
		if (r == 0)
			r = word_expand(p, w.w[0], &key);
		if (r == 0)
			r = word_expand(p, v, &value);
		if (r == 0)
			r = env_pair_add(p, st, key, value, env);
		free(key);
		free(value);
	}
	struct kv_list vals = {0};
	for (size_t i = 0; r == 0 && !legacy && i < w.n; i++) {
		char *eq = strchr(w.w[i], '=');
		if (!eq) {
			r = perr(p, "%s: %.64s is not NAME=VALUE", env ? "ENV" : "LABEL", w.w[i]);
			break;
		}
		*eq = '\0';
		char *key = NULL, *value = NULL;
		r = word_expand(p, w.w[i], &key);
		if (r == 0)
			r = word_expand(p, eq + 1, &value);
		if (r == 0)
			kv_append(&vals, key, value);
		free(key);
		free(value);
	}
	/* ENV A=1 B=$A: B is substituted with A's value before this line. */
	for (size_t i = 0; r == 0 && i < vals.n; i++)
		r = env_pair_add(p, st, vals.keys[i], vals.values[i], env);
	kv_list_release(&vals);
	words_release(&w);
	return r;
}

static bool arg_name_valid(const char *s)
{
	if (!s[0] || isdigit((unsigned char)s[0]))
		return false;
	for (; *s; s++)
		if (!is_name_char(*s))
			return false;
	return true;
}

/* One ARG name[=default]: its value at this step. */
static int arg_declare(struct parser *p, const char *word, struct dockerfile_step *st)
{
	cleanup_free char *name = xstrdup(word);
	char *eq = strchr(name, '=');
	cleanup_free char *def = NULL;
	if (eq) {
		*eq = '\0';
		int r = word_expand(p, eq + 1, &def);
		if (r < 0)
			return r;
	}
	if (!arg_name_valid(name))
		return perr(p, "ARG %.64s: a name is letters, digits and _", name);
	if (p->n_declared >= DOCKERFILE_MAX_ARGS)
		return perr_big(p, "more than %d ARGs", DOCKERFILE_MAX_ARGS);
	p->n_declared++;
	const char *value = def;
	ssize_t b = kv_find(p->build_args, name);
	ssize_t m = kv_find(&p->meta, name);
	if (b >= 0)
		value = p->build_args->values[b];
	else if (!eq && m >= 0 && p->df->from)
		value = p->meta.values[m];
	if (value && strlen(value) > DOCKERFILE_MAX_ENV_VALUE)
		return perr_big(p, "ARG %.64s: the value is longer than %d bytes", name, DOCKERFILE_MAX_ENV_VALUE);
	kv_set(p->df->from ? &p->args : &p->meta, name, value);
	if (st)
		kv_append(&st->pairs, name, value);
	return 0;
}

static int parse_arg(struct parser *p, const char *rest, struct dockerfile_step *st)
{
	struct words w = {0};
	int r = words_split(p, rest, DOCKERFILE_MAX_ARGS + 1, &w);
	if (r == 0 && w.n == 0)
		r = perr(p, "ARG needs a name");
	for (size_t i = 0; r == 0 && i < w.n; i++)
		r = arg_declare(p, w.w[i], st);
	words_release(&w);
	return r;
}

/* Like Go's path.Clean of an absolute path. */
static char *path_clean_abs(const char *path)
{
	struct sbuf out = {.max = SIZE_MAX / 2};
	const char *s = path;
	while (*s) {
		while (*s == '/')
			s++;
		size_t n = strcspn(s, "/");
		if (n == 0 || (n == 1 && s[0] == '.')) {
			s += n;
			continue;
		}
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			char *slash = out.s ? strrchr(out.s, '/') : NULL;
			if (slash) {
				out.n = (size_t)(slash - out.s);
				out.s[out.n] = '\0';
			}
		} else {
			sbuf_addc(&out, '/');
			sbuf_add(&out, s, n);
		}
		s += n;
	}
	if (out.n == 0)
		sbuf_addc(&out, '/');
	return sbuf_take(&out);
}

static int parse_workdir(struct parser *p, const char *rest, struct dockerfile_step *st)
{
	cleanup_free char *v = NULL;
	int r = word_expand(p, rest, &v);
	if (r < 0)
		return r;
	if (!v[0])
		return perr(p, "WORKDIR needs a path");
	cleanup_free char *joined = v[0] == '/' ? xstrdup(v) : xasprintf("%s/%s", p->workdir, v);
	st->value = path_clean_abs(joined);
	if (strlen(st->value) > DOCKERFILE_MAX_WORD)
		return perr_big(p, "the WORKDIR is longer than %d bytes", DOCKERFILE_MAX_WORD);
	free(p->workdir);
	p->workdir = xstrdup(st->value);
	return 0;
}

static bool port_valid(const char *s)
{
	char *end;
	errno = 0;
	unsigned long a = strtoul(s, &end, 10);
	if (end == s || !isdigit((unsigned char)s[0]) || errno || a == 0 || a > 65535)
		return false;
	if (*end == '-') {
		const char *b = end + 1;
		unsigned long z = strtoul(b, &end, 10);
		if (end == b || !isdigit((unsigned char)b[0]) || z < a || z > 65535)
			return false;
	}
	return !*end || !strcasecmp(end, "/tcp") || !strcasecmp(end, "/udp") || !strcasecmp(end, "/sctp");
}

static int parse_expose(struct parser *p, const char *rest, struct dockerfile_step *st)
{
	struct words w = {0};
	int r = words_split(p, rest, 1024, &w);
	if (r == 0 && w.n == 0)
		r = perr(p, "EXPOSE needs a port");
	if (r == 0)
		st->ports = xcalloc(w.n, sizeof(*st->ports));
	for (size_t i = 0; r == 0 && i < w.n; i++) {
		char *v = NULL;
		r = word_expand(p, w.w[i], &v);
		if (r == 0 && !port_valid(v))
			r = perr(p, "EXPOSE %.64s: a port is N, N-M, N/tcp or N/udp", v);
		if (r < 0)
			free(v);
		else
			st->ports[st->n_ports++] = v;
	}
	words_release(&w);
	return r;
}

static int parse_from(struct parser *p, const char *rest)
{
	struct dockerfile *df = p->df;
	if (df->from)
		return perr(p, "multi-stage builds are not supported (a second FROM)");
	if (!strncmp(rest, "--", 2))
		return perr(p, "FROM %.40s is not supported", rest);
	struct words w = {0};
	int r = words_split(p, rest, 4, &w);
	if (r < 0)
		return r;
	if (w.n != 1 && !(w.n == 3 && !strcasecmp(w.w[1], "AS")))
		r = perr(p, "FROM takes an image and optionally AS name");
	char *from = NULL;
	if (r == 0)
		r = word_expand(p, w.w[0], &from);
	if (r == 0 && !from[0])
		r = perr(p, "FROM names no image (an ARG without a value?)");
	if (r == 0) {
		df->from = TAKE_PTR(from);
		df->from_alias = w.n == 3 ? xstrdup(w.w[2]) : NULL;
		df->from_line = p->line;
	}
	free(from);
	words_release(&w);
	return r;
}

/* ---------------------------------------------------------------- the step key */

static void key_field(struct sbuf *k, const char *s)
{
	char len[32];
	if (!s) {
		sbuf_add(k, " -", 2);
		return;
	}
	snprintf(len, sizeof(len), " %zu:", strlen(s));
	sbuf_add(k, len, strlen(len));
	sbuf_add(k, s, strlen(s));
}

static char *step_key_make(const struct dockerfile_step *st)
{
	struct sbuf k = {.max = SIZE_MAX / 2};
	char num[32];
	const char *name = dockerfile_kind_name(st->kind);
	sbuf_add(&k, name, strlen(name));
	snprintf(num, sizeof(num), "%zu", st->argv.argc);
	key_field(&k, num);
	for (size_t i = 0; i < st->argv.argc; i++)
		key_field(&k, st->argv.argv[i]);
	snprintf(num, sizeof(num), "%zu", st->n_sources);
	key_field(&k, num);
	for (size_t i = 0; i < st->n_sources; i++)
		key_field(&k, st->sources[i]);
	key_field(&k, st->dest);
	key_field(&k, st->chown);
	snprintf(num, sizeof(num), "%d", st->chmod);
	key_field(&k, num);
	snprintf(num, sizeof(num), "%zu", st->pairs.n);
	key_field(&k, num);
	for (size_t i = 0; i < st->pairs.n; i++) {
		key_field(&k, st->pairs.keys[i]);
		key_field(&k, st->pairs.values[i]);
	}
	key_field(&k, st->value);
	snprintf(num, sizeof(num), "%zu", st->n_ports);
	key_field(&k, num);
	for (size_t i = 0; i < st->n_ports; i++)
		key_field(&k, st->ports[i]);
	return sbuf_take(&k);
}

/* ---------------------------------------------------------------- instructions */

static const struct {
	const char *name;
	int kind; /* a dockerfile_kind; -1 FROM; -2 refused; -3 MAINTAINER */
} instructions[] = {
    {"FROM", -1},
    {"RUN", DOCKERFILE_RUN},
    {"COPY", DOCKERFILE_COPY},
    {"ADD", DOCKERFILE_ADD},
    {"ENV", DOCKERFILE_ENV},
    {"WORKDIR", DOCKERFILE_WORKDIR},
    {"USER", DOCKERFILE_USER},
    {"ARG", DOCKERFILE_ARG},
    {"CMD", DOCKERFILE_CMD},
    {"ENTRYPOINT", DOCKERFILE_ENTRYPOINT},
    {"LABEL", DOCKERFILE_LABEL},
    {"EXPOSE", DOCKERFILE_EXPOSE},
    {"MAINTAINER", -3},
    {"ONBUILD", -2},
    {"SHELL", -2},
    {"HEALTHCHECK", -2},
    {"VOLUME", -2},
    {"STOPSIGNAL", -2},
};

const char *dockerfile_kind_name(enum dockerfile_kind kind)
{
	for (size_t i = 0; i < ARRAY_SIZE(instructions); i++)
		if (instructions[i].kind == (int)kind)
			return instructions[i].name;
	return "?";
}

const char *dockerfile_step_key(const struct dockerfile_step *step)
{
	return step->key;
}

static void step_release(struct dockerfile_step *st)
{
	free(st->text);
	argv_release(&st->argv);
	for (size_t i = 0; i < st->n_sources; i++)
		free(st->sources[i]);
	free(st->sources);
	free(st->dest);
	free(st->chown);
	kv_list_release(&st->pairs);
	free(st->value);
	for (size_t i = 0; i < st->n_ports; i++)
		free(st->ports[i]);
	free(st->ports);
	free(st->key);
}

static int step_fields(struct parser *p, const char *name, const char *rest, struct dockerfile_step *st)
{
	if (st->kind != DOCKERFILE_COPY && st->kind != DOCKERFILE_ADD && !strncmp(rest, "--", 2) &&
	    st->kind != DOCKERFILE_ENV && st->kind != DOCKERFILE_LABEL && st->kind != DOCKERFILE_USER)
		return perr(p, "%s %.40s is not supported (no flags are)", name, rest);
	switch (st->kind) {
	case DOCKERFILE_RUN:
	case DOCKERFILE_CMD:
	case DOCKERFILE_ENTRYPOINT:
		return parse_command(p, name, rest, st);
	case DOCKERFILE_COPY:
	case DOCKERFILE_ADD:
		return parse_copy(p, name, rest, st);
	case DOCKERFILE_ENV:
	case DOCKERFILE_LABEL:
		return parse_pairs(p, rest, st, st->kind == DOCKERFILE_ENV);
	case DOCKERFILE_WORKDIR:
		return parse_workdir(p, rest, st);
	case DOCKERFILE_USER: {
		int r = word_expand(p, rest, &st->value);
		if (r == 0 && !st->value[0])
			r = perr(p, "USER needs a user");
		return r;
	}
	case DOCKERFILE_ARG:
		return parse_arg(p, rest, st);
	case DOCKERFILE_EXPOSE:
		return parse_expose(p, rest, st);
	}
	return perr(p, "unknown instruction");
}

static char *text_shown(const char *line)
{
	if (strlen(line) <= DOCKERFILE_TEXT_SHOWN)
		return xstrdup(line);
	return xasprintf("%.*s...", DOCKERFILE_TEXT_SHOWN, line);
}

/* name is NULL for MAINTAINER. */
static int add_step(struct parser *p, enum dockerfile_kind kind, const char *name, const char *rest, const char *line)
{
	struct dockerfile *df = p->df;
	df->steps = xrealloc(df->steps, (df->n_steps + 1) * sizeof(*df->steps));
	struct dockerfile_step *st = &df->steps[df->n_steps];
	*st = (struct dockerfile_step){.kind = kind, .line = p->line, .chmod = -1};
	int r = 0;
	if (!name) { /* MAINTAINER: the label Docker makes of it, as written */
		if (!rest[0])
			return perr(p, "MAINTAINER needs a name");
		kv_append(&st->pairs, "maintainer", rest);
	} else {
		r = step_fields(p, name, rest, st);
	}
	if (r < 0) {
		step_release(st);
		return r;
	}
	st->text = text_shown(line);
	st->key = step_key_make(st);
	df->n_steps++;
	return 0;
}

static int instruction_dispatch(struct parser *p, char *line)
{
	size_t n = strcspn(line, " \t");
	char *rest = line + n;
	rest += skip_blank(rest, strlen(rest));
	size_t end = strlen(rest);
	while (end > 0 && isspace((unsigned char)rest[end - 1]))
		rest[--end] = '\0';
	int kind = -4;
	const char *name = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(instructions); i++)
		if (strlen(instructions[i].name) == n && !strncasecmp(line, instructions[i].name, n)) {
			kind = instructions[i].kind;
			name = instructions[i].name;
		}
	if (kind == -4)
		return perr(p, "unknown instruction %.*s", (int)MIN(n, (size_t)40), line);
	if (kind == -2)
		return perr(p, "%s is not supported by Airlock's template builds", name);
	if (kind == -1)
		return parse_from(p, rest);
	if (!p->df->from && kind != DOCKERFILE_ARG)
		return perr(p, "%s before FROM: a Dockerfile starts with FROM (only ARG may come before it)", name);
	if (!p->df->from)
		return parse_arg(p, rest, NULL);
	if (kind == -3)
		return add_step(p, DOCKERFILE_LABEL, NULL, rest, line);
	return add_step(p, (enum dockerfile_kind)kind, name, rest, line);
}

void dockerfile_state_at(const struct dockerfile *df, size_t step, struct dockerfile_state *ret)
{
	struct dockerfile_state st = {.workdir = "/"};
	struct kv_list args = {0};
	for (size_t i = 0; i < step && i < df->n_steps; i++) {
		const struct dockerfile_step *s = &df->steps[i];
		for (size_t k = 0; s->kind == DOCKERFILE_ENV && k < s->pairs.n; k++)
			kv_set(&st.env, s->pairs.keys[k], s->pairs.values[k]);
		for (size_t k = 0; s->kind == DOCKERFILE_ARG && k < s->pairs.n; k++)
			kv_set(&args, s->pairs.keys[k], s->pairs.values[k]);
		if (s->kind == DOCKERFILE_WORKDIR)
			st.workdir = s->value;
		else if (s->kind == DOCKERFILE_USER)
			st.user = s->value;
		else if (s->kind == DOCKERFILE_CMD)
			st.cmd = &s->argv;
		else if (s->kind == DOCKERFILE_ENTRYPOINT)
			st.entrypoint = &s->argv;
	}
	for (size_t k = 0; k < st.env.n; k++)
		kv_append(&st.run_env, st.env.keys[k], st.env.values[k]);
	for (size_t k = 0; k < args.n; k++)
		if (args.values[k] && kv_find(&st.env, args.keys[k]) < 0)
			kv_append(&st.run_env, args.keys[k], args.values[k]);
	kv_list_release(&args);
	*ret = st;
}

void dockerfile_state_release(struct dockerfile_state *st)
{
	kv_list_release(&st->env);
	kv_list_release(&st->run_env);
	*st = (struct dockerfile_state){0};
}

void dockerfile_free(struct dockerfile *df)
{
	if (!df)
		return;
	free(df->from);
	free(df->from_alias);
	for (size_t i = 0; i < df->n_steps; i++)
		step_release(&df->steps[i]);
	free(df->steps);
	free(df);
}

static int parse_all(struct parser *p, const char *text, size_t len)
{
	if (len > DOCKERFILE_MAX_BYTES)
		return perr_big(p, "the Dockerfile is larger than %d bytes", DOCKERFILE_MAX_BYTES);
	if (memchr(text, '\0', len))
		return perr(p, "the Dockerfile holds a NUL byte (is it a text file?)");
	if (p->build_args && p->build_args->n > DOCKERFILE_MAX_ARGS)
		return perr_big(p, "more than %d build args", DOCKERFILE_MAX_ARGS);
	struct reader rd = {.text = text, .len = len};
	int r = read_directives(p, &rd);
	size_t count = 0;
	char *line = NULL;
	while (r == 0 && (r = next_instruction(p, &rd, &line)) > 0) {
		if (++count > DOCKERFILE_MAX_INSTRUCTIONS)
			r = perr_big(p, "more than %d instructions", DOCKERFILE_MAX_INSTRUCTIONS);
		else
			r = instruction_dispatch(p, line);
		free(TAKE_PTR(line));
	}
	if (r == 0 && !p->df->from) {
		p->line = 0;
		r = perr(p, "no FROM instruction (a Dockerfile starts with FROM TEMPLATE)");
	}
	return r;
}

int dockerfile_parse(const char *text, size_t len, const struct kv_list *build_args, struct dockerfile **ret,
                     struct al_error *err)
{
	struct parser p = {
	    .escape = '\\',
	    .build_args = build_args,
	    .workdir = xstrdup("/"),
	    .df = xcalloc(1, sizeof(struct dockerfile)),
	    .err = err,
	};
	int r = parse_all(&p, text, len);
	kv_list_release(&p.env);
	kv_list_release(&p.args);
	kv_list_release(&p.meta);
	free(p.workdir);
	if (r < 0) {
		dockerfile_free(p.df);
		return r;
	}
	*ret = p.df;
	return 0;
}
