/* SPDX-License-Identifier: Apache-2.0 */
/* The VMM backend interface. Backends live side by side (vmm-qemu.c,
 * vmm-firecracker.c); the daemon only talks to them through these ops. */
#ifndef AIRLOCK_VMM_H
#define AIRLOCK_VMM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "vmm-backend.h"

/* File names inside a sandbox directory. Kept short: unix socket paths are
 * limited to 108 bytes, so sockets are always reached relative to the
 * directory (the VMM runs with it as cwd; the daemon uses /proc/self/fd). */
#define VMM_CHANNEL_SOCK "ctl.sock"
#define VMM_CONSOLE_SOCK "con.sock"
#define VMM_DISK "disk.qcow2"
#define VMM_LOG "vmm.log"
#define VMM_CONSOLE_LOG "console.log"
/* The VMM's own directory inside the sandbox directory: its jail root. */
#define SANDBOX_VM_DIR "vm"

struct vmm_jail;

struct vmm_config {
	const char *sandbox_id;
	const char *dir;    /* absolute sandbox directory: the daemon's (VMM_LOG is here) */
	const char *root;   /* absolute VMM directory inside it: the VMM's jail root and cwd */
	const char *kernel; /* absolute paths, opened by the daemon and passed as fds */
	const char *initrd;
	const char *rootfs; /* template image (read-only base of the disk) */
	/* Size of the sandbox's disk as the guest sees it (>= the template's);
	 * 0: the template's size. Its file on the host never grows beyond it
	 * (plus the image format's metadata). */
	uint64_t disk_mib;
	unsigned vcpus;
	unsigned memory_mib;
	int dirfd; /* the VMM directory (root), for the VMM's sockets */
	/* Restore: an fd of the saved memory and device state to start from
	 * instead of booting (read by the VMM, never reopened); -1 to boot. */
	int incoming_fd;
	/* The sandbox's network namespace (netns.h): the VMM joins it before
	 * it starts and attaches the guest's NIC to its tap0. -1: no NIC. */
	int netns_fd;
	/* The VMM's jail (jail.h); spawn refuses to run a VMM without one. */
	const struct vmm_jail *jail;
	/* Guest RAM: -1 anonymous memory; else an fd of the file that backs it
	 * (a memfd), mapped shared (mem_shared: a template's boot, its RAM is
	 * the file) or private copy-on-write (a restore from a template
	 * snapshot: unchanged pages are shared by every such sandbox). A saved
	 * state never carries the RAM of a shared mapping (x-ignore-shared),
	 * and a restore takes none it does not carry. */
	int mem_fd;
	bool mem_shared;

	/* ---- added with the Firecracker backend (issue 8) ---- */
	/* Restore, backends with a state_suffix (vmm_ops): an fd of the device
	 * state saved with incoming_fd's memory (-1 otherwise). Firecracker
	 * takes both by name: /proc/self/fd/N in its jail. */
	int incoming_state_fd;
	/* Firecracker: track dirty pages from the start (or the restore), so
	 * that save_diff can write only what changed since the last save. */
	bool diff_snapshots;

	/* ---- added with the accelerator probe (issue 15) ---- */
	/* QEMU: NULL, the daemon's accelerator (accel.h); else KVM with this
	 * -cpu model, whatever the daemon's (the probe's attempts). */
	const char *kvm_cpu;
};

