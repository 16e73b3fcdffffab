/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A test driver of the Firecracker backend (src/daemon/vmm/firecracker/vmm-firecracker.c)
 * through its struct vmm_ops, as the daemon calls them, for
 * tests/fc/test_fc_conformance.py. `firecracker` is whatever PATH finds: the
 * tests put tests/fc/fake_firecracker.py there, which checks every request
 * against the spec. The VMM is started through the jailer named by
 * --jailer, as the daemon starts it (the tests give tests/fc/fake_jailer.sh,
 * which records what it is asked and runs the fake without a jail). D is
 * both the sandbox dir and the VMM's (jail root). Prints one JSON object per
 * step on stdout; on a failure the step's "error" and exit status 1.
 *
 *   fc-driver lifecycle --jailer J --dir D --kernel K --initrd I --rootfs R
 *                       [--netns PATH] [--disk-mib N] [--diff]
 *       prepare_disk, spawn (boot), the channel (HELLO, an exec), pause,
 *       save into D/snap (plus a copy of the disk, as a snapshot has),
 *       resume, the channel again (a snapshot resets it), [pause, save_diff,
 *       resume], probe, stop.
 *   fc-driver restore --jailer J --dir D2 --from D/snap [--netns PATH] [--diff]
 *       spawn from the snapshot (File memory backend), wait_incoming,
 *       resume, the channel (HELLO, an exec), stop.
 *   fc-driver call --dir D [--timeout-ms N] METHOD PATH [JSON]
 *       one fc_call on D/fc.sock: {"body": ...} or the error.
 */
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "airlock/proto.h"
#include "fc-api.h"
#include "file-copy.h"
#include "frame.h"
#include "jail.h"
#include "json-cleanup.h"
#include "util.h"
#include "vmm-firecracker.h"
#include "vmm.h"

#define CHANNEL_TIMEOUT_MS 15000

static const struct vmm_ops *ops = &vmm_firecracker_ops;

static void step_ok(const char *step, json_t *extra)
{
	json_t *o = extra ? extra : json_object();
	json_object_set_new(o, "step", json_string(step));
	json_object_set_new(o, "ok", json_true());
	char *s = json_dumps(o, JSON_COMPACT);
	printf("%s\n", s);
	fflush(stdout);
	free(s);
	json_decref(o);
}

static int __attribute__((noreturn)) step_fail(const char *step, const char *msg)
{
	json_t *o = json_pack("{s:s, s:b, s:s}", "step", step, "ok", 0, "error", msg);
	char *s = json_dumps(o, JSON_COMPACT);
	printf("%s\n", s);
	fflush(stdout);
	free(s);
	json_decref(o);
	exit(1);
}

/* ---- a minimal host side of the channel ------------------------------------------------------ */

struct chan {
	int fd;
	struct frame_reader rd;
};

/* The next frame within the deadline: 1, or 0 at EOF, or < 0. */
static int chan_next(struct chan *c, uint64_t deadline, struct airlock_frame_header *h, const uint8_t **payload)
{
	for (;;) {
		int r = frame_reader_next(&c->rd, h, payload);
		if (r != 0)
			return r;
		uint64_t now = now_ms_monotonic();
		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		if (poll(&p, 1, (int)(deadline - now)) <= 0)
			continue;
		size_t space;
		uint8_t *buf = frame_reader_space(&c->rd, &space);
		ssize_t n = read(c->fd, buf, space);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return 0;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (n > 0)
			frame_reader_commit(&c->rd, (size_t)n);
	}
}

/* Connects like the daemon will (channel_connect, retried while the VMM or
 * the agent is not there yet) and waits for HELLO; ask: send HELLO first
 * (a re-attach). */
static void chan_open(const struct vmm_config *vc, struct chan *c, bool ask, const char *step)
{
	uint64_t deadline = now_ms_monotonic() + CHANNEL_TIMEOUT_MS;
	struct al_error err = {0};
	for (;;) {
		int r = ops->channel_connect(vc, &c->fd, &err);
		if (r == 0)
			break;
		if ((r != -ENOENT && r != -ECONNREFUSED) || now_ms_monotonic() >= deadline)
			step_fail(step, err.message);
		usleep(20 * 1000);
	}
	frame_reader_init(&c->rd);
	if (ask && frame_write(c->fd, AIRLOCK_FRAME_HELLO, 0, "{}", 2, 2000) < 0)
		step_fail(step, "cannot ask for HELLO");
	struct airlock_frame_header h;
	const uint8_t *p;
	int r = chan_next(c, deadline, &h, &p);
	if (r <= 0 || h.type != AIRLOCK_FRAME_HELLO)
		step_fail(step, "no HELLO from the agent");
	json_t *hello = json_loadb((const char *)p, h.length, 0, NULL);
	step_ok(step, json_pack("{s:o}", "hello", hello ? hello : json_null()));
}

