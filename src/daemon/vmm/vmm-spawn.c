/* SPDX-License-Identifier: Apache-2.0 */
/* How every backend starts and stops its VMM process (vmm-backend.h): the
 * binary on PATH, the VMM's log, the jailer forked with the VMM's fds at
 * their numbers. */
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>

#include "util.h"
#include "vmm-backend.h"
#include "vmm.h"
#include "airlock/proto.h"

int vmm_binary_path(const char *name, char *out, size_t size)
{
	const char *path = getenv("PATH");
	cleanup_free char *copy = xstrdup(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
	char *save = NULL;
	for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		if (dir[0] != '/')
			continue;
		cleanup_free char *cand = xasprintf("%s/%s", dir, name);
		char real[PATH_MAX];
		if (access(cand, X_OK) == 0 && realpath(cand, real) && strlen(real) < size) {
			memcpy(out, real, strlen(real) + 1);
			return 0;
		}
	}
	return -ENOENT;
}

int vmm_log_open(const char *dir, struct al_error *err)
{
	cleanup_free char *path = xasprintf("%s/%s", dir, VMM_LOG);
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m", path);
	return fd;
}

/* In the child: stdio, the fds at their numbers, then the jailer. */
static void __attribute__((noreturn))
exec_jailed(const char *root, char *const jargv[], const int src[], int nfds, int out_fd, int err_fd)
{
	setsid();
	if (chdir(root) < 0)
		_exit(126);
	int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (nullfd < 0 || dup2(nullfd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
		_exit(126);
	/* Every source out of the way first, then each to its number. */
	int high[VMM_FDS_MAX];
	for (int i = VMM_FD_FIRST; i < nfds; i++) {
		high[i] = src[i] >= 0 ? fcntl(src[i], F_DUPFD_CLOEXEC, 64) : -1;
		if (src[i] >= 0 && high[i] < 0)
			_exit(126);
	}
	for (int i = VMM_FD_FIRST; i < nfds; i++)
		if (high[i] >= 0 && dup2(high[i], i) < 0)
			_exit(126);
	close_range((unsigned)nfds, ~0u, 0);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execv(jargv[0], jargv);
	dprintf(2, "airlock-jailer: exec: cannot run %s: %m\n", jargv[0]);
	_exit(127);
}

int vmm_spawn_jailed(const char *root, char *const jargv[], const int src[], int nfds, int out_fd, int err_fd,
                     pid_t *ret_pid, struct al_error *err)
{
	if (nfds < VMM_FD_FIRST || nfds > VMM_FDS_MAX)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "a VMM starts with %d to %d fds, not %d",
		                    VMM_FD_FIRST, VMM_FDS_MAX, nfds);
	pid_t pid = fork();
	if (pid < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot fork the VMM: %m");
	if (pid == 0)
		exec_jailed(root, jargv, src, nfds, out_fd, err_fd);
	*ret_pid = pid;
	return 0;
}

int vmm_stop_by_kill(const struct vmm_config *cfg, pid_t pid)
{
	(void)cfg;
	if (pid <= 0)
		return 0;
	if (kill(pid, SIGKILL) < 0 && errno != ESRCH)
		return -errno;
	return 0;
}

bool vmm_pidfd_exited(int pidfd)
{
	struct pollfd p = {.fd = pidfd, .events = POLLIN};
	return pidfd >= 0 && poll(&p, 1, 0) > 0;
}

const char *vmm_guest_mac(const struct vmm_config *vc)
{
	uint8_t mac[6];
	if (vc->guest_mac && mac_parse(vc->guest_mac, mac) == 0 && mac_is_local_unicast(mac))
		return vc->guest_mac;
	return AIRLOCK_NET_GUEST_MAC;
}
