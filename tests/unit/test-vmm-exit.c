/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the words of a VMM's end (src/daemon/vmm/vmm-exit.c): the
 * kernel's audit record of a seccomp kill, and the description of a VMM
 * that exited or was killed, with the last lines of its log. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "util.h"
#include "vmm.h"

static void test_audit_parse(void **state)
{
	(void)state;
	long pid;
	int sig, nr;
	const char *rec = "6,1234,213905777,-;audit: type=1326 audit(1796163053.252:2): auid=4294967295 uid=1500000000 "
	                  "gid=1500000000 ses=4294967295 subj=unconfined pid=11593 comm=\"qemu-system-x86\" "
	                  "exe=\"/usr/bin/qemu-system-x86_64\" sig=31 arch=c000003e syscall=63 compat=0 "
	                  "ip=0x7f68ba95eb07 code=0x80000000\n";
	assert_int_equal(vmm_audit_seccomp_parse(rec, &pid, &sig, &nr), 0);
	assert_int_equal(pid, 11593);
	assert_int_equal(sig, 31);
	assert_int_equal(nr, 63);
	/* Other records, and malformed ones. */
	assert_int_equal(vmm_audit_seccomp_parse("6,1,2,-;audit: type=1300 pid=5 sig=31 syscall=63", &pid, &sig, &nr),
	                 -ENOENT);
	assert_int_equal(vmm_audit_seccomp_parse("type=1326 pid=5 sig=31", &pid, &sig, &nr), -EINVAL);
	assert_int_equal(vmm_audit_seccomp_parse("type=1326 pid=x5 sig=31 syscall=1", &pid, &sig, &nr), -EINVAL);
	assert_int_equal(
	    vmm_audit_seccomp_parse("type=1326 pid=5 sig=31 syscall=99999999999999999999999", &pid, &sig, &nr),
	    -EINVAL);
	assert_int_equal(vmm_audit_seccomp_parse("type=1326 pid=0 sig=31 syscall=1", &pid, &sig, &nr), -EINVAL);
	/* ppid= and the comm's text do not count as pid=. */
	assert_int_equal(
	    vmm_audit_seccomp_parse("type=1326 ppid=7 comm=\"pid=9\" pid=12 sig=31 syscall=2", &pid, &sig, &nr), 0);
	assert_int_equal(pid, 12);
}

static int log_dir(const char *text)
{
	char tmpl[] = "/tmp/test-vmm-exit.XXXXXX";
	assert_non_null(mkdtemp(tmpl));
	int dfd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	int fd = openat(dfd, "vmm.log", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return dfd;
}

static void done(int dfd)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", dfd);
	char dir[4096];
	ssize_t n = readlink(path, dir, sizeof(dir) - 1);
	close(dfd);
	if (n > 0) {
		dir[n] = '\0';
		rm_rf(dir);
	}
}

static void test_describe_status(void **state)
{
	(void)state;
	char out[1024];
	int dfd = log_dir("line one\n\nqemu-system-x86_64: -cpu bogus: unable to find CPU model 'bogus'\n");
	int st = 1 << 8; /* exit 1 */
	assert_int_equal(vmm_exit_describe(-1, 1, &st, dfd, "vmm.log", out, sizeof(out)), 0);
	assert_string_equal(out, "the VMM exited with status 1; vmm.log: line one | qemu-system-x86_64: -cpu bogus: "
	                         "unable to find CPU model 'bogus'");
	st = SIGABRT; /* killed by SIGABRT */
	assert_int_equal(vmm_exit_describe(-1, 1, &st, dfd, "vmm.log", out, sizeof(out)), 0);
	assert_non_null(strstr(out, "the VMM was killed by signal 6 (SIGABRT); vmm.log: "));
	st = 0;
	assert_int_equal(vmm_exit_describe(-1, 1, &st, dfd, "vmm.log", out, sizeof(out)), 0);
	assert_non_null(strstr(out, "status 0 (the guest powered off, or its kernel panicked)"));
	/* Not known: says so. */
	assert_int_equal(vmm_exit_describe(-1, 1, NULL, dfd, "vmm.log", out, sizeof(out)), -ECHILD);
	assert_non_null(strstr(out, "how is not known"));
	/* Control bytes from the log never reach the message; a small buffer is not overrun. */
	int fd = openat(dfd, "vmm.log", O_WRONLY | O_TRUNC | O_CLOEXEC);
	assert_int_equal(write(fd, "a\x1b[31mb\x00c\r\n", 10), 10);
	close(fd);
	st = 1 << 8;
	vmm_exit_describe(-1, 1, &st, dfd, "vmm.log", out, sizeof(out));
	for (const char *p = out; *p; p++)
		assert_true(*p >= 0x20 && *p < 0x7f);
	char small[16];
	vmm_exit_describe(-1, 1, &st, dfd, "vmm.log", small, sizeof(small));
	assert_int_equal(strlen(small), sizeof(small) - 1);
	/* No log at all. */
	assert_int_equal(unlinkat(dfd, "vmm.log", 0), 0);
	vmm_exit_describe(-1, 1, &st, dfd, "vmm.log", out, sizeof(out));
	assert_string_equal(out, "the VMM exited with status 1; vmm.log: (empty)");
	done(dfd);
}

