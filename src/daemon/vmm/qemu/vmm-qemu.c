/* SPDX-License-Identifier: Apache-2.0 */
/* QEMU backend: -M microvm, on the accelerator the daemon decided (accel.h:
 * KVM only once a guest has booted on it, TCG otherwise). */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "airlock/proto.h"
#include "json-cleanup.h"
#include "util.h"
#include "accel.h"
#include "jail.h"
#include "vmm-qmp.h"
#include "vmm.h"

#define QEMU_BINARY "qemu-system-x86_64"
#define QEMU_IMG_BINARY "qemu-img"
/* TCG's translation cache, MiB (part of the memory limit, jail.h). */
#define QEMU_TCG_TB_MIB_STR "128"
#define STR_(x) #x
#define STR(x) STR_(x)
#define FD_KERNEL_NUM 4
#define FD_INITRD_NUM 5
#define FD_INCOMING_NUM 7
#define FD_MEM_NUM 8

static const char *qemu_accel(void)
{
	struct accel_info a;
	accel_get(&a);
	return accel_name(&a);
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
	/* With a size the guest sees a bigger block device than the template
	 * (the filesystem on it is not grown); the qcow2 file can never hold
	 * more than that many bytes of data. The backing file named in the
	 * overlay is never opened by that name: spawn gives QEMU the template
	 * as an fd and names it as the backing node. */
	char size[32];
	snprintf(size, sizeof(size), "%" PRIu64 "M", cfg->disk_mib);
	char *argv[] = {QEMU_IMG_BINARY,
	                "create",
	                "-q",
	                "-f",
	                "qcow2",
	                "-F",
	                "raw",
	                "-b",
	                (char *)cfg->rootfs,
	                VMM_DISK,
	                cfg->disk_mib ? size : NULL,
	                NULL};
	int r = run_wait(argv, cfg->root, log_fd);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r,
		                    "cannot create the copy-on-write disk over %s with qemu-img (see %s/%s)",
		                    cfg->rootfs, cfg->dir, VMM_LOG);
	return 0;
}

/* The absolute path of the QEMU binary (the jailer wants one): the first
 * on PATH, canonical. */
static int qemu_binary_path(char *out, size_t size)
{
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	cleanup_free char *copy = xstrdup(path);
	char *save = NULL;
	for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		if (dir[0] != '/')
			continue;
		cleanup_free char *cand = xasprintf("%s/%s", dir, QEMU_BINARY);
		char real[PATH_MAX];
		if (access(cand, X_OK) == 0 && realpath(cand, real) && strlen(real) < size) {
			memcpy(out, real, strlen(real) + 1);
			return 0;
		}
	}
	return -ENOENT;
}

/* The fds a VMM starts with, at these numbers (the jailer keeps them). */
enum {
	FD_NETNS = 3, /* joined and closed by the jailer */
	FD_KERNEL = FD_KERNEL_NUM,
	FD_INITRD = FD_INITRD_NUM,
	FD_ROOTFS = 6,
	FD_INCOMING = FD_INCOMING_NUM,
	FD_MEM = FD_MEM_NUM,
	FD_COUNT = 9,
};

