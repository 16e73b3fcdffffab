/* SPDX-License-Identifier: Apache-2.0 */
/* The supervision of a sandbox's VMM: its monitor thread (console, guest
 * channel, the VMM's exit), attaching to a started VMM's sockets, and
 * stopping it. The monitor reads sb->ch and the fds without locks: they
 * change only with op_lock held and the monitor stopped; what it changes in
 * the record is under sb->lock. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "log.h"
#include "process.h"
#include "util.h"
#include "sandbox-internal.h"

static void reap_vmm(struct sandbox *sb)
{
	int status = 0;
	bool known = false;
	if (sb->our_child) {
		pid_t p;
		while ((p = waitpid(sb->pid, &status, 0)) < 0 && errno == EINTR)
			;
		/* A failed wait tells nothing: never "status 0". */
		known = p == sb->pid;
		sb->our_child = false;
	}
	sb->vmm_status = status;
	sb->vmm_status_known = known;
	__atomic_store_n(&sb->vmm_exited, true, __ATOMIC_RELEASE);
}

/* How the VMM ended and its last words (vmm_exit_describe), whether the
 * monitor has reaped it already or not. */
void sb_vmm_end_describe(struct sandbox *sb, char *out, size_t size)
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

/* State error, the reason what and then the console's telling lines (a
 * store that fails is logged); with sb->lock held. */
void sb_error_locked(struct sandbox *sb, const char *what)
{
	char reason[2048];
	sb_describe_exit(sb, what, reason, sizeof(reason));
	struct al_error e;
	if (sb_set_state_locked(sb, SANDBOX_ERROR, reason, &e) < 0)
		log_error("sandbox %s: %s", sb->rec.id, e.message);
}

/* The VMM is gone or the guest broke the protocol while nobody expected it. */
void sandbox_fail(struct sandbox *sb, const char *what)
{
	pthread_mutex_lock(&sb->lock);
	if (!sb->stopping && (sb->rec.state == SANDBOX_RUNNING || sb->rec.state == SANDBOX_PAUSED))
		sb_error_locked(sb, what);
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
			sb_console_drain(sb);
		if (ch_i >= 0 && (p[ch_i].revents & (POLLIN | POLLHUP | POLLERR)) &&
		    guest_channel_read(sb->ch) == -EPROTO) {
			/* SECURITY: a guest that sends garbage gets no second chance. */
			char why[512];
			guest_channel_dead(sb->ch, why, sizeof(why));
			struct vmm_config vc = {.sandbox_id = sb->rec.id, .dir = sb->dir, .root = sb->root};
			sb_cfg->vmm->stop(&vc, sb->pid);
			sandbox_fail(sb, why);
		}
		if (ch_i >= 0 && (want_write || (chw_i >= 0 && p[chw_i].revents)))
			guest_channel_flush(sb->ch);
		if (p[1].revents) {
			if (sb->console_fd >= 0)
				sb_console_drain(sb);
			reap_vmm(sb);
			if (sb->ch)
				guest_channel_kill(sb->ch, "the VM exited");
			char how[1024], what[1100];
			sb_vmm_end_describe(sb, how, sizeof(how));
			snprintf(what, sizeof(what), "the VM exited unexpectedly: %s", how);
			sandbox_fail(sb, what);
			break;
		}
	}
	return NULL;
}

void sb_monitor_start(struct sandbox *sb)
{
	sb->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sb->wake_fd < 0)
		abort();
	if (pthread_create(&sb->monitor, NULL, monitor_main, sb) != 0)
		abort();
	sb->has_monitor = true;
}

void sb_monitor_stop(struct sandbox *sb)
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
void sb_vmm_stop_wait(struct sandbox *sb)
{
	if (sb->pid <= 0 || sb->vmm_exited)
		return;
	/* By pidfd when there is one: it names this process, never a reused pid. */
	if (sb->pidfd < 0 || syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0) < 0) {
		struct vmm_config vc = {.sandbox_id = sb->rec.id, .dir = sb->dir, .root = sb->root};
		sb_cfg->vmm->stop(&vc, sb->pid);
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
	struct vmm_config vc = sb_vmm_config(sb);
	return vmm_connect_retry(sb_cfg->vmm, &vc, channel, sb->pidfd, deadline_ms, ret_fd);
}

/* Whether the guest channel can only be opened while the guest runs (a
 * vsock connection is the guest's to accept; Firecracker's) rather than at
 * any time (QEMU's virtio-serial socket is the VMM's). */
bool sb_channel_needs_running_guest(void)
{
	return sb_cfg->vmm->channel_resets_on_save;
}

static int attach_failed(struct sandbox *sb, int r, struct al_error *err)
{
	char refusal[200];
	if (r == -ECHILD && sb_jail_refusal(sb, refusal, sizeof(refusal)))
		return al_error_set(err, AL_ERR_BOOT_FAILED, EPERM, "the VMM's jail could not be set up: %s", refusal);
	if (r == -ECHILD) {
		char how[1024];
		sb_vmm_end_describe(sb, how, sizeof(how));
		return al_error_set(err, AL_ERR_BOOT_FAILED, ECHILD, "the VMM exited at start: %s (in %s)", how,
		                    sb->dir);
	}
	return al_error_set(err, AL_ERR_BOOT_FAILED, -r, "cannot connect to the VMM's sockets in %s: %s", sb->dir,
	                    strerror(-r));
}

/* Opens the guest channel of a started VMM and starts supervising. */
int sb_attach_channel(struct sandbox *sb, uint64_t deadline_ms, struct al_error *err)
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
	sb_monitor_start(sb);
	return 0;
}

/* Opens the console of a started VMM, then (with_channel) its channel. */
int sb_attach(struct sandbox *sb, uint64_t deadline_ms, bool with_channel, struct al_error *err)
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
	return with_channel ? sb_attach_channel(sb, deadline_ms, err) : 0;
}

/* Stops the monitor and detaches the channel from its connection, which a
 * save is about to reset (Firecracker resets every vsock connection at a
 * snapshot): nobody reads the end of it, so its streams live on. With
 * op_lock held. */
/* The sandbox's channel (and its processes) retire: kept, for what their
 * callers still hold, until the sandbox is freed. Under sb->lock. */
void sb_channel_retire_locked(struct sandbox *sb)
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

void sb_channel_detach(struct sandbox *sb)
{
	sb_monitor_stop(sb);
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
int sb_channel_reconnect(struct sandbox *sb, uint64_t deadline_ms, struct al_error *err)
{
	sb_channel_detach(sb);
	if (!sb->ch || guest_channel_dead(sb->ch, NULL, 0)) {
		/* Dead already (it broke or its VM went): it retires. */
		pthread_mutex_lock(&sb->lock);
		sb_channel_retire_locked(sb);
		pthread_mutex_unlock(&sb->lock);
		return sb_attach_channel(sb, deadline_ms, err);
	}
	int fd = -1;
	int r = connect_retry(sb, true, deadline_ms, &fd);
	if (r < 0) {
		sb_monitor_start(sb); /* its exit is still noticed */
		return attach_failed(sb, r, err);
	}
	guest_channel_replace_fd(sb->ch, fd);
	sb_monitor_start(sb);
	return 0;
}
