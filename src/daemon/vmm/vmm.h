/* SPDX-License-Identifier: Apache-2.0 */
/* The VMM backend interface. Each backend lives in a folder of its own
 * below vmm/ (qemu/, firecracker/) and implements all of struct vmm_ops;
 * the daemon talks to it through these ops and fields alone, and finds it
 * through the backend table (vmm-select.h). docs/vmm-backends.md says how
 * to add one. */
#ifndef AIRLOCK_VMM_H
#define AIRLOCK_VMM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* File names inside a sandbox directory (each backend names its own files
 * in the VMM's directory: its vmm_ops). Kept short: unix socket paths are
 * limited to 108 bytes, so sockets are always reached relative to the
 * directory (the VMM runs with it as cwd; the daemon uses /proc/self/fd). */
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
	/* Restore: an fd of the main file of a save (save()'s `out`) to start
	 * from instead of booting (read by the VMM, never reopened); -1 to boot. */
	int incoming_fd;
	/* Restore, backends whose ops have state_apart: an fd of the device
	 * state saved with it (save()'s `state_out`); -1 otherwise. */
	int incoming_state_fd;
	/* The sandbox's network namespace (netns.h): the VMM joins it before
	 * it starts and attaches the guest's NIC to its tap0. -1: no NIC. */
	int netns_fd;
	/* The MAC address of that NIC ("02:xx:xx:xx:xx:xx", the one its
	 * namespace's rules accept, netns.h); NULL or "": AIRLOCK_NET_GUEST_MAC.
	 * A restore's NIC has the address saved with the snapshot until THAW
	 * gives it this one. */
	const char *guest_mac;
	/* The VMM's jail (jail.h); spawn refuses to run a VMM without one. */
	const struct vmm_jail *jail;
	/* Guest RAM, backends whose ops have ram_fd: -1 anonymous memory; else
	 * an fd of the file that backs it (a memfd), mapped shared (mem_shared:
	 * a template's boot, its RAM is the file) or private copy-on-write (a
	 * restore from a template snapshot: unchanged pages are shared by every
	 * such sandbox). A save never carries the RAM of a shared mapping, and
	 * a restore takes none it does not carry. Other backends: always -1. */
	int mem_fd;
	bool mem_shared;
	/* Track the guest's dirty pages from the start (or the restore), so
	 * that save_diff can write only what changed since the last save. */
	bool diff_snapshots;
	/* NULL: the daemon's accelerator (accel.h); else this start runs on KVM
	 * with this CPU model, whatever the daemon's (the accelerator probe's
	 * attempts, accel-probe.h). */
	const char *kvm_cpu;
};

/* What a backend's per-sandbox disk is, and so the disk of its snapshots. */
enum vmm_disk_kind {
	/* Copy-on-write over the template's image (a qcow2 overlay): small; the
	 * size the guest sees is in its header. */
	VMM_DISK_OVERLAY,
	/* The whole disk, raw (sparse): its size is the one the guest sees. */
	VMM_DISK_WHOLE,
};

/* One VMM backend: what the daemon knows of it and asks of it. Every backend
 * fills every field and op (docs/vmm-backends.md lists them). */
/* Where a VMM's guest is, as the VMM says (run_state). */
enum vmm_run_state {
	VMM_RUN_UNKNOWN, /* it said something else (loading, failed, shut down) */
	VMM_RUN_RUNNING,
	VMM_RUN_PAUSED,
	VMM_RUN_SAVED, /* paused, and a save has completed since it last ran */
};

struct vmm_ops {
	/* ---- what it is ---- */
	/* Its name: --backend's value, and the backend of a sandbox's record
	 * and of a snapshot (a snapshot restores only on its backend). */
	const char *name;
	/* The VMM's program, looked for on PATH. */
	const char *binary;
	/* The guest kernel in the image dir's kernels/. */
	const char *kernel_file;
	/* The per-sandbox disk in the VMM's directory, and what it is. */
	const char *disk_file;
	enum vmm_disk_kind disk_kind;
	/* What the VMM leaves in its directory besides the disk (sockets,
	 * FIFOs), removed after it is gone; NULL-terminated. */
	const char *const *runtime_files;
	/* What probe() asks, for the watchdog's message. */
	const char *probe_what;

	/* ---- what it can do ---- */
	/* save() writes the device state to a file of its own (state_out),
	 * apart from the memory: a snapshot keeps and digests both. */
	bool state_apart;
	/* The guest's RAM can be a file the daemon gives (cfg->mem_fd), left
	 * out of a save when mapped shared: a template snapshot keeps its RAM
	 * in a sealed memfd that every sandbox of the template maps private.
	 * Else it saves the RAM into its files like any save. */
	bool ram_fd;
	/* A save resets the guest channel's connection and a restored guest
	 * starts without one (a vsock connection is the running guest's to
	 * accept): after save() and after a restore the daemon opens the
	 * channel again, while the guest runs, and asks for HELLO. */
	bool channel_resets_on_save;

