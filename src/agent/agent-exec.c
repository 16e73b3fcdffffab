/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Exec streams: one host stream = one process (and its process group).
 *
 * Lifecycle: EXEC -> fork; the child makes its own session (so its process
 * group id is its pid), wires stdin/stdout/stderr to pipes, chdir, drops to
 * uid/gid, and execs argv[0] searched in the PATH of the given environment.
 * A failure before exec comes back through a close-on-exec pipe and becomes
 * an ERROR frame; after exec the stream produces STDOUT/STDERR frames and
 * ends with EXIT once the process is reaped and both pipes are closed.
 *
 * Pipes held open by background processes: after the main process is reaped
 * the agent keeps reading its pipes until EOF, but closes them once they have
 * been quiet for AGENT_PIPE_GRACE_IDLE_MS or at most AGENT_PIPE_GRACE_MAX_MS
 * after the reap (draining what is buffered first). Background processes are
 * not killed; they get EPIPE/SIGPIPE if they write later.
 *
 * stdin: STDIN frames are buffered (at most AIRLOCK_STDIN_WINDOW per stream)
 * and written without blocking; each write returns CREDIT to the host. Data
 * for a stdin that is closed (by the child, by EOF, or "stdin":false) is
 * dropped and still credited.
 *
 * Output flow control: the pipes are read only while the stream has output
 * credit (AIRLOCK_OUTPUT_WINDOW, replenished by the host's CREDIT frames);
 * without it the process blocks on its next write. Time spent blocked does
 * not count towards the pipe grace.
 *
 * PTY ("pty":{"rows":R,"cols":C}): the child gets a new session with the PTY
 * slave as its controlling terminal and fds 0-2. The master is both the
 * output (STDOUT frames; EIO once every slave fd is closed is the end of
 * output) and the input (STDIN frames, so ^C is turned into SIGINT by the
 * line discipline). A zero-length STDIN writes the terminal's VEOF character
 * (^D) instead of closing anything; RESIZE sets the window size (the kernel
 * sends SIGWINCH to the foreground process group).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

extern char **environ;

#define PASSWD_MAX (1024 * 1024)

enum exec_stage {
	STAGE_SETUP = 1,
	STAGE_CWD,
	STAGE_CRED,
	STAGE_EXEC,
};

struct exec_report {
	int stage;
	int err;
};

struct exec_req {
	char **argv; /* point into the JSON request */
	char **envp; /* owned strings */
	size_t envc;
	const char *cwd;
	uid_t uid;
	gid_t gid;
	uint64_t timeout_ms;
	bool stdin_pipe;
	bool pty;
	unsigned short rows, cols;
};

static void exec_req_release(struct exec_req *r)
{
	free(r->argv);
	for (size_t i = 0; i < r->envc; i++)
		free(r->envp[i]);
	free(r->envp);
}

static bool env_has(char **envp, size_t envc, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < envc; i++)
		if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
			return true;
	return false;
}

/* Home directory of uid from the root filesystem's /etc/passwd (no NSS in a
 * static binary); /root for root and / otherwise when it is not listed. */
static char *home_of(uid_t uid)
{
	cleanup_free char *pw = NULL;
	if (read_file_limited("/etc/passwd", PASSWD_MAX, &pw, NULL) == 0) {
		char *save = NULL;
		for (char *line = strtok_r(pw, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			char *f[7];
			size_t nf = 0;
			for (char *p = line; nf < 7; nf++) {
				f[nf] = p;
				p = strchr(p, ':');
				if (!p) {
					nf++;
					break;
				}
				*p++ = '\0';
			}
			uint64_t id;
			if (nf >= 6 && parse_u64(f[2], &id) == 0 && id == uid && f[5][0] == '/')
				return xstrdup(f[5]);
		}
	}
	return xstrdup(uid == 0 ? "/root" : "/");
}

static bool json_get_id(json_t *o, const char *key, uint32_t *ret, bool *present)
{
	json_t *v = json_object_get(o, key);
	*present = v != NULL;
	if (!v)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 4294967294LL)
		return false;
	*ret = (uint32_t)json_integer_value(v);
	return true;
}