static int qemu_spawn(const struct vmm_config *cfg, pid_t *ret_pid, struct al_error *err)
{
	/* SECURITY: fail closed: a VMM never runs outside its jail. */
	if (!cfg->jail)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM, "refusing to start a VMM without its jail");
	char qemu[PATH_MAX];
	if (qemu_binary_path(qemu, sizeof(qemu)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, ENOENT, "%s is not on PATH", QEMU_BINARY);
	/* The accelerator: the probe's attempt, or the daemon's decision
	 * (never "probing": every start waits for it, sandbox.c). */
	struct accel_info accel;
	accel_get(&accel);
	if (!cfg->kvm_cpu && !accel.decided)
		return al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN,
		                    "the accelerator is not decided yet (its probe is running): try again");
	bool kvm = cfg->kvm_cpu || accel.kvm;
	const char *cpu = cfg->kvm_cpu ? cfg->kvm_cpu : accel.cpu;
	char smp[16], mem[24], append[512];
	snprintf(smp, sizeof(smp), "%u", cfg->vcpus);
	snprintf(mem, sizeof(mem), "%uM", cfg->memory_mib);
	/* panic=-1 + -no-reboot: a guest that panics ends its QEMU, which is how
	 * the daemon learns about it. */
	int off = snprintf(append, sizeof(append), "console=ttyS0 quiet panic=-1 airlock.root=/dev/vda");
	if (!kvm) {
		/* TCG: the guest's TSC is the host's. tsc_early_khz: without it a
		 * third of boots hang calibrating. tsc=reliable: the clocksource
		 * watchdog's reference is jiffies, whose ticks come late on a busy
		 * host (and stop between a snapshot and its restore), so it
		 * would mark the TSC unstable and the guest would fall back to
		 * jiffies and a periodic 250 Hz tick, never idle: ~3x the CPU of
		 * an idle sandbox. */
		unsigned long khz = host_tsc_khz();
		off += snprintf(append + off, sizeof(append) - (size_t)off, " tsc=reliable");
		if (khz)
			snprintf(append + off, sizeof(append) - (size_t)off, " tsc_early_khz=%lu", khz);
	}
	char name[64];
	snprintf(name, sizeof(name), "airlock-%s", cfg->sandbox_id);
	/* Inside the jail there is no kernel, initramfs or template by path:
	 * QEMU reads them from the fds the daemon opened. The template is the
	 * explicit backing node of the overlay (the path written in the
	 * overlay is ignored), through an fd set: no reopen, so it needs no
	 * permission for the jail's uid. */
	char rootfs_fdset[32];
	snprintf(rootfs_fdset, sizeof(rootfs_fdset), "fd=%d,set=1,opaque=rootfs", FD_ROOTFS);

	/* The RAM is always the backend "mem": its name is what a saved state
	 * calls it, the same whatever backs it. */
	char ram[160];
	if (cfg->mem_fd >= 0)
		snprintf(ram, sizeof(ram), "memory-backend-file,id=mem,size=%uM,mem-path=/proc/self/fd/%d,share=%s",
		         cfg->memory_mib, FD_MEM, cfg->mem_shared ? "on" : "off");
	else
		snprintf(ram, sizeof(ram), "memory-backend-ram,id=mem,size=%uM", cfg->memory_mib);

	char *argv[80];
	size_t n = 0;