/* A VMM that is not our child (re-attached after a restart): how it ended
 * is the jailer's record, else not known; never "status 0". */
static void test_describe_exit_record(void **state)
{
	(void)state;
	char out[1024];
	int dfd = log_dir("airlock-jailer[supervisor]: the VMM (pid 7) was killed by signal 9 (SIGKILL)\n");
	const struct {
		const char *record;
		int r;
		const char *want;
	} cases[] = {
	    {"signal 9\n", 0, "the VMM was killed by signal 9 (SIGKILL); vmm.log: (empty)"},
	    {"status 3\n", 0, "the VMM exited with status 3; "},
	    {"status 0\n", 0, "the VMM exited with status 0 (the guest powered off"},
	    /* Anything else is no record. */
	    {"signal 0\n", -ECHILD, "how is not known"},
	    {"status 256\n", -ECHILD, "how is not known"},
	    {"status 3", -ECHILD, "how is not known"},
	    {"status 3\nsignal 9\n", -ECHILD, "how is not known"},
	    {"exited 3\n", -ECHILD, "how is not known"},
	    {"", -ECHILD, "how is not known"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int fd = openat(dfd, "vmm-exit", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, cases[i].record, strlen(cases[i].record)), (ssize_t)strlen(cases[i].record));
		close(fd);
		assert_int_equal(vmm_exit_describe(-1, 1, NULL, dfd, "vmm.log", out, sizeof(out)), cases[i].r);
		if (!strstr(out, cases[i].want))
			fail_msg("record \"%s\": \"%s\" lacks \"%s\"", cases[i].record, out, cases[i].want);
	}
	/* A symlink is not followed. */
	assert_int_equal(unlinkat(dfd, "vmm-exit", 0), 0);
	assert_int_equal(symlinkat("vmm.log", dfd, "vmm-exit"), 0);
	assert_int_equal(vmm_exit_describe(-1, 1, NULL, dfd, "vmm.log", out, sizeof(out)), -ECHILD);
	/* The wait status of our own child wins over any record. */
	int st = 1 << 8;
	assert_int_equal(vmm_exit_describe(-1, 1, &st, dfd, "vmm.log", out, sizeof(out)), 0);
	assert_non_null(strstr(out, "the VMM exited with status 1"));
	done(dfd);
}

/* A real seccomp kill, as the jailer's supervisor reports it: the syscall is
 * named from the kernel's record when this host logs seccomp kills. */
static void test_describe_sigsys(void **state)
{
	(void)state;
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		/* Dies of SIGSYS without a filter: the kernel logs nothing
		 * (cmocka's own handler is not ours to keep). */
		signal(SIGSYS, SIG_DFL);
		raise(SIGSYS);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(child, &st, 0), child);
	char line[160];
	snprintf(line, sizeof(line), "airlock-jailer[supervisor]: the VMM (pid %d) was killed by signal 31 (SIGSYS)\n",
	         (int)child);
	int dfd = log_dir(line);
	char out[1024];
	assert_int_equal(vmm_exit_describe(-1, child, &st, dfd, "vmm.log", out, sizeof(out)), 0);
	/* No record for this pid: still called seccomp's, with where to look;
	 * the supervisor's own line is not one of the VMM's last words. */
	char want[128];
	snprintf(want, sizeof(want), "look for 'type=1326' with pid=%d", (int)child);
	assert_non_null(strstr(out, "seccomp killed the VMM (SIGSYS"));
	assert_non_null(strstr(out, want));
	assert_non_null(strstr(out, "vmm.log: (empty)"));
	done(dfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_audit_parse),
	    cmocka_unit_test(test_describe_status),
	    cmocka_unit_test(test_describe_exit_record),
	    cmocka_unit_test(test_describe_sigsys),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
