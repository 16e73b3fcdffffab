/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Firecracker backend: one `firecracker` process per sandbox (KVM only),
 * configured and driven through its REST API on a unix socket (fc-api.c;
 * the spec is ../shared/firecracker/firecracker.yaml, against which
 * tests/fc checks every request built here), the guest channel over its
 * hybrid vsock (vsock-uds.c), a raw copy-on-write disk (file-copy.h).
 *
 * Firecracker runs inside airlock-jailer (jail.h) like QEMU: its own uid,
 * cgroup, namespaces, no capabilities, /dev/kvm and /dev/net/tun as its only
 * devices; the jailer installs no seccomp profile for it (Firecracker
 * installs its own filters, its defaults being its production profile).
 * Everything the VMM touches is named relative to its cwd, its jail root:
 * the API and vsock sockets, the disk, the console FIFO, the files of a
 * save. A snapshot records those names, so a restore in another jail
 * (another namespace with its own tap0) finds its own. What lies outside the
 * jail (kernel, initramfs, a restore's memory and device state) is handed
 * over as fds the daemon opened, named /proc/self/fd/N in the API (the
 * jail's procfs shows the VMM its own fds); the memory file is mapped
 * MAP_PRIVATE through it, so restores of one snapshot share its pages.
 *
 * The console: Firecracker writes the guest's serial port to its stdout,
 * unbounded. Its stdout is a FIFO in the sandbox dir that the VMM holds open
 * read-write and non-blocking: nothing blocks and nothing grows while no one
 * reads, the daemon reads it like QEMU's console socket, and what arrives
 * while it does not is dropped by the kernel's 64 KiB pipe limit.
 */
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "airlock/proto.h"
#include "fc-api.h"
#include "file-copy.h"
#include "jail.h"
#include "json-cleanup.h"
#include "util.h"
#include "vmm-backend.h"
#include "vmm-firecracker.h"
#include "vmm.h"
#include "vsock-uds.h"

#define FC_BINARY "firecracker"
#define FC_API_SOCK "fc.sock"
#define FC_VSOCK_SOCK "v.sock"
#define FC_CONSOLE_FIFO "con.fifo"
#define FC_DISK "disk.raw"
#define FC_STATE_SUFFIX ".vmstate"
#define FC_KERNEL "vmlinux"
#define FC_DRIVE_ID "root"
#define FC_IFACE_ID "eth0"

#define FC_VCPUS_MAX 32
#define FC_ID_MAX 64
#define FC_START_TIMEOUT_MS 10000
#define FC_CALL_TIMEOUT_MS 10000
#define FC_SAVE_TIMEOUT_MS 600000
#define FC_VSOCK_HANDSHAKE_MS 2000
#define FC_POLL_MS 5

/* The fds the jailed VMM starts with, at these numbers (the jailer keeps
 * them; fd 3 is the network namespace it joins and closes). */
#define STR_(x) #x
#define STR(x) STR_(x)
#define FC_FD_NETNS VMM_FD_NETNS
#define FC_FD_KERNEL 4
#define FC_FD_INITRD 5
#define FC_FD_MEM 6
#define FC_FD_STATE 7
#define FC_FD_COUNT 8
#define FC_FD_PATH(n) "/proc/self/fd/" STR(n)

/* panic=-1 reboots at once and reboot=k makes that a keyboard-controller
 * reset, on which Firecracker exits: how the daemon learns of a panic. ACPI
 * stays on: this kernel finds Firecracker's virtio-mmio devices through it
 * (Firecracker >= 1.8 describes them in the DSDT). */
#define FC_BOOT_ARGS "console=ttyS0 reboot=k panic=-1 pci=off quiet airlock.root=/dev/vda"

static const char *fc_accel(void)
{
	return "kvm";
}

/* ---- requests, one builder per API resource ---------------------------------------------- */

static json_t *machine_config_body(const struct vmm_config *cfg)
{
	json_t *o = json_pack("{s:I, s:I, s:b}", "vcpu_count", (json_int_t)cfg->vcpus, "mem_size_mib",
	                      (json_int_t)cfg->memory_mib, "smt", 0);
	if (cfg->diff_snapshots)
		json_object_set_new(o, "track_dirty_pages", json_true());
	return o;
}

/* The kernel and initramfs are fds the jail was given (the files are
 * outside it). */
static json_t *boot_source_body(void)
{
	return json_pack("{s:s, s:s, s:s}", "kernel_image_path", FC_FD_PATH(FC_FD_KERNEL), "initrd_path",
	                 FC_FD_PATH(FC_FD_INITRD), "boot_args", FC_BOOT_ARGS);
}

/* Not the root device: the initramfs boots and the agent mounts /dev/vda
 * (airlock.root), as under QEMU. Writeback: the guest's flushes (FREEZE
 * syncs) reach the host file before a snapshot copies it. */
static json_t *drive_body(void)
{
	return json_pack("{s:s, s:s, s:b, s:b, s:s}", "drive_id", FC_DRIVE_ID, "path_on_host", FC_DISK,
	                 "is_root_device", 0, "is_read_only", 0, "cache_type", "Writeback");
}

static json_t *network_interface_body(const struct vmm_config *cfg)
{
	return json_pack("{s:s, s:s, s:s}", "iface_id", FC_IFACE_ID, "host_dev_name", AIRLOCK_NET_TAP, "guest_mac",
	                 vmm_guest_mac(cfg));
}

static json_t *vsock_body(void)
{
	return json_pack("{s:i, s:s}", "guest_cid", AIRLOCK_VSOCK_GUEST_CID, "uds_path", FC_VSOCK_SOCK);
}

static json_t *action_body(const char *action)
{
	return json_pack("{s:s}", "action_type", action);
}

static json_t *vm_state_body(const char *state)
{
	return json_pack("{s:s}", "state", state);
}

static json_t *snapshot_create_body(const char *mem, const char *state, const char *type)
{
	return json_pack("{s:s, s:s, s:s}", "snapshot_type", type, "snapshot_path", state, "mem_file_path", mem);
}

/* File backend: Firecracker maps the memory file MAP_PRIVATE, so every
 * restore of one snapshot shares its pages through the page cache and
 * copies only what it writes. Both files are fds the jail was given.
 * Paused: the daemon resumes after THAW's preparations. */
static json_t *snapshot_load_body(const struct vmm_config *cfg)
{
	json_t *o = json_pack("{s:s, s:{s:s, s:s}, s:b}", "snapshot_path", FC_FD_PATH(FC_FD_STATE), "mem_backend",
	                      "backend_type", "File", "backend_path", FC_FD_PATH(FC_FD_MEM), "resume_vm", 0);
	if (cfg->diff_snapshots)
		json_object_set_new(o, "track_dirty_pages", json_true());
	return o;
}

static int fc_send(const struct vmm_config *cfg, const char *method, const char *path, json_t *body,
                   unsigned timeout_ms, struct al_error *err)
{
	cleanup_json json_t *b = body;
	return fc_call(cfg->dirfd, FC_API_SOCK, method, path, b, timeout_ms, NULL, err);
}

/* GET / (InstanceInfo): its "state", "Not started", "Running" or "Paused". */
static int fc_instance_state(const struct vmm_config *cfg, unsigned timeout_ms, char *state, size_t size,
                             struct al_error *err)
{
	cleanup_json json_t *info = NULL;
	int r = fc_call(cfg->dirfd, FC_API_SOCK, "GET", "/", NULL, timeout_ms, &info, err);
	if (r < 0)
		return r;
	const char *s = json_string_value(json_object_get(info, "state"));
	if (!s)
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG, "Firecracker API GET /: no \"state\" in the answer");
	strlcpy_al(state, s, size);
	return 0;
}

/* ---- start ---------------------------------------------------------------------------- */

static int config_check(const struct vmm_config *cfg, struct al_error *err)
{
	size_t n = strlen(cfg->sandbox_id);
	bool id_ok = n > 0 && n <= FC_ID_MAX;
	for (size_t i = 0; i < n && id_ok; i++)
		id_ok = (cfg->sandbox_id[i] >= 'a' && cfg->sandbox_id[i] <= 'z') ||
		        (cfg->sandbox_id[i] >= '0' && cfg->sandbox_id[i] <= '9') || cfg->sandbox_id[i] == '-';
	if (!id_ok)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "sandbox id %s cannot be a Firecracker --id",
		                    cfg->sandbox_id);
	/* SECURITY: fail closed: a VMM never runs outside its jail. */
	if (!cfg->jail)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM, "refusing to start a VMM without its jail");
	if (cfg->incoming_fd >= 0)
		return cfg->incoming_state_fd >= 0 ? 0
		                                   : al_error_set(err, AL_ERR_INTERNAL, EINVAL,
		                                                  "a Firecracker restore needs the snapshot's device "
		                                                  "state (incoming_state_fd) next to its memory");
	if (cfg->vcpus < 1 || cfg->vcpus > FC_VCPUS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "Firecracker runs 1 to %d vCPUs, not %u",
		                    FC_VCPUS_MAX, cfg->vcpus);
	if (cfg->memory_mib < 1)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "no memory for the VM");
	/* Firecracker boots an uncompressed ELF kernel, not a bzImage. */
	char magic[4] = "";
	cleanup_close int fd = open(cfg->kernel, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, magic, sizeof(magic)) != (ssize_t)sizeof(magic) || memcmp(magic, "\177ELF", 4) != 0)
		return al_error_set(err, AL_ERR_INTERNAL, ENOEXEC,
		                    "the guest kernel %s is not an uncompressed ELF vmlinux, which Firecracker needs; "
		                    "'make images' extracts it from the Debian package (images/extract-vmlinux)",
		                    cfg->kernel);
	return 0;
}

