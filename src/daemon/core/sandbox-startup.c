/* SPDX-License-Identifier: Apache-2.0 */
/* Start-up and shutdown of the registry: re-attaching to the VMMs a
 * restarted daemon finds (or ending their sandboxes in error), sweeping
 * what no record owns, starting and stopping the threads. Start-up runs
 * before any request; shutdown after the API stopped. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>

#include "jail.h"
#include "log.h"
#include "template-snap.h"
#include "util.h"
#include "sandbox-internal.h"

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

/* A sandbox the restart does not keep: its runtime goes, its record ends in
 * st (why: the reason) and the registry forgets it. An interrupted delete's
 * directory goes; an error's stays: POST .../recover can boot its disk
 * again. */
static void recover_one_drop(struct sandbox *sb, enum sandbox_state st, const char *why)
{
	struct al_error e = {0};
	sb_teardown(sb);
	pthread_mutex_lock(&sb->lock);
	if (st == SANDBOX_DELETED)
		rm_rf(sb->dir);
	sb->rec.vmm_pid = 0;
	if (sb_set_state_locked(sb, st, why, &e) < 0)
		log_error("sandbox %s: %s", sb->rec.id, e.message);
	pthread_mutex_unlock(&sb->lock);
	sb_registry_remove(sb);
	sandbox_unref(sb);
}

static void recover_one(struct sandbox_record *rec)
{
	struct sandbox *sb = sandbox_new(rec);
	sb_registry_add(sb);
	struct al_error e = {0};
	const char *why = NULL;
	pid_t pid = (pid_t)rec->vmm_pid;
	bool alive = vmm_alive(rec->id, pid);
	if (alive) {
		sb_lease_adopt(sb, pid); /* at once: its jailer may be close to its --orphan-timeout-s */
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
		recover_one_drop(sb, SANDBOX_DELETED, NULL);
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
		bool late = sb_channel_needs_running_guest();
		if (sb->pidfd < 0 || sb->dirfd < 0 || sb_attach(sb, deadline, !late, &e) < 0) {
			why = "airlockd restarted during a snapshot and could not re-attach to the VM";
		} else {
			/* QEMU may still be saving: a cont now would be undone when it finishes. */
			if (sb_cfg->vmm->cancel_save(&vc, &e) < 0)
				why = "airlockd restarted during a snapshot and could not stop the save";
			else
				sb_cfg->vmm->resume(&vc, &ignored);
			if (!why && late && sb_attach_channel(sb, deadline, &e) < 0)
				why = "airlockd restarted during a snapshot and could not re-attach to the VM";
			/* A new connection: the agent forgets the streams of the old one. */
			if (!why &&
			    (guest_channel_request_hello(sb->ch) < 0 ||
			     guest_channel_wait_hello(sb->ch, deadline, NULL) < 0 || sb_thaw(sb, late, &ignored) < 0))
				why = "airlockd restarted during a snapshot and the guest did not come back";
		}
		if (!why) {
			pthread_mutex_lock(&sb->lock);
			sb_set_state_locked(sb, SANDBOX_RUNNING, NULL, &ignored);
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
			sb_cfg->vmm->cancel_save(&vc, &ignored);
		}
		/* A paused guest cannot answer: its hello is asked for when it
		 * resumes; nor accept a vsock connection (Firecracker): its
		 * channel is opened when it resumes. */
		bool late = paused && sb_channel_needs_running_guest();
		if (sb->pidfd < 0 || sb->dirfd < 0 || sb_attach(sb, deadline, !late, &e) < 0 ||
		    (!late && guest_channel_request_hello(sb->ch) < 0) ||
		    (!paused && guest_channel_wait_hello(sb->ch, deadline, NULL) < 0))
			why = "airlockd restarted and could not re-attach to the VM";
		else if (late) {
			/* Supervised meanwhile: its exit and console. */
			sb->channel_at_resume = true;
			sb_monitor_start(sb);
		} else if (paused)
			guest_channel_set_paused(sb->ch, true);
	} else if (alive) {
		/* Half-done create or delete: finish it the safe way. */
		why = "airlockd restarted while the sandbox was being created or stopped";
	} else {
		why = "the VM was gone when airlockd restarted";
	}
	if (!why && sb_network_up(sb, pid, &e) < 0) {
		log_error("sandbox %s: %s", rec->id, e.message);
		why = "airlockd restarted and could not re-attach the sandbox's network";
	}
	if (!why) {
		log_info("sandbox %s: re-attached to VMM %d", rec->id, (int)pid);
		sandbox_unref(sb);
		return;
	}
	/* The disk stays: POST .../recover can boot it again. */
	recover_one_drop(sb, SANDBOX_ERROR, why);
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
	struct sandbox *sb = sb_registry_find(id);
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
	cleanup_free char *snaps = xasprintf("%s/snapshots", sb_cfg->state_dir);
	cleanup_free char *boxes = xasprintf("%s/sandboxes", sb_cfg->state_dir);
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
		struct sandbox *sb = sb_registry_find(de->d_name);
		if (sb) {
			sandbox_unref(sb);
			continue;
		}
		struct sandbox_record rec;
		struct al_error e = {0};
		bool got = store_sandbox_get(sb_cfg->store, de->d_name, &rec, &e) == 0;
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
	sb_cfg = c;
	cleanup_free char *dir = xasprintf("%s/sandboxes", sb_cfg->state_dir);
	int r = mkdir_p(dir, 0700);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot create %s: %s", dir, strerror(-r));
	struct sandbox_record *recs = NULL;
	size_t n = 0;
	if ((r = store_sandbox_list(sb_cfg->store, false, &recs, &n, err)) < 0)
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
	if ((r = netns_pool_start(sb_cfg->netns_pool, err)) < 0)
		return r;
	tsnap_init(sb_cfg);
	sb_reaper_start();
	return 0;
}

void sandboxes_shutdown(void)
{
	sb_reaper_join();
	tsnap_shutdown();
	netns_pool_stop();
	for (;;) {
		pthread_mutex_lock(&sb_registry_lock);
		struct sandbox *sb = sb_registry;
		if (sb)
			sb_registry = sb->next;
		pthread_mutex_unlock(&sb_registry_lock);
		if (!sb)
			break;
		/* Wake every request waiting on this guest; the VM itself keeps running. */
		if (sb->ch)
			guest_channel_kill(sb->ch, "airlockd is shutting down");
		sb_monitor_stop(sb);
		sandbox_unref(sb);
	}
}
