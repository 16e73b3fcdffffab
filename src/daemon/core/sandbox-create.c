/* SPDX-License-Identifier: Apache-2.0 */
/* Creating a sandbox (and restoring a snapshot into a new one): the
 * host-wide limits, the start slots (their own lock), the record, its
 * registration within the tenant's quota (under sb_registry_lock), the boot
 * (under the new sandbox's op_lock). */
#include <fcntl.h>
#include <sys/stat.h>

#include "accel.h"
#include "events.h"
#include "json-cleanup.h"
#include "log.h"
#include "metrics.h"
#include "secrets.h"
#include "snapshot.h"
#include "util.h"
#include "sandbox-internal.h"
#include "templates.h"

/* ---- limits ------------------------------------------------------------------------------- */

/* Boots and restores at once are bounded (--max-concurrent-starts): each
 * holds a slot from before its VMM starts until the guest answered or the
 * start failed. A create that finds none free waits (bounded by
 * --start-queue-timeout-s), in order of nothing but the condition. */
static pthread_mutex_t starts_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t starts_cond = PTHREAD_COND_INITIALIZER;
static unsigned starts_active, starts_waiting;

int sb_start_slot_acquire(const char *what, struct al_error *err)
{
	/* Every start runs on the accelerator the daemon decided: while its
	 * probe runs, starts wait for it. */
	struct accel_info accel;
	if (accel_wait(now_ms_monotonic() + (uint64_t)sb_cfg->accel_wait_s * 1000u, &accel) < 0)
		return al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN,
		                    "%s: the accelerator probe has not finished within %u s (see airlockd's log); "
		                    "nothing was created, try again later",
		                    what, sb_cfg->accel_wait_s);
	pthread_mutex_lock(&starts_lock);
	if (starts_active >= sb_cfg->max_concurrent_starts) {
		struct timespec deadline;
		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += sb_cfg->start_queue_timeout_s;
		starts_waiting++;
		metrics_set_starts(starts_active, starts_waiting);
		metrics_count_start_waited();
		int rc = 0;
		while (starts_active >= sb_cfg->max_concurrent_starts && rc != ETIMEDOUT)
			rc = pthread_cond_timedwait(&starts_cond, &starts_lock, &deadline);
		starts_waiting--;
		if (starts_active >= sb_cfg->max_concurrent_starts) {
			metrics_set_starts(starts_active, starts_waiting);
			pthread_mutex_unlock(&starts_lock);
			metrics_count_start_rejected();
			return al_error_set(err, AL_ERR_UNAVAILABLE, EBUSY,
			                    "%s: %u sandboxes are starting already (airlockd --max-concurrent-starts "
			                    "%u) and none finished within %u s (--start-queue-timeout-s); nothing was "
			                    "created, try again later",
			                    what, sb_cfg->max_concurrent_starts, sb_cfg->max_concurrent_starts,
			                    sb_cfg->start_queue_timeout_s);
		}
	}
	starts_active++;
	metrics_set_starts(starts_active, starts_waiting);
	pthread_mutex_unlock(&starts_lock);
	return 0;
}

bool sb_accel_decided(void)
{
	struct accel_info accel;
	accel_get(&accel);
	return accel.decided;
}

void sb_start_slot_release(void)
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
	if (vcpus > sb_cfg->max_vcpus)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "vcpus: %u%s is above this host's maximum of %u per sandbox (airlockd --max-vcpus)",
		                    vcpus, of, sb_cfg->max_vcpus);
	if (memory_mib > sb_cfg->max_memory_mib)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "memory_mib: %u%s is above this host's maximum of %u per sandbox (airlockd "
		                    "--max-memory-mib, at most the host's memory)",
		                    memory_mib, of, sb_cfg->max_memory_mib);
	uint64_t bytes = 0;
	int r;
	if (from) {
		cleanup_free char *snap = snapshot_dir(from->id);
		cleanup_free char *disk = xasprintf("%s/%s", snap, snapshot_disk_name(sb_snapshot_disk()));
		struct stat st;
		if (sb_snapshot_disk() == SNAPSHOT_DISK_WHOLE) /* a whole disk: its size */
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
	if (disk_mib > sb_cfg->max_disk_mib) {
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
		                    what, disk_mib, sb_cfg->max_disk_mib);
	}
	*ret_disk_mib = disk_mib;
	return 0;
}

/* ---- the create ------------------------------------------------------------------------------ */

/* The egress policy of a sandbox whose request names none: a restore keeps
 * the policy its snapshot's sandbox has (if it still exists); everything
 * else gets the operator's default (deny-all unless configured). */
