/* SPDX-License-Identifier: Apache-2.0 */
/* The build context of a template build (issue 23): the tar a client uploads
 * with its Dockerfile (plain or gzip), read once and indexed, its file
 * contents spooled to an unlinked temporary file (memory stays bounded
 * whatever the sizes). COPY and ADD take files from it as Docker does and
 * give the guest a tar to extract at its root. */
#ifndef AIRLOCK_BUILD_CONTEXT_H
#define AIRLOCK_BUILD_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Limits on a client's context tar, checked as it is read. */
#define BUILD_CONTEXT_MAX_ENTRIES 100000                    /* entries, and directories they imply */
#define BUILD_CONTEXT_MAX_PATH 4096                         /* one name or link target */
#define BUILD_CONTEXT_MAX_NAMES (32u * 1024 * 1024)         /* all names and link targets */
#define BUILD_CONTEXT_MAX_BYTES (8ull * 1024 * 1024 * 1024) /* all file contents, spooled */
#define BUILD_CONTEXT_MAX_SYMLINK_HOPS 40                   /* following a COPY source's symbolic links */
#define BUILD_CONTEXT_MAX_LINK_HOPS 16                      /* a hard link to a hard link ... */

struct build_context;

/* Reads the tar from tar_fd (not closed) up to its end marker. Paths are
 * normalized (./ and leading / dropped); `..` components, devices, fifos,
 * a path under a non-directory and anything over a limit are refused with a
 * message naming the entry. A later entry of the same path replaces an
 * earlier one (as extraction would). The spool goes to $TMPDIR (else
 * /var/tmp) as an O_TMPFILE. */
int build_context_open(int tar_fd, struct build_context **ret, struct al_error *err);
void build_context_free(struct build_context *ctx);

/* A regular file of the context (a hard link: its target's), at most max
 * bytes (-EFBIG beyond), NUL-terminated. -ENOENT if there is none. */
int build_context_read_file(struct build_context *ctx, const char *path, size_t max, char **ret_data, size_t *ret_len,
                            struct al_error *err);

/* One COPY or ADD. */
struct build_copy {
	/* Context paths or fnmatch globs (FNM_PATHNAME). A source that is (or
	 * goes through) a symbolic link is followed inside the context, as
	 * Docker does; links inside a copied directory stay links. */
	const char *const *sources;
	size_t n_sources;
	const char *dest;    /* absolute, or relative to workdir; a trailing / makes it a directory */
	const char *workdir; /* absolute; NULL is / */
	/* The owner of everything written and of the directories created:
	 * uid/gid (-1: 0, Docker's default), and the names when --chown gave
	 * names (put in the tar as uname/gname for the guest's tar to map
	 * through its own /etc/passwd and /etc/group), or NULL. */
	long uid, gid;
	const char *user, *group;
	int chmod_mode; /* -1: the modes of the context */
	/* Whether the tar holds every directory above the files (mode 0755,
	 * owned as above), as Docker makes the ones missing. (dest's own
	 * directory, when a directory is copied into it, is always an entry.)
	 * Only for an extractor that keeps existing directories' metadata and
	 * symlinks to directories (GNU tar's --no-overwrite-dir
	 * --keep-directory-symlink): a plain `tar -x` as root would chown /usr
	 * for COPY --chown=app f /usr/local/bin/, or put a directory in place of
	 * a merged-/usr image's /bin symlink. Without it the extractor makes the
	 * missing ones (root's, 0755 under umask 022). */
	bool parents;
	/* Context paths never copied, nor anything under them. */
	const char *const *exclude;
	size_t n_exclude;
};

/* Writes to out_fd a pax tar of the copy: entries named by their absolute
 * path in the guest without its leading /, in order (a directory before
 * what is in it), the parents first when copy->parents; hard links become
 * regular files. The guest extracts it at / as root (`tar -x -p -C /`; GNU
 * tar maps uname/gname through the guest's own account files when they are
 * there, else takes the numeric ids; entries carry names only when given).
 * A directory inside a copied directory is an entry of its own, so an
 * extractor that replaces a symlink to a directory with a directory (GNU
 * tar without --keep-directory-symlink) does so for COPY rootfs/ / too.
 * ret_digest is SHA-256 over everything that decides the result (paths,
 * types, modes, owners, link targets, contents; not mtimes), for the layer
 * cache. A source matching nothing is an error naming it. */
int build_context_copy(struct build_context *ctx, const struct build_copy *copy, int out_fd, uint8_t ret_digest[32],
                       struct al_error *err);

#endif
