/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's threads over every sandbox: the reaper (timeouts,
 * reclaiming what a sandbox in error still holds) and the watchdog (kills a
 * VMM or agent that stopped answering). Both take a snapshot of the
 * registry under sb_registry_lock and act without it; each sandbox is acted
 * on under its op_lock, tried, never waited for. */
#include <inttypes.h>

#include "events.h"
#include "jail.h"
#include "log.h"
#include "metrics.h"
#include "util.h"
#include "sandbox-internal.h"

#define REAPER_PERIOD_MS 1000

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
	sb_teardown(sb);
}

/* Every sandbox of the registry, each with a reference the caller drops. */
static struct sandbox **registry_snapshot(size_t *ret_n)
{
	pthread_mutex_lock(&sb_registry_lock);
	size_t n = 0, i = 0;
	for (struct sandbox *sb = sb_registry; sb; sb = sb->next)
		n++;
	struct sandbox **v = xcalloc(n ? n : 1, sizeof(*v));
	for (struct sandbox *sb = sb_registry; sb; sb = sb->next) {
		sb->refs++;
		v[i++] = sb;
	}
	pthread_mutex_unlock(&sb_registry_lock);
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
	         strcmp(unresponsive, "vmm") ? "" : sb_cfg->vmm->probe_what, silent_ms / 1000u, waited,
	         sb_cfg->watchdog_s, detail[0] ? "; last: " : "", detail);
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
	sb_error_locked(sb, why);
	pthread_mutex_unlock(&sb->lock);
	/* Requests waiting on the guest get the reason; then the monitor stops
	 * (it must not reap what we kill), and the VMM goes. */
	if (sb->ch)
		guest_channel_kill(sb->ch, why);
	sb_monitor_stop(sb);
	sb_vmm_stop_wait(sb);
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
	uint64_t limit = (uint64_t)sb_cfg->watchdog_s * 1000u;
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
		struct vmm_config vc = sb_vmm_config(sb);
		struct al_error e = {0};
		if (sb_cfg->vmm->probe(&vc, WATCHDOG_PROBE_MS, &e) == 0)
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

static pthread_t reaper, watchdog, leaser;
static bool reaper_running, watchdog_running, leaser_running;
static bool reaper_stop;
static pthread_mutex_t reaper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reaper_cond;
static pthread_once_t reaper_cond_once = PTHREAD_ONCE_INIT;

/* On the monotonic clock: a step of the wall clock must not hold up the
 * threads (a lease not renewed for --orphan-timeout-s stops its VM). */
static void reaper_cond_init(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&reaper_cond, &a);
	pthread_condattr_destroy(&a);
}

/* Waits for period_ms or until the threads are told to stop (true then). */
static bool reaper_sleep(uint64_t period_ms)
{
	pthread_mutex_lock(&reaper_lock);
	if (!reaper_stop) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t ns = (uint64_t)ts.tv_nsec + (period_ms % 1000u) * 1000000u;
		ts.tv_sec += (time_t)(period_ms / 1000u + ns / 1000000000u);
		ts.tv_nsec = (long)(ns % 1000000000u);
		pthread_cond_timedwait(&reaper_cond, &reaper_lock, &ts);
	}
	bool stop = reaper_stop;
	pthread_mutex_unlock(&reaper_lock);
	return stop;
}

/* port.traffic events one round emits at most (the rest wait for the next). */
#define PORT_EVENTS_PER_ROUND 256

