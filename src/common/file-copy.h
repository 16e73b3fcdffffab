/* SPDX-License-Identifier: Apache-2.0 */
/* Copy-on-write copies of disk images and snapshot files: a reflink (FICLONE)
 * where the filesystem can share extents (btrfs, XFS with reflink, bcachefs),
 * else a sparse copy that moves only the data extents (SEEK_DATA/SEEK_HOLE),
 * so a mostly empty raw image costs what its data costs, not its size. */
#ifndef AIRLOCK_FILE_COPY_H
#define AIRLOCK_FILE_COPY_H

#include <stdint.h>
#include <sys/types.h>

enum file_copy_method {
	FILE_COPY_REFLINK = 1, /* extents shared: instant, no space until written */
	FILE_COPY_SPARSE,      /* data extents copied, holes kept */
};

/* Copies the regular file src to dst (created with mode; it must not exist;
 * neither may be a symlink), then fsyncs dst. On failure dst is removed.
 * *ret_method (optional) says how. */
int file_copy_cow(const char *src, const char *dst, mode_t mode, enum file_copy_method *ret_method);

/* The sparse copy alone, between open files (out is truncated first): what
 * file_copy_cow falls back to; exposed for tests. */
int file_copy_sparse_fd(int in, int out);

/* Makes path at least size_bytes long, the new part a hole (never shrinks). */
int file_grow(const char *path, uint64_t size_bytes);

const char *file_copy_method_name(enum file_copy_method m);

#endif
