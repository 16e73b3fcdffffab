/* SPDX-License-Identifier: Apache-2.0 */
#include "sandbox.h"

#include <dirent.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "accel.h"
#include "auth.h"
#include "cpu-wait.h"
#include "ca.h"
#include "egress-supervisor.h"
#include "events.h"
#include "guest-ca.h"
#include "jail.h"
#include "json-cleanup.h"
#include "log.h"
#include "metrics.h"
#include "netns.h"
#include "network-policy.h"
#include "process.h"
#include "secrets.h"
#include "snapshot.h"
#include "template-snap.h"
#include "util.h"
#include "file-copy.h"

struct sandbox {
	struct sandbox *next;    /* registry list, under registry_lock */
	int refs;                /* under registry_lock */
	pthread_mutex_t op_lock; /* one lifecycle operation (boot, delete) at a time */
	pthread_mutex_t lock;    /* rec and the runtime fields below */
	struct sandbox_record rec;
	char *dir;
	int dirfd;
	pid_t pid;
	int pidfd;
	bool our_child;
	struct guest_channel *ch;
	struct process_table *procs;
	int console_fd;
	int console_log_fd;
	size_t console_log_size;
	char console_tail[CONSOLE_TAIL_MAX];
	size_t tail_len;
	int wake_fd;
	pthread_t monitor;
	bool has_monitor;
	bool vmm_exited;
	int vmm_status;
	bool vmm_status_known;     /* the VMM was our child: vmm_status is its wait status */
	bool uid_held;             /* rec.jail_uid is reserved for it (jail_uid_take/reserve) */
	bool channel_at_resume;    /* re-attached paused without a channel: connect it when resumed */
	char *root;                /* <dir>/vm: the VMM's jail root and cwd (owned by its uid); dirfd opens it */
	bool stopping;             /* delete or failed boot in progress: exits are expected */
	bool cancel;               /* deleted while booting */
	uint64_t generation;       /* of the guest: 0 at boot, one more than its snapshot's after a restore */
	struct retired *retired;   /* runtimes of earlier lives (recover), freed with the sandbox */
	uint64_t last_activity_ms; /* monotonic; any API request about it (idle timeout) */
	struct netns net;          /* its network namespace (listeners handed to the gateway) */
	bool net_registered;       /* the egress gateway knows it */
	/* The watchdog's view (its thread only; `armed` also under lock):
	 * when QMP and the agent last answered, and the agent's HELLO count;
	 * how long the VMM's threads had waited for a CPU at the last look at
	 * which both answered (`cpu`, at `cpu_ms`). */
	struct {
		bool armed;
		uint64_t qmp_ok_ms, agent_ok_ms, hellos;
		bool cpu_valid, reprieved;
		uint64_t cpu_ms;
		pid_t vmm_child, child_of; /* the VMM under its jailer (sb->pid) */
		struct cpu_wait cpu;
	} wd;
};

/* A channel and process table an old VMM left: a request that still holds
 * them may be returning, so they live as long as the sandbox. */
struct retired {
	struct retired *next;
	struct guest_channel *ch;
	struct process_table *procs;
};

static const struct daemon_config *cfg;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sandbox *registry;

bool sandbox_id_valid(const char *id)
{
	if (strlen(id) != 19 || strncmp(id, "sb-", 3) != 0)
		return false;
	for (size_t i = 3; i < 19; i++)
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return false;
	return true;
}

static struct sandbox *sandbox_new(const struct sandbox_record *rec)
{
	struct sandbox *sb = xcalloc(1, sizeof(*sb));
	pthread_mutex_init(&sb->lock, NULL);
	pthread_mutex_init(&sb->op_lock, NULL);
	sandbox_record_copy(&sb->rec, rec);
	sb->dir = xasprintf("%s/sandboxes/%s", cfg->state_dir, rec->id);
	sb->root = xasprintf("%s/%s", sb->dir, SANDBOX_VM_DIR);
	sb->dirfd = sb->pidfd = sb->console_fd = sb->console_log_fd = sb->wake_fd = -1;
	sb->refs = 1;
	sb->last_activity_ms = now_ms_monotonic();
	sb->net = (struct netns)NETNS_INIT;
	return sb;
}

static void sandbox_close_runtime(struct sandbox *sb)
{
	while (sb->retired) {
		struct retired *r = sb->retired;
		sb->retired = r->next;
		process_table_free(r->procs, r->ch);
		guest_channel_free(r->ch);
		free(r);
	}
	if (sb->procs) {
		process_table_free(sb->procs, sb->ch);
		sb->procs = NULL;
	}
	if (sb->ch) {
		guest_channel_free(sb->ch);
		sb->ch = NULL;
	}
	netns_release(&sb->net);
	int *fds[] = {&sb->dirfd, &sb->pidfd, &sb->console_fd, &sb->console_log_fd, &sb->wake_fd};
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (*fds[i] >= 0) {
			close(*fds[i]);
			*fds[i] = -1;
		}
}

static void sandbox_unref(struct sandbox *sb)
{
	pthread_mutex_lock(&registry_lock);
	bool last = --sb->refs == 0;
	pthread_mutex_unlock(&registry_lock);
	if (!last)
		return;
	sandbox_close_runtime(sb);
	sandbox_record_release(&sb->rec);
	pthread_mutex_destroy(&sb->lock);
	pthread_mutex_destroy(&sb->op_lock);
	free(sb->dir);
	free(sb->root);
	free(sb);
}

static struct sandbox *registry_find(const char *id)
{
	pthread_mutex_lock(&registry_lock);
	struct sandbox *sb = registry;
	while (sb && strcmp(sb->rec.id, id))
		sb = sb->next;
	if (sb)
		sb->refs++;
	pthread_mutex_unlock(&registry_lock);
	return sb;
}

static void registry_add(struct sandbox *sb)
{
	pthread_mutex_lock(&registry_lock);
	sb->refs++;
	sb->next = registry;
	registry = sb;
	pthread_mutex_unlock(&registry_lock);
}

static void registry_remove(struct sandbox *sb)
{
	bool found = false;
	pthread_mutex_lock(&registry_lock);
	for (struct sandbox **pp = &registry; *pp; pp = &(*pp)->next)
		if (*pp == sb) {
			*pp = sb->next;
			found = true;
			break;
		}
	pthread_mutex_unlock(&registry_lock);
	if (found)
		sandbox_unref(sb);
}

/* Persists a state change; with sb->lock held. */
static int set_state_locked(struct sandbox *sb, enum sandbox_state st, const char *error, struct al_error *err)
{
	struct sandbox_record next;
	sandbox_record_copy(&next, &sb->rec);
	next.state = st;
	next.updated_ms = now_ms_realtime();
	/* Timeouts count running time only: close or open the running interval. */
	if (next.running_since_ms && st != SANDBOX_RUNNING) {
		next.run_ms += next.updated_ms > next.running_since_ms ? next.updated_ms - next.running_since_ms : 0;
		next.running_since_ms = 0;
	} else if (!next.running_since_ms && st == SANDBOX_RUNNING) {
		next.running_since_ms = next.updated_ms;
	}
	free(next.error);
	next.error = error ? xstrdup(error) : NULL;
	int r = store_sandbox_update(cfg->store, &next, err);
	if (r < 0) {
		sandbox_record_release(&next);
		return r;
	}
	/* error may be the old record's own (a delete keeps the reason): from
	 * here on, only the new record's copy is alive. */
	sandbox_record_release(&sb->rec);
	sb->rec = next;
	error = sb->rec.error;
	sb->wd.armed = false; /* a new state: the watchdog starts counting again */
	log_info("sandbox %s: %s%s%s", sb->rec.id, sandbox_state_name(st), error ? ": " : "", error ? error : "");
	json_t *data = json_pack("{s:s}", "state", sandbox_state_name(st));
	if (error)
		json_object_set_new(data, "error", json_string(error));
	events_emit("sandbox.state", sb->rec.tenant, sb->rec.id, data);
	return 0;
}

static int persist_locked(struct sandbox *sb, struct al_error *err)
{
	sb->rec.updated_ms = now_ms_realtime();
	return store_sandbox_update(cfg->store, &sb->rec, err);
}

/* A copy of the record for the caller (who releases it). */
static void record_copy_out(struct sandbox *sb, struct sandbox_record *ret)
{
	pthread_mutex_lock(&sb->lock);
	sandbox_record_copy(ret, &sb->rec);
	pthread_mutex_unlock(&sb->lock);
}

/* ---- console ---------------------------------------------------------------------------- */

static void console_append(struct sandbox *sb, const char *data, size_t n)
{
	/* SECURITY: guest bytes: the file is capped (one rotation), the tail is a bounded ring. */
	if (sb->console_log_fd >= 0) {
		if (sb->console_log_size + n > CONSOLE_LOG_MAX) {
			cleanup_free char *cur = xasprintf("%s/%s", sb->dir, VMM_CONSOLE_LOG);
			cleanup_free char *old = xasprintf("%s/%s.1", sb->dir, VMM_CONSOLE_LOG);
			/* What the rotation pushes out is counted, not kept. */
			struct stat st;
			if (stat(old, &st) == 0 && S_ISREG(st.st_mode))
				metrics_add_output_dropped("console", (uint64_t)st.st_size);
			metrics_count_console_rotation();
			rename(cur, old);
			close(sb->console_log_fd);
			sb->console_log_fd =
			    open(cur, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
			sb->console_log_size = 0;
		}
		if (sb->console_log_fd >= 0 && write_full(sb->console_log_fd, data, n) == 0)
			sb->console_log_size += n;
	}
	if (n >= CONSOLE_TAIL_MAX) {
		memcpy(sb->console_tail, data + n - CONSOLE_TAIL_MAX, CONSOLE_TAIL_MAX);
		sb->tail_len = CONSOLE_TAIL_MAX;
		return;
	}
	if (sb->tail_len + n > CONSOLE_TAIL_MAX) {
		size_t drop = sb->tail_len + n - CONSOLE_TAIL_MAX;
		memmove(sb->console_tail, sb->console_tail + drop, sb->tail_len - drop);
		sb->tail_len -= drop;
	}
	memcpy(sb->console_tail + sb->tail_len, data, n);
	sb->tail_len += n;
}

/* The last `lines` lines of the console, printable ASCII only; with sb->lock held. */
static void console_tail_lines(struct sandbox *sb, unsigned lines, char *out, size_t size)
{
	size_t start = sb->tail_len;
	unsigned seen = 0;
	while (start > 0) {
		if (sb->console_tail[start - 1] == '\n' && start != sb->tail_len && ++seen >= lines)
			break;
		start--;
	}
	size_t o = 0;
	for (size_t i = start; i < sb->tail_len && o + 1 < size; i++) {
		char c = sb->console_tail[i];
		if (c == '\r')
			continue;
		out[o++] = (c == '\n' || (c >= 0x20 && c < 0x7f)) ? c : '?';
	}
	while (o > 0 && out[o - 1] == '\n')
		o--;
	out[o] = '\0';
}

static void console_drain(struct sandbox *sb)
{
	char buf[8192];
	for (;;) {
		ssize_t n = read(sb->console_fd, buf, sizeof(buf));
		if (n > 0) {
			pthread_mutex_lock(&sb->lock);
			console_append(sb, buf, (size_t)n);
			pthread_mutex_unlock(&sb->lock);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || (n < 0 && errno != EAGAIN)) {
			close(sb->console_fd);
			sb->console_fd = -1;
		}
		return;
	}
}

/* ---- VMM supervision --------------------------------------------------------------------- */

static void reap_vmm(struct sandbox *sb)
{
	int status = 0;
	bool known = sb->our_child;
	if (sb->our_child) {
		while (waitpid(sb->pid, &status, 0) < 0 && errno == EINTR)
			;
		sb->our_child = false;
	}
	sb->vmm_status = status;
	sb->vmm_status_known = known;
	__atomic_store_n(&sb->vmm_exited, true, __ATOMIC_RELEASE);
}

/* How the VMM ended and its last words (vmm_exit_describe), whether the
 * monitor has reaped it already or not. */
static void vmm_end_describe(struct sandbox *sb, char *out, size_t size)
{
	cleanup_close int dfd = open(sb->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (int i = 0; i < 2; i++) {
		bool reaped = __atomic_load_n(&sb->vmm_exited, __ATOMIC_ACQUIRE);
		const int *status = reaped && sb->vmm_status_known ? &sb->vmm_status : NULL;
		if (vmm_exit_describe(reaped ? -1 : sb->pidfd, sb->pid, status, dfd, VMM_LOG, out, size) == 0 || reaped)
			return;
		/* Reaped by the monitor while we looked: its status, then. */
		usleep(20 * 1000);
	}
}

/* Lines of the console that explain a failure on their own. */
static bool console_line_telling(const char *line)
{
	static const char *const marks[] = {"airlock-agent:", "Kernel panic", "BUG:", "Oops:", "Out of memory"};
	for (size_t i = 0; i < ARRAY_SIZE(marks); i++)
		if (strstr(line, marks[i]))
			return true;
	return false;
}

/* The reason for a failure: what, then the telling console lines and the
 * last few lines; with sb->lock held. */
static void describe_exit(struct sandbox *sb, const char *what, char *out, size_t size)
{
	char tail[CONSOLE_TAIL_MAX];
	console_tail_lines(sb, 200, tail, sizeof(tail));
	char telling[1024] = "";
	size_t t = 0;
	for (char *line = tail; *line;) {
		char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		char one[256];
		snprintf(one, sizeof(one), "%.*s", (int)MIN(len, sizeof(one) - 1), line);
		if (console_line_telling(one) && t + strlen(one) + 2 < sizeof(telling))
			t += (size_t)snprintf(telling + t, sizeof(telling) - t, "%s\n", one);
		line = nl ? nl + 1 : line + len;
	}
	char last[1024];
	console_tail_lines(sb, 6, last, sizeof(last));
	snprintf(out, size, "%s; guest console:\n%s%s%s", what, telling, telling[0] && last[0] ? "...\n" : "",
	         last[0] || telling[0] ? last : "(nothing)");
}

/* The VMM is gone or the guest broke the protocol while nobody expected it. */
static void sandbox_fail(struct sandbox *sb, const char *what)
{
	pthread_mutex_lock(&sb->lock);
	if (!sb->stopping && (sb->rec.state == SANDBOX_RUNNING || sb->rec.state == SANDBOX_PAUSED)) {
		char reason[2048];
		describe_exit(sb, what, reason, sizeof(reason));
		struct al_error e;
		if (set_state_locked(sb, SANDBOX_ERROR, reason, &e) < 0)
			log_error("sandbox %s: %s", sb->rec.id, e.message);
	}
	pthread_mutex_unlock(&sb->lock);
}

static void *monitor_main(void *arg)
{
	struct sandbox *sb = arg;
	for (;;) {
		struct pollfd p[5];
		int n = 0;
		p[n++] = (struct pollfd){.fd = sb->wake_fd, .events = POLLIN};
		p[n++] = (struct pollfd){.fd = sb->pidfd, .events = POLLIN};
		int con_i = -1, ch_i = -1, chw_i = -1;
		if (sb->console_fd >= 0) {
			con_i = n;
			p[n++] = (struct pollfd){.fd = sb->console_fd, .events = POLLIN};
		}
		bool want_write = false;
		if (sb->ch && !guest_channel_dead(sb->ch, NULL, 0)) {
			want_write = guest_channel_want_write(sb->ch);
			ch_i = n;
			p[n++] = (struct pollfd){.fd = guest_channel_fd(sb->ch),
			                         .events = (short)(POLLIN | (want_write ? POLLOUT : 0))};
			chw_i = n;
			p[n++] = (struct pollfd){.fd = guest_channel_wake_fd(sb->ch), .events = POLLIN};
		}
		/* While frames wait for the guest, wake up to notice a stalled agent. */
		if (poll(p, (nfds_t)n, want_write ? 1000 : -1) < 0) {
			if (errno == EINTR)
				continue;
			log_error("sandbox %s: poll: %m", sb->rec.id);
			break;
		}
		if (p[0].revents)
			break;
		if (con_i >= 0 && p[con_i].revents)
			console_drain(sb);
		if (ch_i >= 0 && (p[ch_i].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    guest_channel_read(sb->ch) == -EPROTO) {
			/* SECURITY: a guest that sends garbage gets no second chance. */
			char why[512];
			guest_channel_dead(sb->ch, why, sizeof(why));
			struct vmm_config vc = {.sandbox_id = sb->rec.id, .dir = sb->dir, .root = sb->root};
			cfg->vmm->stop(&vc, sb->pid);
			sandbox_fail(sb, why);
		}
		if (ch_i >= 0 && (want_write || (chw_i >= 0 && p[chw_i].revents)))
			guest_channel_flush(sb->ch);
		if (p[1].revents) {
			if (sb->console_fd >= 0)
				console_drain(sb);
			reap_vmm(sb);
			if (sb->ch)
				guest_channel_kill(sb->ch, "the VM exited");
			char how[1024], what[1100];
			vmm_end_describe(sb, how, sizeof(how));
			snprintf(what, sizeof(what), "the VM exited unexpectedly: %s", how);
			sandbox_fail(sb, what);
			break;
		}
	}
	return NULL;
}

static void monitor_start(struct sandbox *sb)
{
	sb->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sb->wake_fd < 0)
		abort();
	if (pthread_create(&sb->monitor, NULL, monitor_main, sb) != 0)
		abort();
	sb->has_monitor = true;
}

static void monitor_stop(struct sandbox *sb)
{
	if (!sb->has_monitor)
		return;
	uint64_t one = 1;
	if (write(sb->wake_fd, &one, sizeof(one)) < 0)
		log_error("sandbox %s: cannot wake its monitor: %m", sb->rec.id);
	pthread_join(sb->monitor, NULL);
	sb->has_monitor = false;
}

/* Stops the VMM and waits until it is gone (it ignores nothing: SIGKILL). */
static void vmm_stop_wait(struct sandbox *sb)
{
	if (sb->pid <= 0 || sb->vmm_exited)
		return;
	/* By pidfd when there is one: it names this process, never a reused pid. */
	if (sb->pidfd < 0 || syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0) < 0) {
		struct vmm_config vc = {.sandbox_id = sb->rec.id, .dir = sb->dir, .root = sb->root};
		cfg->vmm->stop(&vc, sb->pid);
	}
	if (sb->pidfd >= 0) {
		struct pollfd p = {.fd = sb->pidfd, .events = POLLIN};
		if (poll(&p, 1, 10000) <= 0)
			log_error("sandbox %s: VMM %d did not exit after SIGKILL", sb->rec.id, (int)sb->pid);
	}
	reap_vmm(sb);
}

/* The backend's channel or console (vmm.h), retried while the VMM or its
 * agent is not there yet (vmm_connect_retry). */
static int connect_retry(struct sandbox *sb, bool channel, uint64_t deadline_ms, int *ret_fd)
{
	struct vmm_config vc = {.sandbox_id = sb->rec.id, .dir = sb->dir, .root = sb->root, .dirfd = sb->dirfd};
	return vmm_connect_retry(cfg->vmm, &vc, channel, sb->pidfd, deadline_ms, ret_fd);
}

static bool jail_refusal(struct sandbox *sb, char *buf, size_t size);

/* Whether the guest channel can only be opened while the guest runs (a
 * vsock connection is the guest's to accept; Firecracker's) rather than at
 * any time (QEMU's virtio-serial socket is the VMM's). */
static bool channel_needs_running_guest(void)
{
	return cfg->vmm->channel_resets_on_save;
}

static int attach_failed(struct sandbox *sb, int r, struct al_error *err)
{
	char refusal[200];
	if (r == -ECHILD && jail_refusal(sb, refusal, sizeof(refusal)))
		return al_error_set(err, AL_ERR_BOOT_FAILED, EPERM, "the VMM's jail could not be set up: %s", refusal);
	if (r == -ECHILD) {
		char how[1024];
		vmm_end_describe(sb, how, sizeof(how));
		return al_error_set(err, AL_ERR_BOOT_FAILED, ECHILD, "the VMM exited at start: %s (in %s)", how,
		                    sb->dir);
	}
	return al_error_set(err, AL_ERR_BOOT_FAILED, -r, "cannot connect to the VMM's sockets in %s: %s", sb->dir,
	                    strerror(-r));
}

/* Opens the guest channel of a started VMM and starts supervising. */
static int attach_channel(struct sandbox *sb, uint64_t deadline_ms, struct al_error *err)
{
	int ch_fd = -1;
	int r = connect_retry(sb, true, deadline_ms, &ch_fd);
	if (r < 0)
		return attach_failed(sb, r, err);
	struct guest_channel *ch = guest_channel_new(ch_fd);
	pthread_mutex_lock(&sb->lock);
	sb->ch = ch;
	sb->procs = process_table_new(sb->rec.id, sb->rec.tenant);
	bool cancel = sb->cancel;
	pthread_mutex_unlock(&sb->lock);
	if (cancel)
		guest_channel_kill(ch, "the sandbox was deleted while it booted");
	monitor_start(sb);
	return 0;
}

/* Opens the console of a started VMM, then (with_channel) its channel. */
static int attach(struct sandbox *sb, uint64_t deadline_ms, bool with_channel, struct al_error *err)
{
	int con_fd = -1;
	int r = connect_retry(sb, false, deadline_ms, &con_fd);
	if (r < 0)
		return attach_failed(sb, r, err);
	fcntl(con_fd, F_SETFL, fcntl(con_fd, F_GETFL) | O_NONBLOCK);
	sb->console_fd = con_fd;
	cleanup_free char *log_path = xasprintf("%s/%s", sb->dir, VMM_CONSOLE_LOG);
	sb->console_log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0640);
	struct stat st;
	if (sb->console_log_fd >= 0 && fstat(sb->console_log_fd, &st) == 0)
		sb->console_log_size = (size_t)st.st_size;
	return with_channel ? attach_channel(sb, deadline_ms, err) : 0;
}