/* The console FIFO, opened for the VMM's stdout (read-write: never blocks
 * on open and never gets EPIPE; non-blocking: a full pipe drops output). */
static int console_fifo_open(const struct vmm_config *cfg, struct al_error *err)
{
	if (mkfifoat(cfg->dirfd, FC_CONSOLE_FIFO, 0600) < 0 && errno != EEXIST)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s/%s: %m", cfg->dir, FC_CONSOLE_FIFO);
	int fd = openat(cfg->dirfd, FC_CONSOLE_FIFO, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode)) {
		int e = fd < 0 ? errno : EINVAL;
		if (fd >= 0)
			close(fd);
		return al_error_set(err, AL_ERR_INTERNAL, e, "%s/%s is not a FIFO the VMM can write", cfg->dir,
		                    FC_CONSOLE_FIFO);
	}
	return fd;
}

/* Firecracker's --id: "airlock-<sandbox id>", which is also how a restarted
 * daemon recognises the process (sandbox-startup.c, vmm_alive). */
static void fc_instance_id(const struct vmm_config *cfg, char *out, size_t size)
{
	snprintf(out, size, "airlock-%s", cfg->sandbox_id);
}

/* The jailer's argv around firecracker's. */
static char **fc_jail_argv(const struct vmm_config *cfg, const char *firecracker, char **ret_arena)
{
	char id[FC_ID_MAX + 1];
	fc_instance_id(cfg, id, sizeof(id));
	char *argv[] = {(char *)firecracker, "--api-sock", FC_API_SOCK, "--id", id, NULL};
	/* SECURITY: the jail of QEMU with /dev/kvm and /dev/net/tun, but no
	 * seccomp profile of the jailer's: Firecracker installs its own
	 * filters (per thread, before any guest code runs), and QEMU's
	 * allow-list would kill it. */
	struct vmm_jail j = *cfg->jail;
	j.own_seccomp = true;
	j.tun = true;
	int keep[3] = {FC_FD_KERNEL, FC_FD_INITRD};
	size_t nkeep = 2;
	if (cfg->incoming_fd >= 0) {
		keep[0] = FC_FD_MEM;
		keep[1] = FC_FD_STATE;
	}
	return jail_argv(cfg->sandbox_id, cfg->root, &j, cfg->netns_fd >= 0 ? FC_FD_NETNS : -1, keep, nkeep, argv,
	                 ret_arena);
}