struct vmm_ops {
	const char *name;
	/* The VMM's program, looked for on PATH. */
	const char *binary;
	/* Accelerator this backend will use on this host: "kvm" or "tcg". */
	const char *(*accel)(void);
	/* Creates the per-sandbox copy-on-write disk over the template. */
	int (*prepare_disk)(const struct vmm_config *cfg, struct al_error *err);
	/* Starts the VMM in its own session; returns its pid. The VMM is not
	 * tied to the daemon's lifetime. */
	int (*spawn)(const struct vmm_config *cfg, pid_t *ret_pid, struct al_error *err);
	/* Asks the VMM to stop now (no guest cooperation needed). */
	int (*stop)(const struct vmm_config *cfg, pid_t pid);
	/* Freezes / thaws the guest's vCPUs; memory stays resident. */
	int (*pause)(const struct vmm_config *cfg, struct al_error *err);
	int (*resume)(const struct vmm_config *cfg, struct al_error *err);
	/* With the guest paused: writes its memory and device state to out_fd
	 * (a file the daemon opened; the VMM gets the fd, never a path) and
	 * waits until that is complete. */
	int (*save)(const struct vmm_config *cfg, int out_fd, struct al_error *err);
	/* The same for backends that can only write files by name (Firecracker,
	 * which cannot be handed an fd once running): out is a name in the
	 * VMM's directory (its jail root), where the files are the VMM's: the
	 * daemon copies them out, refusing anything but a regular file with one
	 * link. A backend has save or save_path. */
	int (*save_path)(const struct vmm_config *cfg, const char *out, struct al_error *err);
	/* After a crash during save: stops a save still in progress and waits
	 * until the VMM is no longer saving (the guest stays paused). */
	int (*cancel_save)(const struct vmm_config *cfg, struct al_error *err);
	/* After a spawn with `incoming`: waits until the state is loaded (the
	 * guest is then paused; resume runs it). */
	int (*wait_incoming)(const struct vmm_config *cfg, uint64_t deadline_ms, struct al_error *err);
	/* The watchdog's question: does the VMM still answer (a status query
	 * through its control socket, within timeout_ms; never blocks longer)?
	 * 0 if it answered. */
	int (*probe)(const struct vmm_config *cfg, unsigned timeout_ms, struct al_error *err);

	/* ---- added with the Firecracker backend (issue 8). NULL in a backend
	 * means QEMU's way; the vmm_*() helpers below apply the defaults. ---- */
	/* Name of the per-sandbox disk in the sandbox dir (default VMM_DISK,
	 * QEMU's qcow2 overlay; Firecracker: a raw image). */
	const char *disk_file;
	/* Name of the guest kernel in the image dir's kernels/ (default
	 * "vmlinuz", a bzImage; Firecracker boots the uncompressed ELF
	 * "vmlinux" extracted from the same package: images/extract-vmlinux). */
	const char *kernel_file;
	/* When set, save() and save_diff() write the device state to `out`
	 * with this suffix (`out` then holds the memory alone): a snapshot must
	 * keep and digest both, and a restore gives it back as
	 * cfg->incoming_state. NULL: `out` holds memory and device state (QEMU). */
	const char *state_suffix;
	/* Opens the host end of the guest channel, one attempt: -ENOENT or
	 * -ECONNREFUSED while the VMM or the agent is not there yet (callers
	 * retry those). Default: connect VMM_CHANNEL_SOCK. Firecracker: its
	 * hybrid vsock socket and CONNECT AIRLOCK_VSOCK_PORT. */
	int (*channel_connect)(const struct vmm_config *cfg, int *ret_fd, struct al_error *err);
	/* Opens the guest's console output, read-only is enough, one attempt
	 * like channel_connect. Default: connect VMM_CONSOLE_SOCK. */
	int (*console_open)(const struct vmm_config *cfg, int *ret_fd, struct al_error *err);
	/* A save() resets the guest channel's connection (Firecracker resets
	 * every vsock connection at a snapshot; a restored guest starts without
	 * one): after save() and after a restore the daemon opens the channel
	 * again with channel_connect and asks for HELLO. */
	bool channel_resets_on_save;
	/* Like save(), only the memory written since the last save (the VM
	 * started with cfg->diff_snapshots); NULL when unsupported. The file is
	 * sparse: merged onto the last full memory file it is a full one. */
	int (*save_diff)(const struct vmm_config *cfg, const char *out, struct al_error *err);
	/* What the VMM leaves in its directory besides the disk (sockets,
	 * FIFOs), removed after it is gone; NULL-terminated. Default: QEMU's. */
	const char *const *runtime_files;
	/* What probe() asks, for the watchdog's message. Default: QEMU's. */
	const char *probe_what;
};

/* A save of a save_path backend (the guest paused): the VMM writes its files
 * in its jail root (vc->dirfd), which are copied to mem_dst and (with a
 * state_suffix) state_dst, checked and bounded (vc->memory_mib), and
 * removed from the jail root (vmm-save.c). */
int vmm_save_by_name(const struct vmm_ops *ops, const struct vmm_config *vc, const char *mem_dst, const char *state_dst,
                     struct al_error *err);