/* A PTY dimension: absent keeps the default, else an integer in 1..65535. */
static bool pty_dim_get(json_t *o, const char *key, unsigned short *ret)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > AGENT_PTY_MAX_DIM)
		return false;
	*ret = (unsigned short)json_integer_value(v);
	return true;
}

/* SECURITY: the EXEC request comes from the host; types and sizes are checked
 * before anything is used (the payload itself is at most 64 KiB). */
static int exec_req_parse(json_t *o, struct exec_req *r, struct al_error *err)
{
	json_t *argv = json_object_get(o, "argv");
	if (!json_is_array(argv) || json_array_size(argv) == 0 || json_array_size(argv) > AGENT_EXEC_MAX_ARGS)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"argv\" must be a non-empty array of at most %d strings", AGENT_EXEC_MAX_ARGS);
	r->argv = xcalloc(json_array_size(argv) + 1, sizeof(char *));
	for (size_t i = 0; i < json_array_size(argv); i++) {
		const char *s = agent_json_get_cstring(json_array_get(argv, i));
		if (!s || (i == 0 && s[0] == '\0'))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "\"argv\"[%zu] must be a %sstring without NUL bytes", i,
			                    i == 0 ? "non-empty " : "");
		r->argv[i] = (char *)s;
	}

	json_t *env = json_object_get(o, "env");
	if (env && !json_is_array(env) && !json_is_null(env))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"env\" must be an array of \"NAME=value\" strings");
	size_t n_env = json_is_array(env) ? json_array_size(env) : 0;
	if (n_env > AGENT_EXEC_MAX_ENV)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"env\" has more than %d entries",
		                    AGENT_EXEC_MAX_ENV);
	r->envp = xcalloc(n_env + 4, sizeof(char *));
	for (size_t i = 0; i < n_env; i++) {
		const char *s = agent_json_get_cstring(json_array_get(env, i));
		if (!s || s[0] == '=' || !strchr(s, '='))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "\"env\"[%zu] must be a \"NAME=value\" string", i);
		r->envp[r->envc++] = xstrdup(s);
	}

	json_t *cwd = json_object_get(o, "cwd");
	r->cwd = "/";
	if (cwd && !json_is_null(cwd)) {
		r->cwd = agent_json_get_cstring(cwd);
		if (!r->cwd || r->cwd[0] == '\0')
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"cwd\" must be a non-empty string");
	}

	uint32_t uid = 0, gid = 0;
	bool has_uid, has_gid;
	if (!json_get_id(o, "uid", &uid, &has_uid) || !json_get_id(o, "gid", &gid, &has_gid))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"uid\" and \"gid\" must be integers in 0..4294967294");
	r->uid = uid;
	r->gid = has_gid ? gid : uid; /* default: the group of the same number */

	json_t *t = json_object_get(o, "timeout_ms");
	if (t && !json_is_null(t)) {
		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    (uint64_t)json_integer_value(t) > AGENT_MAX_TIMEOUT_MS)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "\"timeout_ms\" must be an integer in 0..%llu",
			                    (unsigned long long)AGENT_MAX_TIMEOUT_MS);
		r->timeout_ms = (uint64_t)json_integer_value(t);
	}

	json_t *in = json_object_get(o, "stdin");
	if (in && !json_is_boolean(in) && !json_is_null(in))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"stdin\" must be true or false");
	r->stdin_pipe = json_is_true(in);

	json_t *pty = json_object_get(o, "pty");
	if (pty && !json_is_null(pty)) {
		r->rows = 24;
		r->cols = 80;
		if (!json_is_object(pty) || !pty_dim_get(pty, "rows", &r->rows) || !pty_dim_get(pty, "cols", &r->cols))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "\"pty\" must be an object {\"rows\":N,\"cols\":N} with N in 1..%d",
			                    AGENT_PTY_MAX_DIM);
		r->pty = true;
		if (!env_has(r->envp, r->envc, "TERM"))
			r->envp[r->envc++] = xstrdup("TERM=xterm-256color");
	}

	if (!env_has(r->envp, r->envc, "PATH"))
		r->envp[r->envc++] = xstrdup("PATH=" AGENT_DEFAULT_PATH);
	if (!env_has(r->envp, r->envc, "HOME")) {
		cleanup_free char *home = home_of(r->uid);
		r->envp[r->envc++] = xasprintf("HOME=%s", home);
	}
	return 0;
}