/* Until the API socket accepts, or the VMM exited. */
static int wait_api(const struct vmm_config *cfg, pid_t pid, struct al_error *err)
{
	uint64_t deadline = now_ms_monotonic() + FC_START_TIMEOUT_MS;
	for (;;) {
		int fd = -1;
		int r = unix_connect_at_nonblock(cfg->dirfd, FC_API_SOCK, &fd);
		if (r == 0) {
			close(fd);
			return 0;
		}
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid) {
			char refusal[200];
			cleanup_free char *log = xasprintf("%s/%s", cfg->dir, VMM_LOG);
			if (jail_failure_in_log(AT_FDCWD, log, refusal, sizeof(refusal)))
				return al_error_set(err, AL_ERR_BOOT_FAILED, EPERM,
				                    "the VMM's jail could not be set up: %s", refusal);
			return al_error_set(
			    err, AL_ERR_BOOT_FAILED, ECHILD, "firecracker exited at start (%s %d; see %s/%s)",
			    WIFEXITED(status) ? "status" : "signal",
			    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), cfg->dir, VMM_LOG);
		}
		if (r != -ENOENT && r != -ECONNREFUSED && r != -EAGAIN)
			return al_error_set(err, AL_ERR_BOOT_FAILED, -r, "cannot connect to %s/%s: %s", cfg->dir,
			                    FC_API_SOCK, strerror(-r));
		if (now_ms_monotonic() >= deadline)
			return al_error_set(err, AL_ERR_BOOT_FAILED, ETIMEDOUT,
			                    "firecracker did not open its API socket within %d ms (see %s/%s)",
			                    FC_START_TIMEOUT_MS, cfg->dir, VMM_LOG);
		usleep(FC_POLL_MS * 1000);
	}
}

