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
#include "vmm.h"

#define NO_KVM_WHY "/dev/kvm does not exist (test)"

/* The table's row of a backend (NULL: auto). */
static const struct vmm_backend *row(const char *name)
{
	const struct vmm_backend *b = NULL;
	assert_int_equal(vmm_backend_parse(name, &b, NULL), 0);
	return b;
}

#define AUTO row("auto")
#define QEMU row("qemu")
#define FIRECRACKER row("firecracker")

/* A host with this backend's program on PATH. */
static void host_has(struct vmm_host *h, const char *name, const char *path)
{
	const struct vmm_backend *all;
	size_t n = vmm_backends(&all);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(all[i].ops->name, name))
			snprintf(h->path[i], sizeof(h->path[i]), "%s", path);
}

/* Where the host has this backend's program ("": nowhere). */
static const char *path_in(const struct vmm_host *h, const char *name)
{
	const struct vmm_backend *all;
	size_t n = vmm_backends(&all);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(all[i].ops->name, name))
			return h->path[i];
	fail_msg("no backend %s", name);
	return "";
}

static struct vmm_host host(bool qemu, bool fc, bool kvm)
{
	struct vmm_host h = {.kvm = kvm};
	if (qemu)
		host_has(&h, "qemu", "/usr/bin/qemu-system-x86_64");
	if (fc)
		host_has(&h, "firecracker", "/usr/local/bin/firecracker");
	if (!kvm)
		snprintf(h.kvm_why, sizeof(h.kvm_why), NO_KVM_WHY);
	return h;
}

static void expect_choice(const struct vmm_backend *want, struct vmm_host h, const struct vmm_backend *backend,
                          bool kvm, const char *const *needles)
{
	struct vmm_choice c;
	struct al_error err = {0};
	if (vmm_select(want, &h, &c, &err) != 0)
		fail_msg("refused: %s", err.message);
	assert_ptr_equal(c.backend, backend);
	assert_int_equal(c.kvm, kvm);
	for (; *needles; needles++)
		if (!strstr(c.reason, *needles))
			fail_msg("reason \"%s\" does not say \"%s\"", c.reason, *needles);
}

static void expect_refusal(const struct vmm_backend *want, struct vmm_host h, const char *needle)
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
	const struct vmm_backend *b = QEMU;
	assert_null(AUTO);
	assert_string_equal(vmm_backend_name(NULL), "auto");
	assert_string_equal(vmm_backend_name(QEMU), "qemu");
	assert_string_equal(vmm_backend_name(FIRECRACKER), "firecracker");
	struct al_error err = {0};
	assert_int_equal(vmm_backend_parse("Firecracker", &b, &err), -EINVAL);
	assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
	assert_string_equal(err.message, "--backend is auto, qemu or firecracker, not \"Firecracker\"");
	assert_int_equal(vmm_backend_parse("", &b, NULL), -EINVAL);
	assert_int_equal(vmm_backend_parse("kvm", &b, NULL), -EINVAL);
	assert_ptr_equal(b, QEMU); /* untouched by a refusal */
}

/* Every row names a backend that implements the whole interface: no NULL
 * op or name means "someone else's way". */
static void test_table(void **state)
{
	(void)state;
	const struct vmm_backend *all;
	size_t n = vmm_backends(&all);
	assert_true(n >= 2 && n <= VMM_BACKENDS_MAX);
	for (size_t i = 0; i < n; i++) {
		const struct vmm_ops *o = all[i].ops;
		assert_non_null(o->name);
		assert_non_null(o->binary);
		assert_non_null(o->kernel_file);
		assert_non_null(o->disk_file);
		assert_non_null(o->runtime_files);
		assert_non_null(o->probe_what);
		assert_true(o->disk_kind == VMM_DISK_OVERLAY || o->disk_kind == VMM_DISK_WHOLE);
		void (*const ops[])(void) = {
		    (void (*)(void))o->accel,        (void (*)(void))o->prepare_disk,
		    (void (*)(void))o->spawn,        (void (*)(void))o->stop,
		    (void (*)(void))o->pause,        (void (*)(void))o->resume,
		    (void (*)(void))o->save,         (void (*)(void))o->save_diff,
		    (void (*)(void))o->cancel_save,  (void (*)(void))o->wait_incoming,
		    (void (*)(void))o->probe,        (void (*)(void))o->channel_connect,
		    (void (*)(void))o->console_open,
		};
		for (size_t k = 0; k < ARRAY_SIZE(ops); k++)
			if (!ops[k])
				fail_msg("backend %s: op %zu of struct vmm_ops is NULL", o->name, k);
		assert_non_null(all[i].title);
		assert_non_null(all[i].install);
		for (size_t k = 0; k < i; k++)
			assert_string_not_equal(all[k].ops->name, o->name);
	}
	/* The accelerator's probe boots the backend that has one to probe. */
	assert_ptr_equal(vmm_accel_probe_ops(), QEMU->ops);
}

