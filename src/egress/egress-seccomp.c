/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's syscall allow-list. It holds every tenant's secret values and
 * the Airlock CA key while it parses guest bytes (HTTP, TLS, DNS), so a bug
 * in a parser must not become a general-purpose process: no exec, no fork,
 * no new files written, no sockets but IP ones, no ptrace, no mount, no
 * keyrings, no bpf, no io_uring. The list was built from what the gateway
 * really calls (strace -ff of the egress integration tests) plus the error
 * paths of glibc (abort), OpenSSL's lazy certificate lookups (reads) and
 * c-ares (its config files, reads).
 *
 * SECURITY: the default is SECCOMP_RET_KILL_PROCESS: one stray syscall ends
 * the gateway (airlockd reports it and restarts it; while it is down no
 * sandbox reaches anything: fail closed).
 */
#include "egress-seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

/* Allowed whatever their arguments. */
static const char *const allowed[] = {
    /* memory */
    "brk",
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "madvise",
    /* threads (clone is below, with its flags), locks, signals, exit */
    "futex",
    "set_robust_list",
    "get_robust_list",
    "rseq",
    "sched_yield",
    "sched_getaffinity",
    "exit",
    "exit_group",
    "gettid",
    "getpid",
    "tgkill",
    "rt_sigprocmask",
    "rt_sigaction",
    "rt_sigreturn",
    "sigaltstack",
    "restart_syscall",
    /* time (normally the vDSO; these are its fall-backs) */
    "clock_gettime",
    "clock_getres",
    "gettimeofday",
    "nanosleep",
    "clock_nanosleep",
    /* fds: reading, writing (stderr, sockets, pipes), events */
    "read",
    "readv",
    "pread64",
    "write",
    "writev",
    "close",
    "fcntl",
    "dup",
    "dup3",
    "lseek",
    "pipe2",
    "splice",
    "poll",
    "ppoll",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "eventfd2",
    /* files, read only (openat is below, with its flags): OpenSSL's
     * certificate directory, c-ares's resolv.conf and hosts */
    "newfstatat",
    "fstat",
    "statx",
    "getdents64",
    "fstatfs",
    "access",
    "faccessat",
    "faccessat2",
    /* sockets (socket is below, with its families) */
    "connect",
    "accept",
    "accept4",
    "bind",
    "getsockopt",
    "setsockopt",
    "getsockname",
    "getpeername",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "sendmmsg",
    "recvmmsg",
    "shutdown",
    /* identity and entropy */
    "getrandom",
    "getuid",
    "geteuid",
    "getgid",
    "getegid",
    "uname",
    "sysinfo",
    "getrlimit",
};

static int allow_name(scmp_filter_ctx ctx, const char *name, struct al_error *err)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR)
		return 0; /* not a syscall of this architecture (epoll_wait on arm64) */
	int r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
	return r < 0 ? al_error_set(err, AL_ERR_INTERNAL, -r, "seccomp: cannot allow %s: %s", name, strerror(-r)) : 0;
}

/* The syscalls allowed with some arguments only. */
static int add_conditional(scmp_filter_ctx ctx)
{
	int r = 0;
	/* Threads only: a clone without CLONE_THREAD would be a fork. clone3
	 * passes its flags in memory a filter cannot read: ENOSYS makes glibc
	 * fall back to clone. */
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
		                     SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	/* Files are opened for reading only: nothing created, truncated or
	 * written (O_TMPFILE's own bit; O_DIRECTORY alone is opendir). */
	const scmp_datum_t write_bits = O_ACCMODE | O_CREAT | O_TRUNC | O_APPEND | (O_TMPFILE & ~O_DIRECTORY);
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(openat), 1,
		                     SCMP_A2(SCMP_CMP_MASKED_EQ, write_bits, O_RDONLY));
	/* IP sockets only (dials, DNS upstream); the control socket and the
	 * listeners come from airlockd. No netlink, packet, vsock, alg. */
	static const int families[] = {AF_INET, AF_INET6};
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(families); i++)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
		                     SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)families[i]));
	/* Reading limits (glibc), never setting them. */
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(prlimit64), 1, SCMP_A2(SCMP_CMP_EQ, 0));
	static const unsigned long ioctls[] = {FIONREAD, FIONBIO};
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(ioctls); i++)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
		                     SCMP_A1(SCMP_CMP_EQ, (scmp_datum_t)ioctls[i]));
	return r;
}

int egress_seccomp_install(struct al_error *err)
{
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "seccomp: no_new_privs: %m");
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
	if (!ctx)
		return al_error_set(err, AL_ERR_INTERNAL, ENOMEM, "seccomp: cannot create a filter");
	int r = 0;
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(allowed); i++)
		r = allow_name(ctx, allowed[i], err);
	if (r == 0 && (r = add_conditional(ctx)) < 0)
		al_error_set(err, AL_ERR_INTERNAL, -r, "seccomp: cannot add a rule: %s", strerror(-r));
	if (r == 0 && (r = seccomp_load(ctx)) < 0)
		al_error_set(err, AL_ERR_INTERNAL, -r, "seccomp: cannot load the filter: %s", strerror(-r));
	seccomp_release(ctx);
	return r;
}

void egress_seccomp_self_test(void)
{
	struct al_error err = {0};
	if (egress_seccomp_install(&err) < 0) {
		fprintf(stderr, "airlock-egress: %s\n", err.message);
		return;
	}
	fprintf(stderr, "airlock-egress: filter installed; calling ptrace(), which it does not allow\n");
	/* The kernel kills the process here (SIGSYS). */
	syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0);
	fprintf(stderr, "airlock-egress: ptrace() returned: the seccomp filter is not enforced\n");
}