static void *reaper_main(void *arg)
{
	(void)arg;
	while (!reaper_sleep(REAPER_PERIOD_MS)) {
		reclaim_errored();
		/* Collect the due ones under the registry lock; act without it. */
		char ids[64][SANDBOX_ID_MAX + 1], tenants[64][64];
		enum timeout_action acts[64];
		const char *whys[64];
		size_t n = 0, n_port_events = 0;
		struct port_event *port_events = xcalloc(PORT_EVENTS_PER_ROUND, sizeof(*port_events));
		pthread_mutex_lock(&sb_registry_lock);
		for (struct sandbox *sb = sb_registry; sb; sb = sb->next)
			n_port_events +=
			    sb_port_events_due(sb, port_events + n_port_events, PORT_EVENTS_PER_ROUND - n_port_events);
		for (struct sandbox *sb = sb_registry; sb && n < ARRAY_SIZE(ids); sb = sb->next) {
			const char *why = NULL;
			enum timeout_action a = sb_timeout_due(sb, &why);
			if (a != TIMEOUT_NONE) {
				strlcpy_al(ids[n], sb->rec.id, sizeof(ids[n]));
				strlcpy_al(tenants[n], sb->rec.tenant, sizeof(tenants[n]));
				acts[n] = a;
				whys[n++] = why;
			}
		}
		pthread_mutex_unlock(&sb_registry_lock);
		sb_port_events_emit(port_events, n_port_events);
		free(port_events);
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
				sb_timeout_rearm(ids[i]);
		}
	}
	return NULL;
}

/* Every running sandbox, every third of --watchdog-s (at least a second). */
static void *watchdog_main(void *arg)
{
	(void)arg;
	uint64_t period = MAX(1000u, (uint64_t)sb_cfg->watchdog_s * 1000u / 3u);
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

static void lease_renew(struct sandbox *sb)
{
	int r = jail_lease_touch(sb->dir, false);
	if (r < 0 && r != -ENOENT)
		log_error("sandbox %s: cannot renew its lease: %s", sb->rec.id, strerror(-r));
}

/* Renews every sandbox's lease (docs/jailer.md, "Lease"): on a thread of
 * its own, which nothing else delays (a delete or pause of the reaper may
 * take long). A sandbox without one (its VMM never started, or the flag
 * was 0 when it did) is skipped. */
static void *leaser_main(void *arg)
{
	(void)arg;
	uint64_t period;
	do {
		size_t n;
		struct sandbox **v = registry_snapshot(&n);
		/* In time for the shortest timeout: this daemon's, or the one a
		 * re-attached VM was started with (a restart may change the flag). */
		unsigned shortest = jail_orphan_timeout_s();
		for (size_t i = 0; i < n; i++) {
			unsigned t = __atomic_load_n(&v[i]->lease_timeout_s, __ATOMIC_RELAXED);
			if (t && (!shortest || t < shortest))
				shortest = t;
		}
		period = jail_lease_period_ms(shortest);
		for (size_t i = 0; i < n; i++) {
			lease_renew(v[i]);
			sandbox_unref(v[i]);
		}
		free(v);
		sb_pool_leases_renew();
	} while (!reaper_sleep(period));
	return NULL;
}

void sb_lease_adopt(struct sandbox *sb, pid_t jailer)
{
	__atomic_store_n(&sb->lease_timeout_s, jail_orphan_timeout_of(jailer), __ATOMIC_RELAXED);
	lease_renew(sb);
}

void sb_reaper_start(void)
{
	pthread_once(&reaper_cond_once, reaper_cond_init);
	reaper_stop = false;
	if (pthread_create(&reaper, NULL, reaper_main, NULL) == 0)
		reaper_running = true;
	if (sb_cfg->watchdog_s && pthread_create(&watchdog, NULL, watchdog_main, NULL) == 0)
		watchdog_running = true;
	/* Also with --orphan-timeout-s 0: the VMs re-attached may have a lease. */
	if (pthread_create(&leaser, NULL, leaser_main, NULL) == 0)
		leaser_running = true;
}

void sb_reaper_join(void)
{
	if (!reaper_running && !watchdog_running && !leaser_running)
		return;
	pthread_mutex_lock(&reaper_lock);
	reaper_stop = true;
	pthread_cond_broadcast(&reaper_cond);
	pthread_mutex_unlock(&reaper_lock);
	if (reaper_running)
		pthread_join(reaper, NULL);
	if (watchdog_running)
		pthread_join(watchdog, NULL);
	if (leaser_running)
		pthread_join(leaser, NULL);
	reaper_running = watchdog_running = leaser_running = false;
}
