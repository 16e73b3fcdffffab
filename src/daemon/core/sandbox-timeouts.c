/* SPDX-License-Identifier: Apache-2.0 */
/* Timeouts: a sandbox's timeout_s, on_timeout and idle_timeout_s, and
 * whether one is due (the reaper in sandbox-watchdog.c acts on it). The
 * record is read and written under sb->lock. */

#include "util.h"
#include "sandbox-internal.h"

int sandbox_set_timeouts(const char *id, const char *tenant, const struct timeout_request *t,
                         struct sandbox_record *ret, struct al_error *err)
{
	struct sandbox *sb = NULL;
	int r = sb_find_live(id, tenant, "", &sb, err);
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
	if (t->has_auto_resume)
		sb->rec.auto_resume = t->auto_resume;
	sb->last_activity_ms = now_ms_monotonic();
	r = sb_persist_locked(sb, err);
	if (r == 0)
		sandbox_record_copy(ret, &sb->rec);
	pthread_mutex_unlock(&sb->lock);
	sandbox_unref(sb);
	return r;
}

enum timeout_action sb_timeout_due(struct sandbox *sb, const char **ret_why)
{
	enum timeout_action a = TIMEOUT_NONE;
	pthread_mutex_lock(&sb->lock);
	if (sb->rec.state == SANDBOX_RUNNING && !sb->stopping && !sb->reattaching) {
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
void sb_timeout_rearm(const char *id)
{
	struct sandbox *sb = sb_registry_find(id);
	if (!sb)
		return;
	pthread_mutex_lock(&sb->lock);
	sb->rec.run_ms = 0;
	struct al_error e;
	sb_persist_locked(sb, &e);
	pthread_mutex_unlock(&sb->lock);
	sandbox_unref(sb);
}
