/* SPDX-License-Identifier: Apache-2.0 */
/* Warm pools (docs/architecture.md, "Warm pools"): per shape (template,
 * vCPUs, memory) and owner (a tenant, or "" for the operator's shared
 * pool), VMs restored from the template's snapshot and paused, with no
 * identity yet: a pool id (their directories, jail and cgroup are named by
 * it), no record, not in the registry, a network namespace the gateway does
 * not know. A create takes one (sb_pool_take) and gives it its identity at
 * hand-out (sb_pool_handout: policy and bindings to the gateway, the CPU
 * weight of a sandbox, resume, THAW: entropy, clock, id, hostname, boot
 * id). No VM is ever handed out twice: a pooled VM is either taken once or
 * stopped.
 *
 * One thread fills the pools, one VM at a time, besides the creates' start
 * slots (under load a pool would otherwise never refill) but at the
 * cgroup CPU weight JAIL_CPU_WEIGHT_POOL, so that its VM gets the CPU that
 * the sandboxes and creates leave; it stops filling and sheds pooled VMs while the
 * host's memory in use is above --pool-memory-high-pct. pool_lock guards
 * the table; it is taken before any sandbox's lock, never after. */
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>

#include "auth.h"
#include "cpu-wait.h"
#include "guest-ca.h"
#include "jail.h"
#include "log.h"
#include "process.h"
#include "util.h"
#include "sandbox-internal.h"

#define POOL_TICK_MS 250
#define POOL_RETRY_MS 15000 /* after a failed fill */
#define POOL_WARM_UP_MS 30000