/* What every start of a VMM does around spawn, a sandbox's boot and a
 * template snapshot's build alike (vmm-start.c). */
/* The disk in the VMM's directory (dirfd) becomes the jail uid's, 0600 (the
 * only file there that is). */
int vmm_disk_give(const struct vmm_ops *ops, int dirfd, uint32_t uid, struct al_error *err);
/* The jail of vc's VMM for uid (jail.h): a disk of disk_mib, or of the
 * template's size if that is larger. */
void vmm_jail_spec(const struct vmm_ops *ops, const struct vmm_config *vc, uint32_t uid, uint64_t disk_mib,
                   struct vmm_jail *ret);
/* Opens the guest channel (channel) or the console of a started VMM, retried
 * while the VMM or its agent is not there yet: -ECHILD once the VMM (pidfd)
 * has exited, -ETIMEDOUT at deadline_ms, or the -errno of an attempt that
 * failed otherwise. */
int vmm_connect_retry(const struct vmm_ops *ops, const struct vmm_config *vc, bool channel, int pidfd,
                      uint64_t deadline_ms, int *ret_fd);

/* Why a VMM ended, for the error of its sandbox (vmm-exit.c): how (exit
 * status, or signal; a SIGSYS is seccomp's kill, named with the syscall from
 * the kernel's audit record) and the last lines of its stderr (log_name in
 * log_dirfd). status: its wait status when the caller reaped it, else NULL
 * to look through pidfd without reaping. pid: the VMM's (the jailer's).
 * Returns -ECHILD when how it ended is not known (out still says so). */
int vmm_exit_describe(int pidfd, long pid, const int *status, int log_dirfd, const char *log_name, char *out,
                      size_t size);
/* One kernel log record of a seccomp action (audit type 1326): its pid,
 * signal and syscall number; -ENOENT for another record, -EINVAL for a
 * malformed one. */
int vmm_audit_seccomp_parse(const char *record, long *ret_pid, int *ret_signal, int *ret_syscall);

/* The end of a VMM the daemon ran for itself (a template build, the
 * accelerator probe), whatever state it is in: killed and reaped (*pid is
 * then 0), its cgroup removed, its uid given back unless something may
 * still run as it (*uid_held is then false); `what` names it in the log. */
void vmm_internal_end(pid_t *pid, const char *id, uint32_t uid, bool *uid_held, const char *what);

/* The defaults of the ops added for Firecracker. */
static inline const char *const *vmm_runtime_files(const struct vmm_ops *ops)
{
	static const char *const qemu_files[] = {VMM_CHANNEL_SOCK, VMM_CONSOLE_SOCK, "qmp.sock", NULL};
	return ops->runtime_files ? ops->runtime_files : qemu_files;
}

static inline const char *vmm_probe_what(const struct vmm_ops *ops)
{
	return ops->probe_what ? ops->probe_what : "QMP (query-status)";
}

static inline const char *vmm_disk_file(const struct vmm_ops *ops)
{
	return ops->disk_file ? ops->disk_file : VMM_DISK;
}

static inline const char *vmm_kernel_file(const struct vmm_ops *ops)
{
	return ops->kernel_file ? ops->kernel_file : "vmlinuz";
}

static inline int vmm_channel_connect(const struct vmm_ops *ops, const struct vmm_config *cfg, int *ret_fd,
                                      struct al_error *err)
{
	if (ops->channel_connect)
		return ops->channel_connect(cfg, ret_fd, err);
	int r = unix_connect_at(cfg->dirfd, VMM_CHANNEL_SOCK, ret_fd);
	return r < 0 ? al_error_set(err, AL_ERR_UNAVAILABLE, -r, "cannot connect to %s", VMM_CHANNEL_SOCK) : 0;
}

static inline int vmm_console_open(const struct vmm_ops *ops, const struct vmm_config *cfg, int *ret_fd,
                                   struct al_error *err)
{
	if (ops->console_open)
		return ops->console_open(cfg, ret_fd, err);
	int r = unix_connect_at(cfg->dirfd, VMM_CONSOLE_SOCK, ret_fd);
	return r < 0 ? al_error_set(err, AL_ERR_UNAVAILABLE, -r, "cannot connect to %s", VMM_CONSOLE_SOCK) : 0;
}

#endif