/* Stops the monitor and detaches the channel from its connection, which a
 * save is about to reset (Firecracker resets every vsock connection at a
 * snapshot): nobody reads the end of it, so its streams live on. With
 * op_lock held. */
/* The sandbox's channel (and its processes) retire: kept, for what their
 * callers still hold, until the sandbox is freed. Under sb->lock. */
static void channel_retire_locked(struct sandbox *sb)
{
	if (!sb->ch)
		return;
	struct retired *old = xcalloc(1, sizeof(*old));
	old->ch = sb->ch;
	old->procs = sb->procs;
	old->next = sb->retired;
	sb->retired = old;
	sb->ch = NULL;
	sb->procs = NULL;
}

static void channel_detach(struct sandbox *sb)
{
	monitor_stop(sb);
	if (sb->wake_fd >= 0) {
		close(sb->wake_fd);
		sb->wake_fd = -1;
	}
	if (sb->ch)
		guest_channel_replace_fd(sb->ch, -1);
}

/* After a save that reset the guest channel, with the guest running again:
 * a new connection under the channel, whose exec streams, processes and
 * output go on (the agent keeps them too); with no channel yet (a re-attach
 * of a paused sandbox), a new one. With op_lock held. */
static int channel_reconnect(struct sandbox *sb, uint64_t deadline_ms, struct al_error *err)
{
	channel_detach(sb);
	if (!sb->ch || guest_channel_dead(sb->ch, NULL, 0)) {
		/* Dead already (it broke or its VM went): it retires. */
		pthread_mutex_lock(&sb->lock);
		channel_retire_locked(sb);
		pthread_mutex_unlock(&sb->lock);
		return attach_channel(sb, deadline_ms, err);
	}
	int fd = -1;
	int r = connect_retry(sb, true, deadline_ms, &fd);
	if (r < 0) {
		monitor_start(sb); /* its exit is still noticed */
		return attach_failed(sb, r, err);
	}
	guest_channel_replace_fd(sb->ch, fd);
	monitor_start(sb);
	return 0;
}

/* ---- templates and images ---------------------------------------------------------------- */

struct images {
	char kernel[PATH_MAX], initrd[PATH_MAX], rootfs[PATH_MAX];
};

static int list_templates(char *out, size_t size)
{
	cleanup_free char *dir = xasprintf("%s/templates", cfg->image_dir);
	out[0] = '\0';
	size_t o = 0;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || !template_name_valid(de->d_name))
			continue;
		int n = snprintf(out + o, size - o, "%s%s", o ? ", " : "", de->d_name);
		if (n < 0 || (size_t)n >= size - o)
			break;
		o += (size_t)n;
	}
	closedir(d);
	return 0;
}

static int resolve_images(const char *template_name, struct images *ret, struct al_error *err)
{
	/* SECURITY: template_name was validated against [a-z0-9_-] before it
	 * becomes a path component. */
	if (!template_name_valid(template_name))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "template: invalid name");
	char base[PATH_MAX];
	if (!realpath(cfg->image_dir, base))
		return al_error_set(err, AL_ERR_INTERNAL, errno, "image dir %s: %m", cfg->image_dir);
	if (snprintf_ok(ret->rootfs, sizeof(ret->rootfs), "%s/templates/%s/rootfs.ext4", base, template_name) < 0 ||
	    snprintf_ok(ret->kernel, sizeof(ret->kernel), "%s/kernels/%s", base, vmm_kernel_file(cfg->vmm)) < 0 ||
	    snprintf_ok(ret->initrd, sizeof(ret->initrd), "%s/kernels/initramfs.cpio", base) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, ENAMETOOLONG, "image dir path %s is too long", base);
	if (access(ret->rootfs, R_OK) < 0) {
		char names[512];
		list_templates(names, sizeof(names));
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOENT,
		                    "template: unknown template \"%s\" (installed: %s)", template_name,
		                    names[0] ? names : "none; run 'make images'");
	}
	if (access(ret->kernel, R_OK) < 0 || access(ret->initrd, R_OK) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, ENOENT,
		                    "the guest kernel or initramfs is missing under %s/kernels; run 'make images'",
		                    base);
	return 0;
}

/* ---- limits ------------------------------------------------------------------------------- */

/* Boots and restores at once are bounded (--max-concurrent-starts): each
 * holds a slot from before its VMM starts until the guest answered or the
 * start failed. A create that finds none free waits (bounded by
 * --start-queue-timeout-s), in order of nothing but the condition. */
static pthread_mutex_t starts_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t starts_cond = PTHREAD_COND_INITIALIZER;
static unsigned starts_active, starts_waiting;

static int start_slot_acquire(const char *what, struct al_error *err)
{
	/* Every start runs on the accelerator the daemon decided: while its
	 * probe runs, starts wait for it. */
	struct accel_info accel;
	if (accel_wait(now_ms_monotonic() + (uint64_t)cfg->accel_wait_s * 1000u, &accel) < 0)
		return al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN,
		                    "%s: the accelerator probe has not finished within %u s (see airlockd's log); "
		                    "nothing was created, try again later",
		                    what, cfg->accel_wait_s);
	pthread_mutex_lock(&starts_lock);
	if (starts_active >= cfg->max_concurrent_starts) {
		struct timespec deadline;
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += cfg->start_queue_timeout_s;
		starts_waiting++;
		metrics_set_starts(starts_active, starts_waiting);
		metrics_count_start_waited();
		int rc = 0;
		while (starts_active >= cfg->max_concurrent_starts && rc != ETIMEDOUT)
			rc = pthread_cond_timedwait(&starts_cond, &starts_lock, &deadline);
		starts_waiting--;
		if (starts_active >= cfg->max_concurrent_starts) {
			metrics_set_starts(starts_active, starts_waiting);
			pthread_mutex_unlock(&starts_lock);
			metrics_count_start_rejected();
			return al_error_set(err, AL_ERR_UNAVAILABLE, EBUSY,
			                    "%s: %u sandboxes are starting already (airlockd --max-concurrent-starts "
			                    "%u) and none finished within %u s (--start-queue-timeout-s); nothing was "
			                    "created, try again later",
			                    what, cfg->max_concurrent_starts, cfg->max_concurrent_starts,
			                    cfg->start_queue_timeout_s);
		}
	}
	starts_active++;
	metrics_set_starts(starts_active, starts_waiting);
	pthread_mutex_unlock(&starts_lock);
	return 0;
}

static void start_slot_release(void)
{
	pthread_mutex_lock(&starts_lock);
	starts_active--;
	metrics_set_starts(starts_active, starts_waiting);
	pthread_cond_signal(&starts_cond);
	pthread_mutex_unlock(&starts_lock);
}

/* The virtual size of a qcow2 image (its header: magic "QFI\xfb", the
 * size at offset 24, big-endian). */
static int qcow2_virtual_size(const char *path, uint64_t *ret)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	uint8_t h[32];
	if (fd < 0)
		return -errno;
	if (read_full(fd, h, sizeof(h)) != (ssize_t)sizeof(h) || memcmp(h, "QFI\xfb", 4))
		return -EINVAL;
	uint64_t v = 0;
	for (int i = 24; i < 32; i++)
		v = v << 8 | h[i];
	*ret = v;
	return 0;
}

/* The host-wide maxima of one sandbox (--max-vcpus, --max-memory-mib,
 * --max-disk-mib) and its disk size: the request's disk_mib, else the
 * template's size; a restore keeps its snapshot's. */
static int host_limits_check(const struct create_request *req, const struct snapshot_info *from,
                             const struct images *im, unsigned vcpus, unsigned memory_mib, unsigned *ret_disk_mib,
                             struct al_error *err)
{
	const char *of = from ? " (the snapshot's)" : "";
	if (vcpus > cfg->max_vcpus)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "vcpus: %u%s is above this host's maximum of %u per sandbox (airlockd --max-vcpus)",
		                    vcpus, of, cfg->max_vcpus);
	if (memory_mib > cfg->max_memory_mib)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "memory_mib: %u%s is above this host's maximum of %u per sandbox (airlockd "
		                    "--max-memory-mib, at most the host's memory)",
		                    memory_mib, of, cfg->max_memory_mib);
	uint64_t bytes = 0;
	int r;
	if (from) {
		cleanup_free char *snap = snapshot_dir(from->id);
		cleanup_free char *disk = xasprintf("%s/%s", snap, snapshot_disk_name(from->backend));
		struct stat st;
		if (strcmp(snapshot_disk_name(from->backend), SNAPSHOT_DISK)) /* a raw disk: its size */
			r = stat(disk, &st) == 0 ? (bytes = (uint64_t)st.st_size, 0) : -errno;
		else
			r = qcow2_virtual_size(disk, &bytes);
	} else {
		struct stat st;
		r = stat(im->rootfs, &st) == 0 ? 0 : -errno;
		bytes = r == 0 ? (uint64_t)st.st_size : 0;
	}
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read the size of %s disk: %s",
		                    from ? "the snapshot's" : "the template's", strerror(-r));
	unsigned base_mib = size_mib_up(bytes);
	unsigned disk_mib = !from && req->disk_mib ? req->disk_mib : base_mib;
	if (!from && req->disk_mib && req->disk_mib < base_mib)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "disk_mib: %u is below the size of template %s (%u MiB); a disk can only be "
		                    "made bigger",
		                    req->disk_mib, req->template_name, base_mib);
	if (disk_mib > cfg->max_disk_mib) {
		char what[128];
		if (from)
			snprintf(what, sizeof(what), "snapshot %s: its disk of", from->id);
		else if (!req->disk_mib)
			snprintf(what, sizeof(what), "template %s: its disk of", req->template_name);
		else
			snprintf(what, sizeof(what), "disk_mib:");
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "%s %u MiB is above this host's maximum of %u MiB per sandbox (airlockd "
		                    "--max-disk-mib)",
		                    what, disk_mib, cfg->max_disk_mib);
	}
	*ret_disk_mib = disk_mib;
	return 0;
}

