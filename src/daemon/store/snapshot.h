/* SPDX-License-Identifier: Apache-2.0 */
/* Snapshot artifacts: <state-dir>/snapshots/<id>/ holding memory.bin (the
 * VMM's save: the guest's memory, and its device state unless the backend
 * keeps that apart in memory.bin.vmstate), the sandbox's disk at that moment
 * (as its backend's disk is: disk.qcow2, an overlay over its template, or
 * disk.raw, the whole disk) and snapshot.json; records in the store.
 * A snapshot is immutable: restores copy its disk and only read its memory. */
#ifndef AIRLOCK_SNAPSHOT_H
#define AIRLOCK_SNAPSHOT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "digest.h"
#include "error.h"

#define SNAPSHOT_ID_MAX 31
#define SNAPSHOT_NAME_MAX 64
#define SNAPSHOT_MEMORY "memory.bin"
#define SNAPSHOT_DISK "disk.qcow2"
#define SNAPSHOT_DISK_RAW "disk.raw"
#define SNAPSHOT_STATE "memory.bin.vmstate"
#define SNAPSHOT_META "snapshot.json"

struct store;

/* What a snapshot's disk is: what its backend's disk is (the caller, who
 * knows the backend, says; the store knows no backend). */
enum snapshot_disk_kind {
	SNAPSHOT_DISK_OVERLAY, /* SNAPSHOT_DISK: a qcow2 overlay over its template */
	SNAPSHOT_DISK_WHOLE,   /* SNAPSHOT_DISK_RAW: the whole disk, raw */
};

struct snapshot_info {
	char id[SNAPSHOT_ID_MAX + 1];
	char name[SNAPSHOT_NAME_MAX + 1];
	char sandbox_id[32]; /* the parent */
	char tenant[64];
	char template_name[64];
	unsigned vcpus, memory_mib;
	char backend[16];
	/* The accelerator and CPU model it ran on: its saved CPU state loads only
	 * on the same ("" in records from before: not checked). */
	char accel[8], cpu[64];
	char kernel_sha[65], initrd_sha[65]; /* of the guest kernel and initramfs it ran */
	char memory_sha[65], disk_sha[65];
	char state_sha[65]; /* of SNAPSHOT_STATE; "" when its backend keeps no device state apart */
	uint64_t created_ms;
	uint64_t size_bytes;
	uint64_t generation; /* restores run at generation + 1 and up */
	bool internal;       /* made for a fork; hidden and removed afterwards */
};

int snapshots_init(struct store *s, const char *state_dir, struct al_error *err);
/* Lets go of the store, after the snapshot calls in progress; later ones fail
 * with "unavailable". Before store_close(). */
void snapshots_shutdown(void);
bool snapshot_id_valid(const char *id);
bool snapshot_name_valid(const char *name);
void snapshot_new_id(char out[SNAPSHOT_ID_MAX + 1]);
/* <state-dir>/snapshots/<id> (malloc'd). */
char *snapshot_dir(const char *id);

int snapshot_insert(const struct snapshot_info *info, struct al_error *err);
/* tenant NULL = any; another tenant's snapshot is "not found". */
int snapshot_get(const char *id, const char *tenant, struct snapshot_info *ret, struct al_error *err);
int snapshot_list(const char *tenant, const char *sandbox_id, struct snapshot_info **ret, size_t *ret_n,
                  struct al_error *err);
int snapshot_delete(const char *id, const char *tenant, struct al_error *err);
/* At start-up, before any snapshot is taken: what a crash left goes. Every
 * internal snapshot (a fork that did not finish: a finished one deletes its
 * own), and every directory under snapshots/ that no record owns (published
 * but not recorded, or half-written: *.tmp). Counts what went. */
int snapshot_sweep(unsigned *ret_forks, unsigned *ret_dirs, struct al_error *err);
/* Bytes of snapshots a tenant holds (an error when the store cannot say:
 * the quota check then fails closed). */
int snapshot_tenant_bytes(const char *tenant, uint64_t *ret, struct al_error *err);
/* Re-reads the files (its disk of this kind) and compares their digests
 * (-EBADMSG on a mismatch). */
int snapshot_verify(const struct snapshot_info *info, enum snapshot_disk_kind disk, struct al_error *err);

/* The name of the disk in a snapshot whose disk is of this kind. */
const char *snapshot_disk_name(enum snapshot_disk_kind kind);

json_t *snapshot_to_json(const struct snapshot_info *info);

#endif