static void test_accel(void **state)
{
	(void)state;
	struct vmm_choice c;
	struct al_error err = {0};
	struct vmm_host h = host(true, true, true);
	assert_int_equal(vmm_select(FIRECRACKER, &h, &c, &err), 0);
	struct accel_info a;
	assert_int_equal(vmm_choice_accel(&c, ACCEL_MODE_AUTO, "", NULL, &a, &err), 0);
	assert_true(a.decided && a.kvm);
	assert_string_equal(a.reason, "kvm: Firecracker runs on KVM only");
	/* QEMU: the accelerator's plan (its own unit test says the rest). */
	h = host(true, false, false);
	assert_int_equal(vmm_select(QEMU, &h, &c, &err), 0);
	assert_int_equal(vmm_choice_accel(&c, ACCEL_MODE_AUTO, NO_KVM_WHY, NULL, &a, &err), 0);
	assert_true(a.decided && !a.kvm);
	assert_int_equal(vmm_choice_accel(&c, ACCEL_MODE_KVM, NO_KVM_WHY, NULL, &a, &err), -ENODEV);
}

static void test_auto(void **state)
{
	(void)state;
	/* Everything there: Firecracker. */
	expect_choice(
	    AUTO, host(true, true, true), FIRECRACKER, true,
	    (const char *const[]){"auto: firecracker", "/usr/local/bin/firecracker", "/dev/kvm is usable", NULL});
	/* Firecracker alone is enough (no QEMU needed). */
	expect_choice(AUTO, host(false, true, true), FIRECRACKER, true,
	              (const char *const[]){"auto: firecracker", NULL});
	/* KVM but no Firecracker: QEMU with KVM. */
	expect_choice(AUTO, host(true, false, true), QEMU, true,
	              (const char *const[]){"auto: qemu with KVM once a guest boots on it",
	                                    "no firecracker binary on PATH", NULL});
	/* Firecracker but no KVM: QEMU with TCG, naming both facts. */
	expect_choice(AUTO, host(true, true, false), QEMU, false,
	              (const char *const[]){"auto: qemu with TCG", "/usr/local/bin/firecracker is on PATH",
	                                    "Firecracker needs KVM", NO_KVM_WHY, NULL});
	/* Neither (this machine): QEMU with TCG and both reasons. */
	expect_choice(AUTO, host(true, false, false), QEMU, false,
	              (const char *const[]){"auto: qemu with TCG", "no firecracker binary on PATH", NO_KVM_WHY, NULL});
	/* Nothing at all. */
	expect_refusal(AUTO, host(false, false, false), "qemu-system-x86_64 not found on PATH");
	expect_refusal(AUTO, host(false, true, false), "Firecracker needs KVM");
}

static void test_explicit(void **state)
{
	(void)state;
	expect_choice(QEMU, host(true, true, true), QEMU, true,
	              (const char *const[]){"--backend qemu: qemu with KVM once a guest boots on it", NULL});
	expect_choice(QEMU, host(true, false, false), QEMU, false,
	              (const char *const[]){"--backend qemu: qemu with TCG", NO_KVM_WHY, NULL});
	expect_refusal(QEMU, host(false, true, true), "--backend qemu: qemu-system-x86_64 not found");

	expect_choice(FIRECRACKER, host(false, true, true), FIRECRACKER, true,
	              (const char *const[]){"--backend firecracker", "/usr/local/bin/firecracker", NULL});
	expect_refusal(FIRECRACKER, host(true, false, true), "no firecracker binary on PATH");
	expect_refusal(FIRECRACKER, host(true, true, false), "Firecracker needs KVM, and " NO_KVM_WHY);
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
	assert_string_equal(path_in(&h, "firecracker"), ""); /* not executable */
	assert_int_equal(chmod(fc, 0755), 0);
	vmm_host_probe(&h);
	assert_string_equal(path_in(&h, "firecracker"), fc);
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
	int r = vmm_select(AUTO, &h, &c, &err);
	const char *qemu = path_in(&h, "qemu"), *fc = path_in(&h, "firecracker");
	print_message("this machine: qemu %s, firecracker %s, kvm %s -> %s\n", qemu[0] ? qemu : "no", fc[0] ? fc : "no",
	              h.kvm ? "yes" : h.kvm_why, r == 0 ? c.reason : err.message);
	if (access("/dev/kvm", F_OK) == 0) {
		skip(); /* a KVM host: the combinations above cover it */
		return;
	}
	assert_false(h.kvm);
	assert_non_null(strstr(h.kvm_why, "/dev/kvm does not exist"));
	if (!qemu[0]) {
		assert_true(r < 0);
		return;
	}
	assert_int_equal(r, 0);
	assert_int_equal(c.backend, QEMU);
	assert_false(c.kvm);
	assert_non_null(strstr(c.reason, "auto: qemu with TCG (software emulation, slower), because "));
	assert_non_null(strstr(c.reason, fc[0] ? "Firecracker needs KVM" : "no firecracker binary on PATH"));
	assert_non_null(strstr(c.reason, "/dev/kvm does not exist"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse),        cmocka_unit_test(test_table),    cmocka_unit_test(test_accel),
	    cmocka_unit_test(test_auto),         cmocka_unit_test(test_explicit), cmocka_unit_test(test_probe_path),
	    cmocka_unit_test(test_this_machine),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
