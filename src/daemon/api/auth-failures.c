/* SPDX-License-Identifier: Apache-2.0 */
#include "auth-failures.h"

#include <pthread.h>

#include "util.h"

/* GCRA: a bucket is its theoretical arrival time. It allows a take while
 * tat - now stays within (burst - 1) intervals; a take moves tat one
 * interval on. tat 0 (or in the past) is a full bucket. */
struct gcra {
	uint64_t tat_ms;
};

static bool gcra_allows(const struct gcra *g, uint64_t now_ms, uint64_t interval_ms, unsigned burst)
{
	uint64_t tat = MAX(g->tat_ms, now_ms);
	return tat + interval_ms - now_ms <= (uint64_t)burst * interval_ms;
}

static void gcra_take(struct gcra *g, uint64_t now_ms, uint64_t interval_ms)
{
	g->tat_ms = MAX(g->tat_ms, now_ms) + interval_ms;
}

static bool gcra_full(const struct gcra *g, uint64_t now_ms)
{
	return g->tat_ms <= now_ms;
}

struct source {
	char key[AUTHFAIL_SOURCE_MAX + 1];
	struct gcra bucket;
	bool has_last;
	enum auth_failure last_reason;
	uint64_t last_fingerprint;
	uint64_t last_seen_ms;  /* the previous failure */
	uint64_t last_event_ms; /* the last record or summary; 0: none */
	uint64_t pending;
	uint64_t by_reason[AUTH_FAILURE__COUNT];
};

struct authfail_limiter {
	pthread_mutex_t lock;
	struct authfail_limits lim;
	uint64_t interval_ms, total_interval_ms;
	unsigned total_burst;
	struct gcra total;
	size_t n, max;
	struct source *sources;
	struct source overflow;
};

struct authfail_limiter *authfail_limiter_new(const struct authfail_limits *lim, size_t max_sources)
{
	struct authfail_limiter *l = xcalloc(1, sizeof(*l));
	pthread_mutex_init(&l->lock, NULL);
	l->lim = *lim;
	if (l->lim.burst == 0)
		l->lim.burst = 1;
	if (l->lim.summary_ms == 0)
		l->lim.summary_ms = AUTHFAIL_SUMMARY_MS;
	if (l->lim.per_min) {
		l->interval_ms = MAX(60000u / l->lim.per_min, 1u);
		l->total_interval_ms = MAX(60000u / ((uint64_t)l->lim.per_min * AUTHFAIL_TOTAL_FACTOR), 1u);
	}
	l->total_burst = l->lim.burst * AUTHFAIL_TOTAL_FACTOR;
	l->max = max_sources ? max_sources : 1;
	l->sources = xcalloc(l->max, sizeof(*l->sources));
	strlcpy_al(l->overflow.key, AUTHFAIL_OVERFLOW_SOURCE, sizeof(l->overflow.key));
	return l;
}

void authfail_limiter_free(struct authfail_limiter *l)
{
	if (!l)
		return;
	pthread_mutex_destroy(&l->lock);
	free(l->sources);
	free(l);
}

/* Forgetting it changes nothing: no count to report, a full bucket. */
static bool source_forgettable(const struct source *s, uint64_t now_ms)
{
	return s->pending == 0 && gcra_full(&s->bucket, now_ms);
}

/* The entry of key, a new or reused one, or the shared overflow entry; with l->lock held. */
static struct source *source_for(struct authfail_limiter *l, const char *key, uint64_t now_ms)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->sources[i].key, key))
			return &l->sources[i];
	struct source *s = NULL;
	if (l->n < l->max) {
		s = &l->sources[l->n++];
	} else {
		for (size_t i = 0; i < l->n && !s; i++)
			if (source_forgettable(&l->sources[i], now_ms))
				s = &l->sources[i];
		if (!s)
			return &l->overflow;
	}
	*s = (struct source){0};
	strlcpy_al(s->key, key, sizeof(s->key));
	return s;
}