static char *default_network(const struct snapshot_info *from)
{
	if (from) {
		struct sandbox_record parent;
		struct al_error ignored;
		if (store_sandbox_get(sb_cfg->store, from->sandbox_id, &parent, &ignored) == 0) {
			char *p = parent.network_json ? xstrdup(parent.network_json) : NULL;
			sandbox_record_release(&parent);
			if (p)
				return p;
		}
	}
	return xstrdup(sb_cfg->default_network_json ? sb_cfg->default_network_json : NETWORK_POLICY_EMPTY);
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

/* Whether one more sandbox of this shape fits in the tenant's quota;
 * under sb_registry_lock. */
static int quota_check_locked(const char *tenant, const struct tenant_quota *quota, const struct tenant_usage *extra,
                              unsigned vcpus, unsigned memory_mib, struct al_error *err)
{
	struct tenant_usage used = extra ? *extra : (struct tenant_usage){0};
	for (struct sandbox *o = sb_registry; o; o = o->next) {
		pthread_mutex_lock(&o->lock);
		if ((o->rec.state == SANDBOX_CREATING || o->rec.state == SANDBOX_RUNNING ||
		     o->rec.state == SANDBOX_PAUSED) &&
		    !strcmp(o->rec.tenant, tenant)) {
			used.sandboxes++;
			used.vcpus += o->rec.vcpus;
			used.memory_mib += o->rec.memory_mib;
		}
		pthread_mutex_unlock(&o->lock);
	}
	return tenant_quota_check(tenant, quota, &used, vcpus, memory_mib, err);
}

/* Quota check and registration in one step, so two creates cannot both take the last slot. */
static int registry_add_within_quota(struct sandbox *sb, const struct tenant_quota *quota, struct al_error *err)
{
	pthread_mutex_lock(&sb_registry_lock);
	int r = quota ? quota_check_locked(sb->rec.tenant, quota, NULL, sb->rec.vcpus, sb->rec.memory_mib, err) : 0;
	if (r < 0) {
		pthread_mutex_unlock(&sb_registry_lock);
		return r;
	}
	sb->refs++;
	sb->next = sb_registry;
	sb_registry = sb;
	pthread_mutex_unlock(&sb_registry_lock);
	return 0;
}

void sb_record_base(struct sandbox_record *rec, const char *template_name, unsigned vcpus, unsigned memory_mib,
                    unsigned disk_mib)
{
	*rec = (struct sandbox_record){
	    .state = SANDBOX_CREATING,
	    .vcpus = vcpus,
	    .memory_mib = memory_mib,
	    .disk_mib = disk_mib,
	    .boot_ms = -1,
	};
	new_id(rec->id);
	strlcpy_al(rec->template_name, template_name, sizeof(rec->template_name));
	strlcpy_al(rec->backend, sb_cfg->vmm->name, sizeof(rec->backend));
	struct accel_info accel;
	accel_get(&accel);
	strlcpy_al(rec->accel, sb_cfg->vmm->accel(), sizeof(rec->accel));
	strlcpy_al(rec->cpu, accel.cpu, sizeof(rec->cpu));
	strlcpy_al(rec->accel_reason, accel.reason, sizeof(rec->accel_reason));
	rec->created_ms = rec->updated_ms = now_ms_realtime();
}

/* What the request decides of the record: tenant, secrets, env, metadata,
 * policy, timeouts. */
static int record_from_request(struct sandbox_record *rec, const struct create_request *req, const char *tenant,
                               const struct snapshot_info *from, struct al_error *err)
{
	strlcpy_al(rec->tenant, tenant ? tenant : req->tenant[0] ? req->tenant : TENANT_DEFAULT, sizeof(rec->tenant));
	/* Bindings only for what this request grants: a restore or fork never
	 * inherits them; each binding gets a new placeholder. */
	int r = secret_bindings_grant(rec->tenant, &req->secrets, &rec->secrets_json, err);
	if (r < 0)
		return r;
	rec->env_json = kv_to_json(&req->env);
	rec->metadata_json = kv_to_json(&req->metadata);
	rec->network_json = req->network_json ? xstrdup(req->network_json) : default_network(from);
	rec->timeout_s = req->timeouts.timeout_s;
	rec->idle_timeout_s = req->timeouts.idle_timeout_s;
	strlcpy_al(rec->on_timeout, req->timeouts.on_timeout[0] ? req->timeouts.on_timeout : "kill",
	           sizeof(rec->on_timeout));
	rec->auto_resume = req->timeouts.auto_resume;
	return 0;
}

/* An adopted sandbox (cluster mode) is the one it was: its id, creation
 * time and exposed ports. Its deleted record here (it was here before it
 * moved away) makes room. */
static int record_adopt(struct sandbox_record *rec, const struct sandbox_record *was, struct al_error *err)
{
	if (!sandbox_id_valid(was->id))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "adopt: malformed sandbox id");
	int r = store_sandbox_purge(sb_cfg->store, was->id, err);
	if (r < 0)
		return r;
	strlcpy_al(rec->id, was->id, sizeof(rec->id));
	rec->created_ms = was->created_ms;
	/* Its bindings (ids and placeholders, no values) as they were: secrets
	 * are the cluster's, and its guest has the placeholders. */
	json_t *b = was->secrets_json ? json_loads(was->secrets_json, 0, NULL) : NULL;
	if (json_is_array(b)) {
		free(rec->secrets_json);
		rec->secrets_json = xstrdup(was->secrets_json);
	}
	json_decref(b);
	memcpy(rec->ports, was->ports, sizeof(rec->ports));
	rec->n_ports = MIN(was->n_ports, (unsigned)SANDBOX_RECORD_PORTS_MAX);
	return 0;
}

