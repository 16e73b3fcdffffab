/* SPDX-License-Identifier: Apache-2.0 */
/* QEMU backend: -M microvm, KVM where /dev/kvm exists, TCG otherwise. */
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "airlock/proto.h"
#include "util.h"
#include "vmm.h"

#define QEMU_BINARY "qemu-system-x86_64"
#define QEMU_IMG_BINARY "qemu-img"

static bool have_kvm(void)
{
	return access("/dev/kvm", R_OK | W_OK) == 0;
}

static const char *qemu_accel(void)
{
	return have_kvm() ? "kvm" : "tcg";
}

/* Under TCG the guest TSC is the host's, and without telling the guest its
 * frequency a third of boots hang in calibration (MACHINE-NOTES). */
static unsigned long host_tsc_khz(void)
{
	cleanup_free char *buf = NULL;
	if (read_file_limited("/proc/cpuinfo", 4u << 20, &buf, NULL) < 0)
		return 0;
	const char *p = strstr(buf, "cpu MHz");
	if (!p || !(p = strchr(p, ':')))
		return 0;
	double mhz = strtod(p + 1, NULL);
	return mhz > 0 ? (unsigned long)(mhz * 1000.0) : 0;
}

/* Runs argv with cwd `dir`, stdout/stderr to `log_fd`, and waits for it. */
static int run_wait(char *const argv[], const char *dir, int log_fd)
{
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		if (dir && chdir(dir) < 0)
			_exit(126);
		int nullfd = open("/dev/null", O_RDONLY);
		if (nullfd >= 0)
			dup2(nullfd, 0);
		if (log_fd >= 0) {
			dup2(log_fd, 1);
			dup2(log_fd, 2);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	return -EIO;
}

static int open_log(const char *dir)
{
	cleanup_free char *path = xasprintf("%s/%s", dir, VMM_LOG);
	return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
}

static int qemu_prepare_disk(const struct vmm_config *cfg, struct al_error *err)
{
	cleanup_close int log_fd = open_log(cfg->dir);
	char *argv[] = {QEMU_IMG_BINARY, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", (char *)cfg->rootfs,
			VMM_DISK, NULL};
	int r = run_wait(argv, cfg->dir, log_fd);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r,
				    "cannot create the copy-on-write disk over %s with qemu-img (see %s/%s)",
				    cfg->rootfs, cfg->dir, VMM_LOG);
	return 0;
}

static int qemu_spawn(const struct vmm_config *cfg, pid_t *ret_pid, struct al_error *err)
{
	bool kvm = have_kvm();
	char smp[16], mem[24], append[512], drive[128];
	snprintf(smp, sizeof(smp), "%u", cfg->vcpus);
	snprintf(mem, sizeof(mem), "%uM", cfg->memory_mib);
	/* panic=-1 + -no-reboot: a guest that panics ends its QEMU, which is how
	 * the daemon learns about it. */
	int off = snprintf(append, sizeof(append), "console=ttyS0 quiet panic=-1 airlock.root=/dev/vda");
	if (!kvm) {
		unsigned long khz = host_tsc_khz();
		if (khz)
			snprintf(append + off, sizeof(append) - (size_t)off, " tsc_early_khz=%lu", khz);
	}
	snprintf(drive, sizeof(drive), "id=root,file=%s,format=qcow2,if=none,discard=unmap", VMM_DISK);
	char name[64];
	snprintf(name, sizeof(name), "airlock-%s", cfg->sandbox_id);

	char *argv[] = {
		QEMU_BINARY, "-name", name, "-M", "microvm", "-accel", kvm ? "kvm" : "tcg", "-cpu",
		kvm ? "host" : "max", "-smp", smp, "-m", mem, "-nodefaults", "-no-user-config", "-nographic",
		"-no-reboot", "-kernel", (char *)cfg->kernel, "-initrd", (char *)cfg->initrd, "-append", append,
		"-chardev", "socket,id=con,path=" VMM_CONSOLE_SOCK ",server=on,wait=off", "-serial", "chardev:con",
		"-drive", drive, "-device", "virtio-blk-device,drive=root", "-device", "virtio-rng-device",
		"-device", "virtio-serial-device", "-chardev",
		"socket,id=ctl,path=" VMM_CHANNEL_SOCK ",server=on,wait=off", "-device",
		"virtserialport,chardev=ctl,name=" AIRLOCK_PORT_NAME_LITERAL, "-qmp",
		"unix:" VMM_QMP_SOCK ",server=on,wait=off", NULL};

	cleanup_close int log_fd = open_log(cfg->dir);
	if (log_fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s/%s: %m", cfg->dir, VMM_LOG);
	pid_t pid = fork();
	if (pid < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot fork the VMM: %m");
	if (pid == 0) {
		/* Own session: the VMM outlives a restart of the daemon and gets
		 * none of its signals. Only stdio survives into it. */
		setsid();
		if (chdir(cfg->dir) < 0)
			_exit(126);
		int nullfd = open("/dev/null", O_RDWR);
		if (nullfd < 0)
			_exit(126);
		dup2(nullfd, 0);
		dup2(log_fd, 1);
		dup2(log_fd, 2);
		close_range(3, ~0u, 0);
		sigset_t all;
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		execvp(argv[0], argv);
		_exit(127);
	}
	*ret_pid = pid;
	return 0;
}

static int qemu_stop(const struct vmm_config *cfg, pid_t pid)
{
	(void)cfg;
	if (pid <= 0)
		return 0;
	if (kill(pid, SIGKILL) < 0 && errno != ESRCH)
		return -errno;
	return 0;
}

static int qemu_run_state(const struct vmm_config *cfg, const char *command, const char *what,
			  struct al_error *err)
{
	char why[256];
	int r = qmp_command(cfg->dirfd, command, NULL, NULL, why, sizeof(why));
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot %s the VM: %s", what, why);
	return 0;
}

static int qemu_pause(const struct vmm_config *cfg, struct al_error *err)
{
	return qemu_run_state(cfg, "stop", "pause", err);
}

static int qemu_resume(const struct vmm_config *cfg, struct al_error *err)
{
	return qemu_run_state(cfg, "cont", "resume", err);
}

const struct vmm_ops vmm_qemu_ops = {
	.name = "qemu",
	.accel = qemu_accel,
	.prepare_disk = qemu_prepare_disk,
	.spawn = qemu_spawn,
	.stop = qemu_stop,
	.pause = qemu_pause,
	.resume = qemu_resume,
};

int unix_connect_at(int dirfd, const char *name, int *ret_fd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (snprintf_ok(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dirfd, name) < 0)
		return -ENAMETOOLONG;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	*ret_fd = fd;
	return 0;
}
