/* SPDX-License-Identifier: Apache-2.0 */
/* Which accelerator QEMU's guests run on: `airlockd --accel auto|kvm|tcg`.
 *
 * /dev/kvm's presence proves nothing (a nested KVM may open, create VMs and
 * still never run a Linux guest), so KVM is used only once a probe has
 * booted a guest on it to the agent's hello (accel-probe.c). The plan (what
 * is known without a probe) and the probe's verdict are pure functions,
 * unit-tested; the decision is process-wide, made once at start-up, and
 * every start of a VMM waits for it while the probe runs. */
#ifndef AIRLOCK_ACCEL_H
#define AIRLOCK_ACCEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

enum accel_mode {
	ACCEL_MODE_AUTO = 0,
	ACCEL_MODE_KVM,
	ACCEL_MODE_TCG,
};

#define ACCEL_CPU_MAX 64
#define ACCEL_REASON_MAX 512
/* TCG's CPU model: every feature QEMU can emulate. */
#define ACCEL_CPU_TCG "max"
#define ACCEL_PROBE_TIMEOUT_S_DEFAULT 10

struct accel_info {
	bool decided; /* false while the probe runs */
	bool kvm;     /* KVM, else TCG (meaningful once decided) */
	char cpu[ACCEL_CPU_MAX];
	char reason[ACCEL_REASON_MAX];
	uint64_t probe_ms; /* how long the probe took; 0: none ran */
};

/* "auto", "kvm", "tcg"; -EINVAL otherwise. */
int accel_mode_parse(const char *s, enum accel_mode *ret);
const char *accel_mode_name(enum accel_mode m);

/* A QEMU -cpu value from the operator (--cpu-model): a model name and
 * +/-feature or key=value options, [A-Za-z0-9_.,=+-], 1-63 bytes; -EINVAL
 * otherwise (it becomes one argument of QEMU's command line). */
int accel_cpu_model_check(const char *model);

/* What is known before any probe. kvm_why: why /dev/kvm cannot be used ("" if
 * it opens and speaks the KVM API); cpu_pinned: --cpu-model or NULL (with
 * --accel tcg, TCG's model; else KVM's, the probe's only candidate). Returns
 * 0 with *ret decided (TCG, and why), 1 when a probe must decide (*ret says
 * "probing"), or < 0 when the mode asked for cannot be had (err says why:
 * --accel kvm without KVM). */
int accel_plan(enum accel_mode mode, const char *kvm_why, const char *cpu_pinned, struct accel_info *ret,
               struct al_error *err);

/* The KVM CPU models to try: the pinned one alone, or, in order, the host's
 * own ("host"), then the host's without IA32_ARCH_CAPABILITIES (MSR 0x10a),
 * which some nested KVM hosts cannot set (QEMU aborts: "failed to set MSR
 * 0x10a"): "host,-arch-capabilities". */
size_t accel_cpu_candidates(const char *pinned, const char *out[], size_t max);

/* One attempt of the probe: a model, and why it failed ("" if the guest's
 * agent said hello). */
struct accel_attempt {
	const char *cpu;
	char why[384];
	bool vmm_exited; /* the VMM ended by itself (another model may work) */
	uint64_t ms;
};

/* The verdict of a probe from its attempts: KVM with the first model that
 * worked, else TCG (mode auto) or a refusal (mode kvm: returns -ENODEV and
 * err says why). */
int accel_verdict(enum accel_mode mode, const struct accel_attempt *attempts, size_t n, uint64_t probe_ms,
                  struct accel_info *ret, struct al_error *err);

/* ---- the daemon's decision ---- */
void accel_set(const struct accel_info *info);
/* Now, without waiting (decided = false while the probe runs). */
void accel_get(struct accel_info *ret);
/* Waits until decided or deadline_ms (monotonic): 0, or -ETIMEDOUT. */
int accel_wait(uint64_t deadline_ms, struct accel_info *ret);
/* "kvm", "tcg", or "probing". */
const char *accel_name(const struct accel_info *info);

#endif