struct pool {
	bool used;
	struct pool_spec spec;
	unsigned gen; /* changes when the pool is removed: a fill in flight then goes */
	struct sandbox *ready[POOL_SIZE_MAX];
	unsigned n_ready;
	bool filling;
	uint64_t hits, misses, fills, failures, shed, lost;
	uint64_t retry_at_ms;
	char error[256];
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cond;
static struct pool pools[POOLS_MAX];
static unsigned pool_gen;
static pthread_t pool_thread;
static bool pool_running, pool_stopping, pool_shedding;
static struct sandbox *pool_filling; /* the VM being filled: its boot is cut short at stop */
/* VMs taken and not yet handed out (or discarded): not in a pool and maybe
 * not in the registry yet, they still count in their tenant's quota for
 * refills (tenant_pooled_locked). */
#define POOL_INFLIGHT_MAX 256
static struct {
	struct sandbox *sb;
	char tenant[64];
	unsigned vcpus, memory_mib;
} pool_inflight[POOL_INFLIGHT_MAX];

/* sb leaves the in-flight list (if it is there); under pool_lock. */
static void inflight_remove_locked(const struct sandbox *sb)
{
	for (size_t i = 0; i < POOL_INFLIGHT_MAX; i++)
		if (pool_inflight[i].sb == sb)
			pool_inflight[i].sb = NULL;
}

/* ---- memory ------------------------------------------------------------------------------------ */

/* The host's memory and what of it is available (/proc/meminfo), in KiB. */
static int host_memory_kib(uint64_t *ret_total, uint64_t *ret_available)
{
	cleanup_close int fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
	char buf[4096];
	ssize_t n = fd >= 0 ? read_full(fd, buf, sizeof(buf) - 1) : -errno;
	if (n <= 0)
		return n < 0 ? (int)n : -EIO;
	buf[n] = '\0';
	const char *t = strstr(buf, "MemTotal:"), *a = strstr(buf, "MemAvailable:");
	unsigned long long total, avail;
	if (!t || !a || sscanf(t, "MemTotal: %llu", &total) != 1 || sscanf(a, "MemAvailable: %llu", &avail) != 1 ||
	    !total)
		return -EIO;
	*ret_total = total;
	*ret_available = avail;
	return 0;
}

/* Whether the host's memory in use is at or above the high-water mark. */
static bool memory_above_high(void)
{
	uint64_t total, avail;
	if (!sb_cfg->pool_memory_high_pct || host_memory_kib(&total, &avail) < 0)
		return false;
	return (total - MIN(avail, total)) * 100u >= total * sb_cfg->pool_memory_high_pct;
}

/* Pss of a process (/proc/PID/smaps_rollup), in bytes; 0 when unknown. */
static uint64_t pss_bytes(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	char buf[2048];
	ssize_t n = fd >= 0 ? read_full(fd, buf, sizeof(buf) - 1) : -1;
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	const char *p = strstr(buf, "\nPss:");
	unsigned long long kib;
	return p && sscanf(p, "\nPss: %llu", &kib) == 1 ? (uint64_t)kib * 1024u : 0;
}

/* A pooled VM's memory: its jailer's and its VMM's Pss. */
static uint64_t pooled_pss(pid_t jailer)
{
	if (jailer <= 0)
		return 0;
	pid_t vmm = proc_first_child(jailer);
	return pss_bytes(jailer) + (vmm > 0 ? pss_bytes(vmm) : 0);
}

/* ---- the table ------------------------------------------------------------------------------- */

static bool spec_same_pool(const struct pool_spec *a, const struct pool_spec *b)
{
	return !strcmp(a->tenant, b->tenant) && !strcmp(a->template_name, b->template_name) && a->vcpus == b->vcpus &&
	       a->memory_mib == b->memory_mib;
}

/* The pool of owner and shape; under pool_lock. */
static struct pool *pool_find_locked(const char *tenant, const char *template_name, unsigned vcpus, unsigned memory_mib)
{
	struct pool_spec key = {.vcpus = vcpus, .memory_mib = memory_mib};
	strlcpy_al(key.tenant, tenant, sizeof(key.tenant));
	strlcpy_al(key.template_name, template_name, sizeof(key.template_name));
	for (size_t i = 0; i < POOLS_MAX; i++)
		if (pools[i].used && spec_same_pool(&pools[i].spec, &key))
			return &pools[i];
	return NULL;
}

/* Stops a VM that was never handed out (or was taken and not used). */
void sb_pool_discard(struct sandbox *sb)
{
	pthread_mutex_lock(&pool_lock);
	inflight_remove_locked(sb);
	pthread_mutex_unlock(&pool_lock);
	pthread_mutex_lock(&sb->op_lock);
	sb_teardown(sb);
	int r = rm_rf(sb->dir);
	if (r < 0)
		log_error("warm pool: cannot remove %s: %s", sb->dir, strerror(-r));
	pthread_mutex_unlock(&sb->op_lock);
	sandbox_unref(sb);
}

/* Moves out of p what it must no longer hold: VMs whose VMM exited, and
 * those above its size (newest first); under pool_lock. */
static size_t pool_prune_locked(struct pool *p, struct sandbox **out, size_t max)
{
	size_t n = 0;
	for (unsigned i = 0; i < p->n_ready && n < max;) {
		if (__atomic_load_n(&p->ready[i]->vmm_exited, __ATOMIC_ACQUIRE)) {
			log_error("warm pool %s:%u:%u: pooled VM %s exited; it is replaced", p->spec.template_name,
			          p->spec.vcpus, p->spec.memory_mib, p->ready[i]->rec.id);
			p->lost++;
			out[n++] = p->ready[i];
			memmove(&p->ready[i], &p->ready[i + 1], (p->n_ready - i - 1) * sizeof(p->ready[0]));
			p->n_ready--;
		} else {
			i++;
		}
	}
	while (p->n_ready > p->spec.size && n < max)
		out[n++] = p->ready[--p->n_ready];
	return n;
}

int sandbox_pool_set(const struct pool_spec *spec, const struct tenant_quota *quota, struct al_error *err)
{
	if (spec->size && (spec->vcpus > sb_cfg->max_vcpus || spec->memory_mib > sb_cfg->max_memory_mib))
		return al_error_set(
		    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		    "a pool of %u vCPU and %u MiB is above this host's maxima per sandbox (%u vCPUs, %u "
		    "MiB: airlockd --max-vcpus, --max-memory-mib)",
		    spec->vcpus, spec->memory_mib, sb_cfg->max_vcpus, sb_cfg->max_memory_mib);
	if (spec->size && !sb_cfg->template_snapshots)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "warm pools hold restores of the template's snapshot, and this airlockd runs with "
		                    "--template-snapshots off");
	if (spec->size) {
		struct images im;
		int r = sb_resolve_images(spec->template_name, &im, err);
		if (r < 0)
			return r;
	}
	if (spec->tenant[0] && quota) {
		/* Its pooled VMs alone must fit in the tenant's quotas. */
		uint64_t n = spec->size;
		if (n && ((quota->max_sandboxes && n > quota->max_sandboxes) ||
		          (quota->max_vcpus && n * spec->vcpus > quota->max_vcpus) ||
		          (quota->max_memory_mib && n * spec->memory_mib > quota->max_memory_mib))) {
			return al_error_set(err, AL_ERR_QUOTA, EDQUOT,
			                    "a pool of %u sandboxes of %u vCPU and %u MiB does not fit in tenant %s's "
			                    "quotas (%u sandboxes, %u vCPUs, %u MiB; 0 = unlimited); ask for a smaller "
			                    "pool or raise the quota with PUT /v1/tenants/%s",
			                    spec->size, spec->vcpus, spec->memory_mib, spec->tenant,
			                    quota->max_sandboxes, quota->max_vcpus, quota->max_memory_mib,
			                    spec->tenant);
		}
	}
	struct sandbox *out[POOL_SIZE_MAX];
	size_t n_out = 0;
	pthread_mutex_lock(&pool_lock);
	struct pool *p = pool_find_locked(spec->tenant, spec->template_name, spec->vcpus, spec->memory_mib);
	if (!p && spec->size) {
		for (size_t i = 0; i < POOLS_MAX && !p; i++)
			if (!pools[i].used)
				p = &pools[i];
		if (!p) {
			pthread_mutex_unlock(&pool_lock);
			return al_error_set(err, AL_ERR_CONFLICT, ENOSPC,
			                    "this daemon has %d warm pools already; remove one (size 0) first",
			                    POOLS_MAX);
		}
		*p = (struct pool){.used = true, .spec = *spec, .gen = ++pool_gen};
	}
	if (p) {
		p->spec.size = spec->size;
		p->retry_at_ms = 0;
		n_out = pool_prune_locked(p, out, POOL_SIZE_MAX);
		if (!spec->size) {
			p->used = false;
			p->gen = ++pool_gen;
		}
	}
	pthread_cond_signal(&pool_cond);
	pthread_mutex_unlock(&pool_lock);
	for (size_t i = 0; i < n_out; i++)
		sb_pool_discard(out[i]);
	log_info("warm pool %s%s%s:%u:%u: size %u", spec->tenant, spec->tenant[0] ? "/" : "", spec->template_name,
	         spec->vcpus, spec->memory_mib, spec->size);
	return 0;
}

