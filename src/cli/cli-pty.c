/* SPDX-License-Identifier: Apache-2.0 */
/* exec -it: a process with a PTY in the guest, attached over an upgraded HTTP
 * connection (libcurl does not do upgrades, so the request is written by hand)
 * that carries the PTY protocol of docs/api.md:
 *   type (1 byte) | length (4 bytes, big-endian) | payload (<= 65536 bytes). */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>

#include "cli.h"

#define PTY_PAYLOAD_MAX 65536u
#define PTY_MSG_IN 0     /* client -> daemon: terminal input */
#define PTY_MSG_RESIZE 1 /* client -> daemon: {"rows","cols"} */
#define PTY_MSG_OUT 2    /* daemon -> client: terminal output */
#define PTY_MSG_EXIT 3   /* daemon -> client: the exit object */

/* ------------------------------------------------------------ terminal state */

static struct termios saved_termios;
static bool termios_saved;
static int signal_pipe[2] = {-1, -1};

static void terminal_restore(void)
{
	if (termios_saved) {
		tcsetattr(0, TCSADRAIN, &saved_termios);
		termios_saved = false;
	}
}

static void on_signal(int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t w = write(signal_pipe[1], &b, 1);
	(void)w;
	errno = saved;
}

static int terminal_make_raw(void)
{
	struct termios t;
	if (tcgetattr(0, &t) < 0)
		return -errno;
	saved_termios = t;
	termios_saved = true;
	atexit(terminal_restore);
	cfmakeraw(&t);
	if (tcsetattr(0, TCSADRAIN, &t) < 0)
		return -errno;
	return 0;
}

static void window_size(unsigned *ret_rows, unsigned *ret_cols)
{
	struct winsize ws;
	if ((ioctl(1, TIOCGWINSZ, &ws) == 0 || ioctl(0, TIOCGWINSZ, &ws) == 0) && ws.ws_row && ws.ws_col) {
		*ret_rows = ws.ws_row;
		*ret_cols = ws.ws_col;
	} else {
		*ret_rows = 24;
		*ret_cols = 80;
	}
}

/* ------------------------------------------------------------ messages */

static int send_msg(int fd, uint8_t type, const void *payload, size_t len)
{
	uint8_t head[5] = {type, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
	int r = write_full(fd, head, sizeof(head));
	return r < 0 ? r : write_full(fd, payload, len);
}

static int send_resize(int fd)
{
	unsigned rows, cols;
	window_size(&rows, &cols);
	char buf[64];
	int n = snprintf(buf, sizeof(buf), "{\"rows\":%u,\"cols\":%u}", rows, cols);
	return send_msg(fd, PTY_MSG_RESIZE, buf, (size_t)n);
}

struct pty_in {
	uint8_t buf[5 + PTY_PAYLOAD_MAX];
	size_t len;
	int status; /* >= 0 once the exit message came */
};

/* SECURITY: frames from the daemon: the length is checked against
 * PTY_PAYLOAD_MAX before anything is buffered; only type 2 bytes reach stdout. */
static int pty_in_consume(struct pty_in *in)
{
	size_t off = 0;
	while (in->len - off >= 5) {
		const uint8_t *h = in->buf + off;
		uint32_t len = (uint32_t)h[1] << 24 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 8 | h[4];
		if (len > PTY_PAYLOAD_MAX)
			return cli_client_error("the daemon sent a PTY message of %u bytes (limit %u); closing", len,
			                        PTY_PAYLOAD_MAX);
		if (in->len - off < 5 + (size_t)len)
			break;
		if (h[0] == PTY_MSG_OUT) {
			if (write_full(1, h + 5, len) < 0)
				return cli_client_error("cannot write to standard output: %s", strerror(errno));
		} else if (h[0] == PTY_MSG_EXIT) {
			cleanup_json json_t *o = json_loadb((const char *)h + 5, len, 0, NULL);
			terminal_restore();
			in->status = o ? cli_exit_status_of(o)
			               : cli_client_error("the daemon sent an exit message that is not JSON");
			return 0;
		}
		off += 5 + len;
	}
	memmove(in->buf, in->buf + off, in->len - off);
	in->len -= off;
	return 0;
}

/* Relays until the exit message, the connection's end, or a terminating signal. */
static int pty_loop(int fd, struct pty_in *in, bool forward_stdin, bool raw)
{
	cleanup_free uint8_t *kbuf = xmalloc(PTY_PAYLOAD_MAX);
	bool stdin_open = forward_stdin;
	int r;
	if ((r = pty_in_consume(in)) || in->status >= 0)
		return r ? r : in->status;
	for (;;) {
		struct pollfd p[3] = {{.fd = fd, .events = POLLIN},
		                      {.fd = signal_pipe[0], .events = POLLIN},
		                      {.fd = stdin_open ? 0 : -1, .events = POLLIN}};
		if (poll(p, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			return cli_client_error("poll: %s", strerror(errno));
		}
		if (p[1].revents & POLLIN) {
			unsigned char sig;
			if (read(signal_pipe[0], &sig, 1) == 1) {
				if (sig == SIGWINCH) {
					if (raw)
						send_resize(fd);
				} else {
					terminal_restore();
					fprintf(stderr,
					        "\r\nairlock: detached on signal %d; the process keeps running "
					        "(see 'airlock ps')\n",
					        sig);
					return 128 + sig;
				}
			}
		}
		if (p[2].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(0, kbuf, PTY_PAYLOAD_MAX);
			if (n > 0) {
				if (send_msg(fd, PTY_MSG_IN, kbuf, (size_t)n) < 0)
					return cli_client_error("cannot send to the daemon: %s", strerror(errno));
			} else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
				/* End of our (non-terminal) input: Ctrl-D, the terminal's end of file. */
				stdin_open = false;
				if (!raw)
					send_msg(fd, PTY_MSG_IN, "\x04", 1);
			}
		}
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(fd, in->buf + in->len, sizeof(in->buf) - in->len);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				terminal_restore();
				return cli_client_error(
				    "the daemon closed the terminal connection before the command ended; "
				    "the process may still run (see 'airlock ps')");
			}
			in->len += (size_t)n;
			if ((r = pty_in_consume(in)) || in->status >= 0)
				return r ? r : in->status;
		}
	}
}

