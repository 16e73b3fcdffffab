/* SPDX-License-Identifier: Apache-2.0 */
/* The sha256 of a file's contents, as 64 hex digits: what snapshots and
 * template snapshots record of their files and check them against. */
#ifndef AIRLOCK_DIGEST_H
#define AIRLOCK_DIGEST_H

/* The sha256 of what fd has from its offset on. */
int fd_sha256(int fd, char out[65]);
/* The sha256 of the file at path (not followed if a symlink). */
int file_sha256(const char *path, char out[65]);

#endif