/* In the child between fork and exec: only async-signal-safe calls. */
static void __attribute__((noreturn)) child_fail(int report_fd, int stage, int err)
{
	struct exec_report rep = {.stage = stage, .err = err};
	(void)!write(report_fd, &rep, sizeof(rep));
	_exit(127);
}

static int move_fd(int from, int to)
{
	if (from == to)
		return fcntl(to, F_SETFD, 0);
	return dup2(from, to);
}

static void __attribute__((noreturn))
child_run(const struct exec_req *r, int in_fd, int out_fd, int err_fd, int report_fd)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL); /* ignored signals survive exec (SIGPIPE) */
	if (setsid() < 0)
		child_fail(report_fd, STAGE_SETUP, errno);
	/* With a PTY, in/out/err are all its slave: make it the controlling
	 * terminal of the new session, so ^C and job control work. */
	if (r->pty && ioctl(in_fd, TIOCSCTTY, 0) < 0)
		child_fail(report_fd, STAGE_SETUP, errno);
	if (in_fd < 0)
		in_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (in_fd < 0 || move_fd(in_fd, 0) < 0 || move_fd(out_fd, 1) < 0 || move_fd(err_fd, 2) < 0)
		child_fail(report_fd, STAGE_SETUP, errno);
	if (chdir(r->cwd) < 0)
		child_fail(report_fd, STAGE_CWD, errno);
	/* The limits of what the agent starts (agent.h), not the agent's own.
	 * An unprivileged agent (tests) may not be able to raise them: best effort there. */
	struct rlimit nofile = {AGENT_CHILD_NOFILE_SOFT, AGENT_CHILD_NOFILE_HARD}, nproc;
	/* Processes: the kernel's own default (half of threads-max, so it
	 * follows the guest's memory) when that is lower. */
	if (getrlimit(RLIMIT_NPROC, &nproc) < 0 || nproc.rlim_max > AGENT_CHILD_NPROC)
		nproc.rlim_max = AGENT_CHILD_NPROC;
	nproc.rlim_cur = nproc.rlim_max;
	if ((setrlimit(RLIMIT_NOFILE, &nofile) < 0 || setrlimit(RLIMIT_NPROC, &nproc) < 0) && getuid() == 0)
		child_fail(report_fd, STAGE_SETUP, errno);
	/* An unprivileged agent (--channel-fd tests) can only run as itself. */
	bool same = r->uid == getuid() && r->gid == getgid();
	if (!(same && getuid() != 0) && (setgroups(1, &r->gid) < 0 || setresgid(r->gid, r->gid, r->gid) < 0 ||
	                                 setresuid(r->uid, r->uid, r->uid) < 0))
		child_fail(report_fd, STAGE_CRED, errno);
	/* execvpe searches the PATH of the calling process: make it the new one. */
	environ = r->envp;
	execvpe(r->argv[0], r->argv, r->envp);
	child_fail(report_fd, STAGE_EXEC, errno);
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* The child's report of what failed before exec. */
static int exec_report_failure(const struct exec_req *r, const struct exec_report *rep, struct al_error *err)
{
	const char *e = strerror(rep->err);
	switch (rep->stage) {
	case STAGE_CWD:
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, rep->err, "chdir \"%s\": %s", r->cwd, e);
	case STAGE_CRED:
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, rep->err, "switch to uid %u gid %u: %s",
		                    (unsigned)r->uid, (unsigned)r->gid, e);
	case STAGE_EXEC:
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, rep->err, "exec \"%s\": %s", r->argv[0], e);
	default:
		return al_error_set(err, AL_ERR_INTERNAL, rep->err, "set up the process for \"%s\": %s", r->argv[0], e);
	}
}

static int make_pipe(int *ret_r, int *ret_w)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	*ret_r = p[0];
	*ret_w = p[1];
	return 0;
}

/* A new PTY pair, both ends close-on-exec, with the requested window size. */
static int pty_open(const struct exec_req *r, int *ret_master, int *ret_slave)
{
	cleanup_close int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0)
		return -errno;
	cleanup_close int sl = -1;