	/* ---- what it does ---- */
	/* The accelerator this backend will use on this host: "kvm", "tcg", or
	 * "probing" while the accelerator's probe runs (accel.h). */
	const char *(*accel)(void);
	/* Creates the per-sandbox disk (disk_file in cfg->root) from the
	 * template (cfg->rootfs), of cfg->disk_mib (0: the template's size). */
	int (*prepare_disk)(const struct vmm_config *cfg, struct al_error *err);
	/* Starts the VMM in its jail and its own session; returns its pid (the
	 * jailer's). The VMM is not tied to the daemon's lifetime; its command
	 * line has "airlock-<sandbox id>" as one argument (how a restarted
	 * daemon tells it from a process that reused its pid). A restore
	 * (cfg->incoming_fd) starts paused once wait_incoming returns. */
	int (*spawn)(const struct vmm_config *cfg, pid_t *ret_pid, struct al_error *err);
	/* Asks the VMM to stop now (no guest cooperation needed). */
	int (*stop)(const struct vmm_config *cfg, pid_t pid);
	/* Freezes / thaws the guest's vCPUs; memory stays resident. */
	int (*pause)(const struct vmm_config *cfg, struct al_error *err);
	int (*resume)(const struct vmm_config *cfg, struct al_error *err);
	/* With the guest paused: saves it into new files of the daemon's, named
	 * by path (outside the VMM's jail; however the VMM gets them is the
	 * backend's business), and returns once they are complete and on disk:
	 * `out`, its memory (but the RAM of a shared cfg->mem_fd) and, unless
	 * state_apart, its device state; `state_out`, with state_apart, the
	 * device state (else unused). cfg->memory_mib bounds the memory's file.
	 * A restore gets them back as incoming_fd and incoming_state_fd. */
	int (*save)(const struct vmm_config *cfg, const char *out, const char *state_out, struct al_error *err);
	/* Like save(), only the memory written since the last save (the VM
	 * runs with cfg->diff_snapshots): a sparse file that, merged onto the
	 * last full one, is a full one. -EOPNOTSUPP where the backend cannot. */
	int (*save_diff)(const struct vmm_config *cfg, const char *out, const char *state_out, struct al_error *err);
	/* After a crash during save: stops a save still in progress and waits
	 * until the VMM is no longer saving (the guest stays paused). */
	int (*cancel_save)(const struct vmm_config *cfg, struct al_error *err);
	/* After a spawn with incoming_fd: waits until the state is loaded (the
	 * guest is then paused; resume runs it). Ends at once (-ECHILD) when
	 * the VMM (pidfd) has exited: killed by a DELETE, or crashed. */
	int (*wait_incoming)(const struct vmm_config *cfg, int pidfd, uint64_t deadline_ms, struct al_error *err);
	/* The watchdog's question: does the VMM still answer (a status query
	 * through its control socket, within timeout_ms; never blocks longer)?
	 * 0 if it answered. */
	int (*probe)(const struct vmm_config *cfg, unsigned timeout_ms, struct al_error *err);
	/* Where the guest is (within timeout_ms): what a restarted daemon
	 * checks against the record before it re-attaches. */
	int (*run_state)(const struct vmm_config *cfg, unsigned timeout_ms, enum vmm_run_state *ret,
	                 struct al_error *err);
	/* Opens the host end of the guest channel, one attempt: -ENOENT or
	 * -ECONNREFUSED while the VMM or the agent is not there yet (callers
	 * retry those: vmm_connect_retry). */
	int (*channel_connect)(const struct vmm_config *cfg, int *ret_fd, struct al_error *err);
	/* Opens the guest's console output (reading it is enough), one attempt
	 * like channel_connect. */
	int (*console_open)(const struct vmm_config *cfg, int *ret_fd, struct al_error *err);
};

/* What every start of a VMM does around spawn, a sandbox's boot and a
 * template snapshot's build alike (vmm-start.c). */
/* The disk in the VMM's directory (dirfd) becomes the jail uid's, 0600 (the
 * only file there that is). */
int vmm_disk_give(const struct vmm_ops *ops, int dirfd, uint32_t uid, struct al_error *err);
/* The jail of vc's VMM for uid (jail.h): a disk of disk_mib, or of the
 * template's size if that is larger. */
void vmm_jail_spec(const struct vmm_ops *ops, const struct vmm_config *vc, uint32_t uid, uint64_t disk_mib,
                   struct vmm_jail *ret);
/* The MAC address vc's NIC starts with (vmm-spawn.c): vc->guest_mac, or
 * AIRLOCK_NET_GUEST_MAC when that is unset. SECURITY: it goes into a VMM's
 * command line or API body: anything but a plain address is not used. */
const char *vmm_guest_mac(const struct vmm_config *vc);
/* Whether the process of pidfd has exited (a wait for it would not block). */
bool vmm_pidfd_exited(int pidfd);
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

#endif
