/* SPDX-License-Identifier: Apache-2.0 */
/* A small tar (ustar + pax) writer and a streaming extractor for 'airlock cp'. */
#ifndef AIRLOCK_CLI_TAR_H
#define AIRLOCK_CLI_TAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "error.h"

#define TAR_BLOCK 512
#define TAR_NAME_MAX 4096       /* an entry's whole name or link target */
#define TAR_PAX_MAX (64u << 10) /* a pax extended header's data */
/* What one copy from a sandbox may bring by default ('airlock cp --max-bytes,
 * --max-entries' raise it): the guest chooses the archive, so its size and
 * its number of entries are bounded like any other guest input. */
#define CP_MAX_BYTES_DEFAULT (1ull << 30)
#define CP_MAX_ENTRIES_DEFAULT 100000ull

struct tar_reader;

/* An extractor into the directory dest_dirfd (not closed). If rename_first is
 * not NULL, the first component of every name is replaced by it (cp into a new
 * name); it must be one plain component (not "", "." or "..": aborts). The
 * limits start at CP_MAX_BYTES_DEFAULT and CP_MAX_ENTRIES_DEFAULT. */
struct tar_reader *cli_tar_reader_new(int dest_dirfd, const char *rename_first);
/* Caps the data of all entries together (max_bytes, the bytes of every
 * entry's data, whether written or skipped) and the number of headers
 * (max_entries, extended headers included); going over either stops the
 * extraction with an error naming the flag that raises it. */
void cli_tar_reader_set_limits(struct tar_reader *t, uint64_t max_bytes, uint64_t max_entries);
void cli_tar_reader_free(struct tar_reader *t);
void cli_tar_reader_freep(struct tar_reader **t);
#define cleanup_cli_tar_reader __attribute__((cleanup(cli_tar_reader_freep)))
/* Feeds bytes of the stream; < 0 with err set on a bad or hostile entry (the
 * extraction stops there). */
int cli_tar_reader_feed(struct tar_reader *t, const void *buf, size_t len, struct al_error *err);
/* Checks that the stream ended cleanly; returns the number of entries skipped
 * because they are not files, directories or symlinks (hard links, devices). */
int cli_tar_reader_finish(struct tar_reader *t, struct al_error *err);
/* Regular files, directories and symlinks created so far. */
uint64_t cli_tar_reader_entries(const struct tar_reader *t);

/* Writes the file, directory tree or symlink at src to out_fd as entries
 * named name (and name/...). Sockets, devices and fifos are skipped (counted
 * in *skipped). */
int cli_tar_write_path(int out_fd, const char *src, const char *name, unsigned *skipped, struct al_error *err);
/* One entry for the file, symlink (never followed) or directory (its header
 * only, named name/) at src, whose lstat is lst; nothing for another type. */
int cli_tar_write_entry(int out_fd, const char *src, const char *name, const struct stat *lst, struct al_error *err);
/* Whether cli_tar_write_entry() writes something for this type. */
bool cli_tar_type_ok(const struct stat *st);
/* The two zero blocks that end an archive. */
int cli_tar_write_end(int out_fd, struct al_error *err);

#endif