/* A pooled VM takes the request's record; what it is already (its id, jail,
 * VMM, accelerator, the CA it trusts, its namespace's MAC) it keeps. */
static void pooled_adopt(struct sandbox *sb, struct sandbox_record *rec)
{
	pthread_mutex_lock(&sb->lock);
	strlcpy_al(rec->id, sb->rec.id, sizeof(rec->id));
	rec->jail_uid = sb->rec.jail_uid;
	rec->vmm_pid = sb->rec.vmm_pid;
	strlcpy_al(rec->boot_path, "pool", sizeof(rec->boot_path));
	strlcpy_al(rec->ca_bundle, sb->rec.ca_bundle, sizeof(rec->ca_bundle));
	strlcpy_al(rec->guest_mac, sb->rec.guest_mac, sizeof(rec->guest_mac));
	strlcpy_al(rec->accel, sb->rec.accel, sizeof(rec->accel));
	strlcpy_al(rec->cpu, sb->rec.cpu, sizeof(rec->cpu));
	strlcpy_al(rec->accel_reason, sb->rec.accel_reason, sizeof(rec->accel_reason));
	sandbox_record_release(&sb->rec);
	sandbox_record_copy(&sb->rec, rec);
	sb->pooled = false; /* recorded from here on */
	pthread_mutex_unlock(&sb->lock);
}

/* A create that holds a start slot (or a pooled VM): the record, the
 * registry, the boot (or the hand-out). */
static int create_started(const struct create_request *req, const char *tenant, const struct tenant_quota *quota,
                          const struct snapshot_info *from, const struct images *images, unsigned disk_mib,
                          struct sandbox *pooled, struct sandbox_record *ret, struct al_error *err)
{
	struct images im = *images;
	struct sandbox_record rec;
	sb_record_base(&rec, from ? from->template_name : req->template_name, from ? from->vcpus : req->vcpus,
	               from ? from->memory_mib : req->memory_mib, disk_mib);
	if (req->cold_boot)
		strlcpy_al(rec.boot_path, "cold", sizeof(rec.boot_path));
	/* Only a fork restores an internal snapshot: until the fork is done,
	 * a restart deletes this sandbox (sandbox_fork). */
	if (from && from->internal)
		strlcpy_al(rec.fork_of, from->id, sizeof(rec.fork_of));
	int r = record_from_request(&rec, req, tenant, from, err);
	if (r == 0 && req->adopt)
		r = record_adopt(&rec, req->adopt, err);
	if (r < 0) {
		sandbox_record_release(&rec);
		if (pooled)
			sb_pool_discard(pooled);
		return r;
	}
	struct sandbox *sb = pooled;
	if (sb)
		pooled_adopt(sb, &rec);
	else
		sb = sandbox_new(&rec);
	sandbox_record_release(&rec);
	/* The boot's before anyone can find it: a DELETE from the first moment
	 * waits for the boot (which it cuts short), never runs before it. */
	pthread_mutex_lock(&sb->op_lock);
	if ((r = registry_add_within_quota(sb, quota, err)) < 0) {
		pthread_mutex_unlock(&sb->op_lock);
		if (pooled)
			sb_pool_discard(sb);
		else
			sandbox_unref(sb);
		return r;
	}
	if ((r = store_sandbox_insert(sb_cfg->store, &sb->rec, err)) < 0) {
		sb_registry_remove(sb);
		pthread_mutex_unlock(&sb->op_lock);
		if (pooled)
			sb_pool_discard(sb);
		else
			sandbox_unref(sb);
		return r;
	}
	crash_point("create.inserted");
	events_emit("sandbox.state", sb->rec.tenant, sb->rec.id, json_pack("{s:s}", "state", "creating"));
	log_info("sandbox %s: creating (template %s, %u vCPU, %u MiB, %s/%s%s%s%s)", sb->rec.id, sb->rec.template_name,
	         sb->rec.vcpus, sb->rec.memory_mib, sb->rec.backend, sb->rec.accel, from ? ", from snapshot " : "",
	         from ? from->id : "", pooled ? ", from the warm pool" : "");

