/* SPDX-License-Identifier: Apache-2.0 */
#include "api-ratelimit.h"

#include <pthread.h>

#include "util.h"

static void refill(struct token_bucket *b, uint64_t now_ms, unsigned rate, unsigned burst)
{
	uint64_t cap = (uint64_t)burst * 1000u;
	if (!b->primed) {
		b->milli = cap;
		b->last_ms = now_ms;
		b->primed = true;
		return;
	}
	/* rate tokens a second = rate thousandths a millisecond. */
	uint64_t elapsed = now_ms > b->last_ms ? now_ms - b->last_ms : 0;
	uint64_t add = elapsed > cap ? cap : elapsed * rate; /* elapsed > cap: full anyway (rate >= 1) */
	b->milli = b->milli + add > cap ? cap : b->milli + add;
	b->last_ms = now_ms > b->last_ms ? now_ms : b->last_ms;
}

bool token_bucket_take(struct token_bucket *b, uint64_t now_ms, unsigned rate, unsigned burst, uint64_t *ret_retry_ms)
{
	refill(b, now_ms, rate, burst);
	if (b->milli >= 1000u) {
		b->milli -= 1000u;
		return true;
	}
	uint64_t missing = 1000u - b->milli;
	*ret_retry_ms = (missing + rate - 1) / rate;
	if (*ret_retry_ms == 0)
		*ret_retry_ms = 1;
	return false;
}

bool token_bucket_full(const struct token_bucket *b, uint64_t now_ms, unsigned rate, unsigned burst)
{
	struct token_bucket copy = *b;
	refill(&copy, now_ms, rate, burst);
	return copy.milli >= (uint64_t)burst * 1000u;
}

struct rl_entry {
	char key[RATELIMIT_KEY_MAX + 1];
	struct token_bucket bucket;
};

struct rate_limiter {
	pthread_mutex_t lock;
	unsigned rate, burst;
	size_t n, max;
	struct rl_entry *entries;
};

struct rate_limiter *rate_limiter_new(unsigned rate, unsigned burst, size_t max_keys)
{
	struct rate_limiter *rl = xcalloc(1, sizeof(*rl));
	pthread_mutex_init(&rl->lock, NULL);
	rl->rate = rate ? rate : 1;
	rl->burst = burst ? burst : 1;
	rl->max = max_keys ? max_keys : 1;
	rl->entries = xcalloc(rl->max, sizeof(*rl->entries));
	return rl;
}

void rate_limiter_free(struct rate_limiter *rl)
{
	if (!rl)
		return;
	pthread_mutex_destroy(&rl->lock);
	free(rl->entries);
	free(rl);
}

/* The bucket of key, a reused full one, or NULL when every bucket is busy;
 * with rl->lock held. */
static struct token_bucket *bucket_for(struct rate_limiter *rl, const char *key, uint64_t now_ms)
{
	for (size_t i = 0; i < rl->n; i++)
		if (!strcmp(rl->entries[i].key, key))
			return &rl->entries[i].bucket;
	struct rl_entry *e = NULL;
	if (rl->n < rl->max) {
		e = &rl->entries[rl->n++];
	} else {
		for (size_t i = 0; i < rl->n && !e; i++)
			if (token_bucket_full(&rl->entries[i].bucket, now_ms, rl->rate, rl->burst))
				e = &rl->entries[i];
		if (!e)
			return NULL;
	}
	strlcpy_al(e->key, key, sizeof(e->key));
	e->bucket = (struct token_bucket){0};
	return &e->bucket;
}

bool rate_limiter_allow(struct rate_limiter *rl, const char *key, uint64_t now_ms, unsigned *ret_retry_after_s)
{
	uint64_t retry_ms = 1000;
	pthread_mutex_lock(&rl->lock);
	struct token_bucket *b = bucket_for(rl, key, now_ms);
	bool ok = b && token_bucket_take(b, now_ms, rl->rate, rl->burst, &retry_ms);
	pthread_mutex_unlock(&rl->lock);
	if (!ok)
		*ret_retry_after_s = (unsigned)((retry_ms + 999u) / 1000u);
	return ok;
}
