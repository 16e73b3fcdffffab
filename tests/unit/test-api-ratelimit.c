/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/daemon/api/api-ratelimit.c: the token bucket (burst, refill,
 * Retry-After) and the bounded per-tenant table, with a clock the test
 * drives. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api-ratelimit.h"
#include "util.h"

static void test_bucket_starts_full_and_empties(void **state)
{
	(void)state;
	struct token_bucket b = {0};
	uint64_t retry = 0;
	for (int i = 0; i < 5; i++)
		assert_true(token_bucket_take(&b, 1000, 2, 5, &retry));
	assert_false(token_bucket_take(&b, 1000, 2, 5, &retry));
	/* 2 a second: the next token is 500 ms away. */
	assert_int_equal(retry, 500);
	assert_false(token_bucket_take(&b, 1499, 2, 5, &retry));
	assert_int_equal(retry, 1);
	assert_true(token_bucket_take(&b, 1500, 2, 5, &retry));
	assert_false(token_bucket_take(&b, 1500, 2, 5, &retry));
}

static void test_bucket_refills_up_to_burst(void **state)
{
	(void)state;
	struct token_bucket b = {0};
	uint64_t retry = 0;
	for (int i = 0; i < 3; i++)
		assert_true(token_bucket_take(&b, 0, 10, 3, &retry));
	assert_false(token_bucket_take(&b, 0, 10, 3, &retry));
	assert_int_equal(retry, 100);
	assert_false(token_bucket_full(&b, 0, 10, 3));
	/* An hour later: never more than the burst. */
	uint64_t later = 3600u * 1000u;
	assert_true(token_bucket_full(&b, later, 10, 3));
	for (int i = 0; i < 3; i++)
		assert_true(token_bucket_take(&b, later, 10, 3, &retry));
	assert_false(token_bucket_take(&b, later, 10, 3, &retry));
	/* A clock that goes back adds nothing and breaks nothing. */
	assert_false(token_bucket_take(&b, later - 5000, 10, 3, &retry));
	assert_true(retry >= 1);
}

static void test_slow_rate_retry_after(void **state)
{
	(void)state;
	struct token_bucket b = {0};
	uint64_t retry = 0;
	assert_true(token_bucket_take(&b, 42, 1, 1, &retry));
	assert_false(token_bucket_take(&b, 42, 1, 1, &retry));
	assert_int_equal(retry, 1000);
	assert_false(token_bucket_take(&b, 541, 1, 1, &retry));
	assert_int_equal(retry, 501);
}

static void test_limiter_keys_are_independent(void **state)
{
	(void)state;
	struct rate_limiter *rl = rate_limiter_new(1, 2, 16);
	unsigned after = 0;
	assert_true(rate_limiter_allow(rl, "a", 0, &after));
	assert_true(rate_limiter_allow(rl, "a", 0, &after));
	assert_false(rate_limiter_allow(rl, "a", 0, &after));
	assert_int_equal(after, 1);
	/* Another tenant has a bucket of its own. */
	assert_true(rate_limiter_allow(rl, "b", 0, &after));
	assert_true(rate_limiter_allow(rl, "b", 0, &after));
	assert_false(rate_limiter_allow(rl, "b", 10, &after));
	/* One second later, one more each. */
	assert_true(rate_limiter_allow(rl, "a", 1000, &after));
	assert_false(rate_limiter_allow(rl, "a", 1000, &after));
	rate_limiter_free(rl);
	rate_limiter_free(NULL);
}

static void test_limiter_table_is_bounded(void **state)
{
	(void)state;
	struct rate_limiter *rl = rate_limiter_new(1, 1, 2);
	unsigned after = 0;
	assert_true(rate_limiter_allow(rl, "a", 0, &after));
	assert_true(rate_limiter_allow(rl, "b", 0, &after));
	/* Both buckets are busy: a third tenant waits rather than growing the table. */
	assert_false(rate_limiter_allow(rl, "c", 0, &after));
	assert_int_equal(after, 1);
	/* Once a bucket is full again it is reused; "a" starts over, full. */
	assert_true(rate_limiter_allow(rl, "c", 1000, &after));
	assert_true(rate_limiter_allow(rl, "a", 1000, &after));
	assert_false(rate_limiter_allow(rl, "a", 1000, &after));
	rate_limiter_free(rl);
}

struct hammer {
	struct rate_limiter *rl;
	int allowed;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	unsigned after;
	for (int i = 0; i < 1000; i++)
		if (rate_limiter_allow(h->rl, "t", 7, &after))
			h->allowed++;
	return NULL;
}

static void test_limiter_is_thread_safe(void **state)
{
	(void)state;
	struct rate_limiter *rl = rate_limiter_new(5, 100, 8);
	struct hammer h[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		h[i] = (struct hammer){.rl = rl};
		assert_int_equal(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
	}
	int total = 0;
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		total += h[i].allowed;
	}
	/* The clock stands still: exactly the burst got through. */
	assert_int_equal(total, 100);
	rate_limiter_free(rl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bucket_starts_full_and_empties), cmocka_unit_test(test_bucket_refills_up_to_burst),
	    cmocka_unit_test(test_slow_rate_retry_after),          cmocka_unit_test(test_limiter_keys_are_independent),
	    cmocka_unit_test(test_limiter_table_is_bounded),       cmocka_unit_test(test_limiter_is_thread_safe),
	};
	return cmocka_run_group_tests_name("api-ratelimit", tests, NULL, NULL);
}
