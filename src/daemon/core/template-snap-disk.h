/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template snapshots kept across restarts of the daemon (template-snap.h):
 * the files of a snapshot's directory, the RAM of a ram_fd backend written
 * out of its memfd (sparse: zero pages are holes) and read back into a new
 * one, and the manifest that says what the snapshot was made of and what
 * its files' digests are. The manifest is written last (tmp + fsync +
 * rename, after every file is fsynced): a directory without one is a
 * half-made snapshot and is never used.
 */
#ifndef AIRLOCK_TEMPLATE_SNAP_DISK_H
#define AIRLOCK_TEMPLATE_SNAP_DISK_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"

struct daemon_config;
struct tsnap_request;

/* The manifest's "format": another one is rebuilt, never read. */
#define TSNAP_FORMAT 1
#define TSNAP_MANIFEST "manifest.json"
#define TSNAP_MANIFEST_MAX (64u * 1024u)
/* The RAM of a ram_fd backend's snapshot, on disk. */
#define TSNAP_RAM_FILE "memory.ram"

/* What a snapshot of req is made of on this daemon now: the backend, the
 * VMM's binary, airlockd's own binary, the accelerator and CPU model, the
 * kernel, initramfs and rootfs (path, size, mtime, inode, sha256) and the
 * Airlock CA's certificate (sha256). A file's digest is computed once per
 * process while its path, inode, size, mtime and ctime stay the same. NULL
 * with err when one cannot be read. */
json_t *tsnap_inputs_new(const struct daemon_config *cfg, const struct tsnap_request *req, struct al_error *err);
/* false when want and got are the same inputs; else true with the first
 * input that differs named in buf. */
bool tsnap_inputs_differ(const json_t *want, const json_t *got, char *buf, size_t size);

/* The sha256 and size of a file; with sync, fsyncs it first. */
int tsnap_file_digest(const char *path, bool sync, uint64_t *ret_size, char ret_sha[65]);
/* The digest of a snapshot's RAM (the manifest's "sha256_pages" of
 * TSNAP_RAM_FILE): sha256 over its size (64-bit little-endian), then, in
 * order of offset, over each 4 KiB page that is not all zeros, preceded
 * by its offset (the same). A zero page and a hole are the same content;
 * any byte that differs changes it. Computed without reading the holes. */
#define TSNAP_RAM_DIGEST "sha256_pages"

/* Writes the first size bytes of mem_fd to a new file path (0600, zero
 * pages left as holes), fsynced; their TSNAP_RAM_DIGEST. */
int tsnap_ram_save(int mem_fd, uint64_t size, const char *path, char ret_sha[65], struct al_error *err);
/* A new memfd (MFD_ALLOW_SEALING, not sealed yet) with the contents of the
 * file path, which must be size bytes long; their TSNAP_RAM_DIGEST,
 * computed over what was put in the memfd. */
int tsnap_ram_load(const char *path, uint64_t size, int *ret_fd, char ret_sha[65], struct al_error *err);

/* Writes dir's manifest (tmp + fsync + rename, then fsyncs dir). */
int tsnap_manifest_write(const char *dir, const json_t *manifest, struct al_error *err);
/* dir's manifest when it is there, parses, is of TSNAP_FORMAT and names a
 * key; else NULL. */
json_t *tsnap_manifest_read(const char *dir);

#endif