/* A fresh VM: every device, then InstanceStart. */
static int configure_boot(const struct vmm_config *cfg, struct al_error *err)
{
	int r;
	if ((r = fc_send(cfg, "PUT", "/machine-config", machine_config_body(cfg), FC_CALL_TIMEOUT_MS, err)) < 0 ||
	    (r = fc_send(cfg, "PUT", "/boot-source", boot_source_body(), FC_CALL_TIMEOUT_MS, err)) < 0 ||
	    (r = fc_send(cfg, "PUT", "/drives/" FC_DRIVE_ID, drive_body(), FC_CALL_TIMEOUT_MS, err)) < 0)
		return r;
	if (cfg->netns_fd >= 0 && (r = fc_send(cfg, "PUT", "/network-interfaces/" FC_IFACE_ID,
	                                       network_interface_body(cfg), FC_CALL_TIMEOUT_MS, err)) < 0)
		return r;
	if ((r = fc_send(cfg, "PUT", "/vsock", vsock_body(), FC_CALL_TIMEOUT_MS, err)) < 0 ||
	    (r = fc_send(cfg, "PUT", "/entropy", json_object(), FC_CALL_TIMEOUT_MS, err)) < 0 ||
	    (r = fc_send(cfg, "PUT", "/actions", action_body("InstanceStart"), FC_CALL_TIMEOUT_MS, err)) < 0)
		return r;
	return 0;
}