/* ---- operations -------------------------------------------------------------------------- */

/* The egress policy of a sandbox whose request names none: a restore keeps
 * the policy its snapshot's sandbox has (if it still exists); everything
 * else gets the operator's default (deny-all unless configured). */
static char *default_network(const struct snapshot_info *from)
{
	if (from) {
		struct sandbox_record parent;
		struct al_error ignored;
		if (store_sandbox_get(cfg->store, from->sandbox_id, &parent, &ignored) == 0) {
			char *p = parent.network_json ? xstrdup(parent.network_json) : NULL;
			sandbox_record_release(&parent);
			if (p)
				return p;
		}
	}
	return xstrdup(cfg->default_network_json ? cfg->default_network_json : NETWORK_POLICY_EMPTY);
}

static bool tenant_sees(const char *tenant, const struct sandbox_record *rec)
{
	return !tenant || !strcmp(tenant, rec->tenant);
}

static int not_found(const char *id, struct al_error *err)
{
	return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "no sandbox with id \"%.64s\"", id);
}

void sandbox_usage(const char *tenant, unsigned *ret_sandboxes, unsigned *ret_vcpus, unsigned *ret_memory_mib)
{
	unsigned n = 0, vcpus = 0, mem = 0;
	pthread_mutex_lock(&registry_lock);
	for (struct sandbox *sb = registry; sb; sb = sb->next) {
		pthread_mutex_lock(&sb->lock);
		bool live = sb->rec.state == SANDBOX_CREATING || sb->rec.state == SANDBOX_RUNNING ||
		            sb->rec.state == SANDBOX_PAUSED;
		if (live && !strcmp(sb->rec.tenant, tenant)) {
			n++;
			vcpus += sb->rec.vcpus;
			mem += sb->rec.memory_mib;
		}
		pthread_mutex_unlock(&sb->lock);
	}
	pthread_mutex_unlock(&registry_lock);
	*ret_sandboxes = n;
	*ret_vcpus = vcpus;
	*ret_memory_mib = mem;
}

/* The registry's sandbox `id` if the caller may see it: 1 and a new
 * reference; 0 when it is not live (ask the store); < 0 "not found". */
static int registry_find_visible(const char *id, const char *tenant, struct sandbox **ret, struct al_error *err)
{
	if (!sandbox_id_valid(id))
		return not_found(id, err);
	struct sandbox *sb = registry_find(id);
	if (!sb)
		return 0;
	pthread_mutex_lock(&sb->lock);
	bool visible = tenant_sees(tenant, &sb->rec);
	pthread_mutex_unlock(&sb->lock);
	if (!visible) {
		sandbox_unref(sb);
		return not_found(id, err);
	}
	*ret = sb;
	return 1;
}

/* The live sandbox `id` as the caller may see it: a new reference, or
 * "not found" (unknown, another tenant's) or a conflict naming its state and
 * what the operation needs (`needs`, e.g. "not running"). */
static int find_live(const char *id, const char *tenant, const char *needs, struct sandbox **ret, struct al_error *err)
{
	int r = registry_find_visible(id, tenant, ret, err);
	if (r != 0)
		return r < 0 ? r : 0;
	struct sandbox_record rec;
	if ((r = store_sandbox_get(cfg->store, id, &rec, err)) < 0)
		return r;
	r = tenant_sees(tenant, &rec) ? al_error_set(err, AL_ERR_CONFLICT, EBUSY, "sandbox %s is %s%s%s", id,
	                                             sandbox_state_name(rec.state), needs[0] ? ", " : "", needs)
	                              : not_found(id, err);
	sandbox_record_release(&rec);
	return r;
}

int sandbox_acquire(const char *id, const char *tenant, struct sandbox **ret, struct al_error *err)
{
	struct sandbox *sb = NULL;
	int fr = find_live(id, tenant, "not running", &sb, err);
	if (fr < 0)
		return fr;
	pthread_mutex_lock(&sb->lock);
	int r = 0;
	sb->last_activity_ms = now_ms_monotonic();
	if (sb->rec.state == SANDBOX_PAUSED)
		r = al_error_set(err, AL_ERR_CONFLICT, EBUSY,
		                 "sandbox %s is paused: resume it first (POST /v1/sandboxes/%s/resume), or add "
		                 "?resume=true to the request",
		                 id, id);
	else if (sb->rec.state != SANDBOX_RUNNING || !sb->ch || sb->stopping)
		r = al_error_set(err, AL_ERR_CONFLICT, EBUSY, "sandbox %s is %s, not running", id,
		                 sandbox_state_name(sb->rec.state));
	pthread_mutex_unlock(&sb->lock);
	if (r < 0) {
		sandbox_unref(sb);
		return r;
	}
	*ret = sb;
	return 0;
}

void sandbox_release(struct sandbox *sb)
{
	if (!sb)
		return;
	/* The end of a request is activity too: idle counts from there. */
	pthread_mutex_lock(&sb->lock);
	sb->last_activity_ms = now_ms_monotonic();
	pthread_mutex_unlock(&sb->lock);
	sandbox_unref(sb);
}

const char *sandbox_id(const struct sandbox *sb)
{
	return sb->rec.id;
}

const char *sandbox_tenant(const struct sandbox *sb)
{
	return sb->rec.tenant;
}

struct guest_channel *sandbox_channel(struct sandbox *sb)
{
	return sb->ch;
}

struct process_table *sandbox_processes(struct sandbox *sb)
{
	return sb->procs;
}

void env_free(char **env, size_t n)
{
	for (size_t i = 0; env && i < n; i++)
		free(env[i]);
	free(env);
}

static char *kv_to_json(const struct kv_list *l)
{
	cleanup_json json_t *o = json_object();
	for (size_t i = 0; i < l->n; i++)
		json_object_set_new(o, l->keys[i], json_string(l->values[i]));
	char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	if (!s)
		abort();
	return s;
}

static void new_id(char out[SANDBOX_ID_MAX + 1])
{
	uint8_t b[8];
	char hex[17];
	random_bytes(b, sizeof(b));
	hex_encode(b, sizeof(b), hex);
	snprintf(out, SANDBOX_ID_MAX + 1, "sb-%s", hex);
}

/* Boots the VMM of a freshly inserted sandbox and waits for the agent. */
#define THAW_TIMEOUT_MS 30000
#define FREEZE_TIMEOUT_MS 30000
#define RESTORE_TIMEOUT_MS 120000

/* Tells the guest who it is now and makes it unique (proto.h, THAW). */
static int thaw(struct sandbox *sb, bool orphan_streams, struct al_error *err)
{
	uint8_t entropy[64];
	random_bytes(entropy, sizeof(entropy));
	cleanup_free char *b64 = base64_encode(entropy, sizeof(entropy), NULL);
	explicit_bzero(entropy, sizeof(entropy));
	char hostname[32];
	snprintf(hostname, sizeof(hostname), "%s", sb->rec.id);
	cleanup_json json_t *msg = json_pack("{s:I, s:s, s:I, s:s, s:s, s:b}", "generation", (json_int_t)sb->generation,
	                                     "entropy", b64, "time_ms", (json_int_t)now_ms_realtime(), "sandbox_id",
	                                     sb->rec.id, "hostname", hostname, "orphan_streams", orphan_streams);
	return guest_channel_call(sb->ch, AIRLOCK_FRAME_THAW, msg, now_ms_monotonic() + THAW_TIMEOUT_MS,
	                          "the restore hooks (THAW)", NULL, err);
}

/* The disk and memory of a restore, from its snapshot; before the VMM
 * starts. *ret_mem_fd: the memory, for the VMM to read (never by path: it
 * is outside the jail, and a restore never modifies its snapshot);
 * *ret_state_fd: the device state of a backend that keeps it apart
 * (state_suffix), else -1. */
