/* SPDX-License-Identifier: Apache-2.0 */
/* Why a VMM ended, in words a person can act on (vmm.h, vmm_exit_describe):
 * how it ended (exit status or signal; a SIGSYS is seccomp's kill, named
 * with the syscall the kernel's audit record gives) and the last lines of
 * its own stderr (vmm.log). */
#include <fcntl.h>
#include <limits.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "airlock/jailer.h"
#include "jail.h"
#include "util.h"
#include "vmm.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* The kernel's record of a seccomp kill may be printed a moment after the
 * process is gone (kauditd is a thread of its own). */
#define KMSG_TRIES 5
#define KMSG_RETRY_MS 50
#define KMSG_RECORDS_MAX 200000
#define LOG_TAIL_BYTES 16384
#define LOG_TAIL_LINES 3
#define LOG_LINE_MAX 200

/* "key=NUMBER" in s, as a whole word; -1 if absent. */
static long long field_number(const char *s, const char *key)
{
	size_t klen = strlen(key);
	for (const char *p = s; (p = strstr(p, key)); p += klen) {
		if (p != s && p[-1] != ' ')
			continue;
		if (p[klen] != '=')
			continue;
		const char *v = p + klen + 1;
		if (*v < '0' || *v > '9')
			return -1;
		long long n = 0;
		for (; *v >= '0' && *v <= '9'; v++) {
			if (n > (LLONG_MAX - 9) / 10)
				return -1;
			n = n * 10 + (*v - '0');
		}
		return *v == '\0' || *v == ' ' || *v == '\n' ? n : -1;
	}
	return -1;
}

int vmm_audit_seccomp_parse(const char *record, long *ret_pid, int *ret_signal, int *ret_syscall)
{
	/* type=1326 is AUDIT_SECCOMP. */
	if (!strstr(record, "type=1326 "))
		return -ENOENT;
	long long pid = field_number(record, "pid"), sig = field_number(record, "sig"),
	          nr = field_number(record, "syscall");
	if (pid <= 0 || pid > INT32_MAX || sig < 0 || sig > 64 || nr < 0 || nr > 4095)
		return -EINVAL;
	*ret_pid = (long)pid;
	*ret_signal = (int)sig;
	*ret_syscall = (int)nr;
	return 0;
}

/* The syscall seccomp killed pid for, from the kernel log: -ENOENT when no
 * record says (audit goes to auditd on this host, or the ring was full). */
static int kmsg_seccomp_syscall(long pid, int *ret_nr)
{
	for (int attempt = 0; attempt < KMSG_TRIES; attempt++) {
		cleanup_close int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		char rec[8192];
		for (unsigned i = 0; i < KMSG_RECORDS_MAX; i++) {
			ssize_t n = read(fd, rec, sizeof(rec) - 1);
			if (n < 0 && errno == EPIPE)
				continue; /* overwritten while we read: the next one */
			if (n <= 0)
				break;
			rec[n] = '\0';
			long p;
			int sig, nr;
			if (vmm_audit_seccomp_parse(rec, &p, &sig, &nr) == 0 && p == pid && sig == SIGSYS) {
				*ret_nr = nr;
				return 0;
			}
		}
		usleep(KMSG_RETRY_MS * 1000);
	}
	return -ENOENT;
}

/* The pid the jailer's supervisor gave for a VMM killed by a signal (the
 * VMM is pid 1 of its own namespace, another pid than the jailer's). */
static long supervisor_pid(const char *log)
{
	const char *hit = NULL;
	for (const char *p = log; (p = strstr(p, AIRLOCK_JAILER_SUPERVISOR_PREFIX)); p++)
		if (p == log || p[-1] == '\n')
			hit = p;
	if (!hit)
		return -1;
	const char *pid = strstr(hit, "(pid ");
	const char *nl = strchr(hit, '\n');
	if (!pid || (nl && pid > nl))
		return -1;
	char *end;
	long n = strtol(pid + 5, &end, 10);
	return *end == ')' && n > 0 ? n : -1;
}

