/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the accelerator's decision (src/daemon/vmm/accel.c): what is
 * known without a probe, the verdict from a probe's attempts (auto falls
 * back to TCG and says why; kvm refuses), the CPU models tried, the check of
 * --cpu-model, and the wait of a start while the probe runs. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "accel.h"
#include "util.h"

static void test_mode_parse(void **state)
{
	(void)state;
	enum accel_mode m;
	assert_int_equal(accel_mode_parse("auto", &m), 0);
	assert_int_equal(m, ACCEL_MODE_AUTO);
	assert_int_equal(accel_mode_parse("kvm", &m), 0);
	assert_int_equal(m, ACCEL_MODE_KVM);
	assert_int_equal(accel_mode_parse("tcg", &m), 0);
	assert_int_equal(m, ACCEL_MODE_TCG);
	assert_int_equal(accel_mode_parse("KVM", &m), -EINVAL);
	assert_int_equal(accel_mode_parse("", &m), -EINVAL);
	assert_int_equal(accel_mode_parse("hvf", &m), -EINVAL);
	assert_string_equal(accel_mode_name(ACCEL_MODE_KVM), "kvm");
}

static void test_cpu_model_check(void **state)
{
	(void)state;
	assert_int_equal(accel_cpu_model_check("host"), 0);
	assert_int_equal(accel_cpu_model_check("host,-arch-capabilities"), 0);
	assert_int_equal(accel_cpu_model_check("Skylake-Server-v4,+avx512f,l3-cache=on"), 0);
	assert_int_equal(accel_cpu_model_check(""), -EINVAL);
	assert_int_equal(accel_cpu_model_check("-help"), -EINVAL);
	assert_int_equal(accel_cpu_model_check(",host"), -EINVAL);
	assert_int_equal(accel_cpu_model_check("host -smp 64"), -EINVAL);
	assert_int_equal(accel_cpu_model_check("host;reboot"), -EINVAL);
	assert_int_equal(accel_cpu_model_check("host\n"), -EINVAL);
	char long_model[ACCEL_CPU_MAX + 1];
	memset(long_model, 'a', sizeof(long_model) - 1);
	long_model[ACCEL_CPU_MAX] = '\0';
	assert_int_equal(accel_cpu_model_check(long_model), -EINVAL);
	long_model[ACCEL_CPU_MAX - 1] = '\0';
	assert_int_equal(accel_cpu_model_check(long_model), 0);
}

static void test_plan(void **state)
{
	(void)state;
	struct accel_info a;
	struct al_error err = {0};
	/* tcg: decided, whatever the host has. */
	assert_int_equal(accel_plan(ACCEL_MODE_TCG, "", NULL, &a, &err), 0);
	assert_true(a.decided);
	assert_false(a.kvm);
	assert_string_equal(a.cpu, "max");
	assert_non_null(strstr(a.reason, "--accel tcg"));
	/* A pinned model is TCG's under --accel tcg, never under auto's fallback. */
	assert_int_equal(accel_plan(ACCEL_MODE_TCG, "", "qemu64", &a, &err), 0);
	assert_string_equal(a.cpu, "qemu64");
	assert_int_equal(accel_plan(ACCEL_MODE_AUTO, "no /dev/kvm", "host", &a, &err), 0);
	assert_string_equal(a.cpu, "max");
	/* No /dev/kvm: auto is TCG and says why; kvm refuses. */
	assert_int_equal(accel_plan(ACCEL_MODE_AUTO, "/dev/kvm does not exist", NULL, &a, &err), 0);
	assert_true(a.decided);
	assert_false(a.kvm);
	assert_non_null(strstr(a.reason, "because /dev/kvm does not exist"));
	assert_int_equal(accel_plan(ACCEL_MODE_KVM, "/dev/kvm does not exist", NULL, &a, &err), -ENODEV);
	assert_non_null(strstr(err.message, "--accel kvm: /dev/kvm does not exist"));
	assert_int_equal(err.code, AL_ERR_UNAVAILABLE);
	/* /dev/kvm opens: never trusted without a probe. */
	assert_int_equal(accel_plan(ACCEL_MODE_AUTO, "", NULL, &a, &err), 1);
	assert_false(a.decided);
	assert_string_equal(accel_name(&a), "probing");
	assert_int_equal(accel_plan(ACCEL_MODE_KVM, "", NULL, &a, &err), 1);
	assert_false(a.decided);
}