int sandbox_pools_list(const char *tenant, struct pool_status **ret, size_t *ret_n)
{
	struct pool_status *v = xcalloc(POOLS_MAX, sizeof(*v));
	pid_t pids[POOLS_MAX][POOL_SIZE_MAX];
	size_t n = 0;
	pthread_mutex_lock(&pool_lock);
	for (size_t i = 0; i < POOLS_MAX; i++) {
		const struct pool *p = &pools[i];
		if (!p->used || (tenant && p->spec.tenant[0] && strcmp(p->spec.tenant, tenant)))
			continue;
		v[n] = (struct pool_status){.spec = p->spec,
		                            .ready = p->n_ready,
		                            .filling = p->filling,
		                            .hits = p->hits,
		                            .misses = p->misses,
		                            .fills = p->fills,
		                            .failures = p->failures,
		                            .shed = p->shed,
		                            .lost = p->lost};
		strlcpy_al(v[n].error, p->error, sizeof(v[n].error));
		for (unsigned k = 0; k < p->n_ready; k++)
			pids[n][k] = p->ready[k]->pid;
		n++;
	}
	pthread_mutex_unlock(&pool_lock);
	/* Outside the lock: reading smaps walks page tables. A VM stopped
	 * meanwhile reads as 0. */
	for (size_t i = 0; i < n; i++)
		for (unsigned k = 0; k < v[i].ready; k++)
			v[i].pss_bytes += pooled_pss(pids[i][k]);
	*ret = v;
	*ret_n = n;
	return 0;
}

void sandbox_pools_memory(struct pool_memory *ret)
{
	*ret = (struct pool_memory){.high_pct = sb_cfg->pool_memory_high_pct};
	uint64_t total = 0, avail = 0;
	if (host_memory_kib(&total, &avail) == 0) {
		ret->host_total_bytes = total * 1024u;
		ret->host_available_bytes = avail * 1024u;
	}
	pthread_mutex_lock(&pool_lock);
	ret->shedding = pool_shedding;
	pthread_mutex_unlock(&pool_lock);
}

