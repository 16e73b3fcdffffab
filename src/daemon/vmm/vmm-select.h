/* SPDX-License-Identifier: Apache-2.0 */
/* Which VMM backend runs the sandboxes: `--backend auto|<backend>`. The
 * backends are the rows of one table (vmm-select.c); auto takes the first
 * that can run here, those on KVM only first: today Firecracker when its
 * binary is on PATH and /dev/kvm is usable, else QEMU (KVM when a guest
 * boots on it, TCG otherwise). The
 * choice is a pure function of what the host has (so it is unit-tested) and
 * always comes with a sentence saying why, which airlockd prints at start.
 * Adding a backend is its folder under vmm/ and a row of the table
 * (docs/vmm-backends.md). */
#ifndef AIRLOCK_VMM_SELECT_H
#define AIRLOCK_VMM_SELECT_H

#include <stdbool.h>
#include <stddef.h>

#include "accel.h"
#include "error.h"

struct vmm_ops;

/* One row of the backend table. */
struct vmm_backend {
	const struct vmm_ops *ops; /* ops->name: its --backend name; ops->binary: its program */
	const char *title;         /* its name in a sentence: "QEMU", "Firecracker" */
	const char *install;       /* what to do when its program is not on PATH */
	/* Runs on KVM only: chosen only where /dev/kvm is usable, and its
	 * accelerator is KVM without a probe. Else KVM or TCG, as the
	 * accelerator's plan and probe decide (accel.h). */
	bool kvm_only;
};

#define VMM_BACKENDS_MAX 8

/* The table: *ret its rows; returns how many. */
size_t vmm_backends(const struct vmm_backend **ret);

/* "auto, qemu or firecracker": --backend's values, from the table. */
void vmm_backend_names(char *buf, size_t size);
/* --backend's value: "auto" (*ret NULL) or a backend's name; -EINVAL with
 * err naming the choices otherwise. */
int vmm_backend_parse(const char *s, const struct vmm_backend **ret, struct al_error *err);
/* Its name; "auto" for NULL. */
const char *vmm_backend_name(const struct vmm_backend *b);

/* What the host offers. */
struct vmm_host {
	/* Each backend's program on PATH, in the table's order ("": none). */
	char path[VMM_BACKENDS_MAX][256];
	bool kvm;          /* /dev/kvm opens read-write and speaks KVM API 12 */
	char kvm_why[200]; /* why not, when !kvm */
};

struct vmm_choice {
	const struct vmm_backend *backend;
	bool kvm;          /* the accelerator: KVM, else TCG */
	char reason[1024]; /* one sentence: what was chosen and why */
};

/* Looks at PATH and /dev/kvm. */
void vmm_host_probe(struct vmm_host *ret);

/* The decision (want NULL: auto). Fails (err says what is missing and what
 * to do) when the backend asked for cannot run here, or nothing can. */
int vmm_select(const struct vmm_backend *want, const struct vmm_host *host, struct vmm_choice *ret,
               struct al_error *err);

/* The accelerator of the chosen backend, before any probe: KVM for a
 * kvm_only backend, else accel_plan()'s (kvm_why: why /dev/kvm cannot be
 * used; cpu_pinned: --cpu-model or NULL). Returns as accel_plan(): 0 decided,
 * 1 when a probe must decide, < 0 when the mode cannot be had. */
int vmm_choice_accel(const struct vmm_choice *c, enum accel_mode mode, const char *kvm_why, const char *cpu_pinned,
                     struct accel_info *ret, struct al_error *err);

/* The backend the accelerator's probe boots (accel-probe.h), and whose
 * kernel `airlockd --check` looks for: the table's first that is not
 * kvm_only. */
const struct vmm_ops *vmm_accel_probe_ops(void);

#endif
