/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the backend selection (src/daemon/vmm/vmm-select.c): every
 * combination of what a host has, the reasons given, and the probe of this
 * very machine (no /dev/kvm here: auto must pick qemu and say why). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "util.h"
#include "vmm-select.h"

#define NO_KVM_WHY "/dev/kvm does not exist (test)"

static struct vmm_host host(bool qemu, bool fc, bool kvm)
{
	struct vmm_host h = {.qemu = qemu, .firecracker = fc, .kvm = kvm};
	if (fc)
		snprintf(h.firecracker_path, sizeof(h.firecracker_path), "/usr/local/bin/firecracker");
	if (!kvm)
		snprintf(h.kvm_why, sizeof(h.kvm_why), NO_KVM_WHY);
	return h;
}

static void expect_choice(enum vmm_backend want, struct vmm_host h, enum vmm_backend backend, bool kvm,
                          const char *const *needles)
{
	struct vmm_choice c;
	struct al_error err = {0};
	if (vmm_select(want, &h, &c, &err) != 0)
		fail_msg("refused: %s", err.message);
	assert_int_equal(c.backend, backend);
	assert_int_equal(c.kvm, kvm);
	for (; *needles; needles++)
		if (!strstr(c.reason, *needles))
			fail_msg("reason \"%s\" does not say \"%s\"", c.reason, *needles);
}

static void expect_refusal(enum vmm_backend want, struct vmm_host h, const char *needle)
{
	struct vmm_choice c;
	struct al_error err = {0};
	assert_true(vmm_select(want, &h, &c, &err) < 0);
	assert_int_equal(err.code, AL_ERR_UNAVAILABLE);
	if (!strstr(err.message, needle))
		fail_msg("message \"%s\" does not say \"%s\"", err.message, needle);
}

static void test_parse(void **state)
{
	(void)state;
	enum vmm_backend b;
	assert_int_equal(vmm_backend_parse("auto", &b), 0);
	assert_int_equal(b, VMM_BACKEND_AUTO);
	assert_int_equal(vmm_backend_parse("qemu", &b), 0);
	assert_int_equal(b, VMM_BACKEND_QEMU);
	assert_int_equal(vmm_backend_parse("firecracker", &b), 0);
	assert_int_equal(b, VMM_BACKEND_FIRECRACKER);
	assert_int_equal(vmm_backend_parse("Firecracker", &b), -EINVAL);
	assert_int_equal(vmm_backend_parse("", &b), -EINVAL);
	assert_int_equal(vmm_backend_parse("kvm", &b), -EINVAL);
	assert_string_equal(vmm_backend_name(VMM_BACKEND_FIRECRACKER), "firecracker");
}

static void test_auto(void **state)
{
	(void)state;
	/* Everything there: Firecracker. */
	expect_choice(
	    VMM_BACKEND_AUTO, host(true, true, true), VMM_BACKEND_FIRECRACKER, true,
	    (const char *const[]){"auto: firecracker", "/usr/local/bin/firecracker", "/dev/kvm is usable", NULL});
	/* Firecracker alone is enough (no QEMU needed). */
	expect_choice(VMM_BACKEND_AUTO, host(false, true, true), VMM_BACKEND_FIRECRACKER, true,
	              (const char *const[]){"auto: firecracker", NULL});
	/* KVM but no Firecracker: QEMU with KVM. */
	expect_choice(VMM_BACKEND_AUTO, host(true, false, true), VMM_BACKEND_QEMU, true,
	              (const char *const[]){"auto: qemu with KVM once a guest boots on it",
	                                    "no firecracker binary on PATH", NULL});
	/* Firecracker but no KVM: QEMU with TCG, naming both facts. */
	expect_choice(VMM_BACKEND_AUTO, host(true, true, false), VMM_BACKEND_QEMU, false,
	              (const char *const[]){"auto: qemu with TCG", "/usr/local/bin/firecracker is on PATH",
	                                    "Firecracker needs KVM", NO_KVM_WHY, NULL});
	/* Neither (this machine): QEMU with TCG and both reasons. */
	expect_choice(VMM_BACKEND_AUTO, host(true, false, false), VMM_BACKEND_QEMU, false,
	              (const char *const[]){"auto: qemu with TCG", "no firecracker binary on PATH", NO_KVM_WHY, NULL});
	/* Nothing at all. */
	expect_refusal(VMM_BACKEND_AUTO, host(false, false, false), "qemu-system-x86_64 not found on PATH");
	expect_refusal(VMM_BACKEND_AUTO, host(false, true, false), "Firecracker needs KVM");
}