/* ---- take and hand out ------------------------------------------------------------------------ */

struct sandbox *sb_pool_take(const char *tenant, const char *template_name, unsigned vcpus, unsigned memory_mib,
                             unsigned disk_mib)
{
	struct sandbox *dead[POOL_SIZE_MAX * 2];
	size_t n_dead = 0;
	struct sandbox *sb = NULL;
	pthread_mutex_lock(&pool_lock);
	struct pool *own = pool_find_locked(tenant, template_name, vcpus, memory_mib);
	struct pool *shared = pool_find_locked("", template_name, vcpus, memory_mib);
	struct pool *tries[2] = {own, shared};
	for (size_t t = 0; t < 2 && !sb; t++) {
		struct pool *p = tries[t];
		if (!p)
			continue;
		n_dead += pool_prune_locked(p, dead + n_dead, POOL_SIZE_MAX);
		/* The oldest first; a disk of another size (the template's image
		 * changed) is not this create's. */
		size_t slot = 0;
		while (slot < POOL_INFLIGHT_MAX && pool_inflight[slot].sb)
			slot++;
		/* A full in-flight list (256 hand-outs at once): the restore path. */
		if (p->n_ready && p->ready[0]->rec.disk_mib == disk_mib && slot < POOL_INFLIGHT_MAX) {
			sb = p->ready[0];
			pool_inflight[slot].sb = sb;
			strlcpy_al(pool_inflight[slot].tenant, tenant, sizeof(pool_inflight[slot].tenant));
			pool_inflight[slot].vcpus = vcpus;
			pool_inflight[slot].memory_mib = memory_mib;
			memmove(&p->ready[0], &p->ready[1], (p->n_ready - 1) * sizeof(p->ready[0]));
			p->n_ready--;
			p->hits++;
		}
	}
	if (!sb && (own || shared))
		(own ? own : shared)->misses++;
	if (own || shared)
		pthread_cond_signal(&pool_cond); /* refill */
	pthread_mutex_unlock(&pool_lock);
	for (size_t i = 0; i < n_dead; i++)
		sb_pool_discard(dead[i]);
	return sb;
}

static int pool_handout(struct sandbox *sb, struct al_error *err);

int sb_pool_handout(struct sandbox *sb, struct al_error *err)
{
	int r = pool_handout(sb, err);
	pthread_mutex_lock(&pool_lock);
	inflight_remove_locked(sb);
	pthread_cond_signal(&pool_cond); /* a refill may fit the quota now */
	pthread_mutex_unlock(&pool_lock);
	return r;
}

static int pool_handout(struct sandbox *sb, struct al_error *err)
{
	uint64_t t0 = now_ms_monotonic();
	struct vmm_config vc = sb_vmm_config(sb);
	if (__atomic_load_n(&sb->vmm_exited, __ATOMIC_ACQUIRE))
		return al_error_set(err, AL_ERR_BOOT_FAILED, ECHILD, "the warm pool's VM had exited; create again");
	/* A sandbox's CPU share from now on; then the gateway learns its policy
	 * and bindings (fail closed: without them it does not start). */
	int r = jail_cpu_weight_set(sb->rec.id, JAIL_CPU_WEIGHT_DEFAULT, err);
	if (r < 0 || (r = sb_network_register(sb, err)) < 0)
		return r;
	/* Its processes are its tenant's (none ran yet). */
	pthread_mutex_lock(&sb->lock);
	struct process_table *old = sb->procs;
	sb->procs = process_table_new(sb->rec.id, sb->rec.tenant);
	pthread_mutex_unlock(&sb->lock);
	if (old)
		process_table_free(old, sb->ch);
	sb->generation = 0;
	uint64_t t_ready = now_ms_monotonic();
	/* SECURITY: THAW before anything of the create's reaches the guest: its
	 * entropy, clock, id, hostname and boot id are its own from here on. */
	if ((r = sb_cfg->vmm->resume(&vc, err)) < 0)
		return r;
	uint64_t t_resumed = now_ms_monotonic();
	if ((r = sb_thaw(sb, true, err)) < 0)
		return r;
	uint64_t now = now_ms_monotonic();
	log_info("sandbox %s: handed out from the warm pool in %" PRIu64 " ms: identity %" PRIu64 ", resume %" PRIu64
	         ", thaw %" PRIu64,
	         sb->rec.id, now - t0, t_ready - t0, t_resumed - t_ready, now - t_resumed);
	pthread_mutex_lock(&sb->lock);
	sb->rec.boot_ms = (int64_t)(now - t0);
	r = sb->cancel ? sb_boot_cancelled(sb, err) : sb_set_state_locked(sb, SANDBOX_RUNNING, NULL, err);
	pthread_mutex_unlock(&sb->lock);
	return r;
}