	r = pooled ? sb_pool_handout(sb, err) : sb_boot(sb, &im, from, false, err);
	if (r < 0) {
		sb_boot_failed(sb, err);
		/* As sb_boot_failed saw it: a DELETE after it finds `error`. */
		pthread_mutex_lock(&sb->lock);
		bool deleted = sb->cancel;
		pthread_mutex_unlock(&sb->lock);
		/* The disk is large and useless now; the logs stay until rm. */
		cleanup_free char *disk = xasprintf("%s/%s", sb->root, sb_cfg->vmm->disk_file);
		unlink(disk);
		/* Deleted while it booted: whatever failed on the way (the VMM and
		 * the channel were killed), the answer is the documented one. */
		if (deleted)
			sb_boot_cancelled(sb, err);
		else /* The record has the console lines; the answer names the sandbox to inspect. */
			al_error_prefix(err, "sandbox %s failed to boot (see 'airlock inspect %s')", sb->rec.id,
			                sb->rec.id);
	} else {
		sb_record_copy_out(sb, ret);
	}
	pthread_mutex_unlock(&sb->op_lock);
	sandbox_unref(sb);
	return r;
}

bool sb_quota_fits(const char *tenant, const struct tenant_quota *quota, const struct tenant_usage *extra,
                   unsigned vcpus, unsigned memory_mib)
{
	if (!quota)
		return true;
	struct al_error ignored;
	pthread_mutex_lock(&sb_registry_lock);
	bool fits = quota_check_locked(tenant, quota, extra, vcpus, memory_mib, &ignored) == 0;
	pthread_mutex_unlock(&sb_registry_lock);
	return fits;
}

int sandbox_create(const struct create_request *req, const char *tenant, const struct tenant_quota *quota,
                   const struct snapshot_info *from, struct sandbox_record *ret, struct al_error *err)
{
	if (tenant && req->tenant[0] && strcmp(tenant, req->tenant))
		return al_error_set(
		    err, AL_ERR_FORBIDDEN, EPERM,
		    "tenant: your token belongs to tenant \"%s\"; it cannot create sandboxes for \"%s\"", tenant,
		    req->tenant);
	/* SECURITY: a tenant starts only its own templates and the shared ones
	 * (templates.h), never a layer of the build cache (only a build's own
	 * sandbox does); a snapshot's template was checked when it was made. */
	const char *user = tenant ? tenant : req->tenant[0] ? req->tenant : TENANT_DEFAULT;
	struct template_info tpl;
	int gr = sb_gate ? sb_gate("create a sandbox", err) : 0;
	if (gr < 0)
		return gr;
	if (!from && !req->build_layer && template_name_reserved(req->template_name))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOENT, "template: unknown template \"%s\"",
		                    req->template_name);
	if (!from) {
		int tr = template_find(req->template_name, user, &tpl, err);
		if (tr < 0) {
			if (err->code == AL_ERR_NOT_FOUND)
				err->code = AL_ERR_INVALID_ARGUMENT; /* a bad field of the create */
			return tr;
		}
		template_info_release(&tpl);
	}
	struct images im;
	int r = sb_resolve_images(from ? from->template_name : req->template_name, &im, err);
	if (r < 0)
		return r;
	unsigned disk_mib = 0;
	if ((r = host_limits_check(req, from, &im, from ? from->vcpus : req->vcpus,
	                           from ? from->memory_mib : req->memory_mib, &disk_mib, err)) < 0)
		return r;
	/* A warm pool's VM needs no start slot: it started already. Taken
	 * only when the create would fit in the quota, so that creates over it
	 * cannot use up a pool. */
	const char *owner = tenant ? tenant : req->tenant[0] ? req->tenant : TENANT_DEFAULT;
	struct sandbox *pooled = NULL;
	if (!from && !req->cold_boot && sb_quota_fits(owner, quota, NULL, req->vcpus, req->memory_mib))
		pooled = sb_pool_take(owner, req->template_name, req->vcpus, req->memory_mib, disk_mib);
	if (pooled)
		return create_started(req, tenant, quota, NULL, &im, disk_mib, pooled, ret, err);
	/* Before anything is recorded: a create refused here leaves nothing. */
	if ((r = sb_start_slot_acquire(from ? "restore" : "create", err)) < 0)
		return r;
	r = create_started(req, tenant, quota, from, &im, disk_mib, NULL, ret, err);
	sb_start_slot_release();
	return r;
}
