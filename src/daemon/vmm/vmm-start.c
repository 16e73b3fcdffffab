/* SPDX-License-Identifier: Apache-2.0 */
/* What every start of a VMM does around its backend's spawn (vmm.h),
 * whoever starts it: a sandbox's boot (sandbox-boot.c) and a template
 * snapshot's build (template-snap.c). */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "jail.h"
#include "log.h"
#include "util.h"
#include "vmm.h"

/* Between two attempts to connect to a VMM's socket. */
#define VMM_CONNECT_RETRY_MS 5

int vmm_disk_give(const struct vmm_ops *ops, int dirfd, uint32_t uid, struct al_error *err)
{
	const char *disk = ops->disk_file;
	/* SECURITY: the directory is the jail uid's, and a VMM of an earlier
	 * life of the sandbox may have left a symlink under the disk's name:
	 * neither call follows one (fchmodat refuses it). */
	if (fchownat(dirfd, disk, uid, uid, AT_SYMLINK_NOFOLLOW) < 0 ||
	    fchmodat(dirfd, disk, 0600, AT_SYMLINK_NOFOLLOW) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot give the disk %s to the jail's uid %u: %m",
		                    disk, uid);
	return 0;
}

void vmm_jail_spec(const struct vmm_ops *ops, const struct vmm_config *vc, uint32_t uid, uint64_t disk_mib,
                   struct vmm_jail *ret)
{
	struct stat st;
	if (stat(vc->rootfs, &st) == 0 && size_mib_up((uint64_t)st.st_size) > disk_mib)
		disk_mib = size_mib_up((uint64_t)st.st_size);
	jail_spec(ret, uid, vc->vcpus, vc->memory_mib, disk_mib, vc->kvm_cpu || !strcmp(ops->accel(), "kvm"));
}

int vmm_connect_retry(const struct vmm_ops *ops, const struct vmm_config *vc, bool channel, int pidfd,
                      uint64_t deadline_ms, int *ret_fd)
{
	for (;;) {
		struct al_error e = {0};
		int r = channel ? ops->channel_connect(vc, ret_fd, &e) : ops->console_open(vc, ret_fd, &e);
		if (r == 0)
			return 0;
		if (r != -ENOENT && r != -ECONNREFUSED)
			return r;
		struct pollfd p = {.fd = pidfd, .events = POLLIN};
		if (poll(&p, 1, VMM_CONNECT_RETRY_MS) > 0)
			return -ECHILD; /* the VMM exited before it opened its sockets */
		if (now_ms_monotonic() >= deadline_ms)
			return -ETIMEDOUT;
	}
}

void vmm_internal_end(pid_t *pid, const char *id, uint32_t uid, bool *uid_held, const char *what)
{
	if (*pid > 0) {
		kill(*pid, SIGKILL);
		int status;
		while (waitpid(*pid, &status, 0) < 0 && errno == EINTR)
			;
		*pid = 0;
	}
	struct al_error e = {0};
	if (id[0] && jail_cleanup(id, &e) < 0) {
		log_error("%s %s: %s", what, id, e.message);
		*uid_held = false; /* something may still run as it */
	}
	if (*uid_held)
		jail_uid_put(uid);
	*uid_held = false;
}