void sb_pool_leases_renew(void)
{
	char *dirs[POOLS_MAX * POOL_SIZE_MAX];
	size_t n = 0;
	pthread_mutex_lock(&pool_lock);
	for (size_t i = 0; i < POOLS_MAX; i++)
		for (unsigned k = 0; pools[i].used && k < pools[i].n_ready; k++)
			dirs[n++] = xstrdup(pools[i].ready[k]->dir);
	pthread_mutex_unlock(&pool_lock);
	for (size_t i = 0; i < n; i++) {
		int r = jail_lease_touch(dirs[i], false);
		if (r < 0 && r != -ENOENT)
			log_error("warm pool: cannot renew the lease in %s: %s", dirs[i], strerror(-r));
		free(dirs[i]);
	}
}

/* ---- filling ---------------------------------------------------------------------------------- */

/* The guest runs one command before it is paused, so that the first
 * command of the create that takes it finds the exec path's code
 * translated (TCG) and paged in: /bin/sh -c 'echo warm', as root. A failure
 * other than a dead channel only costs that speed. */
static int pool_warm_up(struct sandbox *sb, struct al_error *err)
{
	/* The guest's internal exec (like the CA's install): not a process of
	 * the sandbox, so no id in its table and no exec event of a VM that is
	 * nobody's yet. */
	char *argv[] = {"/bin/sh", "-c", "echo warm", NULL};
	struct al_error e = {0};
	int r = guest_run_internal(sb->ch, argv, 3, now_ms_monotonic() + POOL_WARM_UP_MS, &e);
	char why[256] = "";
	if (guest_channel_dead(sb->ch, why, sizeof(why)))
		return al_error_set(err, AL_ERR_BOOT_FAILED, ECONNRESET, "the pooled guest went away: %s", why);
	if (r < 0)
		log_info("warm pool: %s: its warm-up command failed (%s); it is kept", sb->rec.id, e.message);
	return 0;
}

