/* SPDX-License-Identifier: Apache-2.0 */
/* Snapshots of a live sandbox, whether a snapshot can be restored here,
 * and forks (a snapshot restored into several new sandboxes). A snapshot
 * holds sb->op_lock throughout; state changes are under sb->lock. */
#include <inttypes.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "accel.h"
#include "json-cleanup.h"
#include "log.h"
#include "snapshot.h"
#include "util.h"
#include "file-copy.h"
#include "sandbox-internal.h"

#define FREEZE_TIMEOUT_MS 30000

static int images_digests(const char *template_name, char kernel_sha[65], char initrd_sha[65], struct al_error *err)
{
	struct images im;
	int r = sb_resolve_images(template_name, &im, err);
	if (r < 0)
		return r;
	if ((r = file_sha256(im.kernel, kernel_sha)) < 0 || (r = file_sha256(im.initrd, initrd_sha)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read the guest kernel: %s", strerror(-r));
	return 0;
}

enum snapshot_disk_kind sb_snapshot_disk(void)
{
	return sb_cfg->vmm->disk_kind == VMM_DISK_WHOLE ? SNAPSHOT_DISK_WHOLE : SNAPSHOT_DISK_OVERLAY;
}

int sandbox_snapshot_usable(const char *snapshot_id, const char *tenant, struct snapshot_info *ret,
                            struct al_error *err)
{
	struct snapshot_info info;
	int r = snapshot_get(snapshot_id, tenant, &info, err);
	if (r < 0)
		return r;
	if (strcmp(info.backend, sb_cfg->vmm->name))
		return al_error_set(err, AL_ERR_CONFLICT, EINVAL,
		                    "snapshot %s was taken with the %s backend; this daemon runs %s", info.id,
		                    info.backend, sb_cfg->vmm->name);
	/* A saved CPU state loads only where it was made. Waits while the
	 * accelerator's probe runs. */
	struct accel_info accel;
	if (accel_wait(now_ms_monotonic() + (uint64_t)sb_cfg->accel_wait_s * 1000u, &accel) == 0 && info.accel[0] &&
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
	if ((r = snapshot_verify(&info, sb_snapshot_disk(), err)) < 0)
		return r;
	*ret = info;
	return 0;
}

/* Writes the snapshot's files into dir (a fresh directory); the guest is
 * paused: the VMM's save, then the disk at that moment. */
static int snapshot_write(struct sandbox *sb, const struct vmm_config *vc, const char *dir, struct al_error *err)
{
	cleanup_free char *mem = xasprintf("%s/%s", dir, SNAPSHOT_MEMORY);
	cleanup_free char *state = xasprintf("%s/%s", dir, SNAPSHOT_STATE);
	int r = sb_cfg->vmm->save(vc, mem, state, err);
	if (r < 0)
		return r;
	/* A whole disk is copied by reflink where the filesystem can (else
	 * sparse); an overlay is small. */
	cleanup_free char *src = xasprintf("%s/%s", sb->root, sb_cfg->vmm->disk_file);
	cleanup_free char *dst = xasprintf("%s/%s", dir, snapshot_disk_name(sb_snapshot_disk()));
	if ((r = file_copy_cow(src, dst, 0600, NULL)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot copy the disk into the snapshot: %s%s",
		                    strerror(-r), r == -ENOSPC ? " (the state dir's filesystem is full)" : "");
	return 0;
}

/* Digests, size and metadata of the files in dir. */
static int snapshot_describe(const char *dir, struct snapshot_info *info, struct al_error *err)
{
	cleanup_free char *mem = xasprintf("%s/%s", dir, SNAPSHOT_MEMORY);
	cleanup_free char *disk = xasprintf("%s/%s", dir, snapshot_disk_name(sb_snapshot_disk()));
	cleanup_free char *state = xasprintf("%s/%s", dir, SNAPSHOT_STATE);
	int r;
	if ((r = file_sha256(mem, info->memory_sha)) < 0 || (r = file_sha256(disk, info->disk_sha)) < 0 ||
	    (sb_cfg->vmm->state_apart && (r = file_sha256(state, info->state_sha)) < 0))
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read the snapshot back: %s", strerror(-r));
	struct stat a, b, c;
	if (stat(mem, &a) == 0 && stat(disk, &b) == 0)
		info->size_bytes = (uint64_t)a.st_blocks * 512u + (uint64_t)b.st_blocks * 512u;
	if (sb_cfg->vmm->state_apart && stat(state, &c) == 0)
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
	int fr = sb_op_acquire(id, tenant, "only a running or paused sandbox can be snapshotted", &sb, err);
	if (fr < 0)
		return fr;
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
		strlcpy_al(info.backend, sb_cfg->vmm->name, sizeof(info.backend));
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
			r = sb_set_state_locked(sb, SANDBOX_SNAPSHOTTING, NULL, err);
	}
	pthread_mutex_unlock(&sb->lock);
	if (r < 0) {
		sb_op_release(sb);
		return r;
	}
	bool running = before == SANDBOX_RUNNING;
	/* The guest's memory bounds the files a save may leave (save()). */
	struct vmm_config vc = sb_vmm_config(sb);
	vc.memory_mib = sb->rec.memory_mib;
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
		r = sb_cfg->vmm->pause(&vc, err);
		vm_paused = r == 0;
	}
	/* A save that resets the channel's connection (Firecracker): nobody
	 * reads its end, so that the streams live on (sb_channel_reconnect). */
	bool reset = sb_cfg->vmm->channel_resets_on_save && r == 0;
	if (reset)
		sb_channel_detach(sb);
	cleanup_free char *final_dir = snapshot_dir(info.id);
	cleanup_free char *tmp_dir = xasprintf("%s.tmp", final_dir);
	if (r == 0 && mkdir(tmp_dir, 0700) < 0)
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", tmp_dir);
	if (r == 0)
		r = snapshot_write(sb, &vc, tmp_dir, err);
	if (r == 0)
		r = snapshot_describe(tmp_dir, &info, err);
	if (r == 0)
		crash_point("snapshot.written");
	if (r == 0 && rename(tmp_dir, final_dir) < 0)
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "cannot publish the snapshot: %m");
	if (r == 0)
		crash_point("snapshot.published");
	if (r == 0 && (r = snapshot_insert(&info, err)) < 0)
		rm_rf(final_dir);
	if (r < 0)
		rm_rf(tmp_dir); /* nothing half-written stays */
	/* Whatever happened, the sandbox goes back to how it was. */
	struct al_error back = {0};
	bool resumed = vm_paused && sb_cfg->vmm->resume(&vc, &back) == 0;
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
		sb_monitor_start(sb);
	} else if (reset && (!resumed || sb_channel_reconnect(sb, now_ms_monotonic() + THAW_TIMEOUT_MS, &back) < 0 ||
	                     guest_channel_request_hello(sb->ch) < 0 ||
	                     guest_channel_wait_hello(sb->ch, now_ms_monotonic() + THAW_TIMEOUT_MS, NULL) < 0)) {
		log_error("sandbox %s: after the snapshot, the guest channel did not come back: %s", sb->rec.id,
		          back.message[0] ? back.message : "no HELLO");
		frozen = false;
		broken = true;
	}
	if (frozen && sb_thaw(sb, false, &back) < 0)
		log_error("sandbox %s: after the snapshot: %s", sb->rec.id, back.message);
	pthread_mutex_lock(&sb->lock);
	if (sb->rec.state == SANDBOX_SNAPSHOTTING && sb_set_state_locked(sb, before, NULL, &back) < 0)
		log_error("sandbox %s: %s", sb->rec.id, back.message);
	pthread_mutex_unlock(&sb->lock);
	if (broken)
		sandbox_fail(sb, "the guest channel did not come back after the snapshot");
	sb_op_release(sb);
	if (r == 0) {
		log_info("sandbox %s: snapshot %s (%s, %" PRIu64 " bytes)", id, info.id, info.name, info.size_bytes);
		*ret = info;
	}
	return r;
}