#define ARG(x) (argv[n++] = (char *)(x))
	ARG(qemu);
	ARG("-name");
	ARG(name);
	ARG("-M");
	ARG("microvm,memory-backend=mem");
	ARG("-object");
	ARG(ram);
	ARG("-accel");
	/* A bounded translation cache: it is host memory of the sandbox's
	 * cgroup (QEMU's default is 1 GiB). */
	ARG(kvm ? "kvm" : "tcg,tb-size=" QEMU_TCG_TB_MIB_STR);
	ARG("-cpu");
	ARG(cpu);
	ARG("-smp");
	ARG(smp);
	ARG("-m");
	ARG(mem);
	ARG("-nodefaults");
	ARG("-no-user-config");
	ARG("-nographic");
	ARG("-no-reboot");
	/* QEMU's own filter on top of the jailer's: no setuid, no exec, no
	 * scheduler or resource changes. */
	ARG("-sandbox");
	ARG("on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	/* A restore runs the guest from its saved RAM and CPUs, never the
	 * firmware: the kernel and initramfs would only be read into QEMU's
	 * heap for fw_cfg (~16 MiB of every sandbox's private memory, and the
	 * time to read them). A guest that reboots ends its QEMU (-no-reboot). */
	bool boot_files = cfg->incoming_fd < 0;
	if (boot_files) {
		ARG("-kernel");
		ARG("/proc/self/fd/" STR(FD_KERNEL_NUM));
		ARG("-initrd");
		ARG("/proc/self/fd/" STR(FD_INITRD_NUM));
		ARG("-append");
		ARG(append);
	}
	ARG("-chardev");
	ARG("socket,id=con,path=" VMM_CONSOLE_SOCK ",server=on,wait=off");
	ARG("-serial");
	ARG("chardev:con");
	ARG("-add-fd");
	ARG(rootfs_fdset);
	ARG("-blockdev");
	ARG("driver=file,node-name=base-file,filename=/dev/fdset/1,read-only=on");
	ARG("-blockdev");
	ARG("driver=raw,node-name=base,file=base-file,read-only=on");
	ARG("-blockdev");
	ARG("driver=file,node-name=disk-file,filename=" VMM_DISK ",discard=unmap");
	ARG("-blockdev");
	ARG("driver=qcow2,node-name=root,file=disk-file,backing=base,discard=unmap");
	ARG("-device");
	ARG("virtio-blk-device,drive=root");
	ARG("-device");
	ARG("virtio-rng-device");
	ARG("-device");
	ARG("virtio-serial-device");
	ARG("-chardev");
	ARG("socket,id=ctl,path=" VMM_CHANNEL_SOCK ",server=on,wait=off");
	ARG("-device");
	ARG("virtserialport,chardev=ctl,name=" AIRLOCK_PORT_NAME_LITERAL);
	ARG("-qmp");
	ARG("unix:" QEMU_QMP_SOCK ",server=on,wait=off");
	if (cfg->netns_fd >= 0) {
		/* The guest's only NIC: tap0 of the sandbox's namespace (the jailer
		 * joins it; the tap belongs to the jail's uid). Never vhost (not
		 * available here, and the kernel-side datapath is more attack
		 * surface). */
		ARG("-netdev");
		ARG("tap,id=n0,ifname=" AIRLOCK_NET_TAP ",script=no,downscript=no");
		ARG("-device");
		ARG("virtio-net-device,netdev=n0,mac=" AIRLOCK_NET_GUEST_MAC);
	}
	if (cfg->incoming_fd >= 0) {
		/* A restore: the same machine, its state read from the snapshot
		 * (fd FD_INCOMING) once wait_incoming has set the capabilities. */
		ARG("-incoming");
		ARG("defer");
	}
	argv[n] = NULL;
#undef ARG

	int keep[5] = {FD_ROOTFS};
	size_t nkeep = 1;
	if (boot_files) {
		keep[nkeep++] = FD_KERNEL;
		keep[nkeep++] = FD_INITRD;
	}
	if (cfg->incoming_fd >= 0)
		keep[nkeep++] = FD_INCOMING;
	if (cfg->mem_fd >= 0)
		keep[nkeep++] = FD_MEM;
	cleanup_free char *arena = NULL;
	cleanup_free char **jargv = jail_argv(cfg->sandbox_id, cfg->root, cfg->jail, cfg->netns_fd >= 0 ? FD_NETNS : -1,
	                                      keep, nkeep, argv, &arena);

	/* What the VMM starts with, opened here (the jail has none of them). */
	int src[FD_COUNT];
	for (int i = 0; i < FD_COUNT; i++)
		src[i] = -1;
	src[FD_NETNS] = cfg->netns_fd;
	src[FD_INCOMING] = cfg->incoming_fd;
	src[FD_MEM] = cfg->mem_fd;
	cleanup_close int kfd = boot_files ? open(cfg->kernel, O_RDONLY | O_CLOEXEC) : -1;
	cleanup_close int ifd = boot_files ? open(cfg->initrd, O_RDONLY | O_CLOEXEC) : -1;
	cleanup_close int rfd = open(cfg->rootfs, O_RDONLY | O_CLOEXEC);
	if ((boot_files && (kfd < 0 || ifd < 0)) || rfd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m",
		                    rfd < 0   ? cfg->rootfs
		                    : kfd < 0 ? cfg->kernel
		                              : cfg->initrd);
	src[FD_KERNEL] = kfd;
	src[FD_INITRD] = ifd;
	src[FD_ROOTFS] = rfd;

	cleanup_close int log_fd = open_log(cfg->dir);
	if (log_fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s/%s: %m", cfg->dir, VMM_LOG);
	pid_t pid = fork();
	if (pid < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot fork the VMM: %m");
	if (pid == 0) {
		/* Own session: the VMM outlives a restart of the daemon and gets
		 * none of its signals. The jailer's cwd is the VMM's dir (how a
		 * restarted daemon finds VMMs no record owns). */
		setsid();
		if (chdir(cfg->root) < 0)
			_exit(126);
		int nullfd = open("/dev/null", O_RDWR);
		if (nullfd < 0 || dup2(nullfd, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0)
			_exit(126);
		/* Every source out of the way first, then each to its number. */
		int high[FD_COUNT];
		for (int i = 0; i < FD_COUNT; i++) {
			high[i] = src[i] >= 0 ? fcntl(src[i], F_DUPFD_CLOEXEC, 64) : -1;
			if (src[i] >= 0 && high[i] < 0)
				_exit(126);
		}
		for (int i = FD_NETNS; i < FD_COUNT; i++)
			if (high[i] >= 0 && dup2(high[i], i) < 0)
				_exit(126);
		close_range(FD_COUNT, ~0u, 0);
		sigset_t all;
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		execv(jargv[0], jargv);
		dprintf(2, "airlock-jailer: exec: cannot run %s: %m\n", jargv[0]);
		_exit(127);
	}
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

static int qemu_run_state(const struct vmm_config *cfg, const char *command, const char *what, struct al_error *err)
{
	int r = qmp_command(cfg->dirfd, command, NULL, NULL, err);
	if (r < 0)
		al_error_prefix(err, "cannot %s the VM", what);
	return r;
}

static int qemu_pause(const struct vmm_config *cfg, struct al_error *err)
{
	return qemu_run_state(cfg, "stop", "pause", err);
}

static int qemu_resume(const struct vmm_config *cfg, struct al_error *err)
{
	return qemu_run_state(cfg, "cont", "resume", err);
}

#define QEMU_SAVE_TIMEOUT_MS 600000
#define QEMU_CANCEL_TIMEOUT_MS 30000
#define QEMU_POLL_MS 20
#define QEMU_INCOMING_POLL_MS 3

/* Every saved state is made and read with x-ignore-shared: the RAM of a
 * shared file-backed memory (a template's boot) is left out, everything
 * else is in it. Both sides must agree: it changes the stream's format. */
static int set_migration_caps(const struct vmm_config *cfg, struct al_error *err)
{
	cleanup_json json_t *args =
	    json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared", "state", 1);
	return qmp_command(cfg->dirfd, "migrate-set-capabilities", args, NULL, err);
}

/* Where a migration (a save) is: query-migrate's "status" and, when it
 * failed, QEMU's "error-desc". */
static int migration_status(const struct vmm_config *cfg, char *status, size_t size, char *desc, size_t desc_size,
                            struct al_error *err)
{
	cleanup_json json_t *ret = NULL;
	int r = qmp_command(cfg->dirfd, "query-migrate", NULL, &ret, err);
	if (r < 0)
		return r;
	snprintf(status, size, "%s", json_string_value(json_object_get(ret, "status")) ?: "");
	snprintf(desc, desc_size, "%s", json_string_value(json_object_get(ret, "error-desc")) ?: "");
	return 0;
}

/* Until the save that migrate started is complete. */
static int qemu_save_wait(const struct vmm_config *cfg, struct al_error *err)
{
	uint64_t deadline = now_ms_monotonic() + QEMU_SAVE_TIMEOUT_MS;
	for (;;) {
		char status[32], desc[256];
		int r = migration_status(cfg, status, sizeof(status), desc, sizeof(desc), err);
		if (r < 0) {
			al_error_prefix(err, "cannot follow the save");
			return r;
		}
		if (!strcmp(status, "completed"))
			return 0;
		if (!strcmp(status, "failed") || !strcmp(status, "cancelled"))
			return al_error_set(err, AL_ERR_INTERNAL, EIO, "saving the VM failed%s%s (is the disk full?)",
			                    desc[0] ? ": " : "", desc);
		if (now_ms_monotonic() > deadline) {
			qmp_command(cfg->dirfd, "migrate_cancel", NULL, NULL, NULL);
			return al_error_set(err, AL_ERR_TIMEOUT, ETIMEDOUT, "saving the VM took too long");
		}
		usleep(QEMU_POLL_MS * 1000);
	}
}

static int qemu_save(const struct vmm_config *cfg, int out_fd, struct al_error *err)
{
	if (set_migration_caps(cfg, err) < 0) {
		al_error_prefix(err, "cannot prepare saving the VM");
		err->code = AL_ERR_INTERNAL;
		return -EIO;
	}
	/* The VMM gets the open file, never a path: it cannot write anywhere
	 * else, and no shell runs in its jail (-sandbox spawn=deny). */
	cleanup_json json_t *args = json_pack("{s:s}", "uri", "fd:snapshot");
	int r = qmp_command_with_fd(cfg->dirfd, out_fd, "snapshot", "migrate", args, err);
	if (r < 0) {
		al_error_prefix(err, "cannot start saving the VM");
		return r;
	}
	return qemu_save_wait(cfg, err);
}

static int qemu_cancel_save(const struct vmm_config *cfg, struct al_error *err)
{
	qmp_command(cfg->dirfd, "migrate_cancel", NULL, NULL, NULL);
	uint64_t deadline = now_ms_monotonic() + QEMU_CANCEL_TIMEOUT_MS;
	for (;;) {
		char status[32], desc[256];
		if (migration_status(cfg, status, sizeof(status), desc, sizeof(desc), err) < 0) {
			al_error_prefix(err, "cannot ask QEMU about the save");
			err->code = AL_ERR_INTERNAL;
			return -EIO;
		}
		/* Still moving: setup, active, device, pre-switchover, cancelling, wait-unplug. */
		bool busy = status[0] && strcmp(status, "completed") && strcmp(status, "failed") &&
		            strcmp(status, "cancelled") && strcmp(status, "none");
		if (!busy)
			return 0;
		if (now_ms_monotonic() > deadline)
			return al_error_set(err, AL_ERR_TIMEOUT, ETIMEDOUT, "QEMU did not stop saving");
		usleep(QEMU_POLL_MS * 1000);
	}
}

/* -incoming defer: QEMU waits for the capabilities, then reads the state
 * from the fd it was given at start. */
static int qemu_load_start(const struct vmm_config *cfg, uint64_t deadline_ms, struct al_error *err)
{
	/* Its QMP socket appears a moment after the others. */
	for (;;) {
		int r = set_migration_caps(cfg, err);
		if (r == 0)
			break;
		/* Not listening yet, or too busy to answer (a loaded host): again,
		 * until the restore's own deadline. */
		if ((r != -ENOENT && r != -ECONNREFUSED && r != -ETIMEDOUT) || now_ms_monotonic() > deadline_ms) {
			al_error_prefix(err, "QEMU could not start loading the snapshot");
			err->code = AL_ERR_INTERNAL;
			return -EIO;
		}
		usleep(QEMU_INCOMING_POLL_MS * 1000);
	}
	cleanup_json json_t *uri = json_pack("{s:s}", "uri", "fd:" STR(FD_INCOMING_NUM));
	if (qmp_command(cfg->dirfd, "migrate-incoming", uri, NULL, err) < 0) {
		al_error_prefix(err, "QEMU could not start loading the snapshot");
		err->code = AL_ERR_INTERNAL;
		return -EIO;
	}
	return 0;
}

static int qemu_wait_incoming(const struct vmm_config *cfg, uint64_t deadline_ms, struct al_error *err)
{
	int r = qemu_load_start(cfg, deadline_ms, err);
	if (r < 0)
		return r;
	/* Why the last status query failed, for the timeout's message. */
	struct al_error last = {0};
	for (;;) {
		cleanup_json json_t *ret = NULL;
		if (qmp_command(cfg->dirfd, "query-status", NULL, &ret, &last) == 0) {
			const char *status = json_string_value(json_object_get(ret, "status"));
			bool loading = status && !strcmp(status, "inmigrate");
			bool failed = status && (!strcmp(status, "internal-error") || !strcmp(status, "shutdown"));
			if (failed)
				return al_error_set(err, AL_ERR_INTERNAL, EIO, "QEMU could not load the snapshot");
			if (!loading)
				return 0;
		}
		if (now_ms_monotonic() > deadline_ms)
			return al_error_set(err, AL_ERR_TIMEOUT, ETIMEDOUT, "loading the snapshot took too long%s%s",
			                    last.message[0] ? ": " : "", last.message);
		usleep(QEMU_INCOMING_POLL_MS * 1000); /* a template's state loads in a few ms */
	}
}

static int qemu_probe(const struct vmm_config *cfg, unsigned timeout_ms, struct al_error *err)
{
	json_t *ret = NULL;
	/* query-status is answered by QEMU's main loop: it is what stops when
	 * the process is stopped, wedged or starved. */
	int r = qmp_command_timeout(cfg->dirfd, "query-status", NULL, &ret, timeout_ms, err);
	json_decref(ret);
	if (r < 0) {
		al_error_prefix(err, "QEMU did not answer query-status within %u ms", timeout_ms);
		err->code = AL_ERR_UNAVAILABLE;
	}
	return r;
}

const struct vmm_ops vmm_qemu_ops = {
    .name = "qemu",
    .accel = qemu_accel,
    .prepare_disk = qemu_prepare_disk,
    .spawn = qemu_spawn,
    .stop = vmm_stop_by_kill,
    .pause = qemu_pause,
    .resume = qemu_resume,
    .save = qemu_save,
    .wait_incoming = qemu_wait_incoming,
    .cancel_save = qemu_cancel_save,
    .probe = qemu_probe,
};

static int connect_at(int dirfd, const char *name, int flags, int *ret_fd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (snprintf_ok(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dirfd, name) < 0)
		return -ENAMETOOLONG;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
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

int unix_connect_at(int dirfd, const char *name, int *ret_fd)
{
	return connect_at(dirfd, name, 0, ret_fd);
}

int unix_connect_at_nonblock(int dirfd, const char *name, int *ret_fd)
{
	/* A unix stream connect never completes later: it is there at once, or
	 * EAGAIN when the backlog is full. */
	return connect_at(dirfd, name, SOCK_NONBLOCK, ret_fd);
}
