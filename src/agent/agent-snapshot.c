/* SPDX-License-Identifier: Apache-2.0 */
/*
 * FREEZE and THAW (include/airlock/proto.h): the guest's side of snapshots
 * and of restoring one snapshot into many clones.
 *
 * FREEZE: sync, SIGSTOP every process but the agent (kill(-1) as PID 1;
 * a --channel-fd test agent stops only its own descendants), wait a moment
 * for them to be seen stopped, answer OK {"stopped":N}. From then on, frames
 * of the streams that existed at FREEZE are held back (queued, not written):
 * once the host has read the OK, the agent writes nothing unasked, so the VM
 * can be stopped and saved without a half-written frame in it. Answers to the
 * host (HELLO, ERROR on stream 0, new streams) still go out.
 *
 * THAW: validate everything first (any bad field: ERROR einval, nothing
 * done), then in order: (a) mix the host's entropy into the kernel RNG and
 * reseed the CRNG, (a2) give eth0 the host's MAC address (the link stays
 * up: virtio-net changes it live through its control queue), (b) set
 * CLOCK_REALTIME, (c) the hostname, (d) write
 * /run/airlock/{generation,sandbox_id}, (e) with orphan_streams forget every
 * stream, (f) SIGCONT what FREEZE stopped, (g) record the generation and
 * draw a new boot_id, release the held frames, (h) OK {"generation":N}.
 * A step that fails answers ERROR and stops there: the processes stay
 * stopped and the host may send THAW again (every step can be repeated).
 * Steps a, a2, b, c change the whole machine: a test agent (not PID 1) skips them,
 * and writes (d) only under $AIRLOCK_AGENT_RUN_DIR if that is set.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

#define PF_KTHREAD_FLAG 0x00200000u /* include/linux/sched.h */
#define THAW_ENTROPY_MIN 32
#define THAW_ENTROPY_MAX 512
#define THAW_NAME_MAX 63
/* 9999-12-31: anything later is a bug on the host, not a time. */
#define THAW_TIME_MS_MAX 253402300799999LL
#define PROC_MAX_DEPTH 4096
/* The guest's NIC (agent-init.c). */
#define THAW_NIC "eth0"

struct proc_ent {
	pid_t pid, ppid;
	char state;
	bool kthread;
};

/* Every process in /proc (pid, parent, state letter, kernel thread). */
static size_t proc_list(struct proc_ent **ret)
{
	size_t n = 0, cap = 64;
	struct proc_ent *v = xcalloc(cap, sizeof(*v));
	DIR *d = opendir("/proc");
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		char path[64];
		cleanup_free char *text = NULL;
		if (snprintf_ok(path, sizeof(path), "/proc/%s/stat", de->d_name) < 0 ||
		    read_file_limited(path, 4096, &text, NULL) < 0)
			continue; /* gone meanwhile */
		char *p = strrchr(text, ')');
		char state;
		int ppid;
		unsigned long flags, fields[4];
		/* ") S ppid pgrp session tty_nr tpgid flags" */
		if (!p || sscanf(p + 1, " %c %d %lu %lu %lu %lu %lu", &state, &ppid, &fields[0], &fields[1], &fields[2],
		                 &fields[3], &flags) != 7)
			continue;
		if (n == cap) {
			cap *= 2;
			v = xrealloc(v, cap * sizeof(*v));
		}
		uint64_t pid;
		if (parse_u64(de->d_name, &pid) < 0 || pid > INT32_MAX)
			continue;
		v[n++] = (struct proc_ent){
		    .pid = (pid_t)pid, .ppid = ppid, .state = state, .kthread = (flags & PF_KTHREAD_FLAG) != 0};
	}
	if (d)
		closedir(d);
	*ret = v;
	return n;
}

/* What FREEZE stops: as PID 1 every process but the agent and kernel
 * threads (what kill(-1) reaches); in a test agent its descendants. */
