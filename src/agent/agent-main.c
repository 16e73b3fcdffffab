/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-agent entry point and event loop.
 *
 * As PID 1 (the guest's /init) it boots the guest first (agent-init.c). Then,
 * in every mode, it opens the channel, says HELLO and serves frames from one
 * poll(2) loop over: the port (on vsock: the listening socket and the host's
 * current connection), a signalfd for SIGCHLD (PID 1 reaps every
 * zombie, orphans included), each exec's stdout/stderr or PTY master (read
 * only while the outgoing queue has room and the stream has output credit,
 * one frame per fd per iteration, round-robin so a flood cannot starve other
 * streams) and stdin (written when data is
 * pending), and poll timeouts for exec deadlines and pipe grace periods.
 *
 * Usage: airlock-agent                  (as /init, or on a guest with the port)
 *        airlock-agent --channel-fd N   (tests: serve a socket given as fd N;
 *                                        its EOF ends the agent)
 *        airlock-agent --listen-unix P  (tests: the vsock code path, listening
 *                                        on the unix socket P instead)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

static struct agent agent;

struct stream *agent_stream_find(struct agent *a, uint32_t id)
{
	for (size_t i = 0; i < a->n_streams; i++)
		if (a->streams[i]->id == id)
			return a->streams[i];
	return NULL;
}

struct stream *agent_stream_new(struct agent *a, uint32_t id, enum stream_kind kind)
{
	if (a->n_streams >= AGENT_MAX_STREAMS)
		abort(); /* the dispatcher checks the limit first */
	struct stream *s = xcalloc(1, sizeof(*s));
	s->id = id;
	s->kind = kind;
	s->out_fd = s->err_fd = s->in_fd = s->file_fd = -1;
	s->poll_out = s->poll_err = s->poll_in = -1;
	s->out_window = AIRLOCK_OUTPUT_WINDOW;
	a->streams[a->n_streams++] = s;
	return s;
}

void agent_stream_free(struct agent *a, struct stream *s)
{
	int fds[] = {s->out_fd, s->err_fd, s->in_fd, s->file_fd};
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (s->tmp_path)
		unlink(s->tmp_path); /* an unfinished FILE_WRITE leaves nothing */
	free(s->tmp_path);
	free(s->path);
	free(s->in_buf);
	if (s->dir)
		closedir(s->dir);
	free(s->pending);
	agent_watch_free(s);
	for (size_t i = 0; i < a->n_streams; i++) {
		if (a->streams[i] == s) {
			a->streams[i] = a->streams[--a->n_streams];
			a->streams[a->n_streams] = NULL;
			break;
		}
	}
	free(s);
}

size_t agent_stream_output_room(const struct agent *a, const struct stream *s)
{
	if (s->orphan)
		return AIRLOCK_FRAME_MAX_PAYLOAD; /* read and dropped: never blocked */
	if (a->q_bytes >= AGENT_OUTQ_SOFT_BYTES)
		return 0;
	return MIN((size_t)s->out_window, (size_t)AIRLOCK_FRAME_MAX_PAYLOAD);
}

void agent_stream_output_sent(struct stream *s, size_t n)
{
	if (n > s->out_window)
		abort(); /* every reader is bounded by agent_stream_output_room */
	s->out_window -= (uint32_t)n;
}

/* SECURITY: the host may credit more than it was sent (a bug); the window
 * never grows beyond AIRLOCK_OUTPUT_WINDOW, so that cannot be used to make
 * the agent queue more than the window for one stream. */
void agent_stream_output_credit(struct stream *s, uint32_t n)
{
	uint64_t w = (uint64_t)s->out_window + n;
	s->out_window = (uint32_t)MIN(w, (uint64_t)AIRLOCK_OUTPUT_WINDOW);
}

void agent_new_boot_id(struct agent *a, bool early)
{
	uint8_t id[16];
	/* An identity, not a key: do not wait for the CRNG this early in boot.
	 * After THAW's reseed the CRNG is ready and distinct in every clone. */
	if (getrandom(id, sizeof(id), early ? GRND_INSECURE : GRND_NONBLOCK) != (ssize_t)sizeof(id))
		random_bytes(id, sizeof(id));
	hex_encode(id, sizeof(id), a->boot_id);
}

