/* SPDX-License-Identifier: Apache-2.0 */
/* QEMU backend: -M microvm, on the accelerator the daemon decided (accel.h:
 * KVM only once a guest has booted on it, TCG otherwise), driven through its
 * monitor (QMP, vmm-qmp.h). */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "airlock/proto.h"
#include "json-cleanup.h"
#include "util.h"
#include "accel.h"
#include "jail.h"
#include "vmm-backend.h"
#include "vmm-qemu.h"
#include "vmm-qmp.h"
#include "vmm.h"

#define QEMU_BINARY "qemu-system-x86_64"
#define QEMU_IMG_BINARY "qemu-img"
/* The guest kernel: a bzImage. */
#define QEMU_KERNEL "vmlinuz"
/* TCG's translation cache, MiB (part of the memory limit, jail.h). */
#define QEMU_TCG_TB_MIB_STR "128"
#define STR_(x) #x
#define STR(x) STR_(x)
#define FD_KERNEL_NUM 4
#define FD_INITRD_NUM 5
#define FD_INCOMING_NUM 7
#define FD_MEM_NUM 8

/* The fds a VMM starts with, at these numbers (the jailer keeps them). */
enum {
	FD_NETNS = VMM_FD_NETNS, /* joined and closed by the jailer */
	FD_KERNEL = FD_KERNEL_NUM,
	FD_INITRD = FD_INITRD_NUM,
	FD_ROOTFS = 6,
	FD_INCOMING = FD_INCOMING_NUM,
	FD_MEM = FD_MEM_NUM,
	FD_COUNT = 9,
};

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