static void test_explicit(void **state)
{
	(void)state;
	expect_choice(VMM_BACKEND_QEMU, host(true, true, true), VMM_BACKEND_QEMU, true,
	              (const char *const[]){"--backend qemu: qemu with KVM once a guest boots on it", NULL});
	expect_choice(VMM_BACKEND_QEMU, host(true, false, false), VMM_BACKEND_QEMU, false,
	              (const char *const[]){"--backend qemu: qemu with TCG", NO_KVM_WHY, NULL});
	expect_refusal(VMM_BACKEND_QEMU, host(false, true, true), "--backend qemu: qemu-system-x86_64 not found");

	expect_choice(VMM_BACKEND_FIRECRACKER, host(false, true, true), VMM_BACKEND_FIRECRACKER, true,
	              (const char *const[]){"--backend firecracker", "/usr/local/bin/firecracker", NULL});
	expect_refusal(VMM_BACKEND_FIRECRACKER, host(true, false, true), "no firecracker binary on PATH");
	expect_refusal(VMM_BACKEND_FIRECRACKER, host(true, true, false), "Firecracker needs KVM, and " NO_KVM_WHY);
}

static void test_probe_path(void **state)
{
	(void)state;
	char dir[] = "/tmp/airlock-test-select.XXXXXX";
	assert_non_null(mkdtemp(dir));
	cleanup_free char *fc = xasprintf("%s/firecracker", dir);
	assert_int_equal(write_file_atomic(fc, "#!/bin/sh\n", 10, 0644), 0);
	const char *old = getenv("PATH");
	cleanup_free char *saved = xstrdup(old ? old : "/usr/bin:/bin");
	cleanup_free char *path = xasprintf("%s:%s", dir, saved);
	setenv("PATH", path, 1);
	struct vmm_host h;
	vmm_host_probe(&h);
	assert_false(h.firecracker); /* not executable */
	assert_int_equal(chmod(fc, 0755), 0);
	vmm_host_probe(&h);
	assert_true(h.firecracker);
	assert_string_equal(h.firecracker_path, fc);
	setenv("PATH", saved, 1);
	rm_rf(dir);
}

static void test_this_machine(void **state)
{
	(void)state;
	struct vmm_host h;
	vmm_host_probe(&h);
	struct vmm_choice c;
	struct al_error err = {0};
	int r = vmm_select(VMM_BACKEND_AUTO, &h, &c, &err);
	print_message("this machine: qemu %s, firecracker %s, kvm %s -> %s\n", h.qemu ? "yes" : "no",
	              h.firecracker ? h.firecracker_path : "no", h.kvm ? "yes" : h.kvm_why,
	              r == 0 ? c.reason : err.message);
	if (access("/dev/kvm", F_OK) == 0) {
		skip(); /* a KVM host: the combinations above cover it */
		return;
	}
	assert_false(h.kvm);
	assert_non_null(strstr(h.kvm_why, "/dev/kvm does not exist"));
	if (!h.qemu) {
		assert_true(r < 0);
		return;
	}
	assert_int_equal(r, 0);
	assert_int_equal(c.backend, VMM_BACKEND_QEMU);
	assert_false(c.kvm);
	assert_non_null(strstr(c.reason, "auto: qemu with TCG (software emulation, slower), because "));
	assert_non_null(strstr(c.reason, h.firecracker ? "Firecracker needs KVM" : "no firecracker binary on PATH"));
	assert_non_null(strstr(c.reason, "/dev/kvm does not exist"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse),      cmocka_unit_test(test_auto),         cmocka_unit_test(test_explicit),
	    cmocka_unit_test(test_probe_path), cmocka_unit_test(test_this_machine),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
