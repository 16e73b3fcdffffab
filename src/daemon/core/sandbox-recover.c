/* SPDX-License-Identifier: Apache-2.0 */
/* Recover: a sandbox in state error boots again, from its latest snapshot
 * or cold from its disk, under its op_lock and a start slot. */

#include "log.h"
#include "snapshot.h"
#include "util.h"
#include "sandbox-internal.h"

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
		return sb_not_found(id, err);
	struct sandbox *sb = sb_registry_find(id);
	if (!sb) {
		/* A record whose VMM died while the daemon was away: bring it back to life. */
		struct sandbox_record rec;
		int r = sb_store_get_visible(id, tenant, &rec, err);
		if (r < 0)
			return r;
		if (rec.state != SANDBOX_ERROR) {
			r = al_error_set(err, AL_ERR_CONFLICT, EBUSY,
			                 "sandbox %s is %s: only a sandbox in state error can be recovered", id,
			                 sandbox_state_name(rec.state));
			sandbox_record_release(&rec);
			return r;
		}
		sb = sandbox_new(&rec);
		sandbox_record_release(&rec);
		sb_registry_add(sb);
	}
	pthread_mutex_lock(&sb->op_lock);
	pthread_mutex_lock(&sb->lock);
	int r = 0;
	if (!sb_tenant_sees(tenant, &sb->rec))
		r = sb_not_found(id, err);
	else if (sb->rec.state != SANDBOX_ERROR)
		r = al_error_set(err, AL_ERR_CONFLICT, EBUSY,
		                 "sandbox %s is %s: only a sandbox in state error can be recovered", id,
		                 sandbox_state_name(sb->rec.state));
	pthread_mutex_unlock(&sb->lock);
	struct snapshot_info snap;
	bool from_snapshot = r == 0 && memory && latest_snapshot(id, tenant, &snap);
	struct images im;
	if (r == 0)
		r = sb_resolve_images(sb->rec.template_name, &im, err);
	/* A slot before anything changes: a recover refused here leaves the sandbox as it was. */
	bool slot = false;
	if (r == 0)
		slot = (r = sb_start_slot_acquire("recover", err)) == 0;
	if (r == 0) {
		/* Whatever is left of the old VMM goes; its channel retires. */
		sb_teardown(sb);
		pthread_mutex_lock(&sb->lock);
		sb_channel_retire_locked(sb);
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
		r = sb_set_state_locked(sb, SANDBOX_CREATING, NULL, err);
		pthread_mutex_unlock(&sb->lock);
	}
	if (r == 0) {
		log_info("sandbox %s: recovering %s", id, from_snapshot ? snap.id : "by a cold boot of its disk");
		r = sb_boot(sb, &im, from_snapshot ? &snap : NULL, true, err);
		if (r < 0) {
			sb_boot_failed(sb, err);
			pthread_mutex_lock(&sb->lock);
			bool deleted = sb->cancel; /* as sb_boot_failed saw it */
			pthread_mutex_unlock(&sb->lock);
			if (deleted) /* whatever failed on the way: the documented answer */
				sb_boot_cancelled(sb, err);
			else
				al_error_prefix(err, "sandbox %s could not be recovered", id);
		}
	}
	if (slot)
		sb_start_slot_release();
	if (r == 0)
		sb_record_copy_out(sb, ret);
	pthread_mutex_unlock(&sb->op_lock);
	sandbox_unref(sb);
	return r;
}
