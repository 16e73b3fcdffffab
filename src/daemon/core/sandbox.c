/* SPDX-License-Identifier: Apache-2.0 */
/* Sandboxes: the registry of live ones, their records and state changes,
 * and the operations on a live sandbox (look-up, get, delete, pause,
 * resume). The other concerns are in sandbox-*.c; what they share is in
 * sandbox-internal.h, with the lock rules: sb_registry_lock guards the list
 * and every refs count, sb->lock a sandbox's record and runtime fields,
 * sb->op_lock one lifecycle operation at a time. */
#include "sandbox.h"

#include <signal.h>
#include <sys/syscall.h>

#include "events.h"
#include "log.h"
#include "process.h"
#include "util.h"
#include "sandbox-internal.h"

const struct daemon_config *sb_cfg;
pthread_mutex_t sb_registry_lock = PTHREAD_MUTEX_INITIALIZER;
struct sandbox *sb_registry;

struct sandbox *sandbox_new(const struct sandbox_record *rec)
{
	struct sandbox *sb = xcalloc(1, sizeof(*sb));
	pthread_mutex_init(&sb->lock, NULL);
	pthread_mutex_init(&sb->op_lock, NULL);
	sandbox_record_copy(&sb->rec, rec);
	sb->dir = xasprintf("%s/sandboxes/%s", sb_cfg->state_dir, rec->id);
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

void sandbox_unref(struct sandbox *sb)
{
	pthread_mutex_lock(&sb_registry_lock);
	bool last = --sb->refs == 0;
	pthread_mutex_unlock(&sb_registry_lock);
	if (!last)
		return;
	sandbox_close_runtime(sb);
	sandbox_record_release(&sb->rec);
	pthread_mutex_destroy(&sb->lock);
	pthread_mutex_destroy(&sb->op_lock);
	free(sb->dir);
	free(sb->root);
	free(sb->port_fds);
	free(sb);
}

struct sandbox *sb_registry_find(const char *id)
{
	pthread_mutex_lock(&sb_registry_lock);
	struct sandbox *sb = sb_registry;
	while (sb && strcmp(sb->rec.id, id))
		sb = sb->next;
	if (sb)
		sb->refs++;
	pthread_mutex_unlock(&sb_registry_lock);
	return sb;
}

void sb_registry_add(struct sandbox *sb)
{
	pthread_mutex_lock(&sb_registry_lock);
	sb->refs++;
	sb->next = sb_registry;
	sb_registry = sb;
	pthread_mutex_unlock(&sb_registry_lock);
}

void sb_registry_remove(struct sandbox *sb)
{
	bool found = false;
	pthread_mutex_lock(&sb_registry_lock);
	for (struct sandbox **pp = &sb_registry; *pp; pp = &(*pp)->next)
		if (*pp == sb) {
			*pp = sb->next;
			found = true;
			break;
		}
	pthread_mutex_unlock(&sb_registry_lock);
	if (found)
		sandbox_unref(sb);
}

/* Persists a state change; with sb->lock held. */
int sb_set_state_locked(struct sandbox *sb, enum sandbox_state st, const char *error, struct al_error *err)
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
	int r = store_sandbox_update(sb_cfg->store, &next, err);
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

int sb_persist_locked(struct sandbox *sb, struct al_error *err)
{
	sb->rec.updated_ms = now_ms_realtime();
	if (sb->pooled) /* no record until a create takes it */
		return 0;
	return store_sandbox_update(sb_cfg->store, &sb->rec, err);
}

/* A copy of the record for the caller (who releases it). */
void sb_record_copy_out(struct sandbox *sb, struct sandbox_record *ret)
{
	pthread_mutex_lock(&sb->lock);
	sandbox_record_copy(ret, &sb->rec);
	pthread_mutex_unlock(&sb->lock);
}

bool sb_tenant_sees(const char *tenant, const struct sandbox_record *rec)
{
	return !tenant || !strcmp(tenant, rec->tenant);
}

int sb_not_found(const char *id, struct al_error *err)
{
	return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "no sandbox with id \"%.64s\"", id);
}