static bool proc_is_target(const struct agent *a, const struct proc_ent *v, size_t n, size_t i)
{
	pid_t self = getpid();
	if (v[i].pid == self || v[i].kthread)
		return false;
	if (a->pid1)
		return true;
	pid_t p = v[i].ppid;
	for (int depth = 0; p > 1 && depth < PROC_MAX_DEPTH; depth++) {
		if (p == self)
			return true;
		size_t j = 0;
		while (j < n && v[j].pid != p)
			j++;
		if (j == n)
			return false;
		p = v[j].ppid;
	}
	return false;
}

/* Sends sig to every target; returns how many there were and, in
 * *ret_running, how many are not (yet) stopped. */
static size_t signal_targets(const struct agent *a, int sig, size_t *ret_running)
{
	if (sig && a->pid1)
		kill(-1, sig); /* all but PID 1 itself */
	cleanup_free struct proc_ent *v = NULL;
	size_t n = proc_list(&v), targets = 0, running = 0;
	for (size_t i = 0; i < n; i++) {
		if (!proc_is_target(a, v, n, i))
			continue;
		targets++;
		if (sig && !a->pid1)
			kill(v[i].pid, sig);
		if (!strchr("TtZX", v[i].state))
			running++;
	}
	if (ret_running)
		*ret_running = running;
	return targets;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_nsec = (long)ms * 1000000L};
	nanosleep(&ts, NULL);
}

/* The request is empty or a JSON object (the dispatcher checks that); its
 * content is not used. */
int agent_snapshot_freeze(struct agent *a, uint32_t id, json_t *req, struct al_error *err)
{
	(void)req;
	(void)err;
	sync();
	size_t running = 0;
	signal_targets(a, SIGSTOP, &running);
	/* A test agent signals what it finds: once more for children forked
	 * meanwhile. As PID 1, kill(-1) reached everyone at once. */
	if (!a->pid1)
		signal_targets(a, SIGSTOP, &running);
	/* SIGSTOP takes effect when each process next runs: wait (briefly) so
	 * that the answer means "stopped", not "asked to stop". */
	size_t targets = 0;
	for (uint64_t end = now_ms_monotonic() + AGENT_FREEZE_WAIT_MS;;) {
		targets = signal_targets(a, 0, &running);
		if (running == 0 || now_ms_monotonic() >= end)
			break;
		sleep_ms(2);
	}
	if (running)
		agent_log("FREEZE: %zu of %zu processes not stopped after %d ms", running, targets,
		          AGENT_FREEZE_WAIT_MS);
	a->frozen = true;
	for (size_t i = 0; i < a->n_streams; i++)
		a->streams[i]->held = true;
	agent_channel_send_json(a, AIRLOCK_FRAME_OK, id,
	                        json_pack("{s:I}", "stopped", (json_int_t)(targets - running)));
	return 0;
}

struct thaw_req {
	uint64_t generation;
	uint8_t *entropy;
	size_t entropy_len;
	int64_t time_ms;
	const char *sandbox_id, *hostname;
	bool orphan_streams;
	bool has_mac;
	uint8_t mac[6];
};

static void thaw_req_release(struct thaw_req *r)
{
	if (r->entropy) {
		explicit_bzero(r->entropy, r->entropy_len);
		free(r->entropy);
	}
}

static bool sandbox_id_valid(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > THAW_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return false;
	return true;
}

/* RFC 1123: dot-separated labels of letters, digits and '-', neither
 * starting nor ending with '-'; at most 63 bytes in all here. */
static bool hostname_valid(const char *s)
{
	size_t n = strlen(s), label = 0;
	if (n == 0 || n > THAW_NAME_MAX)
		return false;
	for (size_t i = 0; i <= n; i++) {
		char c = s[i];
		if (c == '.' || c == '\0') {
			if (label == 0 || s[i - 1] == '-')
				return false;
			label = 0;
		} else if (isalnum((unsigned char)c) || (c == '-' && label > 0)) {
			label++;
		} else {
			return false;
		}
	}
	return true;
}

/* SECURITY: every field is checked (type, size, character set) before
 * anything is changed; the entropy is at most THAW_ENTROPY_MAX bytes. */