static int restore_prepare(struct sandbox *sb, const struct snapshot_info *from, int *ret_mem_fd, int *ret_state_fd,
                           struct al_error *err)
{
	cleanup_free char *snap = snapshot_dir(from->id);
	cleanup_free char *src = xasprintf("%s/%s", snap, snapshot_disk_name(from->backend));
	cleanup_free char *dst = xasprintf("%s/%s", sb->root, vmm_disk_file(cfg->vmm));
	unlink(dst); /* a recover replaces the disk it had */
	/* A raw disk is copied by reflink where the filesystem can (else
	 * sparse); a qcow2 overlay is small. */
	int r = cfg->vmm->disk_file ? file_copy_cow(src, dst, 0600, NULL) : copy_file(src, dst, 0600);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot copy the snapshot's disk: %s", strerror(-r));
	cleanup_free char *mem = xasprintf("%s/%s", snap, SNAPSHOT_MEMORY);
	cleanup_close int fd = open(mem, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open the snapshot's memory: %m");
	int state_fd = -1;
	if (cfg->vmm->state_suffix) {
		cleanup_free char *state = xasprintf("%s/%s", snap, SNAPSHOT_STATE);
		if (!from->state_sha[0] || (state_fd = open(state, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
			return al_error_set(err, AL_ERR_CONFLICT, from->state_sha[0] ? errno : ENOENT,
			                    "snapshot %s has no device state (%s) to restore", from->id,
			                    SNAPSHOT_STATE);
	}
	*ret_mem_fd = TAKE_FD(fd);
	*ret_state_fd = state_fd;
	return 0;
}

/* After the VMM loaded the snapshot: run it, find its agent, make it unique. */
static int restore_finish(struct sandbox *sb, const struct vmm_config *vc, uint64_t deadline, struct al_error *err)
{
	int r = cfg->vmm->wait_incoming(vc, deadline, err);
	if (r == 0)
		r = cfg->vmm->resume(vc, err);
	/* A restored guest has no connection of its own: opened now it runs. */
	if (r == 0 && !sb->ch)
		r = attach_channel(sb, deadline, err);
	if (r < 0)
		return r;
	if (guest_channel_request_hello(sb->ch) < 0 || guest_channel_wait_hello(sb->ch, deadline, NULL) < 0)
		return al_error_set(err, AL_ERR_BOOT_FAILED, ETIMEDOUT, "the restored guest agent did not answer");
	return thaw(sb, true, err);
}

/* The gateway forgets the sandbox and its namespace goes (with the VMM). */
static void network_down(struct sandbox *sb)
{
	if (sb->net_registered) {
		egress_sandbox_remove(sb->rec.id);
		sb->net_registered = false;
	}
	netns_release(&sb->net);
}

/* A new namespace (attach_pid 0) or the one a running VMM is in, its
 * listeners handed to the gateway with the sandbox's policy.
 * SECURITY: fail closed: without its rules and listeners a sandbox does
 * not start (or is not re-attached). */
static int network_up(struct sandbox *sb, pid_t attach_pid, struct al_error *err)
{
	network_down(sb);
	struct netns n = NETNS_INIT;
	int r = attach_pid > 0 ? netns_attach(attach_pid, &n, err) : netns_take(sb->rec.jail_uid, &n, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sb->lock);
	cleanup_free char *policy = xstrdup(sb->rec.network_json ? sb->rec.network_json : NETWORK_POLICY_EMPTY);
	cleanup_free char *bindings = xstrdup(sb->rec.secrets_json ? sb->rec.secrets_json : "[]");
	pthread_mutex_unlock(&sb->lock);
	if ((r = egress_sandbox_add(sb->rec.id, sb->rec.tenant, policy, bindings, &n, err)) < 0) {
		netns_release(&n);
		return r;
	}
	sb->net = n;
	sb->net_registered = true;
	return 0;
}

/* The guest trusts the Airlock CA before anything else runs in it (a
 * restore or recover installs again: it finds what it had). */
static int install_ca(struct sandbox *sb, uint64_t deadline, struct al_error *err)
{
	const char *pem = ca_cert_pem();
	if (!pem)
		return 0;
	char bundle[sizeof(sb->rec.ca_bundle)];
	int r = guest_ca_install(sb->ch, pem, deadline, bundle, sizeof(bundle), err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sb->lock);
	strlcpy_al(sb->rec.ca_bundle, bundle, sizeof(sb->rec.ca_bundle));
	pthread_mutex_unlock(&sb->lock);
	return 0;
}

/* ---- the VMM's jail (jail.h) ------------------------------------------------------------ */

/* The VMM's directory, owned by a uid of its own (taken here, kept in the
 * record): nothing in it but the disk from an earlier life (sockets, the
 * jail's mount points and anything an earlier VMM left are removed). */
static int jail_enter_prepare(struct sandbox *sb, struct al_error *err)
{
	if (!sb->uid_held) {
		uint32_t uid;
		int r = jail_uid_take(&uid, err);
		if (r < 0)
			return r;
		pthread_mutex_lock(&sb->lock);
		sb->rec.jail_uid = uid;
		sb->uid_held = true;
		pthread_mutex_unlock(&sb->lock);
	}
	if (mkdir(sb->root, 0700) < 0 && errno != EEXIST)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", sb->root);
	if (sb->dirfd >= 0)
		close(sb->dirfd);
	sb->dirfd = open(sb->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (sb->dirfd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m", sb->root);
	cleanup_close int scan = dup(sb->dirfd);
	DIR *d = scan >= 0 ? fdopendir(scan) : NULL;
	if (!d)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot list %s: %m", sb->root);
	scan = -1; /* the DIR has it */
	struct dirent *de;
	int r = 0;
	while (r == 0 && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, vmm_disk_file(cfg->vmm)))
			r = rm_rf_at(sb->dirfd, de->d_name);
	closedir(d);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot clean %s: %s", sb->root, strerror(-r));
	if (fchown(sb->dirfd, sb->rec.jail_uid, sb->rec.jail_uid) < 0 || fchmod(sb->dirfd, 0700) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot give %s to the jail's uid: %m", sb->root);
	return 0;
}

/* The jailer's refusal in the VMM log, if that is why the VMM ended. */
static bool jail_refusal(struct sandbox *sb, char *buf, size_t size)
{
	cleanup_free char *log = xasprintf("%s/%s", sb->dir, VMM_LOG);
	return jail_failure_in_log(AT_FDCWD, log, buf, size);
}

/* After the VMM is gone: its cgroup goes, its uid is free again. */
static void jail_release(struct sandbox *sb)
{
	if (sb->pid > 0 && !sb->vmm_exited)
		return; /* still there: nothing may be reused */
	if (sb->rec.jail_uid == 0 && sb->pid <= 0)
		return;
	struct al_error e = {0};
	if (jail_cleanup(sb->rec.id, &e) < 0) {
		/* Its uid stays taken: something of it may still run. */
		log_error("sandbox %s: %s", sb->rec.id, e.message);
		return;
	}
	pthread_mutex_lock(&sb->lock);
	if (sb->uid_held)
		jail_uid_put(sb->rec.jail_uid);
	sb->uid_held = false;
	sb->rec.jail_uid = 0;
	pthread_mutex_unlock(&sb->lock);
}

static void tsnap_putp(struct tsnap **t)
{
	tsnap_put(*t);
}

/* The snapshot of the sandbox's template (made now if needed), or NULL:
 * then it boots cold (the reason is logged; making it is retried after a
 * minute). */
static struct tsnap *template_snapshot_for(struct sandbox *sb, const struct images *im)
{
	if (!cfg->template_snapshots)
		return NULL;
	struct tsnap_request tr = {
	    .template_name = sb->rec.template_name,
	    .vcpus = sb->rec.vcpus,
	    .memory_mib = sb->rec.memory_mib,
	    .kernel = im->kernel,
	    .initrd = im->initrd,
	    .rootfs = im->rootfs,
	};
	struct tsnap *ts = NULL;
	struct al_error e = {0};
	if (tsnap_get(&tr, &ts, &e) < 0) {
		log_info("sandbox %s: boots cold: %s", sb->rec.id, e.message);
		return NULL;
	}
	return ts;
}

/* The fds a restore of the template's snapshot starts from. QEMU: the
 * saved state (its RAM is the snapshot's memfd). A backend that saves by
 * name (Firecracker): the memory file, which it maps private, and the
 * device state. */
static int template_snapshot_open(const struct tsnap *ts, int *ret_mem_fd, int *ret_state_fd, struct al_error *err)
{
	const char *mem = tsnap_mem_path(ts) ? tsnap_mem_path(ts) : tsnap_state_path(ts);
	cleanup_close int mem_fd = open(mem, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	cleanup_close int state_fd = -1;
	if (mem_fd < 0 ||
	    (tsnap_mem_path(ts) && (state_fd = open(tsnap_state_path(ts), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0))
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open the template snapshot: %m");
	*ret_mem_fd = TAKE_FD(mem_fd);
	*ret_state_fd = TAKE_FD(state_fd);
	return 0;
}

/* Where a start's time went (the benchmarks' profile of a create). */
static void boot_phases_log(struct sandbox *sb, uint64_t t0, uint64_t disk, uint64_t net, uint64_t spawn,
                            uint64_t attach, uint64_t agent)
{
	uint64_t now = now_ms_monotonic();
	log_info("sandbox %s: started (%s) in %" PRIu64 " ms: disk %" PRIu64 ", network %" PRIu64 ", spawn %" PRIu64
	         ", sockets %" PRIu64 ", %s %" PRIu64 ", CA %" PRIu64,
	         sb->rec.id, sb->rec.boot_path, now - t0, disk - t0, net - disk, spawn - net, attach - spawn,
	         !strcmp(sb->rec.boot_path, "cold") ? "boot to hello" : "load+resume+hello+thaw", agent - attach,
	         now - agent);
}

/* The guest agent did not say hello (r: what waiting for it returned): why,
 * as far as the VMM, its jail and the channel tell. */
static int hello_failed(struct sandbox *sb, int r, struct al_error *err)
{
	/* Give the console a moment to deliver the guest's last words. */
	struct pollfd p = {.fd = sb->pidfd, .events = POLLIN};
	poll(&p, 1, r == -ETIMEDOUT ? 0 : 500);
	char what[1200];
	char refusal[200];
	if (poll(&p, 1, 0) > 0 && jail_refusal(sb, refusal, sizeof(refusal))) {
		snprintf(what, sizeof(what), "the VMM's jail could not be set up: %s", refusal);
	} else if (poll(&p, 1, 0) > 0) {
		char how[1024];
		vmm_end_describe(sb, how, sizeof(how));
		snprintf(what, sizeof(what), "the VM exited before the guest agent said hello: %s", how);
	} else if (r == -ETIMEDOUT)
		snprintf(what, sizeof(what), "the guest agent did not say hello within %u s (boot timeout)",
		         cfg->boot_timeout_s);
	else
		guest_channel_dead(sb->ch, what, sizeof(what));
	return al_error_set(err, AL_ERR_BOOT_FAILED, -r, "%s", what);
}

static int boot(struct sandbox *sb, const struct images *im, const struct snapshot_info *from, bool reuse,
                struct al_error *err)
{
	uint64_t t0 = now_ms_monotonic();
	uint64_t deadline = t0 + (uint64_t)cfg->boot_timeout_s * 1000u;
	struct vmm_config vc = {
	    .sandbox_id = sb->rec.id,
	    .dir = sb->dir,
	    .incoming_fd = -1,
	    .incoming_state_fd = -1,
	    .netns_fd = -1,
	    .mem_fd = -1,
	    .kernel = im->kernel,
	    .initrd = im->initrd,
	    .rootfs = im->rootfs,
	    .vcpus = sb->rec.vcpus,
	    .memory_mib = sb->rec.memory_mib,
	};
	/* A recover boots again in the directory the sandbox has. */
	if (mkdir(sb->dir, 0700) < 0 && !(errno == EEXIST && reuse))
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", sb->dir);
	int r = jail_enter_prepare(sb, err);
	if (r < 0)
		return r;
	vc.root = sb->root;
	vc.dirfd = sb->dirfd;
	cleanup_close int mem_fd = -1, state_fd = -1;
	const char *disk_file = vmm_disk_file(cfg->vmm);
	/* Held until the VMM has its fds. */
	__attribute__((cleanup(tsnap_putp))) struct tsnap *ts = NULL;
	if (from) {
		sb->generation = from->generation + 1;
		deadline = t0 + RESTORE_TIMEOUT_MS;
		r = restore_prepare(sb, from, &mem_fd, &state_fd, err);
		vc.incoming_fd = mem_fd;
		vc.incoming_state_fd = state_fd;
	} else if (reuse) {
		/* Cold boot of the disk the sandbox has. */
		cleanup_free char *disk = xasprintf("%s/%s", sb->root, disk_file);
		r = access(disk, R_OK) == 0
		        ? 0
		        : al_error_set(err, AL_ERR_CONFLICT, ENOENT,
		                       "sandbox %s has no disk left to boot and no snapshot", sb->rec.id);
	} else {
		/* A disk bigger than the template's (create's disk_mib). */
		struct stat st;
		if (stat(im->rootfs, &st) == 0 && sb->rec.disk_mib > size_mib_up((uint64_t)st.st_size))
			vc.disk_mib = sb->rec.disk_mib;
		/* A restore of the template's snapshot where there can be one:
		 * its RAM mapped copy-on-write, its disk copied (small). */
		if (!vc.disk_mib && strcmp(sb->rec.boot_path, "cold"))
			ts = template_snapshot_for(sb, im);
		if (ts) {
			/* A new sandbox, as after a boot: its snapshots are generation 0's. */
			sb->generation = 0;
			deadline = t0 + RESTORE_TIMEOUT_MS;
			cleanup_free char *disk = xasprintf("%s/%s", sb->root, disk_file);
			unlink(disk);
			/* A raw disk by reflink where it can (else sparse); QEMU's
			 * overlay is small. */
			if ((r = cfg->vmm->disk_file ? file_copy_cow(tsnap_disk_path(ts), disk, 0600, NULL)
			                             : copy_file(tsnap_disk_path(ts), disk, 0600)) < 0)
				r = al_error_set(err, AL_ERR_INTERNAL, -r,
				                 "cannot copy the template snapshot's disk: %s", strerror(-r));
			else
				r = template_snapshot_open(ts, &mem_fd, &state_fd, err);
			vc.incoming_fd = mem_fd;
			vc.incoming_state_fd = state_fd;
			vc.mem_fd = tsnap_mem_fd(ts); /* -1 with Firecracker */
		} else {
			r = cfg->vmm->prepare_disk(&vc, err);
		}
	}
	pthread_mutex_lock(&sb->lock);
	strlcpy_al(sb->rec.boot_path, from ? "snapshot" : ts ? "template" : "cold", sizeof(sb->rec.boot_path));
	pthread_mutex_unlock(&sb->lock);
	/* The disk is the VMM's to write (and nothing else in the jail root). */
	if (r == 0)
		r = vmm_disk_give(cfg->vmm, sb->dirfd, sb->rec.jail_uid, err);
	if (r < 0)
		return r;
	uint64_t t_disk = now_ms_monotonic();
	if ((r = network_up(sb, 0, err)) < 0)
		return r;
	uint64_t t_net = now_ms_monotonic();
	vc.netns_fd = sb->net.ns_fd;
	struct vmm_jail jail;
	vmm_jail_spec(cfg->vmm, &vc, sb->rec.jail_uid, sb->rec.disk_mib, &jail);
	vc.jail = &jail;
	pid_t pid;
	if ((r = cfg->vmm->spawn(&vc, &pid, err)) < 0)
		return r;
	uint64_t t_spawn = now_ms_monotonic();
	pthread_mutex_lock(&sb->lock);
	sb->pid = pid;
	sb->our_child = true;
	sb->pidfd = pidfd_open_pid(pid);
	sb->rec.vmm_pid = pid;
	int pr = persist_locked(sb, err);
	pthread_mutex_unlock(&sb->lock);
	if (sb->pidfd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "pidfd_open on the VMM: %m");
	if (pr < 0)
		return pr;
	/* A restored guest's vsock channel can only be opened once it runs
	 * (restore_finish). */
	if ((r = attach(sb, deadline, !((from || ts) && channel_needs_running_guest()), err)) < 0)
		return r;
	uint64_t t_attach = now_ms_monotonic();
	if (from || ts) {
		if ((r = restore_finish(sb, &vc, deadline, err)) < 0)
			return r;
	} else if ((r = guest_channel_wait_hello(sb->ch, deadline, NULL)) != 0) {
		return hello_failed(sb, r, err);
	}
	uint64_t t_agent = now_ms_monotonic();
	/* The template's snapshot has the CA already. */
	if (ts && tsnap_ca_bundle(ts)[0]) {
		pthread_mutex_lock(&sb->lock);
		strlcpy_al(sb->rec.ca_bundle, tsnap_ca_bundle(ts), sizeof(sb->rec.ca_bundle));
		pthread_mutex_unlock(&sb->lock);
	} else if ((r = install_ca(sb, deadline, err)) < 0) {
		return r;
	}
	boot_phases_log(sb, t0, t_disk, t_net, t_spawn, t_attach, t_agent);
	pthread_mutex_lock(&sb->lock);
	sb->rec.boot_ms = (int64_t)(now_ms_monotonic() - t0);
	r = set_state_locked(sb, SANDBOX_RUNNING, NULL, err);
	pthread_mutex_unlock(&sb->lock);
	return r;
}

/* Tears down the runtime of a sandbox: monitor, VMM, fds. Keeps the dir. */
static void teardown(struct sandbox *sb)
{
	pthread_mutex_lock(&sb->lock);
	sb->stopping = true;
	pthread_mutex_unlock(&sb->lock);
	if (sb->ch)
		guest_channel_kill(sb->ch, "the sandbox is being stopped");
	monitor_stop(sb);
	vmm_stop_wait(sb);
	network_down(sb);
	if (sb->console_fd >= 0)
		console_drain(sb);
	/* The VMM's sockets go with it (its disk stays for a recover). */
	if (sb->pid <= 0 || sb->vmm_exited) {
		for (const char *const *f = vmm_runtime_files(cfg->vmm); *f; f++) {
			cleanup_free char *p = xasprintf("%s/%s", sb->root, *f);
			unlink(p);
		}
	}
	jail_release(sb);
}

/* A boot (of a create or a recover) failed with err: the runtime goes, the
 * record says why, with the console's last lines. */
static void boot_failed(struct sandbox *sb, const struct al_error *err)
{
	teardown(sb);
	pthread_mutex_lock(&sb->lock);
	char reason[2048];
	describe_exit(sb, err->message, reason, sizeof(reason));
	struct al_error e2;
	if (set_state_locked(sb, SANDBOX_ERROR, reason, &e2) < 0)
		log_error("sandbox %s: %s", sb->rec.id, e2.message);
	pthread_mutex_unlock(&sb->lock);
}

/* Quota check and registration in one step, so two creates cannot both take the last slot. */
static int registry_add_within_quota(struct sandbox *sb, const struct tenant_quota *quota, struct al_error *err)
{
	pthread_mutex_lock(&registry_lock);
	if (quota) {
		struct tenant_usage used = {0};
		for (struct sandbox *o = registry; o; o = o->next) {
			pthread_mutex_lock(&o->lock);
			if ((o->rec.state == SANDBOX_CREATING || o->rec.state == SANDBOX_RUNNING ||
			     o->rec.state == SANDBOX_PAUSED) &&
			    !strcmp(o->rec.tenant, sb->rec.tenant)) {
				used.sandboxes++;
				used.vcpus += o->rec.vcpus;
				used.memory_mib += o->rec.memory_mib;
			}
			pthread_mutex_unlock(&o->lock);
		}
		int r = quota_check(sb->rec.tenant, quota, &used, sb->rec.vcpus, sb->rec.memory_mib, err);
		if (r < 0) {
			pthread_mutex_unlock(&registry_lock);
			return r;
		}
	}
	sb->refs++;
	sb->next = registry;
	registry = sb;
	pthread_mutex_unlock(&registry_lock);
	return 0;
}

/* A create that holds a start slot: the record, the registry, the boot. */
static int create_started(const struct create_request *req, const char *tenant, const struct tenant_quota *quota,
                          const struct snapshot_info *from, const struct images *images, unsigned disk_mib,
                          struct sandbox_record *ret, struct al_error *err)
{
	struct images im = *images;
	int r;
	struct sandbox_record rec = {
	    .state = SANDBOX_CREATING,
	    .vcpus = from ? from->vcpus : req->vcpus,
	    .memory_mib = from ? from->memory_mib : req->memory_mib,
	    .disk_mib = disk_mib,
	    .boot_ms = -1,
	};
	if (req->cold_boot)
		strlcpy_al(rec.boot_path, "cold", sizeof(rec.boot_path));
	new_id(rec.id);
	strlcpy_al(rec.tenant, tenant ? tenant : req->tenant[0] ? req->tenant : TENANT_DEFAULT, sizeof(rec.tenant));
	/* Bindings only for what this request grants: a restore or fork never
	 * inherits them; each binding gets a new placeholder. */
	if ((r = secret_bindings_grant(rec.tenant, &req->secrets, &rec.secrets_json, err)) < 0)
		return r;
	strlcpy_al(rec.template_name, from ? from->template_name : req->template_name, sizeof(rec.template_name));
	strlcpy_al(rec.backend, cfg->vmm->name, sizeof(rec.backend));
	struct accel_info accel;
	accel_get(&accel);
	strlcpy_al(rec.accel, cfg->vmm->accel(), sizeof(rec.accel));
	strlcpy_al(rec.cpu, accel.cpu, sizeof(rec.cpu));
	strlcpy_al(rec.accel_reason, accel.reason, sizeof(rec.accel_reason));
	rec.created_ms = rec.updated_ms = now_ms_realtime();
	rec.env_json = kv_to_json(&req->env);
	rec.metadata_json = kv_to_json(&req->metadata);
	rec.network_json = req->network_json ? xstrdup(req->network_json) : default_network(from);
	rec.timeout_s = req->timeouts.timeout_s;
	rec.idle_timeout_s = req->timeouts.idle_timeout_s;
	strlcpy_al(rec.on_timeout, req->timeouts.on_timeout[0] ? req->timeouts.on_timeout : "kill",
	           sizeof(rec.on_timeout));
	struct sandbox *sb = sandbox_new(&rec);
	sandbox_record_release(&rec);
	if ((r = registry_add_within_quota(sb, quota, err)) < 0) {
		sandbox_unref(sb);
		return r;
	}
	if ((r = store_sandbox_insert(cfg->store, &sb->rec, err)) < 0) {
		registry_remove(sb);
		sandbox_unref(sb);
		return r;
	}
	events_emit("sandbox.state", sb->rec.tenant, sb->rec.id, json_pack("{s:s}", "state", "creating"));
	log_info("sandbox %s: creating (template %s, %u vCPU, %u MiB, %s/%s%s%s)", sb->rec.id, sb->rec.template_name,
	         sb->rec.vcpus, sb->rec.memory_mib, sb->rec.backend, sb->rec.accel, from ? ", from snapshot " : "",
	         from ? from->id : "");

	pthread_mutex_lock(&sb->op_lock);
	r = boot(sb, &im, from, false, err);
	if (r < 0) {
		boot_failed(sb, err);
		/* The disk is large and useless now; the logs stay until rm. */
		cleanup_free char *disk = xasprintf("%s/%s", sb->root, vmm_disk_file(cfg->vmm));
		unlink(disk);
		/* The record has the console lines; the answer names the sandbox to inspect. */
		al_error_prefix(err, "sandbox %s failed to boot (see 'airlock inspect %s')", sb->rec.id, sb->rec.id);
	} else {
		record_copy_out(sb, ret);
	}
	pthread_mutex_unlock(&sb->op_lock);
	sandbox_unref(sb);
	return r;
}

int sandbox_create(const struct create_request *req, const char *tenant, const struct tenant_quota *quota,
                   const struct snapshot_info *from, struct sandbox_record *ret, struct al_error *err)
{
	if (tenant && req->tenant[0] && strcmp(tenant, req->tenant))
		return al_error_set(
		    err, AL_ERR_FORBIDDEN, EPERM,
		    "tenant: your token belongs to tenant \"%s\"; it cannot create sandboxes for \"%s\"", tenant,
		    req->tenant);
	struct images im;
	int r = resolve_images(from ? from->template_name : req->template_name, &im, err);
	if (r < 0)
		return r;
	unsigned disk_mib = 0;
	if ((r = host_limits_check(req, from, &im, from ? from->vcpus : req->vcpus,
	                           from ? from->memory_mib : req->memory_mib, &disk_mib, err)) < 0)
		return r;
	/* Before anything is recorded: a create refused here leaves nothing. */
	if ((r = start_slot_acquire(from ? "restore" : "create", err)) < 0)
		return r;
	r = create_started(req, tenant, quota, from, &im, disk_mib, ret, err);
	start_slot_release();
	return r;
}

int sandbox_get(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	if (!sandbox_id_valid(id))
		return not_found(id, err);
	struct sandbox_record rec;
	struct sandbox *sb = registry_find(id);
	if (sb) {
		record_copy_out(sb, &rec);
		sandbox_unref(sb);
	} else {
		int r = store_sandbox_get(cfg->store, id, &rec, err);
		if (r < 0)
			return r;
	}
	if (!tenant_sees(tenant, &rec)) {
		sandbox_record_release(&rec);
		return not_found(id, err);
	}
	*ret = rec;
	return 0;
}

int sandbox_delete(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	struct sandbox *sb = NULL;
	int found = registry_find_visible(id, tenant, &sb, err);
	if (found < 0)
		return found;
	if (!found) {
		/* Not live: deleted already, or a record whose VMM is long gone. */
		struct sandbox_record rec;
		int r = store_sandbox_get(cfg->store, id, &rec, err);
		if (r < 0)
			return r;
		if (!tenant_sees(tenant, &rec)) {
			sandbox_record_release(&rec);
			return not_found(id, err);
		}
		if (rec.state != SANDBOX_DELETED) {
			sb = sandbox_new(&rec); /* our reference */
			registry_add(sb);       /* and the registry's */
		} else {
			*ret = rec;
			return 0;
		}
		sandbox_record_release(&rec);
	}
	/* A boot in progress is cut short, then waited for. */
	pthread_mutex_lock(&sb->lock);
	struct guest_channel *booting = NULL;
	if (sb->rec.state == SANDBOX_CREATING) {
		sb->cancel = true;
		booting = sb->ch;
	}
	pthread_mutex_unlock(&sb->lock);
	if (booting)
		guest_channel_kill(booting, "the sandbox was deleted while it booted");
	pthread_mutex_lock(&sb->op_lock);
	pthread_mutex_lock(&sb->lock);
	int r = 0;
	if (sb->rec.state == SANDBOX_DELETED) {
		sandbox_record_copy(ret, &sb->rec);
		pthread_mutex_unlock(&sb->lock);
		pthread_mutex_unlock(&sb->op_lock);
		sandbox_unref(sb);
		return 0;
	}
	r = set_state_locked(sb, SANDBOX_STOPPING, sb->rec.error, err);
	pthread_mutex_unlock(&sb->lock);
	if (r < 0) {
		pthread_mutex_unlock(&sb->op_lock);
		sandbox_unref(sb);
		return r;
	}
	teardown(sb);
	/* The channel and fds are released with the last reference: an exec
	 * that is still returning may hold one. */
	pthread_mutex_lock(&sb->lock);
	int rr = rm_rf(sb->dir);
	if (rr < 0)
		log_error("sandbox %s: cannot remove %s: %s", sb->rec.id, sb->dir, strerror(-rr));
	sb->rec.vmm_pid = 0;
	r = set_state_locked(sb, SANDBOX_DELETED, NULL, err);
	if (r == 0)
		sandbox_record_copy(ret, &sb->rec);
	pthread_mutex_unlock(&sb->lock);
	pthread_mutex_unlock(&sb->op_lock);
	registry_remove(sb);
	sandbox_unref(sb);
	return r;
}

/* A paused sandbox whose channel could not be opened while paused (a vsock
 * connection is the running guest's to accept: a re-attach or a snapshot
 * while paused, Firecracker) gets it now that it runs again. With op_lock
 * held. */
static int channel_at_resume_open(struct sandbox *sb, struct al_error *err)
{
	uint64_t deadline = now_ms_monotonic() + THAW_TIMEOUT_MS;
	int r = channel_reconnect(sb, deadline, err);
	if (r == 0 && (guest_channel_request_hello(sb->ch) < 0 || guest_channel_wait_hello(sb->ch, deadline, NULL) < 0))
		r = al_error_set(err, AL_ERR_UNAVAILABLE, ETIMEDOUT, "the guest agent did not answer after the resume");
	if (r < 0) {
		/* Running without a channel is no state to leave it in. */
		pthread_mutex_lock(&sb->lock);
		struct al_error e;
		set_state_locked(sb, SANDBOX_ERROR, err->message, &e);
		pthread_mutex_unlock(&sb->lock);
		return r;
	}
	guest_channel_set_paused(sb->ch, false);
	pthread_mutex_lock(&sb->lock);
	sb->channel_at_resume = false;
	pthread_mutex_unlock(&sb->lock);
	return 0;
}

/* Pause or resume under the sandbox's operation lock: lifecycle calls on one
 * sandbox are serialized, never interleaved. */
static int pause_resume(const char *id, const char *tenant, bool pause, struct sandbox_record *ret,
                        struct al_error *err)
{
	struct sandbox *sb = NULL;
	int fr = find_live(id, tenant,
	                   pause ? "only a running sandbox can be paused" : "only a paused sandbox can be resumed", &sb,
	                   err);
	if (fr < 0)
		return fr;
	pthread_mutex_lock(&sb->op_lock);
	pthread_mutex_lock(&sb->lock);
	int r = 0;
	enum sandbox_state from = pause ? SANDBOX_RUNNING : SANDBOX_PAUSED;
	if (sb->rec.state == (pause ? SANDBOX_PAUSED : SANDBOX_RUNNING))
		r = 1; /* already there: idempotent */
	else if (sb->rec.state != from || sb->stopping || (!sb->ch && !(!pause && sb->channel_at_resume)))
		r = al_error_set(err, AL_ERR_CONFLICT, EBUSY, "sandbox %s is %s: only a %s sandbox can be %s", id,
		                 sandbox_state_name(sb->rec.state), sandbox_state_name(from),
		                 pause ? "paused" : "resumed");
	pthread_mutex_unlock(&sb->lock);
	if (r == 0) {
		struct vmm_config vc = {.sandbox_id = sb->rec.id, .dir = sb->dir, .root = sb->root, .dirfd = sb->dirfd};
		if (pause) {
			guest_channel_set_paused(sb->ch, true);
			r = cfg->vmm->pause(&vc, err);
			if (r < 0)
				guest_channel_set_paused(sb->ch, false);
		} else {
			r = cfg->vmm->resume(&vc, err);
			if (r == 0 && sb->channel_at_resume)
				r = channel_at_resume_open(sb, err);
			else if (r == 0)
				guest_channel_set_paused(sb->ch, false);
		}
		if (r == 0) {
			pthread_mutex_lock(&sb->lock);
			r = set_state_locked(sb, pause ? SANDBOX_PAUSED : SANDBOX_RUNNING, NULL, err);
			sb->last_activity_ms = now_ms_monotonic(); /* a resume is activity: idle counts anew */
			pthread_mutex_unlock(&sb->lock);
		}
	}
	if (r >= 0) {
		record_copy_out(sb, ret);
		r = 0;
	}
	pthread_mutex_unlock(&sb->op_lock);
	sandbox_unref(sb);
	return r;
}

int sandbox_pause(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	return pause_resume(id, tenant, true, ret, err);
}

int sandbox_resume(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	return pause_resume(id, tenant, false, ret, err);
}

/* ---- snapshots, restores, forks ------------------------------------------------------------------ */

static int images_digests(const char *template_name, char kernel_sha[65], char initrd_sha[65], struct al_error *err)
{
	struct images im;
	int r = resolve_images(template_name, &im, err);
	if (r < 0)
		return r;
	if ((r = file_sha256(im.kernel, kernel_sha)) < 0 || (r = file_sha256(im.initrd, initrd_sha)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read the guest kernel: %s", strerror(-r));
	return 0;
}

int sandbox_snapshot_usable(const char *snapshot_id, const char *tenant, struct snapshot_info *ret,
                            struct al_error *err)
{
	struct snapshot_info info;
	int r = snapshot_get(snapshot_id, tenant, &info, err);
	if (r < 0)
		return r;
	if (strcmp(info.backend, cfg->vmm->name))
		return al_error_set(err, AL_ERR_CONFLICT, EINVAL,
		                    "snapshot %s was taken with the %s backend; this daemon runs %s", info.id,
		                    info.backend, cfg->vmm->name);
	/* A saved CPU state loads only where it was made. Waits while the
	 * accelerator's probe runs. */
	struct accel_info accel;
	if (accel_wait(now_ms_monotonic() + (uint64_t)cfg->accel_wait_s * 1000u, &accel) == 0 && info.accel[0] &&
	    (strcmp(info.accel, accel_name(&accel)) || (info.cpu[0] && strcmp(info.cpu, accel.cpu))))
		return al_error_set(
		    err, AL_ERR_CONFLICT, EINVAL,
		    "snapshot %s was taken on %s (-cpu %s); this daemon runs its guests on %s (-cpu %s), "
		    "and a saved CPU state loads only on the accelerator and CPU model that made it",
		    info.id, info.accel, info.cpu[0] ? info.cpu : "?", accel_name(&accel), accel.cpu);
	char kernel_sha[65], initrd_sha[65];
	if ((r = images_digests(info.template_name, kernel_sha, initrd_sha, err)) < 0) {
		if (err->code == AL_ERR_INVALID_ARGUMENT)
			err->code = AL_ERR_CONFLICT;
		return r;
	}
	/* A guest's memory only makes sense with the kernel it was running. */
	if (strcmp(kernel_sha, info.kernel_sha) || strcmp(initrd_sha, info.initrd_sha))
		return al_error_set(err, AL_ERR_CONFLICT, EINVAL,
		                    "snapshot %s was taken with another guest kernel or initramfs than the one "
		                    "installed now; it cannot be restored",
		                    info.id);
	if ((r = snapshot_verify(&info, err)) < 0)
		return r;
	*ret = info;
	return 0;
}

/* A save by name (save_path): the VMM writes memory and device state into
 * its jail root, the daemon takes them into dir. */
static int snapshot_write_by_name(struct sandbox *sb, const struct vmm_config *vc, const char *dir,
                                  struct al_error *err)
{
	cleanup_free char *mem = xasprintf("%s/%s", dir, SNAPSHOT_MEMORY);
	cleanup_free char *state = xasprintf("%s/%s", dir, SNAPSHOT_STATE);
	struct vmm_config sized = *vc;
	sized.memory_mib = sb->rec.memory_mib;
	int r = vmm_save_by_name(cfg->vmm, &sized, mem, state, err);
	if (r < 0)
		return r;
	cleanup_free char *src = xasprintf("%s/%s", sb->root, vmm_disk_file(cfg->vmm));
	cleanup_free char *dst = xasprintf("%s/%s", dir, snapshot_disk_name(cfg->vmm->name));
	if ((r = file_copy_cow(src, dst, 0600, NULL)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot copy the disk into the snapshot: %s%s",
		                    strerror(-r), r == -ENOSPC ? " (the state dir's filesystem is full)" : "");
	return 0;
}

/* Writes the snapshot's files into dir (a fresh directory); the guest is paused. */
static int snapshot_write(struct sandbox *sb, const struct vmm_config *vc, const char *dir, struct al_error *err)
{
	if (!cfg->vmm->save)
		return snapshot_write_by_name(sb, vc, dir, err);
	/* The VMM gets the open file, not a path (it is outside its jail). */
	cleanup_free char *mem = xasprintf("%s/%s", dir, SNAPSHOT_MEMORY);
	cleanup_close int fd = open(mem, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", mem);
	int r = cfg->vmm->save(vc, fd, err);
	if (r < 0)
		return r;
	if (fsync(fd) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot write the snapshot's memory: %m%s",
		                    errno == ENOSPC ? " (the state dir's filesystem is full)" : "");
	cleanup_free char *src = xasprintf("%s/%s", sb->root, VMM_DISK);
	cleanup_free char *dst = xasprintf("%s/%s", dir, SNAPSHOT_DISK);
	if ((r = copy_file(src, dst, 0600)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot copy the disk into the snapshot: %s%s",
		                    strerror(-r), r == -ENOSPC ? " (the state dir's filesystem is full)" : "");
	return 0;
}

/* Digests, size and metadata of the files in dir. */
static int snapshot_describe(const char *dir, struct snapshot_info *info, struct al_error *err)
{
	cleanup_free char *mem = xasprintf("%s/%s", dir, SNAPSHOT_MEMORY);
	cleanup_free char *disk = xasprintf("%s/%s", dir, snapshot_disk_name(info->backend));
	cleanup_free char *state = xasprintf("%s/%s", dir, SNAPSHOT_STATE);
	int r;
	if ((r = file_sha256(mem, info->memory_sha)) < 0 || (r = file_sha256(disk, info->disk_sha)) < 0 ||
	    (cfg->vmm->state_suffix && (r = file_sha256(state, info->state_sha)) < 0))
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read the snapshot back: %s", strerror(-r));
	struct stat a, b, c;
	if (stat(mem, &a) == 0 && stat(disk, &b) == 0)
		info->size_bytes = (uint64_t)a.st_blocks * 512u + (uint64_t)b.st_blocks * 512u;
	if (cfg->vmm->state_suffix && stat(state, &c) == 0)
		info->size_bytes += (uint64_t)c.st_blocks * 512u;
	cleanup_json json_t *meta = snapshot_to_json(info);
	cleanup_free char *text = json_dumps(meta, JSON_INDENT(2));
	cleanup_free char *path = xasprintf("%s/%s", dir, SNAPSHOT_META);
	if ((r = write_file_atomic(path, text, strlen(text), 0600)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot write %s: %s", path, strerror(-r));
	return 0;
}

int sandbox_snapshot(const char *id, const char *tenant, const char *name, bool internal, struct snapshot_info *ret,
                     struct al_error *err)
{
	struct sandbox *sb = NULL;
	int fr = find_live(id, tenant, "only a running or paused sandbox can be snapshotted", &sb, err);
	if (fr < 0)
		return fr;
	pthread_mutex_lock(&sb->op_lock);
	pthread_mutex_lock(&sb->lock);
	int r = 0;
	enum sandbox_state before = sb->rec.state;
	if ((before != SANDBOX_RUNNING && before != SANDBOX_PAUSED) || sb->stopping ||
	    (!sb->ch && !sb->channel_at_resume))
		r = al_error_set(err, AL_ERR_CONFLICT, EBUSY,
		                 "sandbox %s is %s: only a running or paused sandbox can be snapshotted", id,
		                 sandbox_state_name(before));
	struct snapshot_info info = {0};
	if (r == 0) {
		snapshot_new_id(info.id);
		strlcpy_al(info.name, name, sizeof(info.name));
		strlcpy_al(info.sandbox_id, sb->rec.id, sizeof(info.sandbox_id));
		strlcpy_al(info.tenant, sb->rec.tenant, sizeof(info.tenant));
		strlcpy_al(info.template_name, sb->rec.template_name, sizeof(info.template_name));
		strlcpy_al(info.backend, cfg->vmm->name, sizeof(info.backend));
		strlcpy_al(info.accel, sb->rec.accel, sizeof(info.accel));
		strlcpy_al(info.cpu, sb->rec.cpu, sizeof(info.cpu));
		info.vcpus = sb->rec.vcpus;
		info.memory_mib = sb->rec.memory_mib;
		info.generation = sb->generation;
		info.internal = internal;
		info.created_ms = now_ms_realtime();
		/* A paused sandbox stays paused while it is saved: after a crash it
		 * comes back paused. A running one is "snapshotting" and comes back
		 * running. */
		if (before == SANDBOX_RUNNING)
			r = set_state_locked(sb, SANDBOX_SNAPSHOTTING, NULL, err);
	}
	pthread_mutex_unlock(&sb->lock);
	if (r < 0) {
		pthread_mutex_unlock(&sb->op_lock);
		sandbox_unref(sb);
		return r;
	}
	bool running = before == SANDBOX_RUNNING;
	struct vmm_config vc = {.sandbox_id = sb->rec.id, .dir = sb->dir, .root = sb->root, .dirfd = sb->dirfd};
	/* Guest processes stop first (a paused guest cannot be asked: its vCPUs are stopped already). */
	bool frozen = false;
	if (r == 0)
		r = images_digests(sb->rec.template_name, info.kernel_sha, info.initrd_sha, err);
	if (r == 0 && running) {
		r = guest_channel_freeze(sb->ch, now_ms_monotonic() + FREEZE_TIMEOUT_MS, err);
		frozen = r == 0;
	}
	bool vm_paused = false;
	if (r == 0 && running) {
		/* The channel holds everything since FREEZE's OK, until the memory is saved. */
		guest_channel_set_paused(sb->ch, true);
		r = cfg->vmm->pause(&vc, err);
		vm_paused = r == 0;
	}
	/* A save that resets the channel's connection (Firecracker): nobody
	 * reads its end, so that the streams live on (channel_reconnect). */
	bool reset = cfg->vmm->channel_resets_on_save && r == 0;
	if (reset)
		channel_detach(sb);
	cleanup_free char *final_dir = snapshot_dir(info.id);
	cleanup_free char *tmp_dir = xasprintf("%s.tmp", final_dir);
	if (r == 0 && mkdir(tmp_dir, 0700) < 0)
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", tmp_dir);
	if (r == 0)
		r = snapshot_write(sb, &vc, tmp_dir, err);
	if (r == 0)
		r = snapshot_describe(tmp_dir, &info, err);
	if (r == 0 && rename(tmp_dir, final_dir) < 0)
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "cannot publish the snapshot: %m");
	if (r == 0 && (r = snapshot_insert(&info, err)) < 0)
		rm_rf(final_dir);
	if (r < 0)
		rm_rf(tmp_dir); /* nothing half-written stays */
	/* Whatever happened, the sandbox goes back to how it was. */
	struct al_error back = {0};
	bool resumed = vm_paused && cfg->vmm->resume(&vc, &back) == 0;
	if (resumed)
		guest_channel_set_paused(sb->ch, false);
	if (frozen)
		guest_channel_release_hold(sb->ch);
	/* A save that reset the channel (Firecracker): a new connection under
	 * it. A paused sandbox gets it when it resumes (a vsock connection is
	 * the running guest's to accept); meanwhile its exit is watched. */
	bool broken = false;
	if (reset && before == SANDBOX_PAUSED) {
		pthread_mutex_lock(&sb->lock);
		sb->channel_at_resume = true;
		pthread_mutex_unlock(&sb->lock);
		monitor_start(sb);
	} else if (reset && (!resumed || channel_reconnect(sb, now_ms_monotonic() + THAW_TIMEOUT_MS, &back) < 0 ||
	                     guest_channel_request_hello(sb->ch) < 0 ||
	                     guest_channel_wait_hello(sb->ch, now_ms_monotonic() + THAW_TIMEOUT_MS, NULL) < 0)) {
		log_error("sandbox %s: after the snapshot, the guest channel did not come back: %s", sb->rec.id,
		          back.message[0] ? back.message : "no HELLO");
		frozen = false;
		broken = true;
	}
	if (frozen && thaw(sb, false, &back) < 0)
		log_error("sandbox %s: after the snapshot: %s", sb->rec.id, back.message);
	pthread_mutex_lock(&sb->lock);
	if (sb->rec.state == SANDBOX_SNAPSHOTTING && set_state_locked(sb, before, NULL, &back) < 0)
		log_error("sandbox %s: %s", sb->rec.id, back.message);
	pthread_mutex_unlock(&sb->lock);
	if (broken)
		sandbox_fail(sb, "the guest channel did not come back after the snapshot");
	pthread_mutex_unlock(&sb->op_lock);
	sandbox_unref(sb);
	if (r == 0) {
		log_info("sandbox %s: snapshot %s (%s, %" PRIu64 " bytes)", id, info.id, info.name, info.size_bytes);
		*ret = info;
	}
	return r;
}

#define FORK_MAX 16

int sandbox_fork(const char *id, const char *tenant, const struct tenant_quota *quota, unsigned count,
                 const struct kv_list *grants, struct sandbox_record **ret, struct al_error *err)
{
	if (count < 1 || count > FORK_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "count: from 1 to %d", FORK_MAX);
	struct snapshot_info snap;
	char name[SNAPSHOT_NAME_MAX + 1];
	snprintf(name, sizeof(name), "fork of %s", id);
	int r = sandbox_snapshot(id, tenant, name, true, &snap, err);
	if (r < 0)
		return r;
	struct sandbox_record *recs = xcalloc(count, sizeof(*recs));
	struct sandbox_record parent;
	if ((r = sandbox_get(id, tenant, &parent, err)) < 0) {
		free(recs);
		snapshot_delete(snap.id, NULL, NULL);
		return r;
	}
	struct create_request cr = {0};
	strlcpy_al(cr.tenant, parent.tenant, sizeof(cr.tenant));
	/* Borrowed: cr is not released. The parent's bindings are not copied. */
	if (grants)
		cr.secrets = *grants;
	/* The copies start with the parent's egress policy. */
	cleanup_free char *parent_network = xstrdup(parent.network_json ? parent.network_json : NETWORK_POLICY_EMPTY);
	cr.network_json = parent_network;
	cleanup_json json_t *env = json_loads(parent.env_json, 0, NULL);
	cleanup_json json_t *meta = json_loads(parent.metadata_json, 0, NULL);
	sandbox_record_release(&parent);
	unsigned made = 0;
	for (; made < count && r == 0; made++) {
		r = sandbox_create(&cr, tenant, quota, &snap, &recs[made], err);
		if (r < 0)
			break;
		/* The copies keep the parent's env and metadata. */
		struct sandbox *child = registry_find(recs[made].id);
		if (child) {
			pthread_mutex_lock(&child->lock);
			free(child->rec.env_json);
			free(child->rec.metadata_json);
			child->rec.env_json = json_dumps(env ? env : json_object(), JSON_COMPACT | JSON_SORT_KEYS);
			child->rec.metadata_json =
			    json_dumps(meta ? meta : json_object(), JSON_COMPACT | JSON_SORT_KEYS);
			struct al_error e2;
			persist_locked(child, &e2);
			sandbox_record_release(&recs[made]);
			sandbox_record_copy(&recs[made], &child->rec);
			pthread_mutex_unlock(&child->lock);
			sandbox_unref(child);
		}
	}
	/* The copies have their own disks and memory: the fork's snapshot goes. */
	struct al_error e3;
	snapshot_delete(snap.id, NULL, &e3);
	if (r < 0) {
		/* All or nothing. */
		for (unsigned i = 0; i < made; i++) {
			struct sandbox_record gone;
			if (sandbox_delete(recs[i].id, NULL, &gone, &e3) == 0)
				sandbox_record_release(&gone);
			sandbox_record_release(&recs[i]);
		}
		free(recs);
		return r;
	}
	*ret = recs;
	return 0;
}

/* ---- recover ------------------------------------------------------------------------------------- */

/* The latest user snapshot of a sandbox that can still be restored. */
static bool latest_snapshot(const char *id, const char *tenant, struct snapshot_info *ret)
{
	struct snapshot_info *v = NULL;
	size_t n = 0;
	struct al_error e;
	if (snapshot_list(NULL, id, &v, &n, &e) < 0)
		return false;
	bool found = false;
	for (size_t i = 0; i < n && !found; i++) /* newest first */
		found = sandbox_snapshot_usable(v[i].id, tenant, ret, &e) == 0;
	free(v);
	return found;
}

int sandbox_recover(const char *id, const char *tenant, bool memory, struct sandbox_record *ret, struct al_error *err)
{
	if (!sandbox_id_valid(id))
		return not_found(id, err);
	struct sandbox *sb = registry_find(id);
	if (!sb) {
		/* A record whose VMM died while the daemon was away: bring it back to life. */
		struct sandbox_record rec;
		int r = store_sandbox_get(cfg->store, id, &rec, err);
		if (r < 0)
			return r;
		if (!tenant_sees(tenant, &rec) || rec.state != SANDBOX_ERROR) {
			r = tenant_sees(tenant, &rec) ? al_error_set(err, AL_ERR_CONFLICT, EBUSY,
			                                             "sandbox %s is %s: only a sandbox in state "
			                                             "error can be recovered",
			                                             id, sandbox_state_name(rec.state))
			                              : not_found(id, err);
			sandbox_record_release(&rec);
			return r;
		}
		sb = sandbox_new(&rec);
		sandbox_record_release(&rec);
		registry_add(sb);
	}
	pthread_mutex_lock(&sb->op_lock);
	pthread_mutex_lock(&sb->lock);
	int r = 0;
	if (!tenant_sees(tenant, &sb->rec))
		r = not_found(id, err);
	else if (sb->rec.state != SANDBOX_ERROR)
		r = al_error_set(err, AL_ERR_CONFLICT, EBUSY,
		                 "sandbox %s is %s: only a sandbox in state error can be recovered", id,
		                 sandbox_state_name(sb->rec.state));
	pthread_mutex_unlock(&sb->lock);
	struct snapshot_info snap;
	bool from_snapshot = r == 0 && memory && latest_snapshot(id, tenant, &snap);
	struct images im;
	if (r == 0)
		r = resolve_images(sb->rec.template_name, &im, err);
	/* A slot before anything changes: a recover refused here leaves the sandbox as it was. */
	bool slot = false;
	if (r == 0)
		slot = (r = start_slot_acquire("recover", err)) == 0;
	if (r == 0) {
		/* Whatever is left of the old VMM goes; its channel retires. */
		teardown(sb);
		pthread_mutex_lock(&sb->lock);
		channel_retire_locked(sb);
		int *fds[] = {&sb->pidfd, &sb->console_fd, &sb->console_log_fd, &sb->wake_fd};
		for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
			if (*fds[i] >= 0) {
				close(*fds[i]);
				*fds[i] = -1;
			}
		sb->pid = 0;
		sb->vmm_exited = false;
		sb->stopping = false;
		sb->cancel = false;
		sb->rec.boot_ms = -1;
		r = set_state_locked(sb, SANDBOX_CREATING, NULL, err);
		pthread_mutex_unlock(&sb->lock);
	}
	if (r == 0) {
		log_info("sandbox %s: recovering %s", id, from_snapshot ? snap.id : "by a cold boot of its disk");
		r = boot(sb, &im, from_snapshot ? &snap : NULL, true, err);
		if (r < 0) {
			boot_failed(sb, err);
			al_error_prefix(err, "sandbox %s could not be recovered", id);
		}
	}
	if (slot)
		start_slot_release();
	if (r == 0)
		record_copy_out(sb, ret);
	pthread_mutex_unlock(&sb->op_lock);
	sandbox_unref(sb);
	return r;
}

/* The variables that point TLS clients at a bundle that trusts the Airlock
 * CA (the sandbox's own env may override them). */
static void ca_env(const char *bundle, json_t *o)
{
	if (!bundle[0])
		return;
	static const char *const names[] = {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		json_object_set_new(o, names[i], json_string(bundle));
	json_object_set_new(o, "NODE_EXTRA_CA_CERTS", json_string(CA_GUEST_CERT));
}

char **sandbox_env_merge(struct sandbox *sb, const struct kv_list *over, size_t *ret_n)
{
	/* Lowest first: the CA variables, the sandbox's env, the secrets'
	 * placeholders, then the request's own env. */
	cleanup_json json_t *o = json_object();
	pthread_mutex_lock(&sb->lock);
	cleanup_json json_t *own = json_loads(sb->rec.env_json, 0, NULL);
	ca_env(sb->rec.ca_bundle, o);
	if (json_is_object(own))
		json_object_update(o, own);
	secret_bindings_env(sb->rec.secrets_json, o);
	pthread_mutex_unlock(&sb->lock);
	for (size_t i = 0; i < over->n; i++)
		json_object_set_new(o, over->keys[i], json_string(over->values[i]));
	size_t n = json_object_size(o), k = 0;
	char **env = xcalloc(n + 1, sizeof(char *));
	const char *key;
	json_t *v;
	json_object_foreach (o, key, v) {
		env[k++] = xasprintf("%s=%s", key, json_string_value(v));
	}
	*ret_n = k;
	return env;
}

int sandbox_exec(const char *id, const char *tenant, const struct exec_request *req, struct exec_result *ret,
                 char ret_process_id[32], struct al_error *err)
{
	struct sandbox *sb = NULL;
	int r = sandbox_acquire(id, tenant, &sb, err);
	if (r < 0)
		return r;
	size_t n_env = 0;
	char **env = sandbox_env_merge(sb, &req->env, &n_env);
	struct guest_channel *ch = sb->ch;
	uint64_t start = now_ms_monotonic();
	uint64_t deadline = start + (uint64_t)req->timeout_s * 1000u + GUEST_EXEC_GRACE_MS;
	struct guest_stream *s = NULL;
	char pid[PROCESS_ID_MAX + 1];
	r = process_start(sb->procs, ch, req, env, n_env, GUEST_STREAM_COLLECT, pid, &s, err);
	env_free(env, n_env);
	if (r == 0 && req->stdin_data) {
		/* A zero-length send is the EOF, so empty stdin is just that. */
		r = guest_stream_send_data(ch, s, AIRLOCK_FRAME_STDIN, req->stdin_data, req->stdin_len, deadline);
		if (r == 0 && req->stdin_len > 0)
			r = guest_stream_send_data(ch, s, AIRLOCK_FRAME_STDIN, NULL, 0, deadline);
		if (r == -EPIPE)
			r = 0; /* the process ended without reading it all */
		if (r < 0)
			r = al_error_set(err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_GUEST, -r,
			                 "cannot send stdin to the command: %s", strerror(-r));
	}
	if (r == 0 && (r = guest_stream_wait_done(ch, s, deadline)) < 0) {
		char why[512] = "";
		guest_channel_dead(ch, why, sizeof(why));
		r = r == -ETIMEDOUT ? al_error_set(err, AL_ERR_TIMEOUT, ETIMEDOUT,
		                                   "the guest agent did not report the command's end in time")
		                    : al_error_set(err, AL_ERR_GUEST, -r,
		                                   "the sandbox's guest went away during the command: %s", why);
	}
	if (r == 0) {
		uint8_t type = 0;
		cleanup_json json_t *result = NULL;
		guest_stream_done(ch, s, &type, &result);
		struct exec_result res = {0};
		r = guest_result_to_exit(type, result, &res.status, err);
		if (r == 0) {
			guest_stream_take_output(ch, s, res.out);
			/* Past max_output_bytes the output was dropped as it came: counted. */
			if (res.out[0].truncated || res.out[1].truncated)
				metrics_count_exec_truncated((res.out[0].total - res.out[0].len) +
				                             (res.out[1].total - res.out[1].len));
			res.duration_ms = now_ms_monotonic() - start;
			*ret = res;
			strlcpy_al(ret_process_id, pid, 32);
		}
	}
	if (s)
		guest_stream_unref(ch, s);
	sandbox_release(sb);
	return r;
}

/* ---- timeouts ------------------------------------------------------------------------------------ */

#define REAPER_PERIOD_MS 1000

int sandbox_set_timeouts(const char *id, const char *tenant, const struct timeout_request *t,
                         struct sandbox_record *ret, struct al_error *err)
{
	struct sandbox *sb = NULL;
	int r = find_live(id, tenant, "", &sb, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sb->lock);
	/* A new timeout counts from now, like setting an alarm. */
	if (t->has_timeout) {
		sb->rec.timeout_s = t->timeout_s;
		sb->rec.run_ms = 0;
		if (sb->rec.running_since_ms)
			sb->rec.running_since_ms = now_ms_realtime();
	}
	if (t->has_on_timeout)
		strlcpy_al(sb->rec.on_timeout, t->on_timeout, sizeof(sb->rec.on_timeout));
	if (t->has_idle)
		sb->rec.idle_timeout_s = t->idle_timeout_s;
	sb->last_activity_ms = now_ms_monotonic();
	r = persist_locked(sb, err);
	if (r == 0)
		sandbox_record_copy(ret, &sb->rec);
	pthread_mutex_unlock(&sb->lock);
	sandbox_unref(sb);
	return r;
}

int sandbox_network_set(const char *id, const char *tenant, const char *policy_json, struct sandbox_record *ret,
                        struct al_error *err)
{
	struct sandbox *sb = NULL;
	int r = find_live(id, tenant, "", &sb, err);
	if (r < 0)
		return r;
	/* op_lock: not in the middle of a boot or teardown, so whether the
	 * gateway knows the sandbox cannot change under us. */
	pthread_mutex_lock(&sb->op_lock);
	pthread_mutex_lock(&sb->lock);
	char *old = TAKE_PTR(sb->rec.network_json);
	sb->rec.network_json = xstrdup(policy_json);
	r = persist_locked(sb, err);
	pthread_mutex_unlock(&sb->lock);
	if (r == 0 && sb->net_registered)
		r = egress_sandbox_set_policy(sb->rec.id, policy_json, err);
	pthread_mutex_lock(&sb->lock);
	if (r < 0) {
		/* Not applied: the record says what is enforced. */
		free(sb->rec.network_json);
		sb->rec.network_json = TAKE_PTR(old);
		struct al_error ignored;
		persist_locked(sb, &ignored);
	} else {
		sb->last_activity_ms = now_ms_monotonic();
		sandbox_record_copy(ret, &sb->rec);
	}
	pthread_mutex_unlock(&sb->lock);
	pthread_mutex_unlock(&sb->op_lock);
	free(old);
	if (r == 0) {
		cleanup_json json_t *policy = json_loads(policy_json, 0, NULL);
		events_emit("network.policy", ret->tenant, ret->id, json_pack("{sO}", "policy", policy));
	}
	sandbox_unref(sb);
	return r;
}

int sandbox_network_dropped(const char *id, const char *tenant, uint64_t *ret_packets, uint64_t *ret_bytes,
                            struct al_error *err)
{
	struct sandbox *sb = NULL;
	int r = find_live(id, tenant, "", &sb, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sb->op_lock);
	r = sb->net.ns_fd >= 0 ? netns_dropped(sb->net.ns_fd, ret_packets, ret_bytes, err)
	                       : al_error_set(err, AL_ERR_CONFLICT, ENOENT, "sandbox %s has no network", id);
	pthread_mutex_unlock(&sb->op_lock);
	sandbox_unref(sb);
	return r;
}

enum timeout_action { TIMEOUT_NONE, TIMEOUT_KILL, TIMEOUT_PAUSE };

static enum timeout_action due(struct sandbox *sb, const char **ret_why)
{
	enum timeout_action a = TIMEOUT_NONE;
	pthread_mutex_lock(&sb->lock);
	if (sb->rec.state == SANDBOX_RUNNING && !sb->stopping) {
		uint64_t now = now_ms_realtime();
		uint64_t used =
		    sb->rec.run_ms +
		    (sb->rec.running_since_ms && now > sb->rec.running_since_ms ? now - sb->rec.running_since_ms : 0);
		if (sb->rec.timeout_s && used >= (uint64_t)sb->rec.timeout_s * 1000u) {
			a = strcmp(sb->rec.on_timeout, "pause") ? TIMEOUT_KILL : TIMEOUT_PAUSE;
			*ret_why = "timeout";
		} else if (sb->rec.idle_timeout_s && sb->refs <= 1 &&
		           now_ms_monotonic() - sb->last_activity_ms >= (uint64_t)sb->rec.idle_timeout_s * 1000u) {
			/* refs > 1: a request (an exec, a stream, an upload) holds it: not idle. */
			a = TIMEOUT_PAUSE;
			*ret_why = "idle_timeout";
		}
	}
	pthread_mutex_unlock(&sb->lock);
	return a;
}

/* After a timeout paused a sandbox, its timeout counts again from zero once it is resumed. */
static void timeout_rearm(const char *id)
{
	struct sandbox *sb = registry_find(id);
	if (!sb)
		return;
	pthread_mutex_lock(&sb->lock);
	sb->rec.run_ms = 0;
	struct al_error e;
	persist_locked(sb, &e);
	pthread_mutex_unlock(&sb->lock);
	sandbox_unref(sb);
}

/* ---- reclaiming, and the watchdog ------------------------------------------------------ */

/* Whether a sandbox in error still holds host resources; with op_lock held. */
static bool holds_runtime(struct sandbox *sb)
{
	return sb->has_monitor || sb->net_registered || sb->net.ns_fd >= 0 || (sb->pid > 0 && !sb->vmm_exited);
}

/* Everything a sandbox in error holds on the host goes: its monitor, the
 * VMM (killed by pidfd and waited for), its network namespace (the
 * gateway's listeners, the daemon's fd), the sockets in its directory. Its
 * disk and logs stay (recover, inspect); the record says why. With op_lock
 * held. */
static void reclaim_locked(struct sandbox *sb)
{
	teardown(sb);
}

/* Every sandbox of the registry, each with a reference the caller drops. */
static struct sandbox **registry_snapshot(size_t *ret_n)
{
	pthread_mutex_lock(&registry_lock);
	size_t n = 0, i = 0;
	for (struct sandbox *sb = registry; sb; sb = sb->next)
		n++;
	struct sandbox **v = xcalloc(n ? n : 1, sizeof(*v));
	for (struct sandbox *sb = registry; sb; sb = sb->next) {
		sb->refs++;
		v[i++] = sb;
	}
	pthread_mutex_unlock(&registry_lock);
	*ret_n = n;
	return v;
}

/* Sandboxes whose VMM died (or was killed for breaking the protocol) are in
 * error with their namespace and sockets still there: reclaim them. */
static void reclaim_errored(void)
{
	size_t n;
	struct sandbox **v = registry_snapshot(&n);
	for (size_t i = 0; i < n; i++) {
		struct sandbox *sb = v[i];
		pthread_mutex_lock(&sb->lock);
		bool errored = sb->rec.state == SANDBOX_ERROR && !sb->stopping;
		pthread_mutex_unlock(&sb->lock);
		/* Busy: a recover or delete is at it, and does its own teardown. */
		if (errored && pthread_mutex_trylock(&sb->op_lock) == 0) {
			pthread_mutex_lock(&sb->lock);
			errored = sb->rec.state == SANDBOX_ERROR && !sb->stopping;
			pthread_mutex_unlock(&sb->lock);
			if (errored && holds_runtime(sb)) {
				reclaim_locked(sb);
				log_info("sandbox %s: in error; its VMM, network namespace and sockets are gone",
				         sb->rec.id);
			}
			pthread_mutex_unlock(&sb->op_lock);
		}
		sandbox_unref(sb);
	}
	free(v);
}

/* A query the watchdog makes of QEMU never waits longer than this. */
#define WATCHDOG_PROBE_MS 1000u

/* The watchdog found a VMM that does not answer: the sandbox goes to error
 * with the reason, the VMM is killed by pidfd, everything is reclaimed.
 * With op_lock held. */
static void watchdog_kill(struct sandbox *sb, const char *unresponsive, uint64_t silent_ms, uint64_t waited_ms,
                          const char *detail)
{
	char why[512], waited[96] = "";
	if (waited_ms >= 1000u)
		snprintf(waited, sizeof(waited), ", %" PRIu64 " s of it waiting for a CPU", waited_ms / 1000u);
	snprintf(why, sizeof(why),
	         "the watchdog killed the VM: %s%s for %" PRIu64 " s%s (airlockd --watchdog-s %u)%s%s",
	         strcmp(unresponsive, "vmm") ? "its guest agent did not answer (HELLO)" : "its VMM did not answer ",
	         strcmp(unresponsive, "vmm") ? "" : vmm_probe_what(cfg->vmm), silent_ms / 1000u, waited,
	         cfg->watchdog_s, detail[0] ? "; last: " : "", detail);
	pthread_mutex_lock(&sb->lock);
	bool running = sb->rec.state == SANDBOX_RUNNING && !sb->stopping;
	pthread_mutex_unlock(&sb->lock);
	if (!running)
		return;
	log_error("sandbox %s: %s", sb->rec.id, why);
	events_emit("sandbox.watchdog", sb->rec.tenant, sb->rec.id,
	            json_pack("{s:s, s:I, s:s}", "unresponsive", unresponsive, "silent_ms", (json_int_t)silent_ms,
	                      "reason", why));
	metrics_count_watchdog_kill(unresponsive);
	pthread_mutex_lock(&sb->lock);
	char reason[2048];
	describe_exit(sb, why, reason, sizeof(reason));
	struct al_error e;
	if (set_state_locked(sb, SANDBOX_ERROR, reason, &e) < 0)
		log_error("sandbox %s: %s", sb->rec.id, e.message);
	pthread_mutex_unlock(&sb->lock);
	/* Requests waiting on the guest get the reason; then the monitor stops
	 * (it must not reap what we kill), and the VMM goes. */
	if (sb->ch)
		guest_channel_kill(sb->ch, why);
	monitor_stop(sb);
	vmm_stop_wait(sb);
	reclaim_locked(sb);
}

/* Silence past --watchdog-s is forgiven for as long as this many times it
 * while the VMM was starved: a hung guest on a loaded host still goes. */
#define WATCHDOG_STARVED_FACTOR 4u

/* The VMM's threads' waits for a CPU so far: its jailer's and the VMM's. */
static int watchdog_cpu_sample(struct sandbox *sb, struct cpu_wait *out)
{
	if (sb->wd.child_of != sb->pid || !sb->wd.vmm_child) {
		sb->wd.child_of = sb->pid;
		sb->wd.vmm_child = proc_first_child(sb->pid);
	}
	return cpu_wait_sample(sb->pid, sb->wd.vmm_child, out);
}

/* A silence that counts, less the waits for a CPU, to limit; or that reached cap. */
static bool watchdog_overdue(uint64_t silent, uint64_t waited, uint64_t limit, uint64_t cap)
{
	return silent >= cap || silent - MIN(waited, silent) >= limit;
}

/* After a look: kills a VMM or agent silent for --watchdog-s, not counting
 * the time its VMM waited for a CPU since the last look at which both
 * answered (up to WATCHDOG_STARVED_FACTOR times --watchdog-s of silence in
 * all). */
static void watchdog_judge(struct sandbox *sb, uint64_t now, const char *qmp_detail)
{
	uint64_t limit = (uint64_t)cfg->watchdog_s * 1000u;
	uint64_t qmp_silent = now - sb->wd.qmp_ok_ms, agent_silent = now - sb->wd.agent_ok_ms;
	uint64_t silent = MAX(qmp_silent, agent_silent);
	/* Both answered at this look: the baseline for a silence to come. */
	if (silent < MAX(1000u, limit / 3u)) {
		sb->wd.cpu_valid = watchdog_cpu_sample(sb, &sb->wd.cpu) == 0;
		sb->wd.cpu_ms = now;
		sb->wd.reprieved = false;
		return;
	}
	if (silent < limit)
		return;
	uint64_t waited = 0;
	struct cpu_wait cur;
	if (sb->wd.cpu_valid && watchdog_cpu_sample(sb, &cur) == 0)
		waited = MIN(cpu_wait_added_ms(&sb->wd.cpu, &cur), now - sb->wd.cpu_ms);
	uint64_t cap = limit * WATCHDOG_STARVED_FACTOR;
	if (watchdog_overdue(qmp_silent, waited, limit, cap)) {
		watchdog_kill(sb, "vmm", qmp_silent, waited, qmp_detail);
	} else if (watchdog_overdue(agent_silent, waited, limit, cap)) {
		watchdog_kill(sb, "agent", agent_silent, waited, "");
	} else if (!sb->wd.reprieved) {
		sb->wd.reprieved = true;
		metrics_count_watchdog_reprieve();
		log_info("sandbox %s: its %s silent for %" PRIu64 " s, but the VMM waited %" PRIu64
		         " s of that for a CPU (an overloaded host, or its CPU quota): not counted, for up to %" PRIu64
		         " s of silence",
		         sb->rec.id, qmp_silent >= limit ? "VMM was" : "agent was", silent / 1000u, waited / 1000u,
		         cap / 1000u);
	}
}

/* One look at one sandbox: is a running sandbox's VMM still answering QMP,
 * and its agent HELLO? A paused or snapshotting sandbox cannot answer and
 * is not asked; nor is one whose operation lock is taken (a pause, a
 * snapshot, a delete: each has its own deadlines). */
static void watchdog_check(struct sandbox *sb)
{
	if (pthread_mutex_trylock(&sb->op_lock) != 0) {
		pthread_mutex_lock(&sb->lock);
		sb->wd.armed = false;
		pthread_mutex_unlock(&sb->lock);
		return;
	}
	uint64_t now = now_ms_monotonic();
	pthread_mutex_lock(&sb->lock);
	bool eligible = sb->rec.state == SANDBOX_RUNNING && !sb->stopping && sb->ch && sb->pid > 0 && !sb->vmm_exited &&
	                sb->dirfd >= 0;
	if (eligible && !sb->wd.armed) {
		sb->wd.armed = true;
		sb->wd.cpu_valid = sb->wd.reprieved = false;
		sb->wd.qmp_ok_ms = sb->wd.agent_ok_ms = now;
		sb->wd.hellos = guest_channel_hellos(sb->ch);
	} else if (!eligible) {
		sb->wd.armed = false;
	}
	pthread_mutex_unlock(&sb->lock);
	if (eligible) {
		struct vmm_config vc = {.sandbox_id = sb->rec.id, .dir = sb->dir, .root = sb->root, .dirfd = sb->dirfd};
		struct al_error e = {0};
		if (cfg->vmm->probe(&vc, WATCHDOG_PROBE_MS, &e) == 0)
			sb->wd.qmp_ok_ms = now_ms_monotonic();
		/* An answer to the last ping is a HELLO more than before it. */
		uint64_t hellos = guest_channel_hellos(sb->ch);
		if (hellos != sb->wd.hellos) {
			sb->wd.hellos = hellos;
			sb->wd.agent_ok_ms = now;
		}
		guest_channel_request_hello(sb->ch);
		now = now_ms_monotonic();
		watchdog_judge(sb, now, e.message);
	}
	pthread_mutex_unlock(&sb->op_lock);
}

static pthread_t reaper, watchdog;
static bool reaper_running, watchdog_running;
static bool reaper_stop;
static pthread_mutex_t reaper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reaper_cond = PTHREAD_COND_INITIALIZER;

/* Waits for period_ms or until the threads are told to stop (true then). */
static bool reaper_sleep(uint64_t period_ms)
{
	pthread_mutex_lock(&reaper_lock);
	if (!reaper_stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t ns = (uint64_t)ts.tv_nsec + (period_ms % 1000u) * 1000000u;
		ts.tv_sec += (time_t)(period_ms / 1000u + ns / 1000000000u);
		ts.tv_nsec = (long)(ns % 1000000000u);
		pthread_cond_timedwait(&reaper_cond, &reaper_lock, &ts);
	}
	bool stop = reaper_stop;
	pthread_mutex_unlock(&reaper_lock);
	return stop;
}

static void *reaper_main(void *arg)
{
	(void)arg;
	while (!reaper_sleep(REAPER_PERIOD_MS)) {
		reclaim_errored();
		/* Collect the due ones under the registry lock; act without it. */
		char ids[64][SANDBOX_ID_MAX + 1], tenants[64][64];
		enum timeout_action acts[64];
		const char *whys[64];
		size_t n = 0;
		pthread_mutex_lock(&registry_lock);
		for (struct sandbox *sb = registry; sb && n < ARRAY_SIZE(ids); sb = sb->next) {
			const char *why = NULL;
			enum timeout_action a = due(sb, &why);
			if (a != TIMEOUT_NONE) {
				strlcpy_al(ids[n], sb->rec.id, sizeof(ids[n]));
				strlcpy_al(tenants[n], sb->rec.tenant, sizeof(tenants[n]));
				acts[n] = a;
				whys[n++] = why;
			}
		}
		pthread_mutex_unlock(&registry_lock);
		for (size_t i = 0; i < n; i++) {
			struct sandbox_record rec;
			struct al_error e = {0};
			log_info("sandbox %s: %s: %s", ids[i], whys[i],
			         acts[i] == TIMEOUT_KILL ? "deleting" : "pausing");
			events_emit("sandbox.timeout", tenants[i], ids[i],
			            json_pack("{s:s, s:s}", "reason", whys[i], "action",
			                      acts[i] == TIMEOUT_KILL ? "kill" : "pause"));
			int r = acts[i] == TIMEOUT_KILL ? sandbox_delete(ids[i], NULL, &rec, &e)
			                                : sandbox_pause(ids[i], NULL, &rec, &e);
			if (r == 0)
				sandbox_record_release(&rec);
			else
				log_error("sandbox %s: %s", ids[i], e.message);
			if (r == 0 && acts[i] == TIMEOUT_PAUSE && !strcmp(whys[i], "timeout"))
				timeout_rearm(ids[i]);
		}
	}
	return NULL;
}

/* Every running sandbox, every third of --watchdog-s (at least a second). */
static void *watchdog_main(void *arg)
{
	(void)arg;
	uint64_t period = MAX(1000u, (uint64_t)cfg->watchdog_s * 1000u / 3u);
	while (!reaper_sleep(period)) {
		size_t n;
		struct sandbox **v = registry_snapshot(&n);
		for (size_t i = 0; i < n; i++) {
			watchdog_check(v[i]);
			sandbox_unref(v[i]);
		}
		free(v);
	}
	return NULL;
}

static void reaper_start(void)
{
	reaper_stop = false;
	if (pthread_create(&reaper, NULL, reaper_main, NULL) == 0)
		reaper_running = true;
	if (cfg->watchdog_s && pthread_create(&watchdog, NULL, watchdog_main, NULL) == 0)
		watchdog_running = true;
}

static void reaper_join(void)
{
	if (!reaper_running && !watchdog_running)
		return;
	pthread_mutex_lock(&reaper_lock);
	reaper_stop = true;
	pthread_cond_broadcast(&reaper_cond);
	pthread_mutex_unlock(&reaper_lock);
	if (reaper_running)
		pthread_join(reaper, NULL);
	if (watchdog_running)
		pthread_join(watchdog, NULL);
	reaper_running = watchdog_running = false;
}

/* ---- start-up and shutdown ------------------------------------------------------------------ */

/* SECURITY: a pid from the store may have been reused: it counts as our VMM
 * only if its command line names this sandbox. */
static bool vmm_alive(const char *id, pid_t pid)
{
	if (pid <= 0)
		return false;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	cleanup_free char *buf = NULL;
	size_t len;
	if (read_file_limited(path, 64 * 1024, &buf, &len) < 0)
		return false;
	char want[64];
	snprintf(want, sizeof(want), "airlock-%s", id);
	for (size_t i = 0; i < len; i += strlen(buf + i) + 1)
		if (!strcmp(buf + i, want))
			return true;
	return false;
}

static void recover_one(struct sandbox_record *rec)
{
	struct sandbox *sb = sandbox_new(rec);
	registry_add(sb);
	struct al_error e = {0};
	const char *why = NULL;
	pid_t pid = (pid_t)rec->vmm_pid;
	bool alive = vmm_alive(rec->id, pid);
	if (alive) {
		sb->pid = pid;
		sb->pidfd = pidfd_open_pid(pid);
		/* SECURITY: its uid is its own again; one that another VMM has
		 * or that is outside the configured range cannot be trusted. */
		int q = jail_uid_reserve(rec->jail_uid);
		if (q == 0)
			sb->uid_held = true;
		else if (rec->state != SANDBOX_STOPPING)
			why = q == -EEXIST ? "airlockd restarted and found the VM's jail uid taken by another sandbox"
			                   : "airlockd restarted and the VM's jail uid is outside "
			                     "--jail-uid-base/--jail-uid-count";
	}
	if (rec->state == SANDBOX_STOPPING) {
		/* An interrupted delete: finish it. */
		teardown(sb);
		pthread_mutex_lock(&sb->lock);
		rm_rf(sb->dir);
		sb->rec.vmm_pid = 0;
		if (set_state_locked(sb, SANDBOX_DELETED, NULL, &e) < 0)
			log_error("sandbox %s: %s", rec->id, e.message);
		pthread_mutex_unlock(&sb->lock);
		registry_remove(sb);
		sandbox_unref(sb);
		return;
	}
	if (why) {
		/* Not re-attached (above). */
	} else if (rec->state == SANDBOX_SNAPSHOTTING && alive) {
		/* An interrupted snapshot: roll it back (its files are swept as *.tmp)
		 * and give the guest back its CPU and its processes. */
		sb->dirfd = open(sb->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		uint64_t deadline = now_ms_monotonic() + REATTACH_TIMEOUT_MS;
		struct vmm_config vc = {.sandbox_id = rec->id, .dir = sb->dir, .root = sb->root, .dirfd = sb->dirfd};
		struct al_error ignored;
		/* A vsock channel (Firecracker) is opened once the guest runs. */
		bool late = channel_needs_running_guest();
		if (sb->pidfd < 0 || sb->dirfd < 0 || attach(sb, deadline, !late, &e) < 0) {
			why = "airlockd restarted during a snapshot and could not re-attach to the VM";
		} else {
			/* QEMU may still be saving: a cont now would be undone when it finishes. */
			if (cfg->vmm->cancel_save(&vc, &e) < 0)
				why = "airlockd restarted during a snapshot and could not stop the save";
			else
				cfg->vmm->resume(&vc, &ignored);
			if (!why && late && attach_channel(sb, deadline, &e) < 0)
				why = "airlockd restarted during a snapshot and could not re-attach to the VM";
			/* A new connection: the agent forgets the streams of the old one. */
			if (!why &&
			    (guest_channel_request_hello(sb->ch) < 0 ||
			     guest_channel_wait_hello(sb->ch, deadline, NULL) < 0 || thaw(sb, late, &ignored) < 0))
				why = "airlockd restarted during a snapshot and the guest did not come back";
		}
		if (!why) {
			pthread_mutex_lock(&sb->lock);
			set_state_locked(sb, SANDBOX_RUNNING, NULL, &ignored);
			pthread_mutex_unlock(&sb->lock);
		}
	} else if ((rec->state == SANDBOX_RUNNING || rec->state == SANDBOX_PAUSED) && alive) {
		sb->dirfd = open(sb->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		uint64_t deadline = now_ms_monotonic() + REATTACH_TIMEOUT_MS;
		bool paused = rec->state == SANDBOX_PAUSED;
		if (paused && sb->dirfd >= 0) {
			/* A paused sandbox may have been in the middle of a snapshot. */
			struct vmm_config vc = {
			    .sandbox_id = rec->id, .dir = sb->dir, .root = sb->root, .dirfd = sb->dirfd};
			struct al_error ignored;
			cfg->vmm->cancel_save(&vc, &ignored);
		}
		/* A paused guest cannot answer: its hello is asked for when it
		 * resumes; nor accept a vsock connection (Firecracker): its
		 * channel is opened when it resumes. */
		bool late = paused && channel_needs_running_guest();
		if (sb->pidfd < 0 || sb->dirfd < 0 || attach(sb, deadline, !late, &e) < 0 ||
		    (!late && guest_channel_request_hello(sb->ch) < 0) ||
		    (!paused && guest_channel_wait_hello(sb->ch, deadline, NULL) < 0))
			why = "airlockd restarted and could not re-attach to the VM";
		else if (late) {
			/* Supervised meanwhile: its exit and console. */
			sb->channel_at_resume = true;
			monitor_start(sb);
		} else if (paused)
			guest_channel_set_paused(sb->ch, true);
	} else if (alive) {
		/* Half-done create or delete: finish it the safe way. */
		why = "airlockd restarted while the sandbox was being created or stopped";
	} else {
		why = "the VM was gone when airlockd restarted";
	}
	if (!why && network_up(sb, pid, &e) < 0) {
		log_error("sandbox %s: %s", rec->id, e.message);
		why = "airlockd restarted and could not re-attach the sandbox's network";
	}
	if (!why) {
		log_info("sandbox %s: re-attached to VMM %d", rec->id, (int)pid);
		sandbox_unref(sb);
		return;
	}
	teardown(sb);
	pthread_mutex_lock(&sb->lock);
	/* The disk stays: POST .../recover can boot it again. */
	sb->rec.vmm_pid = 0;
	if (set_state_locked(sb, SANDBOX_ERROR, why, &e) < 0)
		log_error("sandbox %s: %s", rec->id, e.message);
	pthread_mutex_unlock(&sb->lock);
	registry_remove(sb);
	sandbox_unref(sb);
}

/* A process whose cwd is in <boxes> (ctx): the jailer of a VMM if it runs
 * in <boxes>/<id>/vm. Killed if no live record owns it. */
static void vmm_left(long pid, char *cwd, void *ctx)
{
	const char *boxes = ctx;
	size_t blen = strlen(boxes), ilen = strlen("sb-0123456789abcdef");
	if (strlen(cwd) != blen + 1 + ilen + 1 + strlen(SANDBOX_VM_DIR) || cwd[blen + 1 + ilen] != '/' ||
	    strcmp(cwd + blen + 1 + ilen + 1, SANDBOX_VM_DIR))
		return;
	cwd[blen + 1 + ilen] = '\0';
	const char *id = cwd + blen + 1;
	if (!sandbox_id_valid(id))
		return;
	struct sandbox *sb = registry_find(id);
	if (sb) {
		sandbox_unref(sb);
		return;
	}
	if (!vmm_alive(id, (pid_t)pid))
		return;
	log_info("killing VMM %ld of sandbox %s, which no live record owns", pid, id);
	kill((pid_t)pid, SIGKILL);
	struct al_error e = {0};
	if (jail_cleanup(id, &e) < 0)
		log_error("sandbox %s: %s", id, e.message);
}

/* SECURITY/hygiene: after a crash, nothing may be left that no record owns:
 * half-written snapshots, directories of deleted sandboxes, and VMMs running
 * from our state dir whose sandbox is gone. */
static void sweep_orphans(void)
{
	cleanup_free char *snaps = xasprintf("%s/snapshots", cfg->state_dir);
	cleanup_free char *boxes = xasprintf("%s/sandboxes", cfg->state_dir);
	DIR *d = opendir(snaps);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (n > 4 && !strcmp(de->d_name + n - 4, ".tmp")) {
			cleanup_free char *p = xasprintf("%s/%s", snaps, de->d_name);
			log_info("removing the half-written snapshot %s", p);
			rm_rf(p);
		}
	}
	if (d)
		closedir(d);
	/* VMMs first: their cwd is the sandbox dir. */
	jail_each_process_below(boxes, vmm_left, boxes);
	d = opendir(boxes);
	while (d && (de = readdir(d))) {
		if (!sandbox_id_valid(de->d_name))
			continue;
		struct sandbox *sb = registry_find(de->d_name);
		if (sb) {
			sandbox_unref(sb);
			continue;
		}
		struct sandbox_record rec;
		struct al_error e = {0};
		bool got = store_sandbox_get(cfg->store, de->d_name, &rec, &e) == 0;
		/* Only what the store says is deleted or unknown goes; a store error keeps it. */
		bool keep = got ? rec.state != SANDBOX_DELETED : e.code != AL_ERR_NOT_FOUND;
		if (got)
			sandbox_record_release(&rec);
		if (!keep) {
			cleanup_free char *p = xasprintf("%s/%s", boxes, de->d_name);
			log_info("removing %s, which belongs to no sandbox", p);
			if (jail_cleanup(de->d_name, &e) < 0)
				log_error("sandbox %s: %s", de->d_name, e.message);
			rm_rf(p);
		}
	}
	if (d)
		closedir(d);
}

int sandboxes_init(const struct daemon_config *c, struct al_error *err)
{
	cfg = c;
	cleanup_free char *dir = xasprintf("%s/sandboxes", cfg->state_dir);
	int r = mkdir_p(dir, 0700);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot create %s: %s", dir, strerror(-r));
	struct sandbox_record *recs = NULL;
	size_t n = 0;
	if ((r = store_sandbox_list(cfg->store, false, &recs, &n, err)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		if (recs[i].state == SANDBOX_CREATING || recs[i].state == SANDBOX_RUNNING ||
		    recs[i].state == SANDBOX_STOPPING || recs[i].state == SANDBOX_PAUSED ||
		    recs[i].state == SANDBOX_SNAPSHOTTING)
			recover_one(&recs[i]);
		sandbox_record_release(&recs[i]);
	}
	free(recs);
	sweep_orphans();
	if ((r = netns_pool_start(cfg->netns_pool, err)) < 0)
		return r;
	tsnap_init(cfg);
	reaper_start();
	return 0;
}

void sandboxes_shutdown(void)
{
	reaper_join();
	tsnap_shutdown();
	netns_pool_stop();
	for (;;) {
		pthread_mutex_lock(&registry_lock);
		struct sandbox *sb = registry;
		if (sb)
			registry = sb->next;
		pthread_mutex_unlock(&registry_lock);
		if (!sb)
			break;
		/* Wake every request waiting on this guest; the VM itself keeps running. */
		if (sb->ch)
			guest_channel_kill(sb->ch, "airlockd is shutting down");
		monitor_stop(sb);
		sandbox_unref(sb);
	}
}