void sandbox_usage(const char *tenant, unsigned *ret_sandboxes, unsigned *ret_vcpus, unsigned *ret_memory_mib)
{
	unsigned n = 0, vcpus = 0, mem = 0;
	pthread_mutex_lock(&sb_registry_lock);
	for (struct sandbox *sb = sb_registry; sb; sb = sb->next) {
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
	pthread_mutex_unlock(&sb_registry_lock);
	*ret_sandboxes = n;
	*ret_vcpus = vcpus;
	*ret_memory_mib = mem;
}

/* The registry's sandbox `id` if the caller may see it: 1 and a new
 * reference; 0 when it is not live (ask the store); < 0 "not found". */
static int registry_find_visible(const char *id, const char *tenant, struct sandbox **ret, struct al_error *err)
{
	if (!sandbox_id_valid(id))
		return sb_not_found(id, err);
	struct sandbox *sb = sb_registry_find(id);
	if (!sb)
		return 0;
	pthread_mutex_lock(&sb->lock);
	bool visible = sb_tenant_sees(tenant, &sb->rec);
	pthread_mutex_unlock(&sb->lock);
	if (!visible) {
		sandbox_unref(sb);
		return sb_not_found(id, err);
	}
	*ret = sb;
	return 1;
}

/* The stored record of `id` if the caller may see it, else "not found". */
int sb_store_get_visible(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	struct sandbox_record rec;
	int r = store_sandbox_get(sb_cfg->store, id, &rec, err);
	if (r < 0)
		return r;
	if (!sb_tenant_sees(tenant, &rec)) {
		sandbox_record_release(&rec);
		return sb_not_found(id, err);
	}
	*ret = rec;
	return 0;
}

/* The live sandbox `id` as the caller may see it: a new reference, or
 * "not found" (unknown, another tenant's) or a conflict naming its state and
 * what the operation needs (`needs`, e.g. "not running"). */
int sb_find_live(const char *id, const char *tenant, const char *needs, struct sandbox **ret, struct al_error *err)
{
	int r = registry_find_visible(id, tenant, ret, err);
	if (r < 0)
		return r;
	if (r > 0) {
		pthread_mutex_lock(&(*ret)->lock);
		bool reattaching = (*ret)->reattaching;
		pthread_mutex_unlock(&(*ret)->lock);
		if (!reattaching)
			return 0;
		sandbox_unref(*ret);
		*ret = NULL;
		return al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN,
		                    "sandbox %s: airlockd restarted and is re-attaching to its VM; try again in a "
		                    "moment",
		                    id);
	}
	struct sandbox_record rec;
	if ((r = sb_store_get_visible(id, tenant, &rec, err)) < 0)
		return r;
	r = al_error_set(err, AL_ERR_CONFLICT, EBUSY, "sandbox %s is %s%s%s", id, sandbox_state_name(rec.state),
	                 needs[0] ? ", " : "", needs);
	sandbox_record_release(&rec);
	return r;
}

/* sb_find_live, then the sandbox's op_lock: an operation that no other
 * lifecycle call interleaves with; sb_op_release ends it. */
int sb_op_acquire(const char *id, const char *tenant, const char *needs, struct sandbox **ret, struct al_error *err)
{
	int r = sb_find_live(id, tenant, needs, ret, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&(*ret)->op_lock);
	return 0;
}

/* The end of an operation: its op_lock and its reference go. */
void sb_op_release(struct sandbox *sb)
{
	pthread_mutex_unlock(&sb->op_lock);
	sandbox_unref(sb);
}

