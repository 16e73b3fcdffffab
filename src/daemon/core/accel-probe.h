/* SPDX-License-Identifier: Apache-2.0 */
/* The accelerator probe (accel.h): KVM is trusted once a guest has booted on
 * it. A probe boots a template's kernel, initramfs and root filesystem under
 * QEMU with -accel kvm, in a jail like every VMM's (so the seccomp profile
 * and the jail are part of what it proves), to the agent's HELLO, once per
 * CPU model until one works; a model whose VMM ends by itself (QEMU cannot
 * set a guest MSR, say) makes way for the next one, a guest that stays
 * silent ends the probe. Its last VMM log stays in <state>/accel-probe/. */
#ifndef AIRLOCK_ACCEL_PROBE_H
#define AIRLOCK_ACCEL_PROBE_H

#include <limits.h>

#include "accel.h"
#include "sandbox.h"

#define ACCEL_PROBE_DIR "accel-probe"
/* The probe's guest: the smallest that says hello. */
#define ACCEL_PROBE_MEMORY_MIB 256
#define ACCEL_PROBE_TEMPLATE "minimal"

struct accel_probe_config {
	const struct daemon_config *daemon; /* state and image dirs, the backend (QEMU) */
	enum accel_mode mode;
	const char *cpu_pinned; /* --cpu-model, or NULL */
	unsigned timeout_s;     /* each CPU model's boot */
};

/* What a guest boots from the image dir: the kernel and initramfs every
 * sandbox boots, and the probe's template (minimal, else the first name that
 * has a rootfs.ext4). templates (templates_size 0: none) gets the names of
 * every template with a rootfs, comma-separated. -ENOENT when any is
 * missing (why says which). */
struct accel_probe_images {
	char kernel[PATH_MAX], initrd[PATH_MAX], rootfs[PATH_MAX];
};
int accel_probe_images(const struct daemon_config *d, struct accel_probe_images *ret, char *templates,
                       size_t templates_size, char *why, size_t why_size);

/* Runs the probe now: *ret is the decision (KVM, or TCG and why). Fails only
 * for --accel kvm, when no guest ran on KVM (err says why). */
int accel_probe_run(const struct accel_probe_config *pc, struct accel_info *ret, struct al_error *err);

/* Runs it on a thread of its own; the decision goes to accel_set() and the
 * log. pc is copied. */
void accel_probe_start(const struct accel_probe_config *pc);
/* Waits for that thread (at shutdown). */
void accel_probe_join(void);

/* How long a start may wait for the decision: every model's boot, and a
 * margin for the jail's set-up and clean-up. */
unsigned accel_probe_wait_s(const struct accel_probe_config *pc);

#endif