/* Runs `echo word` in the guest and checks its output. */
static void chan_exec(struct chan *c, uint32_t stream, const char *word, const char *step)
{
	cleanup_json json_t *msg = json_pack("{s:[s,s]}", "argv", "echo", word);
	cleanup_free char *text = json_dumps(msg, JSON_COMPACT);
	if (frame_write(c->fd, AIRLOCK_FRAME_EXEC, stream, text, strlen(text), 2000) < 0)
		step_fail(step, "cannot send EXEC");
	char out[256] = "";
	size_t o = 0;
	uint64_t deadline = now_ms_monotonic() + CHANNEL_TIMEOUT_MS;
	for (;;) {
		struct airlock_frame_header h;
		const uint8_t *p;
		int r = chan_next(c, deadline, &h, &p);
		if (r <= 0)
			step_fail(step, r == 0 ? "the channel closed during the exec" : "no EXIT in time");
		if (h.stream != stream)
			continue;
		if (h.type == AIRLOCK_FRAME_STDOUT) {
			size_t n = MIN((size_t)h.length, sizeof(out) - 1 - o);
			memcpy(out + o, p, n);
			o += n;
			out[o] = '\0';
		} else if (h.type == AIRLOCK_FRAME_EXIT) {
			break;
		} else if (h.type == AIRLOCK_FRAME_ERROR) {
			step_fail(step, "the exec failed");
		}
	}
	char want[128];
	snprintf(want, sizeof(want), "%s\n", word);
	if (strcmp(out, want))
		step_fail(step, "unexpected exec output");
	step_ok(step, json_pack("{s:s}", "stdout", out));
}

/* The connection a snapshot reset ends (EOF), after what was queued. */
static void chan_expect_reset(struct chan *c, const char *step)
{
	uint64_t deadline = now_ms_monotonic() + CHANNEL_TIMEOUT_MS;
	for (;;) {
		struct airlock_frame_header h;
		const uint8_t *p;
		int r = chan_next(c, deadline, &h, &p);
		if (r == 0)
			break;
		if (r < 0)
			step_fail(step, "the channel did not end after the snapshot");
	}
	close(c->fd);
	c->fd = -1;
	step_ok(step, NULL);
}

/* ---- steps ---------------------------------------------------------------------------------- */

static void check(const char *step, int r, const struct al_error *err)
{
	if (r < 0)
		step_fail(step, err->message);
	step_ok(step, NULL);
}

static void stop_vmm(const struct vmm_config *vc, pid_t pid)
{
	ops->stop(vc, pid);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	step_ok("stop",
	        json_pack("{s:b, s:i}", "killed", WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "pid", (int)pid));
}

static int open_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		step_fail("open", "cannot open the sandbox dir");
	return fd;
}

struct opts {
	const char *dir, *kernel, *initrd, *rootfs, *netns, *from, *jailer;
	uint64_t disk_mib;
	bool diff;
	unsigned timeout_ms;
};

/* The jailer's settings and the jail of the VMM, as the daemon has them
 * (jail_init runs `JAILER --check`). The seccomp profile is never passed
 * for Firecracker; jail_init only wants a file there. */
static void jail_setup(const struct opts *o, struct vmm_jail *j)
{
	struct jail_settings js = {.jailer = o->jailer,
	                           .seccomp = o->jailer,
	                           .cgroup_parent = JAIL_DEFAULT_CGROUP_PARENT,
	                           .uid_base = JAIL_DEFAULT_UID_BASE,
	                           .uid_count = 16};
	struct al_error err = {0};
	if (jail_init(&js, &err) < 0)
		step_fail("jail", err.message);
	jail_spec(j, JAIL_DEFAULT_UID_BASE + 7, 2, 256, 128, true);
}

