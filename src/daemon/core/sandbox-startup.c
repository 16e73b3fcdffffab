/* SPDX-License-Identifier: Apache-2.0 */
/* Start-up and shutdown of the registry: re-attaching to the VMMs a
 * restarted daemon finds (or ending their sandboxes in error), sweeping
 * what no record owns, starting and stopping the threads. Start-up runs
 * before any request; shutdown after the API stopped. */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>

#include "jail.h"
#include "json-cleanup.h"
#include "log.h"
#include "template-snap.h"
#include "util.h"
#include "sandbox-internal.h"
#include "templates.h"

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
 * again. The caller's reference stays the caller's. */
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
}

/* A crash between the VMM's stop (or cont) and the record saying so leaves
 * them apart. The record is what clients were told, or were about to be
 * (the pause or resume was not acknowledged): the VM follows the record,
 * rather than a healthy VM being torn down for not answering. */
static void run_state_reconcile(struct sandbox *sb, bool paused)
{
	struct vmm_config vc = sb_vmm_config(sb);
	enum vmm_run_state st = VMM_RUN_UNKNOWN;
	struct al_error e = {0};
	if (sb_cfg->vmm->run_state(&vc, REATTACH_TIMEOUT_MS, &st, &e) < 0) {
		log_error("sandbox %s: %s", sb->rec.id, e.message);
		return;
	}
	bool vm_paused = st == VMM_RUN_PAUSED || st == VMM_RUN_SAVED;
	int r = 0;
	if (!paused && vm_paused) {
		log_info("sandbox %s: its record says running and its VM is paused (a pause the restart cut short): "
		         "resuming it",
		         sb->rec.id);
		r = sb_cfg->vmm->resume(&vc, &e);
	} else if (paused && st == VMM_RUN_RUNNING) {
		log_info("sandbox %s: its record says paused and its VM runs (a resume the restart cut short): "
		         "pausing it",
		         sb->rec.id);
		r = sb_cfg->vmm->pause(&vc, &e);
	}
	if (r < 0)
		log_error("sandbox %s: %s", sb->rec.id, e.message);
}

/* Before the API opens, for every record of a live sandbox: the sandbox is
 * registered and takes its uid back (no create may take it), and one that
 * cannot be re-attached is settled. Returns the sandbox to re-attach
 * (reattaching set; the caller's reference), or NULL. */
static struct sandbox *recover_prepare(const struct sandbox_record *rec)
{
	struct sandbox *sb = sandbox_new(rec);
	sb_registry_add(sb);
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
		sandbox_unref(sb);
		return NULL;
	}
	if (!why && !alive)
		why = "the VM was gone when airlockd restarted";
	else if (!why && rec->state != SANDBOX_SNAPSHOTTING && rec->state != SANDBOX_RUNNING &&
	         rec->state != SANDBOX_PAUSED)
		/* Half-done create: finish it the safe way. */
		why = "airlockd restarted while the sandbox was being created or stopped";
	if (why) {
		/* The disk stays: POST .../recover can boot it again. */
		recover_one_drop(sb, SANDBOX_ERROR, why);
		sandbox_unref(sb);
		return NULL;
	}
	sb->reattaching = true;
	return sb;
}

/* An interrupted snapshot: roll it back (its files are swept as *.tmp)
 * and give the guest back its CPU and its processes. NULL, or why not. */
static const char *reattach_snapshotting(struct sandbox *sb, struct al_error *e)
{
	uint64_t deadline = now_ms_monotonic() + REATTACH_TIMEOUT_MS;
	struct vmm_config vc = sb_vmm_config(sb);
	struct al_error ignored;
	/* A vsock channel (Firecracker) is opened once the guest runs. */
	bool late = sb_channel_needs_running_guest();
	if (sb->pidfd < 0 || sb->dirfd < 0 || sb_attach(sb, deadline, !late, e) < 0)
		return "airlockd restarted during a snapshot and could not re-attach to the VM";
	/* QEMU may still be saving: a cont now would be undone when it finishes. */
	if (sb_cfg->vmm->cancel_save(&vc, e) < 0)
		return "airlockd restarted during a snapshot and could not stop the save";
	sb_cfg->vmm->resume(&vc, &ignored);
	if (late && sb_attach_channel(sb, deadline, e) < 0)
		return "airlockd restarted during a snapshot and could not re-attach to the VM";
	/* A new connection: the agent forgets the streams of the old one. */
	if (guest_channel_request_hello(sb->ch) < 0 || guest_channel_wait_hello(sb->ch, deadline, NULL) < 0 ||
	    sb_thaw(sb, late, &ignored) < 0)
		return "airlockd restarted during a snapshot and the guest did not come back";
	pthread_mutex_lock(&sb->lock);
	sb_set_state_locked(sb, SANDBOX_RUNNING, NULL, &ignored);
	pthread_mutex_unlock(&sb->lock);
	return NULL;
}

/* A running or paused sandbox: its VM follows the record, then the console
 * and the channel are opened again. NULL, or why not. */