#ifdef TIOCGPTPEER
	/* The peer of this very master, without a path lookup in /dev/pts. */
	sl = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
#endif
	if (sl < 0) {
		char name[64];
		int e = ptsname_r(m, name, sizeof(name));
		if (e != 0)
			return -e;
		sl = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (sl < 0)
			return -errno;
	}
	struct winsize ws = {.ws_row = r->rows, .ws_col = r->cols};
	if (ioctl(m, TIOCSWINSZ, &ws) < 0)
		return -errno;
	*ret_master = TAKE_FD(m);
	*ret_slave = TAKE_FD(sl);
	return 0;
}

static int exec_spawn(struct agent *a, uint32_t id, struct exec_req *r, struct al_error *err)
{
	cleanup_close int in_r = -1, in_w = -1, out_r = -1, out_w = -1, err_r = -1, err_w = -1, rep_r = -1, rep_w = -1,
	                  master = -1, slave = -1;
	int rc = 0;
	const char *what = "pipe";
	if (r->pty) {
		what = "open a PTY";
		rc = pty_open(r, &master, &slave);
	} else {
		rc = r->stdin_pipe ? make_pipe(&in_r, &in_w) : 0;
		if (rc == 0)
			rc = make_pipe(&out_r, &out_w);
		if (rc == 0)
			rc = make_pipe(&err_r, &err_w);
	}
	if (rc == 0)
		rc = make_pipe(&rep_r, &rep_w);
	if (rc < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -rc, "EXEC: %s: %s", what, strerror(-rc));

	pid_t pid = fork();
	if (pid < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "EXEC: fork: %m");
	if (pid == 0) {
		if (r->pty)
			child_run(r, slave, slave, slave, rep_w);
		child_run(r, in_r, out_w, err_w, rep_w);
	}

	close_fd(&rep_w);
	close_fd(&slave); /* the child's copy is the only one: EIO on the master when it is gone */
	/* Blocks only until the child has exec'd (the pipe closes) or failed. */
	struct exec_report rep;
	if (read_full(rep_r, &rep, sizeof(rep)) == (ssize_t)sizeof(rep)) {
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		return exec_report_failure(r, &rep, err);
	}

	struct stream *s = agent_stream_new(a, id, STREAM_EXEC);
	s->pid = pid;
	if (r->pty) {
		s->pty = true;
		s->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 3); /* -1: stdin is lost, output still works */
		s->out_fd = TAKE_FD(master);
	} else {
		s->out_fd = TAKE_FD(out_r);
		s->err_fd = TAKE_FD(err_r);
		s->in_fd = TAKE_FD(in_w);
	}
	s->stdin_gone = s->in_fd < 0;
	set_nonblock(s->out_fd);
	if (s->err_fd >= 0)
		set_nonblock(s->err_fd);
	if (s->in_fd >= 0)
		set_nonblock(s->in_fd);
	s->last_output_ms = now_ms_monotonic();
	if (r->timeout_ms)
		s->deadline_ms = s->last_output_ms + r->timeout_ms;
	return 0;
}

int agent_exec_start(struct agent *a, uint32_t id, json_t *req, struct al_error *err)
{
	__attribute__((cleanup(exec_req_release))) struct exec_req r = {0};
	int rc = exec_req_parse(req, &r, err);
	if (rc < 0) {
		al_error_prefix(err, "EXEC");
		return rc;
	}
	return exec_spawn(a, id, &r, err);
}

static void exec_kill(struct stream *s, int sig)
{
	if (s->reaped)
		return;
	if (kill(-s->pid, sig) < 0)
		kill(s->pid, sig); /* it left its process group */
}

static void stdin_close(struct agent *a, struct stream *s)
{
	/* Whatever was still buffered will never reach the child: credit it. */
	if (s->in_len && !s->orphan)
		agent_channel_send_credit(a, s->id, s->in_len);
	s->in_len = 0;
	s->in_off = 0;
	s->n_veof = 0;
	free(s->in_buf);
	s->in_buf = NULL;
	close_fd(&s->in_fd);
	s->stdin_gone = true;
}

/* The PTY's end-of-file character as the child has set it (TCGETS on a
 * master reads the slave's termios), ^D if that cannot be known. */