static void signals_install(void)
{
	if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		abort();
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	int sigs[] = {SIGWINCH, SIGTERM, SIGHUP, SIGINT, SIGQUIT};
	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
		sigaction(sigs[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static int attach(const char *id, const char *pid, bool forward_stdin)
{
	cleanup_free char *path = xasprintf("/v1/sandboxes/%s/processes/%s/attach", id, pid);
	static struct pty_in in;
	in.status = -1;
	cleanup_close int fd = -1;
	int r = cli_upgrade(path, "airlock-pty/1", "attach", &fd, in.buf, sizeof(in.buf), &in.len);
	if (r)
		return r;

	bool raw = forward_stdin && isatty(0);
	if (raw && terminal_make_raw() < 0)
		return cli_client_error("cannot put the terminal in raw mode: %s", strerror(errno));
	if (raw)
		send_resize(fd); /* in case it changed since the process started */
	r = pty_loop(fd, &in, forward_stdin, raw);
	terminal_restore();
	return r;
}

int cli_pty_exec(const char *id, json_t *body, bool forward_stdin)
{
	if (!cli_id_ok(id))
		return cli_usage_error("exec: \"%s\" is not a sandbox id", id);
	unsigned rows, cols;
	window_size(&rows, &cols);
	json_object_set_new(body, "pty", json_pack("{s:I, s:I}", "rows", (json_int_t)rows, "cols", (json_int_t)cols));
	signals_install();
	cleanup_json json_t *proc = NULL;
	int r = cli_process_start(id, body, &proc);
	if (r)
		return r;
	const char *pid = json_string_value(json_object_get(proc, "id"));
	if (!pid || !cli_id_ok(pid))
		return cli_client_error("the daemon's answer has no usable process id");
	r = attach(id, pid, forward_stdin);
	if (r == EXIT_CLIENT) {
		/* Attaching failed: do not leave an orphan shell behind. */
		cleanup_free char *kpath = xasprintf("/v1/sandboxes/%s/processes/%s/signal", id, pid);
		cleanup_json json_t *kbody = json_pack("{s:s}", "signal", "KILL");
		long st;
		cleanup_json json_t *resp = NULL;
		cli_http("POST", kpath, kbody, &st, &resp, NULL); /* best effort: the attach error is the one to show */
	}
	return r;
}