static int qemu_prepare_disk(const struct vmm_config *cfg, struct al_error *err)
{
	/* Without its log, qemu-img's words are lost, nothing else. */
	cleanup_close int log_fd = vmm_log_open(cfg->dir, NULL);
	/* With a size the guest sees a bigger block device than the template
	 * (the agent grows the filesystem on it at boot); the qcow2 file can never hold
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
	                QEMU_DISK,
	                cfg->disk_mib ? size : NULL,
	                NULL};
	int r = run_wait(argv, cfg->root, log_fd);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r,
		                    "cannot create the copy-on-write disk over %s with qemu-img (see %s/%s)",
		                    cfg->rootfs, cfg->dir, VMM_LOG);
	return 0;
}

/* ---- start: QEMU's command line ---------------------------------------------------------------- */

#define QEMU_ARGS_MAX 80

/* One start's command line and the buffers its arguments live in. */
struct qemu_cmdline {
	char binary[PATH_MAX];
	char name[64], smp[16], mem[24], append[512], rootfs_fdset[32], ram[160], nic[80];
	char *argv[QEMU_ARGS_MAX + 1];
	size_t n;
};

static void arg(struct qemu_cmdline *c, const char *a)
{
	if (c->n >= QEMU_ARGS_MAX)
		abort(); /* a bug here: the list below is fixed */
	c->argv[c->n++] = (char *)a;
	c->argv[c->n] = NULL;
}

/* The guest kernel's command line. */
static void kernel_cmdline(bool kvm, char *append, size_t size)
{
	/* panic=-1 + -no-reboot: a guest that panics ends its QEMU, which is how
	 * the daemon learns about it. */
	int off = snprintf(append, size, "console=ttyS0 quiet panic=-1 airlock.root=/dev/vda");
	if (kvm)
		return;
	/* TCG: the guest's TSC is the host's. tsc_early_khz: without it a third
	 * of boots hang calibrating. tsc=reliable: the clocksource watchdog's
	 * reference is jiffies, whose ticks come late on a busy host (and stop
	 * between a snapshot and its restore), so it would mark the TSC
	 * unstable and the guest would fall back to jiffies and a periodic
	 * 250 Hz tick, never idle: ~3x the CPU of an idle sandbox. */
	unsigned long khz = host_tsc_khz();
	off += snprintf(append + off, size - (size_t)off, " tsc=reliable");
	if (khz)
		snprintf(append + off, size - (size_t)off, " tsc_early_khz=%lu", khz);
}

/* The machine: its RAM, accelerator, CPUs, and nothing by default. */
static void args_machine(const struct vmm_config *cfg, bool kvm, const char *cpu, struct qemu_cmdline *c)
{
	snprintf(c->name, sizeof(c->name), "airlock-%s", cfg->sandbox_id);
	snprintf(c->smp, sizeof(c->smp), "%u", cfg->vcpus);
	snprintf(c->mem, sizeof(c->mem), "%uM", cfg->memory_mib);
	/* The RAM is always the backend "mem": its name is what a saved state
	 * calls it, the same whatever backs it. */
	if (cfg->mem_fd >= 0)
		snprintf(c->ram, sizeof(c->ram),
		         "memory-backend-file,id=mem,size=%uM,mem-path=/proc/self/fd/%d,share=%s", cfg->memory_mib,
		         FD_MEM, cfg->mem_shared ? "on" : "off");
	else
		snprintf(c->ram, sizeof(c->ram), "memory-backend-ram,id=mem,size=%uM", cfg->memory_mib);
	arg(c, c->binary);
	arg(c, "-name");
	arg(c, c->name);
	arg(c, "-M");
	arg(c, "microvm,memory-backend=mem");
	arg(c, "-object");
	arg(c, c->ram);
	arg(c, "-accel");
	/* A bounded translation cache: it is host memory of the sandbox's
	 * cgroup (QEMU's default is 1 GiB). */
	arg(c, kvm ? "kvm" : "tcg,tb-size=" QEMU_TCG_TB_MIB_STR);
	arg(c, "-cpu");
	arg(c, cpu);
	arg(c, "-smp");
	arg(c, c->smp);
	arg(c, "-m");
	arg(c, c->mem);
	arg(c, "-nodefaults");
	arg(c, "-no-user-config");
	arg(c, "-nographic");
	arg(c, "-no-reboot");
	/* QEMU's own filter on top of the jailer's: no setuid, no exec, no
	 * scheduler or resource changes. */
	arg(c, "-sandbox");
	arg(c, "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
}

/* A restore runs the guest from its saved RAM and CPUs, never the
 * firmware: the kernel and initramfs would only be read into QEMU's heap for
 * fw_cfg (~16 MiB of every sandbox's private memory, and the time to read
 * them). A guest that reboots ends its QEMU (-no-reboot). */
static bool boots(const struct vmm_config *cfg)
{
	return cfg->incoming_fd < 0;
}

static void args_boot(const struct vmm_config *cfg, bool kvm, struct qemu_cmdline *c)
{
	if (!boots(cfg))
		return;
	kernel_cmdline(kvm, c->append, sizeof(c->append));
	arg(c, "-kernel");
	arg(c, "/proc/self/fd/" STR(FD_KERNEL_NUM));
	arg(c, "-initrd");
	arg(c, "/proc/self/fd/" STR(FD_INITRD_NUM));
	arg(c, "-append");
	arg(c, c->append);
}

/* The console, the disk over the template, entropy, the agent's channel
 * and the monitor. */
static void args_devices(struct qemu_cmdline *c)
{
	/* Inside the jail there is no kernel, initramfs or template by path:
	 * QEMU reads them from the fds the daemon opened. The template is the
	 * explicit backing node of the overlay (the path written in the
	 * overlay is ignored), through an fd set: no reopen, so it needs no
	 * permission for the jail's uid. */
	snprintf(c->rootfs_fdset, sizeof(c->rootfs_fdset), "fd=%d,set=1,opaque=rootfs", FD_ROOTFS);
	arg(c, "-chardev");
	arg(c, "socket,id=con,path=" QEMU_CONSOLE_SOCK ",server=on,wait=off");
	arg(c, "-serial");
	arg(c, "chardev:con");
	arg(c, "-add-fd");
	arg(c, c->rootfs_fdset);
	arg(c, "-blockdev");
	arg(c, "driver=file,node-name=base-file,filename=/dev/fdset/1,read-only=on");
	arg(c, "-blockdev");
	arg(c, "driver=raw,node-name=base,file=base-file,read-only=on");
	arg(c, "-blockdev");
	arg(c, "driver=file,node-name=disk-file,filename=" QEMU_DISK ",discard=unmap");
	arg(c, "-blockdev");
	arg(c, "driver=qcow2,node-name=root,file=disk-file,backing=base,discard=unmap");
	arg(c, "-device");
	arg(c, "virtio-blk-device,drive=root");
	arg(c, "-device");
	arg(c, "virtio-rng-device");
	arg(c, "-device");
	arg(c, "virtio-serial-device");
	arg(c, "-chardev");
	arg(c, "socket,id=ctl,path=" QEMU_CHANNEL_SOCK ",server=on,wait=off");
	arg(c, "-device");
	arg(c, "virtserialport,chardev=ctl,name=" AIRLOCK_PORT_NAME_LITERAL);
	arg(c, "-qmp");
	arg(c, "unix:" QEMU_QMP_SOCK ",server=on,wait=off");
}

static void args_network_incoming(const struct vmm_config *cfg, struct qemu_cmdline *c)
{
	if (cfg->netns_fd >= 0) {
		/* The guest's only NIC: tap0 of the sandbox's namespace (the jailer
		 * joins it; the tap belongs to the jail's uid). Never vhost (not
		 * available here, and the kernel-side datapath is more attack
		 * surface). */
		arg(c, "-netdev");
		arg(c, "tap,id=n0,ifname=" AIRLOCK_NET_TAP ",script=no,downscript=no");
		snprintf(c->nic, sizeof(c->nic), "virtio-net-device,netdev=n0,mac=%s", vmm_guest_mac(cfg));
		arg(c, "-device");
		arg(c, c->nic);
	}
	if (cfg->incoming_fd >= 0) {
		/* A restore: the same machine, its state read from the snapshot
		 * (fd FD_INCOMING) once wait_incoming has set the capabilities. */
		arg(c, "-incoming");
		arg(c, "defer");
	}
}

/* ---- start: the fds, the jail, the process --------------------------------------------------- */

/* The accelerator of this start: the probe's attempt (cfg->kvm_cpu, KVM),
 * else the daemon's decision (never "probing": every start waits for it,
 * sandbox-create.c). */
static int start_accel(const struct vmm_config *cfg, bool *ret_kvm, char *cpu, size_t size, struct al_error *err)
{
	struct accel_info accel;
	accel_get(&accel);
	if (!cfg->kvm_cpu && !accel.decided)
		return al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN,
		                    "the accelerator is not decided yet (its probe is running): try again");
	*ret_kvm = cfg->kvm_cpu || accel.kvm;
	strlcpy_al(cpu, cfg->kvm_cpu ? cfg->kvm_cpu : accel.cpu, size);
	return 0;
}

/* The fds the jailer passes through to QEMU (besides the namespace's). */
static size_t keep_fds(const struct vmm_config *cfg, int keep[5])
{
	size_t n = 0;
	keep[n++] = FD_ROOTFS;
	if (boots(cfg)) {
		keep[n++] = FD_KERNEL;
		keep[n++] = FD_INITRD;
	}
	if (cfg->incoming_fd >= 0)
		keep[n++] = FD_INCOMING;
	if (cfg->mem_fd >= 0)
		keep[n++] = FD_MEM;
	return n;
}

/* What QEMU starts with, at its numbers: what the daemon opens here (the
 * jail has none of these files) and the config's fds. */
struct start_fds {
	int src[FD_COUNT];
	int kernel, initrd, rootfs; /* opened here */
};

static void start_fds_close(struct start_fds *f)
{
	int *own[] = {&f->kernel, &f->initrd, &f->rootfs};
	for (size_t i = 0; i < ARRAY_SIZE(own); i++)
		if (*own[i] >= 0) {
			close(*own[i]);
			*own[i] = -1;
		}
}

static int start_fds_open(const struct vmm_config *cfg, struct start_fds *f, struct al_error *err)
{
	for (int i = 0; i < FD_COUNT; i++)
		f->src[i] = -1;
	f->src[FD_NETNS] = cfg->netns_fd;
	f->src[FD_INCOMING] = cfg->incoming_fd;
	f->src[FD_MEM] = cfg->mem_fd;
	f->kernel = boots(cfg) ? open(cfg->kernel, O_RDONLY | O_CLOEXEC) : -1;
	f->initrd = boots(cfg) ? open(cfg->initrd, O_RDONLY | O_CLOEXEC) : -1;
	f->rootfs = open(cfg->rootfs, O_RDONLY | O_CLOEXEC);
	if ((boots(cfg) && (f->kernel < 0 || f->initrd < 0)) || f->rootfs < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m",
		                    f->rootfs < 0   ? cfg->rootfs
		                    : f->kernel < 0 ? cfg->kernel
		                                    : cfg->initrd);
	f->src[FD_KERNEL] = f->kernel;
	f->src[FD_INITRD] = f->initrd;
	f->src[FD_ROOTFS] = f->rootfs;
	return 0;
}

/* A completed save leaves QEMU "postmigrate", where it refuses another
 * ("Can't migrate the vm that was paused due to previous migration")
 * until the guest runs again; and a paused guest does not change. So the
 * last save's memory file is kept, hard-linked, in the sandbox's dir (the
 * daemon's, root's 0700): a paused sandbox's next save is that file again.
 * It is dropped before the guest can run (pause, resume, a new VMM), so
 * that it exists only while it is the guest's state. */
#define LAST_SAVE_FILE "last-save.bin"

static void last_save_drop(const struct vmm_config *cfg)
{
	if (!cfg->dir)
		return;
	cleanup_free char *path = xasprintf("%s/" LAST_SAVE_FILE, cfg->dir);
	unlink(path);
}

static void last_save_keep(const struct vmm_config *cfg, const char *out)
{
	if (!cfg->dir)
		return;
	cleanup_free char *path = xasprintf("%s/" LAST_SAVE_FILE, cfg->dir);
	cleanup_free char *tmp = xasprintf("%s.tmp", path);
	unlink(tmp);
	/* Another filesystem (no link): the next save runs the guest a moment (qemu_save). */
	if (link(out, tmp) < 0 || rename(tmp, path) < 0)
		unlink(tmp);
}

static int qemu_spawn(const struct vmm_config *cfg, pid_t *ret_pid, struct al_error *err)
{
	/* SECURITY: fail closed: a VMM never runs outside its jail. */
	if (!cfg->jail)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM, "refusing to start a VMM without its jail");
	last_save_drop(cfg); /* an earlier VMM's */
	struct qemu_cmdline c = {0};
	if (vmm_binary_path(QEMU_BINARY, c.binary, sizeof(c.binary)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, ENOENT, "%s is not on PATH", QEMU_BINARY);
	bool kvm = false;
	char cpu[ACCEL_CPU_MAX];
	int r = start_accel(cfg, &kvm, cpu, sizeof(cpu), err);
	if (r < 0)
		return r;
	args_machine(cfg, kvm, cpu, &c);
	args_boot(cfg, kvm, &c);
	args_devices(&c);
	args_network_incoming(cfg, &c);
	int keep[5];
	size_t nkeep = keep_fds(cfg, keep);
	cleanup_free char *arena = NULL;
	cleanup_free char **jargv = jail_argv(cfg->sandbox_id, cfg->root, cfg->jail, cfg->netns_fd >= 0 ? FD_NETNS : -1,
	                                      keep, nkeep, c.argv, &arena);
	__attribute__((cleanup(start_fds_close))) struct start_fds fds = {.kernel = -1, .initrd = -1, .rootfs = -1};
	if ((r = start_fds_open(cfg, &fds, err)) < 0)
		return r;
	cleanup_close int log_fd = vmm_log_open(cfg->dir, err);
	if (log_fd < 0)
		return log_fd;
	return vmm_spawn_jailed(cfg->root, jargv, fds.src, FD_COUNT, log_fd, log_fd, ret_pid, err);
}

/* ---- the rest of the lifecycle, through QMP --------------------------------------------------- */

static int qemu_run_state(const struct vmm_config *cfg, const char *command, const char *what, struct al_error *err)
{
	int r = qmp_command(cfg->dirfd, command, NULL, NULL, err);
	if (r < 0)
		al_error_prefix(err, "cannot %s the VM", what);
	return r;
}

static int qemu_pause(const struct vmm_config *cfg, struct al_error *err)
{
	last_save_drop(cfg);
	return qemu_run_state(cfg, "stop", "pause", err);
}

static int qemu_resume(const struct vmm_config *cfg, struct al_error *err)
{
	last_save_drop(cfg);
	return qemu_run_state(cfg, "cont", "resume", err);
}

static int qemu_run_state_get(const struct vmm_config *cfg, unsigned timeout_ms, enum vmm_run_state *ret,
                              struct al_error *err)
{
	cleanup_json json_t *ans = NULL;
	int r = qmp_command_timeout(cfg->dirfd, "query-status", NULL, &ans, timeout_ms, err);
	if (r < 0)
		return r;
	const char *s = json_string_value(json_object_get(ans, "status"));
	if (!s)
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG, "QEMU's query-status has no status");
	if (!strcmp(s, "running"))
		*ret = VMM_RUN_RUNNING;
	else if (!strcmp(s, "postmigrate"))
		*ret = VMM_RUN_SAVED;
	else if (!strcmp(s, "paused") || !strcmp(s, "finish-migrate") || !strcmp(s, "save-vm"))
		*ret = VMM_RUN_PAUSED;
	else
		*ret = VMM_RUN_UNKNOWN;
	return 0;
}