static int thaw_parse(json_t *o, struct thaw_req *r, struct al_error *err)
{
	json_t *g = json_object_get(o, "generation");
	if (!json_is_integer(g) || json_integer_value(g) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"generation\" must be a non-negative integer");
	r->generation = (uint64_t)json_integer_value(g);

	const char *e = agent_json_get_cstring(json_object_get(o, "entropy"));
	if (!e || strlen(e) > (THAW_ENTROPY_MAX + 2) / 3 * 4 ||
	    base64_decode(e, strlen(e), &r->entropy, &r->entropy_len) < 0 || r->entropy_len < THAW_ENTROPY_MIN ||
	    r->entropy_len > THAW_ENTROPY_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"entropy\" must be base64 of %d to %d bytes", THAW_ENTROPY_MIN, THAW_ENTROPY_MAX);

	json_t *t = json_object_get(o, "time_ms");
	if (!json_is_integer(t) || json_integer_value(t) <= 0 || json_integer_value(t) > THAW_TIME_MS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"time_ms\" must be milliseconds since the epoch (a positive integer)");
	r->time_ms = json_integer_value(t);

	r->sandbox_id = agent_json_get_cstring(json_object_get(o, "sandbox_id"));
	if (!r->sandbox_id || !sandbox_id_valid(r->sandbox_id))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"sandbox_id\" must be 1 to %d characters of [a-z0-9-]", THAW_NAME_MAX);
	r->hostname = agent_json_get_cstring(json_object_get(o, "hostname"));
	if (!r->hostname || !hostname_valid(r->hostname))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"hostname\" must be a valid host name of at most %d characters", THAW_NAME_MAX);
	json_t *orph = json_object_get(o, "orphan_streams");
	if (orph && !json_is_boolean(orph))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"orphan_streams\" must be true or false");
	r->orphan_streams = json_is_true(orph);
	/* Absent: a host from before per-sandbox MACs; the address stays. */
	json_t *m = json_object_get(o, "mac");
	if (m) {
		const char *text = agent_json_get_cstring(m);
		if (!text || mac_parse(text, r->mac) < 0 || !mac_is_local_unicast(r->mac))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "\"mac\" must be a locally administered unicast MAC address written "
			                    "xx:xx:xx:xx:xx:xx (first octet x2, x6, xa or xe)");
		r->has_mac = true;
	}
	return 0;
}

static void pool_info_freep(struct rand_pool_info **p)
{
	if (*p) {
		explicit_bzero(*p, sizeof(**p) + (size_t)(*p)->buf_size);
		free(*p);
	}
}

/* (a) Credits the host's bytes to the kernel's pool and reseeds the CRNG
 * from it at once, so /dev/urandom and getrandom() differ in every clone. */
static int rng_reseed(const uint8_t *entropy, size_t len, struct al_error *err)
{
	cleanup_close int fd = open("/dev/urandom", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "reseed the kernel RNG (open /dev/urandom): %m");
	__attribute__((cleanup(pool_info_freep))) struct rand_pool_info *info = xmalloc(sizeof(*info) + len);
	info->entropy_count = (int)(len * 8);
	info->buf_size = (int)len;
	memcpy(info->buf, entropy, len);
	if (ioctl(fd, RNDADDENTROPY, info) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "reseed the kernel RNG (RNDADDENTROPY): %m");
	if (ioctl(fd, RNDRESEEDCRNG) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "reseed the kernel RNG (RNDRESEEDCRNG): %m");
	return 0;
}

/* (a2) SIOCSIFHWADDR on the running link: virtio-net sends the address to
 * the device (VIRTIO_NET_CTRL_MAC_ADDR_SET), whose receive filter follows;
 * a device without that queue (Firecracker's) does not filter by address. */
static int thaw_set_mac(const uint8_t mac[6], struct al_error *err)
{
	char text[MAC_TEXT_LEN + 1];
	mac_format(mac, text);
	cleanup_close int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "set the MAC address of %s to %s (socket): %m",
		                    THAW_NIC, text);
	struct ifreq ifr = {0};
	strlcpy_al(ifr.ifr_name, THAW_NIC, sizeof(ifr.ifr_name));
	ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
	memcpy(ifr.ifr_hwaddr.sa_data, mac, 6);
	if (ioctl(fd, SIOCSIFHWADDR, &ifr) == 0)
		return 0;
	if (errno == ENODEV)
		return al_error_set(err, AL_ERR_INTERNAL, ENODEV,
		                    "set the MAC address to %s: this guest has no network interface %s "
		                    "(a restore needs the NIC its snapshot had)",
		                    text, THAW_NIC);
	return al_error_set(err, AL_ERR_INTERNAL, errno, "set the MAC address of %s to %s (SIOCSIFHWADDR): %m",
	                    THAW_NIC, text);
}