#define FORK_MAX 16

/* The fork's copies (recs, count) are all there: they stop naming its
 * snapshot, in memory and in the store at once (one transaction), with
 * every copy's lock held so that no other write of a record comes between. */
static int fork_finish(const struct snapshot_info *snap, struct sandbox_record *recs, unsigned count,
                       struct al_error *err)
{
	struct sandbox **kids = xcalloc(count, sizeof(*kids));
	for (unsigned i = 0; i < count; i++)
		if ((kids[i] = sb_registry_find(recs[i].id)))
			pthread_mutex_lock(&kids[i]->lock);
	int r = store_fork_finish(sb_cfg->store, snap->id, err);
	for (unsigned i = 0; i < count; i++) {
		recs[i].fork_of[0] = '\0';
		if (!kids[i])
			continue;
		if (r == 0)
			kids[i]->rec.fork_of[0] = '\0';
		pthread_mutex_unlock(&kids[i]->lock);
	}
	/* Not before every lock is let go: sandbox_unref takes the registry's. */
	for (unsigned i = 0; i < count; i++)
		if (kids[i])
			sandbox_unref(kids[i]);
	free(kids);
	return r;
}

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
	crash_point("fork.snapshot_taken");
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
		struct sandbox *child = sb_registry_find(recs[made].id);
		if (child) {
			pthread_mutex_lock(&child->lock);
			free(child->rec.env_json);
			free(child->rec.metadata_json);
			child->rec.env_json = json_dumps(env ? env : json_object(), JSON_COMPACT | JSON_SORT_KEYS);
			child->rec.metadata_json =
			    json_dumps(meta ? meta : json_object(), JSON_COMPACT | JSON_SORT_KEYS);
			struct al_error e2;
			sb_persist_locked(child, &e2);
			sandbox_record_release(&recs[made]);
			sandbox_record_copy(&recs[made], &child->rec);
			pthread_mutex_unlock(&child->lock);
			sandbox_unref(child);
		}
		crash_point("fork.child_made");
	}
	crash_point("fork.children_made");
	if (r == 0)
		r = fork_finish(&snap, recs, count, err);
	crash_point("fork.finished");
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