static const char *reattach_live(struct sandbox *sb, struct al_error *e)
{
	uint64_t deadline = now_ms_monotonic() + REATTACH_TIMEOUT_MS;
	bool paused = sb->rec.state == SANDBOX_PAUSED;
	if (paused && sb->dirfd >= 0) {
		/* A paused sandbox may have been in the middle of a snapshot. */
		struct vmm_config vc = sb_vmm_config(sb);
		struct al_error ignored;
		sb_cfg->vmm->cancel_save(&vc, &ignored);
	}
	if (sb->dirfd >= 0)
		run_state_reconcile(sb, paused);
	/* A paused guest cannot answer: its hello is asked for when it
	 * resumes; nor accept a vsock connection (Firecracker): its
	 * channel is opened when it resumes. */
	bool late = paused && sb_channel_needs_running_guest();
	if (sb->pidfd < 0 || sb->dirfd < 0 || sb_attach(sb, deadline, !late, e) < 0 ||
	    (!late && guest_channel_request_hello(sb->ch) < 0) ||
	    (!paused && guest_channel_wait_hello(sb->ch, deadline, NULL) < 0))
		return "airlockd restarted and could not re-attach to the VM";
	if (late) {
		/* Supervised meanwhile: its exit and console. */
		sb->channel_at_resume = true;
		sb_monitor_start(sb);
	} else if (paused) {
		guest_channel_set_paused(sb->ch, true);
	}
	return NULL;
}

/* On a re-attach worker, with the sandbox's op_lock: requests about it wait
 * for that (a delete) or are answered 503 until it is done (sb_find_live). */
static void recover_attach(struct sandbox *sb)
{
	pthread_mutex_lock(&sb->op_lock);
	pthread_mutex_lock(&sb->lock);
	enum sandbox_state st = sb->rec.state;
	pthread_mutex_unlock(&sb->lock);
	struct al_error e = {0};
	const char *why = NULL;
	if (st != SANDBOX_SNAPSHOTTING && st != SANDBOX_RUNNING && st != SANDBOX_PAUSED) {
		/* Deleted meanwhile (the delete waited for nothing: it held op_lock first). */
		pthread_mutex_unlock(&sb->op_lock);
		sandbox_unref(sb);
		return;
	}
	sb->dirfd = open(sb->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	why = st == SANDBOX_SNAPSHOTTING ? reattach_snapshotting(sb, &e) : reattach_live(sb, &e);
	if (!why && sb_network_up(sb, sb->pid, &e) < 0) {
		log_error("sandbox %s: %s", sb->rec.id, e.message);
		why = "airlockd restarted and could not re-attach the sandbox's network";
	}
	if (why) {
		/* The disk stays: POST .../recover can boot it again. Requests get
		 * 503 until it has left the registry. */
		recover_one_drop(sb, SANDBOX_ERROR, why);
	} else {
		pthread_mutex_lock(&sb->lock);
		sb->reattaching = false;
		pthread_mutex_unlock(&sb->lock);
		log_info("sandbox %s: re-attached to VMM %d", sb->rec.id, (int)sb->pid);
	}
	pthread_mutex_unlock(&sb->op_lock);
	sandbox_unref(sb);
}

/* The re-attach of the live sandboxes a restart found: REATTACH_WORKERS at
 * once, on threads of their own, while the API already answers. */
#define REATTACH_WORKERS 8

/* Internal resource failure aborts (STYLE.md): a thread is one. */
static pthread_t thread_start(void *(*fn)(void *))
{
	pthread_t t;
	if (pthread_create(&t, NULL, fn, NULL) != 0)
		abort();
	return t;
}

static struct {
	pthread_t manager;
	bool started;
	pthread_mutex_t lock;
	struct sandbox **todo;
	size_t n, next, done;
	uint64_t started_ms;
} reattach = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *reattach_worker(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&reattach.lock);
		struct sandbox *sb = reattach.next < reattach.n ? reattach.todo[reattach.next++] : NULL;
		pthread_mutex_unlock(&reattach.lock);
		if (!sb)
			return NULL;
		recover_attach(sb);
		pthread_mutex_lock(&reattach.lock);
		reattach.done++;
		pthread_mutex_unlock(&reattach.lock);
	}
}

static void *reattach_manager(void *arg)
{
	(void)arg;
	pthread_t workers[REATTACH_WORKERS];
	size_t n = reattach.n < REATTACH_WORKERS ? reattach.n : REATTACH_WORKERS;
	for (size_t i = 0; i < n; i++)
		workers[i] = thread_start(reattach_worker);
	for (size_t i = 0; i < n; i++)
		pthread_join(workers[i], NULL);
	log_info("re-attach: %zu sandbox%s done in %" PRIu64 " ms", reattach.n, reattach.n == 1 ? "" : "es",
	         now_ms_monotonic() - reattach.started_ms);
	return NULL;
}