static uint8_t pty_veof_char(int master_fd)
{
	struct termios t;
	if (tcgetattr(master_fd, &t) == 0 && t.c_cc[VEOF] != _POSIX_VDISABLE)
		return t.c_cc[VEOF];
	return 0x04;
}

/* One write to the child: host bytes up to the next pending VEOF, or that
 * VEOF itself. 1 = progress, 0 = would block, < 0 = stdin closed. */
static int stdin_write_once(struct agent *a, struct stream *s)
{
	bool veof = s->n_veof > 0 && s->veof_at[0] == s->in_written;
	uint8_t c = veof ? pty_veof_char(s->in_fd) : 0;
	size_t want = s->in_len;
	if (s->n_veof > 0)
		want = MIN(want, (size_t)(s->veof_at[0] - s->in_written));
	ssize_t n = veof ? write(s->in_fd, &c, 1) : write(s->in_fd, s->in_buf + s->in_off, want);
	if (n < 0) {
		if (errno == EINTR)
			return 1;
		if (errno == EAGAIN)
			return 0;
		stdin_close(a, s); /* EPIPE: the child closed its stdin (EIO: the PTY is gone) */
		return -1;
	}
	if (veof) {
		memmove(s->veof_at, s->veof_at + 1, --s->n_veof * sizeof(s->veof_at[0]));
		return 1;
	}
	s->in_off += (size_t)n;
	s->in_len -= (size_t)n;
	s->in_written += (uint64_t)n;
	agent_channel_send_credit(a, s->id, (size_t)n);
	return 1;
}

static void stdin_pump(struct agent *a, struct stream *s)
{
	while ((s->in_len > 0 || s->n_veof > 0) && s->in_fd >= 0)
		if (stdin_write_once(a, s) <= 0)
			return;
	if (s->in_len == 0) {
		s->in_off = 0;
		if (s->stdin_eof && s->in_fd >= 0)
			stdin_close(a, s);
	}
}

void agent_exec_stdin(struct agent *a, struct stream *s, const uint8_t *data, size_t len)
{
	if (len == 0 && s->pty) {
		/* ^D through the line discipline; the terminal stays open. More
		 * than AGENT_PTY_VEOF_MAX pending (nobody reads) are dropped. */
		if (s->in_fd >= 0 && s->n_veof < AGENT_PTY_VEOF_MAX)
			s->veof_at[s->n_veof++] = s->in_written + s->in_len;
		stdin_pump(a, s);
		return;
	}
	if (len == 0) {
		s->stdin_eof = true;
		stdin_pump(a, s);
		return;
	}
	if (s->stdin_gone || s->stdin_eof) {
		agent_channel_send_credit(a, s->id, len);
		return;
	}
	/* SECURITY: the host may have at most AIRLOCK_STDIN_WINDOW bytes in
	 * flight; one that ignores CREDIT loses the stream rather than making
	 * the agent buffer without bound. */
	if (s->in_len + len > AIRLOCK_STDIN_WINDOW) {
		exec_kill(s, SIGKILL);
		agent_channel_send_error(
		    a, s->id, ENOBUFS,
		    "STDIN: %zu bytes pending exceed the window of %u bytes (host ignored CREDIT); "
		    "process killed",
		    s->in_len + len, AIRLOCK_STDIN_WINDOW);
		agent_stream_free(a, s);
		return;
	}
	if (s->in_off + s->in_len + len > AIRLOCK_STDIN_WINDOW) {
		memmove(s->in_buf, s->in_buf + s->in_off, s->in_len);
		s->in_off = 0;
	}
	if (!s->in_buf)
		s->in_buf = xmalloc(AIRLOCK_STDIN_WINDOW);
	memcpy(s->in_buf + s->in_off + s->in_len, data, len);
	s->in_len += len;
	stdin_pump(a, s);
}

int agent_exec_signal(struct stream *s, json_t *req, struct al_error *err)
{
	json_t *v = json_object_get(req, "signal");
	if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > SIGRTMAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"signal\" must be an integer signal number");
	exec_kill(s, (int)json_integer_value(v));
	return 0;
}