static void test_candidates(void **state)
{
	(void)state;
	const char *m[4];
	assert_int_equal(accel_cpu_candidates(NULL, m, 4), 2);
	assert_string_equal(m[0], "host");
	assert_string_equal(m[1], "host,-arch-capabilities");
	assert_int_equal(accel_cpu_candidates("EPYC", m, 4), 1);
	assert_string_equal(m[0], "EPYC");
	assert_int_equal(accel_cpu_candidates(NULL, m, 1), 1);
}

static void test_verdict(void **state)
{
	(void)state;
	struct accel_info a;
	struct al_error err = {0};
	/* The first model aborts, the second boots: KVM with the second. */
	struct accel_attempt at[2] = {
	    {.cpu = "host",
	     .why = "the VMM was killed by signal 6 (SIGABRT); vmm.log: failed to set MSR 0x10a",
	     .vmm_exited = true,
	     .ms = 30},
	    {.cpu = "host,-arch-capabilities", .why = "", .ms = 180},
	};
	assert_int_equal(accel_verdict(ACCEL_MODE_AUTO, at, 2, 230, &a, &err), 0);
	assert_true(a.decided);
	assert_true(a.kvm);
	assert_string_equal(a.cpu, "host,-arch-capabilities");
	assert_int_equal(a.probe_ms, 230);
	assert_non_null(strstr(a.reason, "booted on it to the agent's hello in 180 ms"));
	assert_non_null(strstr(a.reason, "the models before it failed"));
	/* Every model failed: auto is TCG, naming each failure. */
	snprintf(at[1].why, sizeof(at[1].why),
	         "no hello from the guest's agent within 10 s (the guest printed nothing)");
	assert_int_equal(accel_verdict(ACCEL_MODE_AUTO, at, 2, 10030, &a, &err), 0);
	assert_true(a.decided);
	assert_false(a.kvm);
	assert_string_equal(a.cpu, "max");
	assert_non_null(strstr(a.reason, "KVM failed its probe: -cpu host: the VMM was killed by signal 6"));
	assert_non_null(strstr(a.reason, "; -cpu host,-arch-capabilities: no hello"));
	/* ... and kvm refuses with the same story. */
	assert_int_equal(accel_verdict(ACCEL_MODE_KVM, at, 2, 10030, &a, &err), -ENODEV);
	assert_non_null(strstr(err.message, "--accel kvm: /dev/kvm is there but no guest ran on it"));
	assert_non_null(strstr(err.message, "failed to set MSR 0x10a"));
	/* No attempt at all (nothing to boot). */
	assert_int_equal(accel_verdict(ACCEL_MODE_AUTO, at, 0, 0, &a, &err), 0);
	assert_false(a.kvm);
	assert_non_null(strstr(a.reason, "no CPU model to try"));
	/* A reason never overflows, however long the attempts' stories. */
	struct accel_attempt big[2] = {{.cpu = "host", .vmm_exited = true}, {.cpu = "host,-arch-capabilities"}};
	memset(big[0].why, 'x', sizeof(big[0].why) - 1);
	memset(big[1].why, 'y', sizeof(big[1].why) - 1);
	assert_int_equal(accel_verdict(ACCEL_MODE_AUTO, big, 2, 1, &a, &err), 0);
	assert_true(strlen(a.reason) < sizeof(a.reason));
}

static void *decide_later(void *arg)
{
	(void)arg;
	usleep(100 * 1000);
	struct accel_info a = {.decided = true, .kvm = true, .cpu = "host", .reason = "kvm, because a test said so"};
	accel_set(&a);
	return NULL;
}

static void test_wait(void **state)
{
	(void)state;
	struct accel_info probing = {.decided = false, .reason = "probing"};
	accel_set(&probing);
	struct accel_info a;
	accel_get(&a);
	assert_false(a.decided);
	/* Nobody decides: the wait ends at its deadline. */
	uint64_t t0 = now_ms_monotonic();
	assert_int_equal(accel_wait(t0 + 50, &a), -ETIMEDOUT);
	assert_true(now_ms_monotonic() >= t0 + 50);
	/* A decision wakes the waiter. */
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, decide_later, NULL), 0);
	assert_int_equal(accel_wait(now_ms_monotonic() + 10000, &a), 0);
	pthread_join(t, NULL);
	assert_true(a.decided);
	assert_true(a.kvm);
	assert_string_equal(a.cpu, "host");
	assert_string_equal(accel_name(&a), "kvm");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mode_parse), cmocka_unit_test(test_cpu_model_check), cmocka_unit_test(test_plan),
	    cmocka_unit_test(test_candidates), cmocka_unit_test(test_verdict),         cmocka_unit_test(test_wait),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