static void lifecycle(const struct opts *o)
{
	int netns = o->netns ? open(o->netns, O_RDONLY | O_CLOEXEC) : -1;
	struct vmm_jail jail;
	jail_setup(o, &jail);
	struct vmm_config vc = {
	    .sandbox_id = "sb-0123456789abcdef",
	    .dir = o->dir,
	    .root = o->dir,
	    .jail = &jail,
	    .incoming_fd = -1,
	    .incoming_state_fd = -1,
	    .kernel = o->kernel,
	    .initrd = o->initrd,
	    .rootfs = o->rootfs,
	    .disk_mib = o->disk_mib,
	    .vcpus = 2,
	    .memory_mib = 256,
	    .dirfd = open_dir(o->dir),
	    .netns_fd = netns,
	    .guest_mac = "02:1a:2b:3c:4d:5e", /* a sandbox's own (sandbox-network.c) */
	    .diff_snapshots = o->diff,
	};
	struct al_error err = {0};
	check("prepare_disk", ops->prepare_disk(&vc, &err), &err);
	pid_t pid;
	if (ops->spawn(&vc, &pid, &err) < 0)
		step_fail("spawn", err.message);
	step_ok("spawn", json_pack("{s:i}", "pid", (int)pid));

	struct chan c;
	chan_open(&vc, &c, false, "hello");
	chan_exec(&c, 1, "booted", "exec");

	cleanup_free char *snap = xasprintf("%s/snap", o->dir);
	if (mkdir(snap, 0700) < 0)
		step_fail("save", "cannot create snap/");
	check("pause", ops->pause(&vc, &err), &err);
	/* Into the snapshot's directory, as sandbox-snapshot.c saves: files of
	 * the daemon's, which the backend takes out of the VMM's jail. */
	cleanup_free char *mem = xasprintf("%s/memory.bin", snap);
	cleanup_free char *state = xasprintf("%s/memory.bin.vmstate", snap);
	check("save", ops->save(&vc, mem, state, &err), &err);
	/* What sandbox-snapshot.c does next: the disk, copied while the VM is paused. */
	cleanup_free char *disk = xasprintf("%s/%s", o->dir, ops->disk_file);
	cleanup_free char *disk_copy = xasprintf("%s/%s", snap, ops->disk_file);
	enum file_copy_method how;
	int r = file_copy_cow(disk, disk_copy, 0600, &how);
	if (r < 0)
		step_fail("snapshot-disk", strerror(-r));
	step_ok("snapshot-disk", json_pack("{s:s}", "method", file_copy_method_name(how)));
	check("resume", ops->resume(&vc, &err), &err);

	if (ops->channel_resets_on_save)
		chan_expect_reset(&c, "reset");
	chan_open(&vc, &c, true, "rehello");
	chan_exec(&c, 3, "after-snapshot", "exec-after-snapshot");

	if (o->diff) {
		check("pause-diff", ops->pause(&vc, &err), &err);
		cleanup_free char *diff = xasprintf("%s/diff.bin", snap);
		cleanup_free char *diff_state = xasprintf("%s/diff.bin.vmstate", snap);
		check("save_diff", ops->save_diff(&vc, diff, diff_state, &err), &err);
		check("resume-diff", ops->resume(&vc, &err), &err);
	}
	check("probe", ops->probe(&vc, 1000, &err), &err);
	close(c.fd);
	stop_vmm(&vc, pid);
}