static void summary_take(struct source *s, uint64_t now_ms, struct authfail_summary *out)
{
	*out = (struct authfail_summary){.suppressed = s->pending};
	strlcpy_al(out->source, s->key, sizeof(out->source));
	for (int r = 0; r < AUTH_FAILURE__COUNT; r++) {
		out->by_reason[r] = s->by_reason[r];
		if (s->by_reason[r] > out->by_reason[out->top])
			out->top = (enum auth_failure)r;
	}
	s->pending = 0;
	memset(s->by_reason, 0, sizeof(s->by_reason));
	s->last_event_ms = now_ms;
}

static bool summary_due(const struct authfail_limiter *l, const struct source *s, uint64_t now_ms)
{
	return s->pending > 0 && (s->last_event_ms == 0 || now_ms - s->last_event_ms >= l->lim.summary_ms);
}

bool authfail_limiter_note(struct authfail_limiter *l, const char *source, enum auth_failure reason,
                           uint64_t fingerprint, uint64_t now_ms, struct authfail_summary *ret_summary)
{
	*ret_summary = (struct authfail_summary){0};
	if ((unsigned)reason >= AUTH_FAILURE__COUNT)
		reason = AUTH_FAILURE_UNKNOWN;
	if (!l->lim.per_min)
		return true;
	char key[AUTHFAIL_SOURCE_MAX + 1];
	strlcpy_al(key, source ? source : "", sizeof(key));
	pthread_mutex_lock(&l->lock);
	struct source *s = source_for(l, key, now_ms);
	bool repeat = s->has_last && s->last_reason == reason && s->last_fingerprint == fingerprint &&
	              now_ms - s->last_seen_ms < l->lim.summary_ms;
	bool record = !repeat && gcra_allows(&s->bucket, now_ms, l->interval_ms, l->lim.burst) &&
	              gcra_allows(&l->total, now_ms, l->total_interval_ms, l->total_burst);
	s->has_last = true;
	s->last_reason = reason;
	s->last_fingerprint = fingerprint;
	s->last_seen_ms = now_ms;
	if (record) {
		gcra_take(&s->bucket, now_ms, l->interval_ms);
		gcra_take(&l->total, now_ms, l->total_interval_ms);
		if (s->pending > 0)
			summary_take(s, now_ms, ret_summary);
		s->last_event_ms = now_ms;
	} else {
		s->pending++;
		s->by_reason[reason]++;
		/* A steady stream of suppressed failures still reports once per summary_ms. */
		if (summary_due(l, s, now_ms) && gcra_allows(&l->total, now_ms, l->total_interval_ms, l->total_burst)) {
			gcra_take(&l->total, now_ms, l->total_interval_ms);
			summary_take(s, now_ms, ret_summary);
		}
	}
	pthread_mutex_unlock(&l->lock);
	return record;
}

static bool flush_one(struct authfail_limiter *l, struct source *s, uint64_t now_ms, bool all,
                      void (*fn)(void *ctx, const struct authfail_summary *s), void *ctx)
{
	if (all ? s->pending == 0 : !summary_due(l, s, now_ms))
		return false;
	if (!all) {
		if (!gcra_allows(&l->total, now_ms, l->total_interval_ms, l->total_burst))
			return false;
		gcra_take(&l->total, now_ms, l->total_interval_ms);
	}
	struct authfail_summary sum;
	summary_take(s, now_ms, &sum);
	fn(ctx, &sum);
	return true;
}

size_t authfail_limiter_flush(struct authfail_limiter *l, uint64_t now_ms, bool all,
                              void (*fn)(void *ctx, const struct authfail_summary *s), void *ctx)
{
	size_t reported = 0;
	pthread_mutex_lock(&l->lock);
	for (size_t i = 0; i < l->n; i++)
		reported += flush_one(l, &l->sources[i], now_ms, all, fn, ctx);
	reported += flush_one(l, &l->overflow, now_ms, all, fn, ctx);
	pthread_mutex_unlock(&l->lock);
	return reported;
}

uint64_t authfail_fingerprint(const char *const parts[], size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64 bits */
	for (size_t i = 0; i < n; i++) {
		const char *p = parts[i] ? parts[i] : "";
		do {
			h ^= (unsigned char)*p;
			h *= 0x100000001b3ull;
		} while (*p++);
	}
	return h;
}