static int fc_spawn(const struct vmm_config *cfg, pid_t *ret_pid, struct al_error *err)
{
	int r = config_check(cfg, err);
	if (r < 0)
		return r;
	char firecracker[PATH_MAX];
	if (vmm_binary_path(FC_BINARY, firecracker, sizeof(firecracker)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, ENOENT, "%s is not on PATH (docs/kvm-host.md)", FC_BINARY);
	/* Left by an earlier VMM in this dir (a recover): Firecracker will not
	 * bind over them. */
	unlinkat(cfg->dirfd, FC_API_SOCK, 0);
	unlinkat(cfg->dirfd, FC_VSOCK_SOCK, 0);
	cleanup_close int console_fd = console_fifo_open(cfg, err);
	if (console_fd < 0)
		return console_fd;
	cleanup_close int log_fd = vmm_log_open(cfg->dir, err);
	if (log_fd < 0)
		return log_fd;
	/* What the VMM starts with, opened here (the jail has none of them). */
	int src[FC_FD_COUNT];
	for (int i = 0; i < FC_FD_COUNT; i++)
		src[i] = -1;
	src[FC_FD_NETNS] = cfg->netns_fd;
	cleanup_close int kfd = -1, ifd = -1;
	if (cfg->incoming_fd >= 0) {
		src[FC_FD_MEM] = cfg->incoming_fd;
		src[FC_FD_STATE] = cfg->incoming_state_fd;
	} else {
		kfd = open(cfg->kernel, O_RDONLY | O_CLOEXEC);
		ifd = open(cfg->initrd, O_RDONLY | O_CLOEXEC);
		if (kfd < 0 || ifd < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m",
			                    kfd < 0 ? cfg->kernel : cfg->initrd);
		src[FC_FD_KERNEL] = kfd;
		src[FC_FD_INITRD] = ifd;
	}
	cleanup_free char *arena = NULL;
	cleanup_free char **jargv = fc_jail_argv(cfg, firecracker, &arena);
	pid_t pid;
	if ((r = vmm_spawn_jailed(cfg->root, jargv, src, FC_FD_COUNT, console_fd, log_fd, &pid, err)) < 0)
		return r;
	r = wait_api(cfg, pid, err);
	if (r == 0)
		r = cfg->incoming_fd >= 0
		        ? fc_send(cfg, "PUT", "/snapshot/load", snapshot_load_body(cfg), FC_SAVE_TIMEOUT_MS, err)
		        : configure_boot(cfg, err);
	if (r < 0) {
		/* Nothing half-configured survives; the error names the request. */
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		return r;
	}
	*ret_pid = pid;
	return 0;
}

/* ---- the rest of the lifecycle ---------------------------------------------------------------- */

static int fc_prepare_disk(const struct vmm_config *cfg, struct al_error *err)
{
	cleanup_free char *dst = xasprintf("%s/%s", cfg->root, FC_DISK);
	enum file_copy_method how;
	int r = file_copy_cow(cfg->rootfs, dst, 0600, &how);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot copy the template's disk %s to %s: %s%s",
		                    cfg->rootfs, dst, strerror(-r),
		                    r == -ENOSPC ? " (the state dir's filesystem is full)" : "");
	/* The guest sees a bigger block device than the template (the
	 * agent grows its filesystem at boot); the file stays sparse. */
	if (cfg->disk_mib && (r = file_grow(dst, cfg->disk_mib << 20)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot grow %s to %llu MiB: %s", dst,
		                    (unsigned long long)cfg->disk_mib, strerror(-r));
	cleanup_close int log_fd = vmm_log_open(cfg->dir, NULL);
	if (log_fd >= 0)
		dprintf(log_fd, "airlock: %s from %s by %s\n", FC_DISK, cfg->rootfs, file_copy_method_name(how));
	return 0;
}

static int fc_set_state(const struct vmm_config *cfg, const char *state, const char *what, struct al_error *err)
{
	int r = fc_send(cfg, "PATCH", "/vm", vm_state_body(state), FC_CALL_TIMEOUT_MS, err);
	if (r < 0)
		al_error_prefix(err, "cannot %s the VM", what);
	return r;
}

static int fc_pause(const struct vmm_config *cfg, struct al_error *err)
{
	return fc_set_state(cfg, "Paused", "pause", err);
}

static int fc_resume(const struct vmm_config *cfg, struct al_error *err)
{
	return fc_set_state(cfg, "Resumed", "resume", err);
}

/* `out` is a name the daemon made, relative to the VMM's cwd; the device
 * state goes to `out` + FC_STATE_SUFFIX. */
static int state_path_for(const char *out, char *ret, size_t size, struct al_error *err)
{
	bool ok = out[0] && out[0] != '/' && !strstr(out, "..");
	for (const char *p = out; *p && ok; p++)
		ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("-._/", *p);
	if (!ok || snprintf_ok(ret, size, "%s%s", out, FC_STATE_SUFFIX) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "bad snapshot file name %s", out);
	return 0;
}

static int fc_snapshot(const struct vmm_config *cfg, const char *out, const char *type, struct al_error *err)
{
	char state[PATH_MAX];
	int r = state_path_for(out, state, sizeof(state), err);
	if (r < 0)
		return r;
	/* Synchronous: the answer comes when both files are written. */
	r = fc_send(cfg, "PUT", "/snapshot/create", snapshot_create_body(out, state, type), FC_SAVE_TIMEOUT_MS, err);
	if (r < 0)
		al_error_prefix(err, "saving the VM failed (is the disk full?)");
	return r;
}

static int fc_save_full(const struct vmm_config *cfg, const char *out, struct al_error *err)
{
	return fc_snapshot(cfg, out, "Full", err);
}

static int fc_save_dirty(const struct vmm_config *cfg, const char *out, struct al_error *err)
{
	return fc_snapshot(cfg, out, "Diff", err);
}

/* Firecracker writes its snapshot by name in its jail (it cannot be handed
 * an fd once running): the daemon takes the files out (vmm-save.c). */
static int fc_save(const struct vmm_config *cfg, const char *out, const char *state_out, struct al_error *err)
{
	return vmm_save_by_name(cfg, fc_save_full, FC_STATE_SUFFIX, out, state_out, err);
}

static int fc_save_diff(const struct vmm_config *cfg, const char *out, const char *state_out, struct al_error *err)
{
	return vmm_save_by_name(cfg, fc_save_dirty, FC_STATE_SUFFIX, out, state_out, err);
}

/* A snapshot cannot be cancelled: it is one synchronous request. When the
 * API answers again, none is in progress. */
static int fc_cancel_save(const struct vmm_config *cfg, struct al_error *err)
{
	char state[32];
	uint64_t deadline = now_ms_monotonic() + 30000;
	for (;;) {
		if (fc_instance_state(cfg, 1000, state, sizeof(state), err) == 0)
			return 0;
		if (now_ms_monotonic() > deadline) {
			al_error_prefix(err, "Firecracker did not finish its snapshot");
			return -ETIMEDOUT;
		}
		usleep(50 * 1000);
	}
}

/* The load itself happened in spawn; this checks where it left the VM. */
static int fc_wait_incoming(const struct vmm_config *cfg, int pidfd, uint64_t deadline_ms, struct al_error *err)
{
	char state[32];
	for (;;) {
		int r = fc_instance_state(cfg, FC_CALL_TIMEOUT_MS, state, sizeof(state), err);
		if (r == 0 && (!strcmp(state, "Paused") || !strcmp(state, "Running")))
			return 0;
		if (r == 0)
			return al_error_set(err, AL_ERR_INTERNAL, EIO,
			                    "Firecracker did not load the snapshot (state %s)", state);
		if (vmm_pidfd_exited(pidfd))
			return al_error_set(err, AL_ERR_INTERNAL, ECHILD,
			                    "Firecracker exited while it loaded the snapshot");
		if (now_ms_monotonic() > deadline_ms) {
			al_error_prefix(err, "loading the snapshot took too long");
			return -ETIMEDOUT;
		}
		usleep(20 * 1000);
	}
}

static int fc_probe(const struct vmm_config *cfg, unsigned timeout_ms, struct al_error *err)
{
	char state[32];
	/* GET / is answered by Firecracker's API thread, which stops when the
	 * process is stopped, wedged or starved. */
	int r = fc_instance_state(cfg, timeout_ms, state, sizeof(state), err);
	if (r < 0) {
		al_error_prefix(err, "Firecracker did not answer GET / within %u ms", timeout_ms);
		err->code = AL_ERR_UNAVAILABLE;
	}
	return r;
}

static int fc_run_state(const struct vmm_config *cfg, unsigned timeout_ms, enum vmm_run_state *ret,
                        struct al_error *err)
{
	char state[32];
	int r = fc_instance_state(cfg, timeout_ms, state, sizeof(state), err);
	if (r < 0)
		return r;
	*ret = !strcmp(state, "Running")  ? VMM_RUN_RUNNING
	       : !strcmp(state, "Paused") ? VMM_RUN_PAUSED
	                                  : VMM_RUN_UNKNOWN;
	return 0;
}

static int fc_channel_connect(const struct vmm_config *cfg, int *ret_fd, struct al_error *err)
{
	return vsock_uds_connect(cfg->dirfd, FC_VSOCK_SOCK, AIRLOCK_VSOCK_PORT, FC_VSOCK_HANDSHAKE_MS, ret_fd, err);
}

static int fc_console_open(const struct vmm_config *cfg, int *ret_fd, struct al_error *err)
{
	int fd = openat(cfg->dirfd, FC_CONSOLE_FIFO, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode)) {
		int e = fd < 0 ? errno : EINVAL;
		if (fd >= 0)
			close(fd);
		return al_error_set(err, AL_ERR_UNAVAILABLE, e, "cannot open the console FIFO %s/%s: %s", cfg->dir,
		                    FC_CONSOLE_FIFO, strerror(e));
	}
	*ret_fd = fd;
	return 0;
}

static const char *const fc_runtime_files[] = {FC_API_SOCK, FC_VSOCK_SOCK, FC_CONSOLE_FIFO, NULL};

const struct vmm_ops vmm_firecracker_ops = {
    .name = "firecracker",
    .binary = FC_BINARY,
    .kernel_file = FC_KERNEL,
    .disk_file = FC_DISK,
    .disk_kind = VMM_DISK_WHOLE,
    .runtime_files = fc_runtime_files,
    .probe_what = "its API (GET /)",
    .state_apart = true,
    .ram_fd = false,
    .channel_resets_on_save = true,
    .accel = fc_accel,
    .prepare_disk = fc_prepare_disk,
    .spawn = fc_spawn,
    .stop = vmm_stop_by_kill,
    .pause = fc_pause,
    .resume = fc_resume,
    .save = fc_save,
    .save_diff = fc_save_diff,
    .cancel_save = fc_cancel_save,
    .wait_incoming = fc_wait_incoming,
    .probe = fc_probe,
    .run_state = fc_run_state,
    .channel_connect = fc_channel_connect,
    .console_open = fc_console_open,
};
