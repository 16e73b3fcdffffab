/* SPDX-License-Identifier: Apache-2.0 */
/* The Dockerfile subset of template builds (issue 23): one stage, FROM then
 * RUN, COPY, ADD (local files only), ENV, WORKDIR, USER, ARG, CMD,
 * ENTRYPOINT, LABEL, EXPOSE. Docker's syntax (continuations, the escape
 * directive, comments, JSON exec form, $VAR substitution) with its values at
 * each step; everything else is refused with the line it is on. Pure: no
 * I/O, the builder (template-build.c) runs the steps. */
#ifndef AIRLOCK_DOCKERFILE_H
#define AIRLOCK_DOCKERFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "sandbox-model.h"

/* Limits on a client's Dockerfile, checked before anything is allocated. */
#define DOCKERFILE_MAX_BYTES (1024 * 1024)
#define DOCKERFILE_MAX_INSTRUCTIONS 1000
#define DOCKERFILE_MAX_LINE (64 * 1024) /* a logical line, continuations joined */
#define DOCKERFILE_MAX_SOURCES 256      /* sources of one COPY or ADD */
#define DOCKERFILE_MAX_ARGS 128         /* ARGs declared, and build args given */
#define DOCKERFILE_MAX_ENV 256          /* distinct ENV names */
#define DOCKERFILE_MAX_ENV_VALUE (32 * 1024)
#define DOCKERFILE_MAX_WORD (64 * 1024)           /* one word after substitution */
#define DOCKERFILE_MAX_EXPANDED (8 * 1024 * 1024) /* all substitution output of a file */
#define DOCKERFILE_MAX_SUBST_DEPTH 8              /* ${A:-${B:-...}} nesting */
#define DOCKERFILE_TEXT_SHOWN 200                 /* of an instruction, in progress */

enum dockerfile_kind {
	DOCKERFILE_RUN,
	DOCKERFILE_COPY,
	DOCKERFILE_ADD,
	DOCKERFILE_ENV,
	DOCKERFILE_WORKDIR,
	DOCKERFILE_USER,
	DOCKERFILE_ARG,
	DOCKERFILE_CMD,
	DOCKERFILE_ENTRYPOINT,
	DOCKERFILE_LABEL,
	DOCKERFILE_EXPOSE,
};

/* A NULL-terminated argv (argv[argc] == NULL). */
struct dockerfile_argv {
	size_t argc;
	char **argv;
};

struct dockerfile_step {
	enum dockerfile_kind kind;
	unsigned line; /* of the instruction's first line, from 1 */
	/* The instruction as written (continuations joined), at most
	 * DOCKERFILE_TEXT_SHOWN bytes then "...": for progress. */
	char *text;
	/* RUN, CMD, ENTRYPOINT: the exec form's array, or for the shell form
	 * {"/bin/sh", "-c", text} (no substitution: the shell does it). */
	struct dockerfile_argv argv;
	bool shell_form;
	/* COPY, ADD: sources relative to the context (as written, substituted:
	 * paths or globs), dest (as written: relative to the WORKDIR in effect),
	 * --chown's value (NULL if none), --chmod (-1 if none). */
	size_t n_sources;
	char **sources;
	char *dest;
	char *chown;
	int chmod;
	/* ENV, LABEL: the pairs in order. ARG: one pair per name, value the
	 * ARG's value at this step (the build arg, else the default), NULL when
	 * it has none. */
	struct kv_list pairs;
	/* WORKDIR: the absolute path (a relative one joined to the previous
	 * WORKDIR). USER: the user[:group] string. */
	char *value;
	/* EXPOSE: the ports as written ("80", "8080/tcp"), substituted. */
	size_t n_ports;
	char **ports;
	/* The canonical text of the step with substitutions applied
	 * (dockerfile_step_key). */
	char *key;
};

struct dockerfile {
	char *from;       /* the image (template) name, substituted */
	char *from_alias; /* FROM x AS y: y, or NULL */
	unsigned from_line;
	size_t n_steps;
	struct dockerfile_step *steps;
};

/* Parses a Dockerfile of len bytes (no NUL needed). build_args override the
 * defaults of the ARGs declared with those names (an undeclared one is
 * ignored). On error, err says "Dockerfile line N: ..." and nothing is
 * returned. */
int dockerfile_parse(const char *text, size_t len, const struct kv_list *build_args, struct dockerfile **ret,
                     struct al_error *err);
void dockerfile_free(struct dockerfile *df);

/* The step's canonical text, for the layer cache: its kind and every parsed
 * field after substitution, each length-prefixed (unambiguous). It does not
 * include the steps before it: a cache key chains the keys of every step
 * up to this one (an ARG or ENV step's key holds its values). */
const char *dockerfile_step_key(const struct dockerfile_step *step);
/* What is in effect at a step: the steps before it applied (step ==
 * n_steps: after the last, what the template keeps). Pointers are into df. */
struct dockerfile_state {
	struct kv_list env;     /* ENV, in the order first set: what the image keeps */
	struct kv_list run_env; /* what a RUN gets: env, then the ARGs with a value that ENV does not set */
	const char *workdir;    /* "/" when there was no WORKDIR */
	const char *user;       /* NULL when there was no USER (the parent's) */
	const struct dockerfile_argv *cmd, *entrypoint; /* the last ones, or NULL (the parent's) */
};
void dockerfile_state_at(const struct dockerfile *df, size_t step, struct dockerfile_state *ret);
void dockerfile_state_release(struct dockerfile_state *st);

/* "RUN", "COPY", ... */
const char *dockerfile_kind_name(enum dockerfile_kind kind);

#endif