/* The last lines of the VMM's stderr, but the supervisor's, printable. */
static void log_tail(const char *log, char *out, size_t size)
{
	const char *lines[LOG_TAIL_LINES];
	size_t lens[LOG_TAIL_LINES], n = 0;
	const char *end = log + strlen(log);
	while (end > log && n < LOG_TAIL_LINES) {
		const char *e = end;
		while (e > log && (e[-1] == '\n' || e[-1] == '\r'))
			e--;
		const char *s = e;
		while (s > log && s[-1] != '\n')
			s--;
		end = s;
		if (e == s || !strncmp(s, AIRLOCK_JAILER_SUPERVISOR_PREFIX, strlen(AIRLOCK_JAILER_SUPERVISOR_PREFIX)))
			continue;
		lines[n] = s;
		lens[n++] = (size_t)(e - s);
	}
	size_t o = 0;
	out[0] = '\0';
	for (size_t i = n; i-- > 0 && o + 4 < size;) {
		if (o)
			o += (size_t)snprintf(out + o, size - o, " | ");
		for (size_t k = 0; k < lens[i] && k < LOG_LINE_MAX && o + 1 < size; k++) {
			unsigned char c = (unsigned char)lines[i][k];
			out[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
		}
		out[o] = '\0';
	}
}

static void read_log(int dirfd, const char *name, char *buf, size_t size)
{
	buf[0] = '\0';
	cleanup_close int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return;
	off_t from = st.st_size > (off_t)(size - 1) ? st.st_size - (off_t)(size - 1) : 0;
	ssize_t n = pread(fd, buf, size - 1, from);
	buf[n > 0 ? n : 0] = '\0';
	/* A NUL inside would end the text early: make it a line break. */
	for (ssize_t i = 0; i < n; i++)
		if (!buf[i])
			buf[i] = '\n';
}

static void describe_signal(int sig, long pid, const char *log, char *out, size_t size)
{
	if (sig != SIGSYS) {
		snprintf(out, size, "the VMM was killed by signal %d (SIG%s)", sig, sigabbrev_np(sig) ?: "?");
		return;
	}
	long vmm_pid = supervisor_pid(log);
	int nr = -1;
	if (kmsg_seccomp_syscall(vmm_pid > 0 ? vmm_pid : pid, &nr) < 0) {
		snprintf(out, size,
		         "seccomp killed the VMM (SIGSYS: a syscall outside the profile; the kernel log has no "
		         "record of which: look for 'type=1326' with pid=%ld in the audit log)",
		         vmm_pid > 0 ? vmm_pid : pid);
		return;
	}
	cleanup_free char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
	snprintf(out, size, "seccomp killed the VMM (syscall %d, %s)", nr, name ? name : "unknown");
}

/* The jailer's record of how the VMM ended (JAIL_EXIT_RECORD beside the
 * log: "status N" or "signal N"), for a VMM that is not our child (one a
 * restarted airlockd re-attached to). SECURITY: the sandbox's directory is
 * root's; the VMM cannot write there, unlike in its log. */
static int exit_record_read(int dirfd, int *ret_code, int *ret_sig)
{
	cleanup_close int fd = openat(dirfd, JAIL_EXIT_RECORD, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0)
		return -ENOENT;
	char buf[32];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -ENOENT;
	buf[n] = '\0';
	int value = -1, used = 0;
	char word[8];
	if (sscanf(buf, "%7s %d%n", word, &value, &used) != 2 || buf[used] != '\n' || buf[used + 1] != '\0')
		return -EINVAL;
	if (!strcmp(word, "status") && value >= 0 && value <= 255)
		*ret_code = value;
	else if (!strcmp(word, "signal") && value > 0 && value < 65)
		*ret_sig = value;
	else
		return -EINVAL;
	return 0;
}

int vmm_exit_describe(int pidfd, long pid, const int *status, int log_dirfd, const char *log_name, char *out,
                      size_t size)
{
	char log[LOG_TAIL_BYTES + 1];
	read_log(log_dirfd, log_name, log, sizeof(log));
	char how[384];
	int code = -1, sig = 0;
	if (status) {
		if (WIFSIGNALED(*status))
			sig = WTERMSIG(*status);
		else if (WIFEXITED(*status))
			code = WEXITSTATUS(*status);
	} else if (pidfd >= 0) {
		/* A look at how it ended that leaves the reaping to its owner. */
		siginfo_t si = {0};
		if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid) {
			if (si.si_code == CLD_EXITED)
				code = si.si_status;
			else
				sig = si.si_status;
		}
	}
	/* Not our child: its jailer's word, or "not known" (never "status 0"). */
	if (!sig && code < 0)
		exit_record_read(log_dirfd, &code, &sig);
	if (sig)
		describe_signal(sig, pid, log, how, sizeof(how));
	else if (code == 0)
		snprintf(how, sizeof(how),
		         "the VMM exited with status 0 (the guest powered off, or its kernel panicked)");
	else if (code > 0)
		snprintf(how, sizeof(how), "the VMM exited with status %d", code);
	else
		snprintf(how, sizeof(how), "the VMM ended (how is not known to this airlockd)");
	char tail[LOG_TAIL_LINES * (LOG_LINE_MAX + 3) + 1];
	log_tail(log, tail, sizeof(tail));
	snprintf(out, size, "%s; %s: %s", how, log_name, tail[0] ? tail : "(empty)");
	return sig || code >= 0 ? 0 : -ECHILD;
}