#define QEMU_SAVE_TIMEOUT_MS 600000
#define QEMU_CANCEL_TIMEOUT_MS 30000
#define QEMU_POLL_MS 20
#define QEMU_STATUS_TIMEOUT_MS 10000
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

/* Saves into out_fd, an open file of the daemon's. */
static int qemu_save_fd(const struct vmm_config *cfg, int out_fd, struct al_error *err)
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

/* One file holds the memory and the device state (state_out is unused):
 * the daemon creates it, QEMU writes it through the fd it is handed. */
static int qemu_save(const struct vmm_config *cfg, const char *out, const char *state_out, struct al_error *err)
{
	(void)state_out;
	enum vmm_run_state st = VMM_RUN_UNKNOWN;
	int r = qemu_run_state_get(cfg, QEMU_STATUS_TIMEOUT_MS, &st, err);
	if (r < 0)
		return r;
	if (st == VMM_RUN_SAVED) {
		cleanup_free char *last = cfg->dir ? xasprintf("%s/" LAST_SAVE_FILE, cfg->dir) : NULL;
		if (last && link(last, out) == 0)
			return 0;
		/* No kept save (a crash came between the save and keeping it):
		 * out of postmigrate the only way QEMU has, a moment of running. */
		if ((r = qemu_run_state(cfg, "cont", "resume", err)) < 0 ||
		    (r = qemu_run_state(cfg, "stop", "pause", err)) < 0)
			return r;
	}
	cleanup_close int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", out);
	if ((r = qemu_save_fd(cfg, fd, err)) < 0)
		return r;
	if (fsync(fd) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot write the snapshot's memory: %m%s",
		                    errno == ENOSPC ? " (the state dir's filesystem is full)" : "");
	last_save_keep(cfg, out);
	return 0;
}