/* One VM of spec's shape, restored, warmed up and paused. */
static int pool_fill_one(const struct pool_spec *spec, struct sandbox **ret, struct al_error *err)
{
	struct images im;
	int r = sb_resolve_images(spec->template_name, &im, err);
	if (r < 0)
		return r;
	struct stat st;
	if (stat(im.rootfs, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "%s: %m", im.rootfs);
	struct sandbox_record rec;
	sb_record_base(&rec, spec->template_name, spec->vcpus, spec->memory_mib, size_mib_up((uint64_t)st.st_size));
	strlcpy_al(rec.tenant, spec->tenant, sizeof(rec.tenant));
	struct sandbox *sb = sandbox_new(&rec);
	sandbox_record_release(&rec);
	sb->pooled = true;
	pthread_mutex_lock(&pool_lock);
	pool_filling = sb;
	bool stopping = pool_stopping;
	pthread_mutex_unlock(&pool_lock);
	pthread_mutex_lock(&sb->op_lock);
	r = stopping ? al_error_set(err, AL_ERR_UNAVAILABLE, ECANCELED, "airlockd is stopping")
	             : sb_boot(sb, &im, NULL, false, err);
	if (r == 0)
		r = pool_warm_up(sb, err);
	struct vmm_config vc = sb_vmm_config(sb);
	/* No CPU until a create takes it. */
	if (r == 0)
		r = sb_cfg->vmm->pause(&vc, err);
	pthread_mutex_unlock(&sb->op_lock);
	pthread_mutex_lock(&pool_lock);
	pool_filling = NULL;
	pthread_mutex_unlock(&pool_lock);
	if (r < 0) {
		sb_pool_discard(sb);
		return r;
	}
	*ret = sb;
	return 0;
}

/* Whether a tenant's pool may hold one more VM: its live sandboxes, its
 * pooled VMs and one more within its quotas. */
static bool tenant_pool_fits(const struct pool_spec *spec, unsigned pooled_n, unsigned pooled_vcpus,
                             unsigned pooled_mem)
{
	struct tenant_quota q;
	struct al_error e = {0};
	if (auth_quota_get(spec->tenant, &q, &e) < 0)
		return false;
	struct tenant_usage extra = {.sandboxes = pooled_n, .vcpus = pooled_vcpus, .memory_mib = pooled_mem};
	return sb_quota_fits(spec->tenant, &q, &extra, spec->vcpus, spec->memory_mib);
}

/* The pool to fill next (the emptiest, relative to its size), or NULL;
 * under pool_lock. */
static struct pool *pool_next_locked(uint64_t now)
{
	struct pool *best = NULL;
	for (size_t i = 0; i < POOLS_MAX; i++) {
		struct pool *p = &pools[i];
		if (!p->used || p->filling || p->n_ready >= p->spec.size || p->retry_at_ms > now)
			continue;
		if (!best || (uint64_t)p->n_ready * best->spec.size < (uint64_t)best->n_ready * p->spec.size)
			best = p;
	}
	return best;
}

/* What the tenant's pools hold; under pool_lock. */
static void tenant_pooled_locked(const char *tenant, unsigned *n, unsigned *vcpus, unsigned *mem)
{
	*n = *vcpus = *mem = 0;
	for (size_t i = 0; i < POOLS_MAX; i++) {
		if (!pools[i].used || strcmp(pools[i].spec.tenant, tenant))
			continue;
		unsigned k = pools[i].n_ready + (pools[i].filling ? 1u : 0u);
		*n += k;
		*vcpus += k * pools[i].spec.vcpus;
		*mem += k * pools[i].spec.memory_mib;
	}
	/* Taken for a create of the tenant's and not handed out yet: maybe not
	 * registered yet either (counted twice at worst: a refill waits). */
	for (size_t i = 0; i < POOL_INFLIGHT_MAX; i++)
		if (pool_inflight[i].sb && !strcmp(pool_inflight[i].tenant, tenant)) {
			*n += 1;
			*vcpus += pool_inflight[i].vcpus;
			*mem += pool_inflight[i].memory_mib;
		}
}

/* Sheds one pooled VM (the newest of the fullest pool) while the host is
 * above its memory mark; under pool_lock. NULL: nothing to shed. */
static struct sandbox *pool_shed_locked(void)
{
	struct pool *fullest = NULL;
	for (size_t i = 0; i < POOLS_MAX; i++)
		if (pools[i].used && pools[i].n_ready && (!fullest || pools[i].n_ready > fullest->n_ready))
			fullest = &pools[i];
	if (!fullest)
		return NULL;
	fullest->shed++;
	return fullest->ready[--fullest->n_ready];
}

/* One fill of p (pool_lock held on entry and on return). */
static void pool_fill_locked(struct pool *p)
{
	struct pool_spec spec = p->spec;
	unsigned gen = p->gen;
	p->filling = true;
	pthread_mutex_unlock(&pool_lock);
	struct sandbox *sb = NULL;
	struct al_error e = {0};
	uint64_t t0 = now_ms_monotonic();
	int r = pool_fill_one(&spec, &sb, &e);
	pthread_mutex_lock(&pool_lock);
	p->filling = false;
	bool keep = r == 0 && p->used && p->gen == gen && p->n_ready < p->spec.size && !pool_stopping;
	if (r < 0 && p->used && p->gen == gen) {
		p->failures++;
		p->retry_at_ms = now_ms_monotonic() + POOL_RETRY_MS;
		strlcpy_al(p->error, e.message, sizeof(p->error));
		log_error("warm pool %s:%u:%u: cannot fill it: %s (again in %d s)", spec.template_name, spec.vcpus,
		          spec.memory_mib, e.message, POOL_RETRY_MS / 1000);
	} else if (keep) {
		p->ready[p->n_ready++] = sb;
		p->fills++;
		p->error[0] = '\0';
		log_info("warm pool %s:%u:%u: %s ready in %" PRIu64 " ms (%u of %u)", spec.template_name, spec.vcpus,
		         spec.memory_mib, sb->rec.id, now_ms_monotonic() - t0, p->n_ready, p->spec.size);
	}
	if (r == 0 && !keep) { /* the pool went or shrank meanwhile */
		pthread_mutex_unlock(&pool_lock);
		sb_pool_discard(sb);
		pthread_mutex_lock(&pool_lock);
	}
}

static void pool_wait_locked(unsigned ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += (long)(ms % 1000u) * 1000000L;
	ts.tv_sec += ms / 1000u + ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(&pool_cond, &pool_lock, &ts);
}

static void *pool_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&pool_lock);
	while (!pool_stopping) {
		struct sandbox *out[POOL_SIZE_MAX];
		for (size_t i = 0; i < POOLS_MAX; i++) {
			size_t n = pools[i].used ? pool_prune_locked(&pools[i], out, POOL_SIZE_MAX) : 0;
			pthread_mutex_unlock(&pool_lock);
			for (size_t k = 0; k < n; k++)
				sb_pool_discard(out[k]);
			pthread_mutex_lock(&pool_lock);
		}
		/* Memory first: above the mark, nothing is filled and one VM goes
		 * a tick, before a create would find the host out of memory. */
		pthread_mutex_unlock(&pool_lock);
		bool high = memory_above_high();
		pthread_mutex_lock(&pool_lock);
		if (high != pool_shedding)
			log_info("warm pools: host memory %s the high-water mark (%u%%): %s", high ? "above" : "below",
			         sb_cfg->pool_memory_high_pct, high ? "shedding pooled VMs" : "filling again");
		pool_shedding = high;
		struct sandbox *shed = high ? pool_shed_locked() : NULL;
		if (shed) {
			pthread_mutex_unlock(&pool_lock);
			sb_pool_discard(shed);
			pthread_mutex_lock(&pool_lock);
			pool_wait_locked(POOL_TICK_MS);
			continue;
		}
		struct pool *p = high ? NULL : pool_next_locked(now_ms_monotonic());
		if (p && p->spec.tenant[0]) {
			unsigned n, vcpus, mem;
			tenant_pooled_locked(p->spec.tenant, &n, &vcpus, &mem);
			struct pool_spec spec = p->spec;
			pthread_mutex_unlock(&pool_lock);
			bool fits = tenant_pool_fits(&spec, n, vcpus, mem);
			pthread_mutex_lock(&pool_lock);
			if (!fits) {
				p->retry_at_ms = now_ms_monotonic() + 1000;
				p = NULL;
			}
		}
		if (p && p->used && !p->filling && sb_accel_decided()) {
			pool_fill_locked(p);
			continue;
		}
		pool_wait_locked(POOL_TICK_MS);
	}
	pthread_mutex_unlock(&pool_lock);
	return NULL;
}

