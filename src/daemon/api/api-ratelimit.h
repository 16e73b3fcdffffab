/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Request rates per tenant on the TCP listener (docs/api.md, "Limits"): one
 * token bucket per tenant, refilled at `rate` tokens a second up to `burst`;
 * each request takes one token, a request that finds none is answered 429
 * with Retry-After. The unix socket (the operator) is never limited.
 *
 * Tokens are counted in thousandths, so the arithmetic is exact integers.
 * The table of buckets is bounded: when it is full, a bucket that has filled
 * up again is reused (a full bucket is the same as a new one), so forgetting
 * it changes nothing.
 */
#ifndef AIRLOCK_API_RATELIMIT_H
#define AIRLOCK_API_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RATELIMIT_KEY_MAX 63
#define RATELIMIT_KEYS_MAX 4096 /* tenants tracked at once */

struct token_bucket {
	uint64_t milli; /* tokens x 1000 */
	uint64_t last_ms;
	bool primed; /* false: never used (starts full) */
};

/* Pure: refills b for the time since its last use (monotonic now_ms), then
 * takes a token. true if there was one; else false and *ret_retry_ms says
 * how long until there is (>= 1). rate and burst must be > 0. */
bool token_bucket_take(struct token_bucket *b, uint64_t now_ms, unsigned rate, unsigned burst, uint64_t *ret_retry_ms);
/* Pure: whether b is full again at now_ms (it can be forgotten). */
bool token_bucket_full(const struct token_bucket *b, uint64_t now_ms, unsigned rate, unsigned burst);

struct rate_limiter;

/* rate > 0 requests a second, burst >= 1; max_keys buckets at most. */
struct rate_limiter *rate_limiter_new(unsigned rate, unsigned burst, size_t max_keys);
void rate_limiter_free(struct rate_limiter *rl);
/* Thread-safe. true: key may make this request now. false: it is over its
 * rate (or the table is full of busy buckets); *ret_retry_after_s (>= 1) is
 * when to try again. */
bool rate_limiter_allow(struct rate_limiter *rl, const char *key, uint64_t now_ms, unsigned *ret_retry_after_s);

#endif