static void restore(const struct opts *o)
{
	int dirfd = open_dir(o->dir);
	/* What sandbox-boot.c's restore_prepare does: the disk copied, memory
	 * and state opened (read in place through the fds, never modified). */
	cleanup_free char *src_disk = xasprintf("%s/%s", o->from, ops->disk_file);
	cleanup_free char *dst_disk = xasprintf("%s/%s", o->dir, ops->disk_file);
	int r = file_copy_cow(src_disk, dst_disk, 0600, NULL);
	cleanup_free char *mem = xasprintf("%s/memory.bin", o->from);
	cleanup_free char *state = xasprintf("%s/memory.bin.vmstate", o->from);
	int mem_fd = open(mem, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	int state_fd = open(state, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (r < 0 || mem_fd < 0 || state_fd < 0)
		step_fail("restore_prepare", "cannot copy the disk or open the snapshot");
	step_ok("restore_prepare", NULL);
	struct vmm_jail jail;
	jail_setup(o, &jail);
	struct vmm_config vc = {
	    .sandbox_id = "sb-fedcba9876543210",
	    .dir = o->dir,
	    .root = o->dir,
	    .jail = &jail,
	    .vcpus = 2,
	    .memory_mib = 256,
	    .dirfd = dirfd,
	    .netns_fd = o->netns ? open(o->netns, O_RDONLY | O_CLOEXEC) : -1,
	    .incoming_fd = mem_fd,
	    .incoming_state_fd = state_fd,
	    .diff_snapshots = o->diff,
	};
	struct al_error err = {0};
	pid_t pid;
	if (ops->spawn(&vc, &pid, &err) < 0)
		step_fail("spawn", err.message);
	step_ok("spawn", json_pack("{s:i}", "pid", (int)pid));
	/* As the daemon does: a VMM that exits while it loads ends the wait at once. */
	cleanup_close int pidfd = pidfd_open_pid(pid);
	check("wait_incoming", ops->wait_incoming(&vc, pidfd, now_ms_monotonic() + 5000, &err), &err);
	check("resume", ops->resume(&vc, &err), &err);
	struct chan c;
	chan_open(&vc, &c, true, "hello");
	chan_exec(&c, 1, "restored", "exec");
	close(c.fd);
	stop_vmm(&vc, pid);
}

static void call(const struct opts *o, int argc, char **argv)
{
	if (argc < 2)
		step_fail("call", "METHOD PATH [JSON]");
	json_t *body = NULL;
	if (argc > 2 && !(body = json_loads(argv[2], 0, NULL)))
		step_fail("call", "the body is not JSON");
	struct al_error err = {0};
	json_t *ret = NULL;
	int dirfd = open_dir(o->dir);
	int r = fc_call(dirfd, "fc.sock", argv[0], argv[1], body, o->timeout_ms, &ret, &err);
	json_decref(body);
	if (r < 0)
		step_fail("call", err.message);
	step_ok("call", json_pack("{s:o}", "body", ret ? ret : json_null()));
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN); /* as airlockd */
	if (argc < 2) {
		fprintf(stderr, "usage: fc-driver lifecycle|restore|call OPTIONS\n");
		return 2;
	}
	const char *cmd = argv[1];
	struct opts o = {.timeout_ms = 5000};
	static const struct option longopts[] = {
	    {"dir", required_argument, NULL, 'd'},
	    {"kernel", required_argument, NULL, 'k'},
	    {"initrd", required_argument, NULL, 'i'},
	    {"rootfs", required_argument, NULL, 'r'},
	    {"netns", required_argument, NULL, 'n'},
	    {"from", required_argument, NULL, 'f'},
	    {"disk-mib", required_argument, NULL, 'm'},
	    {"diff", no_argument, NULL, 'D'},
	    {"timeout-ms", required_argument, NULL, 't'},
	    {"jailer", required_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	int c;
	optind = 2;
	while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
		long v;
		switch (c) {
		case 'd':
			o.dir = optarg;
			break;
		case 'k':
			o.kernel = optarg;
			break;
		case 'i':
			o.initrd = optarg;
			break;
		case 'r':
			o.rootfs = optarg;
			break;
		case 'n':
			o.netns = optarg;
			break;
		case 'f':
			o.from = optarg;
			break;
		case 'm':
			if (parse_int_range(optarg, 0, 1 << 20, &v) < 0)
				return 2;
			o.disk_mib = (uint64_t)v;
			break;
		case 'D':
			o.diff = true;
			break;
		case 'j':
			o.jailer = optarg;
			break;
		case 't':
			if (parse_int_range(optarg, 1, 600000, &v) < 0)
				return 2;
			o.timeout_ms = (unsigned)v;
			break;
		default:
			return 2;
		}
	}
	if (!o.dir) {
		fprintf(stderr, "fc-driver: --dir is required\n");
		return 2;
	}
	if (!strcmp(cmd, "lifecycle") && o.kernel && o.initrd && o.rootfs && o.jailer)
		lifecycle(&o);
	else if (!strcmp(cmd, "restore") && o.from && o.jailer)
		restore(&o);
	else if (!strcmp(cmd, "call"))
		call(&o, argc - optind, argv + optind);
	else {
		fprintf(stderr, "fc-driver: unknown command or missing options\n");
		return 2;
	}
	return 0;
}