int agent_exec_resize(struct stream *s, json_t *req, struct al_error *err)
{
	unsigned short rows = 0, cols = 0;
	if (!json_object_get(req, "rows") || !json_object_get(req, "cols") || !pty_dim_get(req, "rows", &rows) ||
	    !pty_dim_get(req, "cols", &cols))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"rows\" and \"cols\" must be integers in 1..%d", AGENT_PTY_MAX_DIM);
	if (!s->pty)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOTTY,
		                    "the process has no PTY (EXEC without \"pty\")");
	struct winsize ws = {.ws_row = rows, .ws_col = cols};
	int fd = s->in_fd >= 0 ? s->in_fd : s->out_fd;
	/* Both closed: the terminal is gone with its processes; nothing to resize. */
	if (fd >= 0 && ioctl(fd, TIOCSWINSZ, &ws) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "%m");
	return 0;
}

void agent_exec_reap(struct agent *a)
{
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid <= 0)
			return; /* 0: none left to reap now; ECHILD: no children */
		for (size_t i = 0; i < a->n_streams; i++) {
			struct stream *s = a->streams[i];
			if (s->kind == STREAM_EXEC && !s->reaped && s->pid == pid) {
				s->reaped = true;
				s->wait_status = status;
				s->reaped_ms = now_ms_monotonic();
				s->grace_base_ms = s->reaped_ms;
				break;
			}
		}
		/* Anything else is an orphan reparented to PID 1: reaped, forgotten. */
	}
}

void agent_exec_poll_add(struct agent *a, struct stream *s, struct pollfd *pfds, size_t *n)
{
	/* Closing: agent_exec_tick drains the pipes itself. */
	bool room = agent_stream_output_room(a, s) > 0 && !s->closing;
	if (s->out_fd >= 0 && room) {
		s->poll_out = (int)*n;
		pfds[(*n)++] = (struct pollfd){.fd = s->out_fd, .events = POLLIN};
	}
	if (s->err_fd >= 0 && room) {
		s->poll_err = (int)*n;
		pfds[(*n)++] = (struct pollfd){.fd = s->err_fd, .events = POLLIN};
	}
	if (s->in_fd >= 0 && (s->in_len > 0 || s->n_veof > 0)) {
		s->poll_in = (int)*n;
		pfds[(*n)++] = (struct pollfd){.fd = s->in_fd, .events = POLLOUT};
	}
}

/* Reads at most one frame's worth, within the stream's output credit and
 * max_bytes: a flooding process gets one frame per loop iteration like
 * everyone else. > 0 bytes sent, 0 nothing now (no data or no credit),
 * -1 at EOF or error (EIO from a PTY master: the terminal is gone), which
 * closes *fd. */