static void agent_identity(struct agent *a)
{
	agent_new_boot_id(a, true);
	struct utsname u;
	if (uname(&u) == 0)
		strlcpy_al(a->kernel, u.release, sizeof(a->kernel));
}

static int signals_setup(void)
{
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
		return -errno;
	int fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	signal(SIGPIPE, SIG_IGN);
	return fd;
}

/* The agent's own open files (agent.h); what it starts gets its own limits. */
static void agent_raise_nofile(void)
{
	struct rlimit want = {AGENT_NOFILE, AGENT_NOFILE}, cur;
	if (setrlimit(RLIMIT_NOFILE, &want) == 0 || getrlimit(RLIMIT_NOFILE, &cur) < 0)
		return;
	/* Unprivileged (tests): as far as the hard limit goes. */
	cur.rlim_cur = cur.rlim_max < AGENT_NOFILE ? cur.rlim_max : AGENT_NOFILE;
	setrlimit(RLIMIT_NOFILE, &cur);
}

static void __attribute__((noreturn)) agent_shutdown(struct agent *a)
{
	agent_exec_kill_all(a);
	agent_channel_release_held(a); /* SHUTDOWN while frozen: say everything */
	if (a->port_fd >= 0 && a->q_head) {
		uint64_t end = now_ms_monotonic() + 1000;
		while (a->q_head && now_ms_monotonic() < end) {
			struct pollfd p = {.fd = a->port_fd, .events = POLLOUT};
			if (poll(&p, 1, 50) < 0 || agent_channel_flush(a) < 0)
				break;
		}
	}
	if (a->pid1) {
		agent_log("shutdown requested by the host: powering off");
		agent_init_poweroff();
	}
	exit(0);
}

static void port_hung_up(struct agent *a, uint64_t now_ms)
{
	if (a->port_is_socket)
		exit(0); /* test mode: the host closed the socket */
	if (a->port_fd < 0)
		return;
	if (!a->port_hup) {
		agent_channel_drop_partial(a);
		/* A file transfer cannot outlive the connection that started it
		 * (whoever connects next does not know it): drop them, which also
		 * removes an unfinished write's temporary file. Exec streams go
		 * on; their processes do not depend on the host being there. */
		for (size_t i = a->n_streams; i-- > 0;)
			if (a->streams[i]->kind != STREAM_EXEC)
				agent_stream_free(a, a->streams[i]);
		/* What the old host did not credit is lost with it. The next
		 * host starts each exec with a full window, less the output still
		 * queued, which it will receive. */
		for (size_t i = 0; i < a->n_streams; i++) {
			struct stream *s = a->streams[i];
			if (s->orphan)
				continue;
			size_t queued = agent_channel_queued_output(a, s->id);
			s->out_window = AIRLOCK_OUTPUT_WINDOW - (uint32_t)MIN(queued, (size_t)AIRLOCK_OUTPUT_WINDOW);
		}
	}
	if (a->listen_fd >= 0) {
		/* vsock: this connection is over (the host closed it, or a
		 * snapshot reset it); the next host connects anew. */
		close(a->port_fd);
		a->port_fd = -1;
		return;
	}
	a->port_hup = true;
	a->port_recheck_ms = now_ms + AGENT_PORT_RECHECK_MS;
}

/* vsock: a host connected. It replaces the connection there was (after a
 * snapshot or restore the guest may not have seen the old one end yet). */
static void host_accept(struct agent *a, uint64_t now_ms)
{
	int fd;
	int r = agent_channel_accept(a, &fd);
	if (r < 0) {
		/* Out of fds or memory, say: not worth dying for as PID 1. The
		 * pending connection stays; look again a little later instead
		 * of spinning on it. */
		agent_log("accept on the host channel: %s; retrying in %d ms", strerror(-r), AGENT_PORT_RECHECK_MS);
		a->listen_pause_until_ms = now_ms + AGENT_PORT_RECHECK_MS;
		return;
	}
	if (r == 0)
		return;
	if (a->port_fd >= 0) {
		agent_log("a new host connection replaces the current one");
		port_hung_up(a, now_ms);
	}
	a->port_fd = fd;
}