/* Starts re-attaching todo[n] (taken) in the background. */
static void reattach_start(struct sandbox **todo, size_t n)
{
	reattach.todo = todo;
	reattach.n = n;
	reattach.next = reattach.done = 0;
	reattach.started_ms = now_ms_monotonic();
	if (n == 0)
		return;
	reattach.manager = thread_start(reattach_manager);
	reattach.started = true;
}

unsigned sandboxes_reattaching(void)
{
	pthread_mutex_lock(&reattach.lock);
	unsigned left = (unsigned)(reattach.n - reattach.done);
	pthread_mutex_unlock(&reattach.lock);
	return left;
}

/* Waits until every re-attach is done. */
static void reattach_join(void)
{
	if (reattach.started)
		pthread_join(reattach.manager, NULL);
	reattach.started = false;
	free(reattach.todo);
	pthread_mutex_lock(&reattach.lock);
	reattach.todo = NULL;
	reattach.n = reattach.done = 0;
	pthread_mutex_unlock(&reattach.lock);
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
	cleanup_free char *boxes = xasprintf("%s/sandboxes", sb_cfg->state_dir);
	unsigned forks = 0, dirs = 0;
	struct al_error e = {0};
	if (snapshot_sweep(&forks, &dirs, &e) < 0)
		log_error("sweeping the snapshots a crash left: %s", e.message);
	else if (forks || dirs)
		log_info("removed what a crash left of snapshots: %u of unfinished forks, %u director%s no record "
		         "owns (half-written or never recorded)",
		         forks, dirs, dirs == 1 ? "y" : "ies");
	DIR *d;
	struct dirent *de;
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
		e = (struct al_error){0};
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

/* A sandbox a restart cut off from what it was for goes. A live one's
 * delete is finished by recover_prepare (state stopping); another's record
 * says deleted and sweep_orphans removes its directory. */
static void record_drop(struct sandbox_record *rec)
{
	bool live = rec->state == SANDBOX_CREATING || rec->state == SANDBOX_RUNNING || rec->state == SANDBOX_PAUSED ||
	            rec->state == SANDBOX_SNAPSHOTTING || rec->state == SANDBOX_STOPPING;
	rec->state = live ? SANDBOX_STOPPING : SANDBOX_DELETED;
	rec->fork_of[0] = '\0';
	rec->updated_ms = now_ms_realtime();
	struct al_error e = {0};
	if (store_sandbox_update(sb_cfg->store, rec, &e) < 0)
		log_error("sandbox %s: %s", rec->id, e.message);
}

/* A template build's sandbox (metadata TEMPLATE_BUILD_METADATA): the build
 * that ran in it ended with the daemon, so nothing will delete it, and it
 * would keep its layer in use. */
static bool build_sandbox(const struct sandbox_record *rec)
{
	cleanup_json json_t *meta = rec->metadata_json ? json_loads(rec->metadata_json, 0, NULL) : NULL;
	return json_object_get(meta, TEMPLATE_BUILD_METADATA) != NULL;
}

/* What a restart cut short: a copy a fork did not finish (a fork is all
 * or nothing), a build's sandbox. */
static void cut_drop(struct sandbox_record *rec)
{
	if (rec->fork_of[0])
		log_info("sandbox %s: deleting it: the fork that made it (snapshot %s) was cut by a restart", rec->id,
		         rec->fork_of);
	else if (build_sandbox(rec))
		log_info("sandbox %s: deleting it: the template build that ran in it was cut by a restart", rec->id);
	else
		return;
	record_drop(rec);
}

int sandboxes_init(const struct daemon_config *c, struct al_error *err)
{
	sb_cfg = c;
	cleanup_free char *dir = xasprintf("%s/sandboxes", sb_cfg->state_dir);
	int r = mkdir_p(dir, 0700);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot create %s: %s", dir, strerror(-r));
	if ((r = templates_init(err)) < 0)
		return r;
	struct sandbox_record *recs = NULL;
	size_t n = 0;
	if ((r = store_sandbox_list(sb_cfg->store, false, &recs, &n, err)) < 0)
		return r;
	struct sandbox **todo = xcalloc(n ? n : 1, sizeof(*todo));
	size_t n_todo = 0;
	for (size_t i = 0; i < n; i++) {
		cut_drop(&recs[i]);
		if (recs[i].state == SANDBOX_CREATING || recs[i].state == SANDBOX_RUNNING ||
		    recs[i].state == SANDBOX_STOPPING || recs[i].state == SANDBOX_PAUSED ||
		    recs[i].state == SANDBOX_SNAPSHOTTING) {
			struct sandbox *sb = recover_prepare(&recs[i]);
			if (sb)
				todo[n_todo++] = sb;
		}
		sandbox_record_release(&recs[i]);
	}
	free(recs);
	/* Every live record is registered now: what no record owns can go. */
	sweep_orphans();
	reattach_start(todo, n_todo);
	if ((r = netns_pool_start(sb_cfg->netns_pool, err)) < 0)
		return r;
	tsnap_init(sb_cfg);
	sb_reaper_start();
	sb_pools_start();
	return 0;
}

void sandboxes_shutdown(void)
{
	sb_pools_stop();
	reattach_join();
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