static ssize_t output_read(struct agent *a, struct stream *s, int *fd, uint8_t type, uint64_t now_ms, size_t max_bytes)
{
	static uint8_t buf[AIRLOCK_FRAME_MAX_PAYLOAD];
	size_t room = MIN(agent_stream_output_room(a, s), max_bytes);
	if (room == 0)
		return 0;
	ssize_t n = read(*fd, buf, room);
	if (n > 0 && s->orphan) {
		s->last_output_ms = now_ms; /* nobody wants it: dropped */
		return n;
	}
	if (n > 0) {
		agent_channel_send(a, type, s->id, buf, (size_t)n);
		agent_stream_output_sent(s, (size_t)n);
		s->last_output_ms = now_ms;
		return n;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	close_fd(fd);
	return -1;
}

void agent_exec_poll_handle(struct agent *a, struct stream *s, const struct pollfd *pfds, uint64_t now_ms)
{
	if (s->poll_out >= 0 && pfds[s->poll_out].revents && s->out_fd >= 0)
		output_read(a, s, &s->out_fd, AIRLOCK_FRAME_STDOUT, now_ms, SIZE_MAX);
	if (s->poll_err >= 0 && pfds[s->poll_err].revents && s->err_fd >= 0)
		output_read(a, s, &s->err_fd, AIRLOCK_FRAME_STDERR, now_ms, SIZE_MAX);
	if (s->poll_in >= 0 && pfds[s->poll_in].revents && s->in_fd >= 0) {
		if (pfds[s->poll_in].revents & POLLERR)
			stdin_close(a, s);
		else
			stdin_pump(a, s);
	}
}

/* Closing a pipe that background processes may hold: first take what it
 * has (at most drain_left more). False while the stream is out of credit
 * with data left: the pipe stays open until CREDIT comes. */
static bool output_drain_close(struct agent *a, struct stream *s, int *fd, uint8_t type, uint64_t now_ms)
{
	while (*fd >= 0 && s->drain_left > 0) {
		if (agent_stream_output_room(a, s) == 0)
			return false;
		ssize_t n = output_read(a, s, fd, type, now_ms, s->drain_left);
		if (n <= 0)
			break;
		s->drain_left -= (size_t)n;
	}
	close_fd(fd);
	return true;
}

static void exec_send_exit(struct agent *a, struct stream *s)
{
	json_t *o = json_object();
	if (WIFEXITED(s->wait_status))
		json_object_set_new(o, "exit_code", json_integer(WEXITSTATUS(s->wait_status)));
	else if (WIFSIGNALED(s->wait_status))
		json_object_set_new(o, "signal", json_integer(WTERMSIG(s->wait_status)));
	if (s->timed_out)
		json_object_set_new(o, "timed_out", json_true());
	agent_channel_send_json(a, AIRLOCK_FRAME_EXIT, s->id, o);
}

static void lower_timeout(int *timeout_ms, uint64_t now_ms, uint64_t at_ms)
{
	int t = at_ms <= now_ms ? 0 : (int)MIN(at_ms - now_ms, (uint64_t)INT32_MAX);
	if (*timeout_ms < 0 || t < *timeout_ms)
		*timeout_ms = t;
}

bool agent_exec_tick(struct agent *a, struct stream *s, uint64_t now_ms, int *timeout_ms)
{
	if (!s->reaped) {
		if (s->deadline_ms && !s->timed_out) {
			if (now_ms >= s->deadline_ms) {
				exec_kill(s, SIGKILL);
				s->timed_out = true;
			} else {
				lower_timeout(timeout_ms, now_ms, s->deadline_ms);
			}
		}
		return false;
	}
	if ((s->out_fd >= 0 || s->err_fd >= 0) && !s->closing) {
		/* While the host is slow (queue full, or no credit) the agent is
		 * not reading: that is not quiet, and that time is not grace. A
		 * CREDIT or a flush to the host wakes the loop. */
		if (agent_stream_output_room(a, s) == 0) {
			if (!s->blocked_since_ms)
				s->blocked_since_ms = MAX(now_ms, 1);
			return false;
		}
		if (s->blocked_since_ms) {
			s->grace_base_ms += now_ms - s->blocked_since_ms;
			s->blocked_since_ms = 0;
			s->last_output_ms = MAX(s->last_output_ms, now_ms);
		}
		uint64_t idle_end = MAX(s->last_output_ms, s->grace_base_ms) + AGENT_PIPE_GRACE_IDLE_MS;
		uint64_t end = MIN(idle_end, s->grace_base_ms + AGENT_PIPE_GRACE_MAX_MS);
		if (now_ms < end) {
			lower_timeout(timeout_ms, now_ms, end);
			return false;
		}
		s->closing = true;
		s->drain_left = AGENT_PIPE_DRAIN_MAX_BYTES;
	}
	if (s->out_fd >= 0 && !output_drain_close(a, s, &s->out_fd, AIRLOCK_FRAME_STDOUT, now_ms))
		return false;
	if (s->err_fd >= 0 && !output_drain_close(a, s, &s->err_fd, AIRLOCK_FRAME_STDERR, now_ms))
		return false;
	if (!s->orphan)
		exec_send_exit(a, s);
	agent_stream_free(a, s);
	return true;
}

void agent_exec_orphan(struct agent *a, struct stream *s)
{
	s->orphan = true;
	/* Its stdin gets EOF (a PTY stays open: only its input side is gone). */
	s->stdin_eof = true;
	stdin_close(a, s);
}

void agent_exec_kill_all(struct agent *a)
{
	for (size_t i = 0; i < a->n_streams; i++)
		if (a->streams[i]->kind == STREAM_EXEC)
			exec_kill(a->streams[i], SIGKILL);
}