/* QEMU's migration stream has no "only what changed since the last one". */
static int qemu_save_diff(const struct vmm_config *cfg, const char *out, const char *state_out, struct al_error *err)
{
	(void)cfg;
	(void)out;
	(void)state_out;
	return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EOPNOTSUPP,
	                    "QEMU cannot save only the memory written since the last save");
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
static int qemu_load_start(const struct vmm_config *cfg, int pidfd, uint64_t deadline_ms, struct al_error *err)
{
	/* Its QMP socket appears a moment after the others. */
	for (;;) {
		int r = set_migration_caps(cfg, err);
		if (r == 0)
			break;
		/* Not listening yet, or too busy to answer (a loaded host): again,
		 * until the restore's own deadline. */
		if ((r != -ENOENT && r != -ECONNREFUSED && r != -ETIMEDOUT) || now_ms_monotonic() > deadline_ms ||
		    vmm_pidfd_exited(pidfd)) {
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

static int qemu_wait_incoming(const struct vmm_config *cfg, int pidfd, uint64_t deadline_ms, struct al_error *err)
{
	int r = qemu_load_start(cfg, pidfd, deadline_ms, err);
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
		if (vmm_pidfd_exited(pidfd))
			return al_error_set(err, AL_ERR_INTERNAL, ECHILD, "QEMU exited while it loaded the snapshot");
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

/* The guest channel and the console: unix sockets QEMU listens on in its
 * directory (virtio-serial and the serial port's chardevs). */
static int qemu_socket_open(const struct vmm_config *cfg, const char *name, int *ret_fd, struct al_error *err)
{
	int r = unix_connect_at(cfg->dirfd, name, ret_fd);
	return r < 0 ? al_error_set(err, AL_ERR_UNAVAILABLE, -r, "cannot connect to %s", name) : 0;
}

static int qemu_channel_connect(const struct vmm_config *cfg, int *ret_fd, struct al_error *err)
{
	return qemu_socket_open(cfg, QEMU_CHANNEL_SOCK, ret_fd, err);
}

static int qemu_console_open(const struct vmm_config *cfg, int *ret_fd, struct al_error *err)
{
	return qemu_socket_open(cfg, QEMU_CONSOLE_SOCK, ret_fd, err);
}

static const char *const qemu_runtime_files[] = {QEMU_CHANNEL_SOCK, QEMU_CONSOLE_SOCK, QEMU_QMP_SOCK, NULL};

const struct vmm_ops vmm_qemu_ops = {
    .name = "qemu",
    .binary = QEMU_BINARY,
    .kernel_file = QEMU_KERNEL,
    .disk_file = QEMU_DISK,
    .disk_kind = VMM_DISK_OVERLAY,
    .runtime_files = qemu_runtime_files,
    .probe_what = "QMP (query-status)",
    .state_apart = false,
    .ram_fd = true,
    .channel_resets_on_save = false,
    .accel = qemu_accel,
    .prepare_disk = qemu_prepare_disk,
    .spawn = qemu_spawn,
    .stop = vmm_stop_by_kill,
    .pause = qemu_pause,
    .resume = qemu_resume,
    .save = qemu_save,
    .save_diff = qemu_save_diff,
    .cancel_save = qemu_cancel_save,
    .wait_incoming = qemu_wait_incoming,
    .probe = qemu_probe,
    .run_state = qemu_run_state_get,
    .channel_connect = qemu_channel_connect,
    .console_open = qemu_console_open,
};
