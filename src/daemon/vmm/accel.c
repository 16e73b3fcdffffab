/* SPDX-License-Identifier: Apache-2.0 */
/* The accelerator's plan, verdict and the daemon's decision (accel.h). */
#include "accel.h"

#include <inttypes.h>
#include <pthread.h>
#include <time.h>

#include "util.h"

int accel_mode_parse(const char *s, enum accel_mode *ret)
{
	static const struct {
		const char *name;
		enum accel_mode m;
	} names[] = {{"auto", ACCEL_MODE_AUTO}, {"kvm", ACCEL_MODE_KVM}, {"tcg", ACCEL_MODE_TCG}};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!strcmp(s, names[i].name)) {
			*ret = names[i].m;
			return 0;
		}
	return -EINVAL;
}

const char *accel_mode_name(enum accel_mode m)
{
	return m == ACCEL_MODE_KVM ? "kvm" : m == ACCEL_MODE_TCG ? "tcg" : "auto";
}

int accel_cpu_model_check(const char *model)
{
	size_t len = strlen(model);
	if (len == 0 || len >= ACCEL_CPU_MAX)
		return -EINVAL;
	/* SECURITY: one argument of QEMU's command line; no character that
	 * could start another option of -cpu's own syntax beyond these. */
	if (strspn(model, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,=+-") != len)
		return -EINVAL;
	if (model[0] == '-' || model[0] == ',')
		return -EINVAL;
	return 0;
}

int accel_plan(enum accel_mode mode, const char *kvm_why, const char *cpu_pinned, struct accel_info *ret,
               struct al_error *err)
{
	*ret = (struct accel_info){.decided = true};
	strlcpy_al(ret->cpu, ACCEL_CPU_TCG, sizeof(ret->cpu));
	if (mode == ACCEL_MODE_TCG) {
		/* A model pinned for TCG is TCG's; under auto it is KVM's only. */
		if (cpu_pinned)
			strlcpy_al(ret->cpu, cpu_pinned, sizeof(ret->cpu));
		snprintf(ret->reason, sizeof(ret->reason), "tcg, because --accel tcg (software emulation, slower)");
		return 0;
	}
	if (kvm_why[0]) {
		if (mode == ACCEL_MODE_KVM)
			return al_error_set(err, AL_ERR_UNAVAILABLE, ENODEV,
			                    "--accel kvm: %s (use --accel auto or tcg to run on software emulation)",
			                    kvm_why);
		snprintf(ret->reason, sizeof(ret->reason), "tcg (software emulation, slower), because %s", kvm_why);
		return 0;
	}
	ret->decided = false;
	snprintf(ret->reason, sizeof(ret->reason),
	         "probing: /dev/kvm opens, and a guest boot on it decides whether KVM is used (--accel %s)",
	         accel_mode_name(mode));
	return 1;
}

size_t accel_cpu_candidates(const char *pinned, const char *out[], size_t max)
{
	static const char *const candidates[] = {"host", "host,-arch-capabilities"};
	if (pinned && max) {
		out[0] = pinned;
		return 1;
	}
	size_t n = 0;
	for (; n < ARRAY_SIZE(candidates) && n < max; n++)
		out[n] = candidates[n];
	return n;
}

int accel_verdict(enum accel_mode mode, const struct accel_attempt *attempts, size_t n, uint64_t probe_ms,
                  struct accel_info *ret, struct al_error *err)
{
	*ret = (struct accel_info){.decided = true, .probe_ms = probe_ms};
	for (size_t i = 0; i < n; i++)
		if (!attempts[i].why[0]) {
			ret->kvm = true;
			strlcpy_al(ret->cpu, attempts[i].cpu, sizeof(ret->cpu));
			snprintf(ret->reason, sizeof(ret->reason),
			         "kvm, because a guest booted on it to the agent's hello in %" PRIu64 " ms (-cpu %s%s)",
			         attempts[i].ms, attempts[i].cpu, i ? ", the models before it failed" : "");
			return 0;
		}
	/* What each model did, most telling last. */
	char tried[ACCEL_REASON_MAX];
	size_t o = 0;
	tried[0] = '\0';
	for (size_t i = 0; i < n && o < sizeof(tried); i++)
		o += (size_t)snprintf(tried + o, sizeof(tried) - o, "%s-cpu %s: %s", i ? "; " : "", attempts[i].cpu,
		                      attempts[i].why);
	if (!n)
		snprintf(tried, sizeof(tried), "no CPU model to try");
	if (mode == ACCEL_MODE_KVM)
		return al_error_set(err, AL_ERR_UNAVAILABLE, ENODEV,
		                    "--accel kvm: /dev/kvm is there but no guest ran on it (%s); use --accel auto or "
		                    "tcg to run on software emulation",
		                    tried);
	strlcpy_al(ret->cpu, ACCEL_CPU_TCG, sizeof(ret->cpu));
	snprintf(ret->reason, sizeof(ret->reason), "tcg (software emulation, slower), because KVM failed its probe: %s",
	         tried);
	return 0;
}

/* ---- the daemon's decision ---- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond;
static pthread_once_t cond_once = PTHREAD_ONCE_INIT;
static struct accel_info current = {
    .decided = true,
    .cpu = ACCEL_CPU_TCG,
    .reason = "tcg: nothing decided otherwise",
};

/* Waits are on CLOCK_MONOTONIC, like every deadline of the daemon. */
static void cond_init(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&cond, &a);
	pthread_condattr_destroy(&a);
}

void accel_set(const struct accel_info *info)
{
	pthread_once(&cond_once, cond_init);
	pthread_mutex_lock(&lock);
	current = *info;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

void accel_get(struct accel_info *ret)
{
	pthread_mutex_lock(&lock);
	*ret = current;
	pthread_mutex_unlock(&lock);
}

int accel_wait(uint64_t deadline_ms, struct accel_info *ret)
{
	pthread_once(&cond_once, cond_init);
	struct timespec ts = {.tv_sec = (time_t)(deadline_ms / 1000), .tv_nsec = (long)(deadline_ms % 1000) * 1000000};
	pthread_mutex_lock(&lock);
	int rc = 0;
	while (!current.decided && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&cond, &lock, &ts);
	*ret = current;
	pthread_mutex_unlock(&lock);
	return ret->decided ? 0 : -ETIMEDOUT;
}

const char *accel_name(const struct accel_info *info)
{
	return !info->decided ? "probing" : info->kvm ? "kvm" : "tcg";
}