static void agent_loop(struct agent *a)
{
	static struct pollfd pfds[3 + 3 * AGENT_MAX_STREAMS];
	for (;;) {
		if (a->shutdown)
			agent_shutdown(a);
		uint64_t now = now_ms_monotonic();
		int timeout = -1;

		/* Deadlines, grace periods, and EXIT for finished streams. */
		for (size_t i = 0; i < a->n_streams;) {
			struct stream *s = a->streams[i];
			if (s->kind == STREAM_EXEC && agent_exec_tick(a, s, now, &timeout))
				continue; /* freed: another stream moved to index i */
			i++;
		}

		size_t n = 0;
		int port_idx = -1, listen_idx = -1;
		if (a->listen_fd >= 0 && now >= a->listen_pause_until_ms) {
			listen_idx = (int)n;
			pfds[n++] = (struct pollfd){.fd = a->listen_fd, .events = POLLIN};
		} else if (a->listen_fd >= 0) {
			int t = (int)(a->listen_pause_until_ms - now);
			if (timeout < 0 || t < timeout)
				timeout = t;
		}
		if (a->port_fd < 0) {
			/* vsock, no host connected: only the listener. */
		} else if (a->port_hup && now < a->port_recheck_ms) {
			int t = (int)(a->port_recheck_ms - now);
			if (timeout < 0 || t < timeout)
				timeout = t;
		} else {
			short ev = agent_channel_want_write(a) ? POLLOUT : 0;
			if (a->q_bytes < AGENT_OUTQ_HARD_BYTES)
				ev |= POLLIN;
			port_idx = (int)n;
			pfds[n++] = (struct pollfd){.fd = a->port_fd, .events = ev};
		}
		int sig_idx = (int)n;
		pfds[n++] = (struct pollfd){.fd = a->sig_fd, .events = POLLIN};
		for (size_t i = 0; i < a->n_streams; i++) {
			struct stream *s = a->streams[i];
			s->poll_out = s->poll_err = s->poll_in = -1;
			if (s->kind == STREAM_EXEC)
				agent_exec_poll_add(a, s, pfds, &n);
			else if ((s->kind == STREAM_FILE_READ && agent_stream_output_room(a, s) > 0) ||
			         (s->kind == STREAM_FILE_LIST && agent_fileop_list_ready(a, s)))
				timeout = 0; /* regular files and directories are always readable */
			if (s->kind == STREAM_WATCH) {
				if (agent_watch_ready(a, s))
					timeout = 0;
				if (agent_watch_want_read(s)) {
					s->poll_out = (int)n;
					pfds[n++] = (struct pollfd){.fd = s->file_fd, .events = POLLIN};
				}
			}
		}

		if (poll(pfds, n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			agent_fatal("poll: %s", strerror(errno));
		}
		now = now_ms_monotonic();

		if (pfds[sig_idx].revents) {
			struct signalfd_siginfo si;
			while (read(a->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
				;
			agent_exec_reap(a);
		}

		/* Children's pipes, starting at a rotating stream. None is freed here. */
		size_t count = a->n_streams;
		for (size_t k = 0; k < count; k++) {
			struct stream *s = a->streams[(a->rr + k) % count];
			if (s->kind == STREAM_EXEC)
				agent_exec_poll_handle(a, s, pfds, now);
		}
		a->rr++;
		/* File reads and listings; walking down so a freed stream's
		 * replacement (moved from the end) has already had its turn. */
		for (size_t i = a->n_streams; i-- > 0;) {
			struct stream *s = a->streams[i];
			if (s->kind == STREAM_FILE_READ && agent_stream_output_room(a, s) > 0)
				agent_file_read_pump(a, s);
			else if (s->kind == STREAM_FILE_LIST && agent_fileop_list_ready(a, s))
				agent_fileop_list_pump(a, s);
			else if (s->kind == STREAM_WATCH) {
				if (s->poll_out >= 0 && (pfds[s->poll_out].revents & POLLIN))
					agent_watch_read(s);
				if (agent_watch_ready(a, s))
					agent_watch_pump(a, s);
			}
		}

		if (port_idx >= 0) {
			short rev = pfds[port_idx].revents;
			if (rev & POLLIN) {
				int r = agent_channel_read(a);
				if (r == -EPIPE)
					port_hung_up(a, now);
				else if (r < 0)
					agent_fatal("read from the host channel: %s", strerror(-r));
			} else if (rev & (POLLHUP | POLLERR)) {
				port_hung_up(a, now);
			} else if (a->port_hup) {
				a->port_hup = false; /* the host is back */
			}
		}
		/* After the port's events, which belong to the connection polled. */
		if (listen_idx >= 0 && (pfds[listen_idx].revents & POLLIN))
			host_accept(a, now);
		if (agent_channel_want_write(a) && !a->port_hup && a->port_fd >= 0) {
			int r = agent_channel_flush(a);
			if (r < 0) {
				agent_log("write to the host channel: %s", strerror(-r));
				port_hung_up(a, now);
			}
		}
	}
}

int main(int argc, char **argv)
{
	struct agent *a = &agent;
	a->pid1 = getpid() == 1;
	a->port_fd = -1;
	a->listen_fd = -1;
	if (!a->pid1 && argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("airlock-agent %s (protocol %d)\n", AGENT_VERSION, AIRLOCK_PROTO_VERSION);
		return 0;
	}
	if (!a->pid1 && argc == 3 && strcmp(argv[1], "--channel-fd") == 0) {
		long fd;
		if (parse_int_range(argv[2], 0, 65535, &fd) < 0 || fcntl((int)fd, F_GETFD) < 0) {
			fprintf(stderr, "airlock-agent: --channel-fd %s: not an open file descriptor\n", argv[2]);
			return 2;
		}
		a->port_fd = (int)fd;
		a->port_is_socket = true;
		fcntl(a->port_fd, F_SETFD, FD_CLOEXEC);
		fcntl(a->port_fd, F_SETFL, fcntl(a->port_fd, F_GETFL) | O_NONBLOCK);
	} else if (!a->pid1 && argc == 3 && strcmp(argv[1], "--listen-unix") == 0) {
		int r = agent_channel_listen_unix(argv[2], &a->listen_fd);
		if (r < 0) {
			fprintf(stderr, "airlock-agent: --listen-unix %s: %s\n", argv[2], strerror(-r));
			return 2;
		}
	} else if (argc > 1 && !a->pid1) {
		fprintf(stderr, "usage: airlock-agent [--channel-fd FD | --listen-unix PATH | --version]\n");
		return 2;
	}

	if (a->pid1)
		agent_init_boot();
	else
		prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphans of our execs come back to us */

	agent_raise_nofile();
	a->sig_fd = signals_setup();
	if (a->sig_fd < 0)
		agent_fatal("signalfd: %s", strerror(-a->sig_fd));
	agent_identity(a);

	if (a->port_fd < 0 && a->listen_fd < 0) {
		int r = agent_channel_open(AGENT_PORT_WAIT_MS, &a->port_fd, &a->listen_fd);
		if (r < 0)
			agent_fatal(
			    "no channel to the host within %d ms: neither the virtio-serial port \"%s\" nor a "
			    "vsock device (%s; is the VM started with -device virtserialport,name=%s, or with a "
			    "vsock device?)",
			    AGENT_PORT_WAIT_MS, AIRLOCK_PORT_NAME, strerror(-r), AIRLOCK_PORT_NAME);
		if (a->listen_fd >= 0)
			agent_log("listening for the host on vsock port %d", AIRLOCK_VSOCK_PORT);
	}
	agent_channel_send_hello(a);
	agent_loop(a);
	return 0;
}