void sb_pools_start(void)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pool_cond, &ca);
	pthread_condattr_destroy(&ca);
	for (size_t i = 0; i < sb_cfg->n_warm_pools; i++) {
		struct al_error e = {0};
		if (sandbox_pool_set(&sb_cfg->warm_pools[i], NULL, &e) < 0)
			log_error("--warm-pool: %s", e.message);
	}
	pool_stopping = false;
	if (pthread_create(&pool_thread, NULL, pool_main, NULL) != 0)
		abort();
	pool_running = true;
}

void sb_pools_stop(void)
{
	if (!pool_running)
		return;
	pthread_mutex_lock(&pool_lock);
	pool_stopping = true;
	if (pool_filling)
		sb_boot_cut_short(pool_filling);
	pthread_cond_signal(&pool_cond);
	pthread_mutex_unlock(&pool_lock);
	pthread_join(pool_thread, NULL);
	pool_running = false;
	/* Nobody took them: they go (a restart would sweep them anyway). */
	for (size_t i = 0; i < POOLS_MAX; i++) {
		pthread_mutex_lock(&pool_lock);
		unsigned n = pools[i].n_ready;
		struct sandbox *v[POOL_SIZE_MAX];
		memcpy(v, pools[i].ready, n * sizeof(v[0]));
		pools[i].n_ready = 0;
		pthread_mutex_unlock(&pool_lock);
		for (unsigned k = 0; k < n; k++)
			sb_pool_discard(v[k]);
	}
}