/* (b), (c) */
static int thaw_clock_hostname(const struct thaw_req *r, struct al_error *err)
{
	struct timespec ts = {.tv_sec = (time_t)(r->time_ms / 1000), .tv_nsec = (long)(r->time_ms % 1000) * 1000000L};
	if (clock_settime(CLOCK_REALTIME, &ts) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "set the clock: %m");
	if (sethostname(r->hostname, strlen(r->hostname)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "set the hostname: %m");
	return 0;
}

static int write_state(const char *dir, const char *name, const char *value, struct al_error *err)
{
	char path[PATH_MAX], text[128];
	int r = 0;
	if (snprintf_ok(path, sizeof(path), "%s/%s", dir, name) < 0 ||
	    snprintf_ok(text, sizeof(text), "%s\n", value) < 0)
		r = -ENAMETOOLONG;
	if (r == 0)
		r = write_file_atomic(path, text, strlen(text), 0644);
	if (r == 0 && chmod(path, 0644) < 0)
		r = -errno;
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "write %s/%s: %s", dir, name, strerror(-r));
	return 0;
}

/* (d) */
static int thaw_write_state(const char *dir, const struct thaw_req *r, struct al_error *err)
{
	int rc = mkdir_p(dir, 0755);
	if (rc == 0 && chmod(dir, 0755) < 0)
		rc = -errno;
	if (rc < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -rc, "write %s/mkdir: %s", dir, strerror(-rc));
	char gen[32];
	snprintf(gen, sizeof(gen), "%llu", (unsigned long long)r->generation);
	if ((rc = write_state(dir, "generation", gen, err)) < 0)
		return rc;
	return write_state(dir, "sandbox_id", r->sandbox_id, err);
}

/* (e) The host forgot every stream it had: execs go on unseen, transfers
 * and listings end (an unfinished upload's temp file is removed), their
 * queued frames are dropped (also the held ones of streams that ended while
 * frozen, a FILE_READ say), their ids are free. */
static void orphan_all(struct agent *a)
{
	agent_channel_drop_held(a);
	for (size_t i = a->n_streams; i-- > 0;) {
		struct stream *s = a->streams[i];
		if (s->orphan)
			continue;
		agent_channel_drop_stream(a, s->id);
		if (s->kind == STREAM_EXEC) {
			agent_exec_orphan(a, s);
			s->id = 0;
		} else {
			agent_stream_free(a, s);
		}
	}
}

int agent_snapshot_thaw(struct agent *a, uint32_t id, json_t *req, struct al_error *err)
{
	__attribute__((cleanup(thaw_req_release))) struct thaw_req r = {0};
	int rc = thaw_parse(req, &r, err);
	/* a-c change the machine, not the agent: only as the guest's PID 1. */
	if (rc == 0 && a->pid1 && (rc = rng_reseed(r.entropy, r.entropy_len, err)) == 0 &&
	    (!r.has_mac || (rc = thaw_set_mac(r.mac, err)) == 0))
		rc = thaw_clock_hostname(&r, err);
	const char *dir = a->pid1 ? AGENT_RUN_DIR : getenv("AIRLOCK_AGENT_RUN_DIR");
	if (rc == 0 && dir && dir[0])
		rc = thaw_write_state(dir, &r, err);
	if (rc < 0) {
		al_error_prefix(err, "THAW");
		return rc;
	}

	if (r.orphan_streams)
		orphan_all(a);
	if (a->frozen) {
		signal_targets(a, SIGCONT, NULL);
		a->frozen = false;
	}
	a->generation = r.generation;
	agent_new_boot_id(a, false);
	agent_channel_release_held(a);
	agent_channel_send_json(a, AIRLOCK_FRAME_OK, id, json_pack("{s:I}", "generation", (json_int_t)r.generation));
	return 0;
}
