/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template snapshots (issue 9): a template is booted once, to "agent
 * ready", with its RAM in a memfd mapped shared; its device state is saved
 * without that RAM (x-ignore-shared), the memfd sealed. A sandbox created
 * from the template is then a restore of that state over a private
 * copy-on-write mapping of the memfd: nothing is read, unchanged guest
 * pages are shared by every sandbox of the template, and the guest gets its
 * own identity at THAW (sandbox-boot.c).
 *
 * One snapshot per (template, vCPUs, memory), made on first use (at most
 * TSNAP_MAX; the least recently used goes); a new kernel, initramfs or
 * template image makes it again. It outlives the daemon: once made it is
 * kept on disk (template-snap-disk.h: its RAM written out of the memfd,
 * then a manifest of what it was made of and of its files' digests), and
 * the first use after a restart checks both, once, loading the RAM into a
 * new sealed memfd; a snapshot that does not match is removed and made
 * again, and one without a manifest (cut by a crash) is never used.
 *
 * A backend whose RAM cannot be a file the daemon gives (vmm_ops without
 * ram_fd: Firecracker) boots the template on anonymous memory and saves it
 * like a sandbox snapshot: memory file (and device state file, state_apart)
 * and disk; a create restores them, the VMM mapping the memory file
 * private (Firecracker's File memory backend): the same sharing of
 * unchanged pages, through the page cache.
 */
#ifndef AIRLOCK_TEMPLATE_SNAP_H
#define AIRLOCK_TEMPLATE_SNAP_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

struct daemon_config;
struct tsnap;

#define TSNAP_MAX 8

struct tsnap_request {
	const char *template_name;
	unsigned vcpus;
	unsigned memory_mib;
	const char *kernel, *initrd, *rootfs; /* resolved image paths */
	/* Asked while it waits for a build (NULL: never): true ends the wait
	 * (-ECANCELED: a DELETE of the create); the build goes on for the others. */
	bool (*cancelled)(void *arg);
	void *cancel_arg;
};

/* Kills a template build a crashed daemon left, removes what is not a
 * complete snapshot from <state-dir>/template-snapshots and notes the rest
 * (at most TSNAP_MAX) for their first use. */
void tsnap_init(const struct daemon_config *cfg);
/* Frees every snapshot (the daemon stops); the kept ones stay on disk. */
void tsnap_shutdown(void);

/* The snapshot for req, made now when there is none (or its images
 * changed): a reference the caller puts back. -EAGAIN: making it failed
 * recently (not tried again for a minute; the caller boots cold).
 * -ECANCELED: req->cancelled said so while it waited. The build runs on a
 * thread of its own, so that a waiter can stop waiting. */
int tsnap_get(const struct tsnap_request *req, struct tsnap **ret, struct al_error *err);
void tsnap_put(struct tsnap *t);

/* The guest's RAM, a sealed memfd (map it private), where the backend's RAM
 * can be one (ram_fd); else -1. */
int tsnap_mem_fd(const struct tsnap *t);
/* The file of the save (vmm_ops.save's `out`: a restore's incoming_fd):
 * the device state without the RAM when that is tsnap_mem_fd's, else the
 * guest's memory too (0644 in a directory of root's; open it and hand the
 * VMM the fd, which it maps private). */
const char *tsnap_saved_path(const struct tsnap *t);
/* The device state of a backend that keeps it apart (state_apart: a
 * restore's incoming_state_fd); else NULL. */
const char *tsnap_state_path(const struct tsnap *t);
/* The disk at that moment. */
const char *tsnap_disk_path(const struct tsnap *t);
/* Where the guest has the Airlock CA ("": it was not installed). */
const char *tsnap_ca_bundle(const struct tsnap *t);
/* How long making it took (ms). */
uint64_t tsnap_build_ms(const struct tsnap *t);

#endif
