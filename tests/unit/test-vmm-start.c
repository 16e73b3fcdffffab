/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for what every start of a VMM does around spawn
 * (src/daemon/vmm/vmm-start.c): the disk given to the jail's uid, the jail's
 * limits, the connection to the VMM's sockets retried. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "jail.h"
#include "util.h"
#include "vmm-qemu.h"
#include "vmm.h"

/* Each test's fixture: a directory of its own (a VMM's jail root). */
struct dir {
	char path[64];
	int fd;
};

static int dir_setup(void **state)
{
	struct dir *d = xcalloc(1, sizeof(*d));
	snprintf(d->path, sizeof(d->path), "/tmp/airlock-test-vmm-start.XXXXXX");
	if (!mkdtemp(d->path) || (d->fd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		free(d);
		return -1;
	}
	*state = d;
	return 0;
}

static int dir_teardown(void **state)
{
	struct dir *d = *state;
	close(d->fd);
	rm_rf(d->path);
	free(d);
	return 0;
}

static mode_t mode_at(int dirfd, const char *name)
{
	struct stat st;
	assert_int_equal(fstatat(dirfd, name, &st, 0), 0);
	return st.st_mode & 07777;
}

static void test_disk_give(void **state)
{
	struct dir d = *(struct dir *)*state;
	int fd = openat(d.fd, QEMU_DISK, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	close(fd);
	struct al_error err = {0};
	assert_int_equal(vmm_disk_give(&vmm_qemu_ops, d.fd, getuid(), &err), 0);
	assert_int_equal(mode_at(d.fd, QEMU_DISK), 0600);

	/* A symlink left under the disk's name (the directory is the jail
	 * uid's): the file it names keeps its mode. */
	int tfd = openat(d.fd, "target", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(tfd >= 0);
	close(tfd);
	assert_int_equal(fchmodat(d.fd, "target", 0644, 0), 0);
	assert_int_equal(unlinkat(d.fd, QEMU_DISK, 0), 0);
	assert_int_equal(symlinkat("target", d.fd, QEMU_DISK), 0);
	assert_true(vmm_disk_give(&vmm_qemu_ops, d.fd, getuid(), &err) < 0);
	assert_non_null(strstr(err.message, "cannot give the disk " QEMU_DISK));
	assert_int_equal(mode_at(d.fd, "target"), 0644);
}

static void test_jail_spec_takes_the_larger_disk(void **state)
{
	(void)state;
	char rootfs[] = "/tmp/airlock-test-rootfs.XXXXXX";
	int fd = mkstemp(rootfs);
	assert_true(fd >= 0 && ftruncate(fd, (off_t)(3u << 20) + 1) == 0);
	close(fd);
	struct vmm_config vc = {.rootfs = rootfs, .vcpus = 2, .memory_mib = 256};
	bool kvm = !strcmp(vmm_qemu_ops.accel(), "kvm");
	struct vmm_jail got, want;
	/* The template's size (rounded up to a MiB) when the disk asked is smaller. */
	vmm_jail_spec(&vmm_qemu_ops, &vc, 1234, 1, &got);
	jail_spec(&want, 1234, 2, 256, 4, kvm);
	assert_memory_equal(&got, &want, sizeof(got));
	vmm_jail_spec(&vmm_qemu_ops, &vc, 1234, 100, &got);
	jail_spec(&want, 1234, 2, 256, 100, kvm);
	assert_memory_equal(&got, &want, sizeof(got));
	unlink(rootfs);
}

static int listen_at(const char *dir, const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 1), 0);
	return fd;
}

/* A "VMM": a child that runs until it is killed; its pidfd. */
static int vmm_child(pid_t *ret_pid)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pause();
		_exit(0);
	}
	int pidfd = pidfd_open_pid(pid);
	assert_true(pidfd >= 0);
	*ret_pid = pid;
	return pidfd;
}

static void vmm_child_end(pid_t pid, int pidfd)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(pidfd);
}

static void test_connect_retry_waits_for_the_socket(void **state)
{
	struct dir d = *(struct dir *)*state;
	struct vmm_config vc = {.dirfd = d.fd};
	pid_t pid;
	int pidfd = vmm_child(&pid);
	int fd = -1;
	/* No socket yet: retried until the deadline. */
	uint64_t t0 = now_ms_monotonic();
	assert_int_equal(vmm_connect_retry(&vmm_qemu_ops, &vc, true, pidfd, t0 + 50, &fd), -ETIMEDOUT);
	assert_true(now_ms_monotonic() - t0 >= 50);
	assert_int_equal(fd, -1);
	/* The channel and the console, each its own socket. */
	int ch = listen_at(d.path, QEMU_CHANNEL_SOCK);
	assert_int_equal(vmm_connect_retry(&vmm_qemu_ops, &vc, true, pidfd, now_ms_monotonic() + 1000, &fd), 0);
	assert_true(fd >= 0);
	close(fd);
	fd = -1;
	assert_int_equal(vmm_connect_retry(&vmm_qemu_ops, &vc, false, pidfd, now_ms_monotonic() + 50, &fd), -ETIMEDOUT);
	int con = listen_at(d.path, QEMU_CONSOLE_SOCK);
	assert_int_equal(vmm_connect_retry(&vmm_qemu_ops, &vc, false, pidfd, now_ms_monotonic() + 1000, &fd), 0);
	close(fd);
	close(ch);
	close(con);
	vmm_child_end(pid, pidfd);
}

static void test_connect_retry_ends_when_the_vmm_exits(void **state)
{
	struct vmm_config vc = {.dirfd = ((struct dir *)*state)->fd};
	pid_t pid;
	int pidfd = vmm_child(&pid);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* Gone before its socket was there: not waited for until the deadline. */
	int fd = -1;
	uint64_t t0 = now_ms_monotonic();
	assert_int_equal(vmm_connect_retry(&vmm_qemu_ops, &vc, true, pidfd, t0 + 60000, &fd), -ECHILD);
	assert_true(now_ms_monotonic() - t0 < 10000);
	assert_int_equal(fd, -1);
	close(pidfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_disk_give, dir_setup, dir_teardown),
	    cmocka_unit_test(test_jail_spec_takes_the_larger_disk),
	    cmocka_unit_test_setup_teardown(test_connect_retry_waits_for_the_socket, dir_setup, dir_teardown),
	    cmocka_unit_test_setup_teardown(test_connect_retry_ends_when_the_vmm_exits, dir_setup, dir_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
