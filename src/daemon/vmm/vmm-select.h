/* SPDX-License-Identifier: Apache-2.0 */
/* Which VMM backend runs the sandboxes: `--backend auto|qemu|firecracker`.
 * auto takes Firecracker when its binary is on PATH and /dev/kvm is usable,
 * else QEMU (KVM when /dev/kvm is usable, TCG otherwise). The choice is a pure
 * function of what the host has (so it is unit-tested) and always comes with
 * a sentence saying why, which airlockd prints at start. */
#ifndef AIRLOCK_VMM_SELECT_H
#define AIRLOCK_VMM_SELECT_H

#include <stdbool.h>

#include "error.h"

enum vmm_backend {
	VMM_BACKEND_AUTO = 0,
	VMM_BACKEND_QEMU,
	VMM_BACKEND_FIRECRACKER,
};

#define VMM_QEMU_BINARY "qemu-system-x86_64"
#define VMM_FIRECRACKER_BINARY "firecracker"

/* What the host offers. */
struct vmm_host {
	bool qemu;                  /* qemu-system-x86_64 is on PATH */
	bool firecracker;           /* firecracker is on PATH */
	char firecracker_path[256]; /* where, when found */
	bool kvm;                   /* /dev/kvm opens read-write and speaks KVM API 12 */
	char kvm_why[200];          /* why not, when !kvm */
};

struct vmm_choice {
	enum vmm_backend backend; /* QEMU or FIRECRACKER */
	bool kvm;                 /* the accelerator: KVM, else TCG (QEMU only) */
	char reason[1024];        /* one sentence: what was chosen and why */
};

/* "auto", "qemu", "firecracker"; -EINVAL otherwise. */
int vmm_backend_parse(const char *s, enum vmm_backend *ret);
const char *vmm_backend_name(enum vmm_backend b);

/* Looks at PATH and /dev/kvm. */
void vmm_host_probe(struct vmm_host *ret);

/* The decision. Fails (err says what is missing and what to do) when the
 * backend asked for cannot run here, or nothing can. */
int vmm_select(enum vmm_backend want, const struct vmm_host *host, struct vmm_choice *ret, struct al_error *err);

#endif