int sandbox_acquire(const char *id, const char *tenant, struct sandbox **ret, struct al_error *err)
{
	struct sandbox *sb = NULL;
	int fr = sb_find_live(id, tenant, "not running", &sb, err);
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

void sandbox_env_free(char **env, size_t n)
{
	for (size_t i = 0; env && i < n; i++)
		free(env[i]);
	free(env);
}

int sandbox_get(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	struct sandbox *sb = NULL;
	int r = registry_find_visible(id, tenant, &sb, err);
	if (r < 0)
		return r;
	if (r == 0)
		return sb_store_get_visible(id, tenant, ret, err);
	sb_record_copy_out(sb, ret);
	sandbox_unref(sb);
	return 0;
}

/* A boot in progress (a create or recover: state creating) is cut short,
 * whatever its stage, so that the DELETE waits seconds, not a boot: the
 * boot sees `cancel` between stages and in a wait for the template's
 * build; its VMM is killed (every wait on the VMM ends with it) and its
 * channel too (the waits for the agent). The boot then answers "deleted
 * while it booted" and leaves the runtime for the DELETE to remove. */
void sb_boot_cut_short(struct sandbox *sb)
{
	pthread_mutex_lock(&sb->lock);
	struct guest_channel *booting = NULL;
	if (sb->rec.state == SANDBOX_CREATING) {
		sb->cancel = true;
		booting = sb->ch;
		/* By pidfd: it names this VMM, never a reused pid; it stays open
		 * while sb->lock is held (a boot sets it under the lock). */
		if (sb->pidfd >= 0 && !__atomic_load_n(&sb->vmm_exited, __ATOMIC_ACQUIRE) &&
		    syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0) < 0 && errno != ESRCH)
			log_error("sandbox %s: cannot kill its booting VMM: %m", sb->rec.id);
		log_info("sandbox %s: deleted while it boots: the boot is cut short", sb->rec.id);
	}
	pthread_mutex_unlock(&sb->lock);
	if (booting)
		guest_channel_kill(booting, "the sandbox was deleted while it booted");
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
		int r = sb_store_get_visible(id, tenant, &rec, err);
		if (r < 0)
			return r;
		if (rec.state != SANDBOX_DELETED) {
			sb = sandbox_new(&rec); /* our reference */
			sb_registry_add(sb);    /* and the registry's */
		} else {
			*ret = rec;
			return 0;
		}
		sandbox_record_release(&rec);
	}
	sb_boot_cut_short(sb);
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
	r = sb_set_state_locked(sb, SANDBOX_STOPPING, sb->rec.error, err);
	pthread_mutex_unlock(&sb->lock);
	if (r < 0) {
		pthread_mutex_unlock(&sb->op_lock);
		sandbox_unref(sb);
		return r;
	}
	crash_point("delete.stopping");
	sb_teardown(sb);
	crash_point("delete.torn_down");
	/* The channel and fds are released with the last reference: an exec
	 * that is still returning may hold one. */
	pthread_mutex_lock(&sb->lock);
	int rr = rm_rf(sb->dir);
	if (rr < 0)
		log_error("sandbox %s: cannot remove %s: %s", sb->rec.id, sb->dir, strerror(-rr));
	sb->rec.vmm_pid = 0;
	r = sb_set_state_locked(sb, SANDBOX_DELETED, NULL, err);
	if (r == 0)
		sandbox_record_copy(ret, &sb->rec);
	pthread_mutex_unlock(&sb->lock);
	pthread_mutex_unlock(&sb->op_lock);
	sb_registry_remove(sb);
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
	int r = sb_channel_reconnect(sb, deadline, err);
	if (r == 0 && (guest_channel_request_hello(sb->ch) < 0 || guest_channel_wait_hello(sb->ch, deadline, NULL) < 0))
		r = al_error_set(err, AL_ERR_UNAVAILABLE, ETIMEDOUT, "the guest agent did not answer after the resume");
	if (r < 0) {
		/* Running without a channel is no state to leave it in. */
		pthread_mutex_lock(&sb->lock);
		struct al_error e;
		sb_set_state_locked(sb, SANDBOX_ERROR, err->message, &e);
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
	int fr = sb_op_acquire(id, tenant,
	                       pause ? "only a running sandbox can be paused" : "only a paused sandbox can be resumed",
	                       &sb, err);
	if (fr < 0)
		return fr;
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
		struct vmm_config vc = sb_vmm_config(sb);
		if (pause) {
			guest_channel_set_paused(sb->ch, true);
			r = sb_cfg->vmm->pause(&vc, err);
			if (r < 0)
				guest_channel_set_paused(sb->ch, false);
			else
				crash_point("pause.vmm_paused");
		} else {
			r = sb_cfg->vmm->resume(&vc, err);
			if (r == 0)
				crash_point("resume.vmm_resumed");
			if (r == 0 && sb->channel_at_resume)
				r = channel_at_resume_open(sb, err);
			else if (r == 0)
				guest_channel_set_paused(sb->ch, false);
		}
		if (r == 0) {
			pthread_mutex_lock(&sb->lock);
			r = sb_set_state_locked(sb, pause ? SANDBOX_PAUSED : SANDBOX_RUNNING, NULL, err);
			sb->last_activity_ms = now_ms_monotonic(); /* a resume is activity: idle counts anew */
			pthread_mutex_unlock(&sb->lock);
		}
	}
	if (r >= 0) {
		sb_record_copy_out(sb, ret);
		r = 0;
	}
	sb_op_release(sb);
	return r;
}

static sandbox_pause_fn pause_handler;
sandbox_gate_fn sb_gate;

void sandboxes_set_cluster_hooks(sandbox_pause_fn pause, sandbox_gate_fn gate)
{
	pause_handler = pause;
	sb_gate = gate;
}

int sandbox_pause_local(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	return pause_resume(id, tenant, true, ret, err);
}

int sandbox_pause(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	if (pause_handler)
		return pause_handler(id, tenant, ret, err);
	return pause_resume(id, tenant, true, ret, err);
}

int sandbox_resume(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err)
{
	int r = sb_gate ? sb_gate("resume a sandbox", err) : 0;
	return r < 0 ? r : pause_resume(id, tenant, false, ret, err);
}
