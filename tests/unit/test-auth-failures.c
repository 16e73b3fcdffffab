/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/daemon/api/auth-failures.c: which failed authentications
 * become events of their own, repeats, the per-source and all-sources
 * buckets, summaries (with the next record, or flushed when due), the
 * bounded table, with a clock the test drives. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "auth-failures.h"
#include "util.h"

#define T0 1000u /* the clock starts here: 0 is never a monotonic time */

static const struct authfail_limits limits = {.per_min = 6, .burst = 3, .summary_ms = 60000};

static uint64_t fp(int n)
{
	char text[16];
	snprintf(text, sizeof(text), "tok-%d", n);
	const char *const parts[] = {"GET", "/v1/sandboxes", text};
	return authfail_fingerprint(parts, 3);
}

static bool note(struct authfail_limiter *l, const char *src, enum auth_failure r, uint64_t f, uint64_t now,
                 struct authfail_summary *sum)
{
	return authfail_limiter_note(l, src, r, f, now, sum);
}

struct collected {
	size_t n;
	struct authfail_summary s[8];
};

static void collect(void *ctx, const struct authfail_summary *s)
{
	struct collected *c = ctx;
	assert_true(c->n < ARRAY_SIZE(c->s));
	c->s[c->n++] = *s;
}

static void collect_none(void *ctx, const struct authfail_summary *s)
{
	(void)ctx;
	(void)s;
}

static void test_fingerprint(void **state)
{
	(void)state;
	const char *const a[] = {"GET", "/x", NULL};
	const char *const b[] = {"GET", "/x", ""};
	const char *const c[] = {"GET", "/x", "Bearer alk_a"};
	/* The parts are delimited: moving a byte from one to the next changes it. */
	const char *const d[] = {"GET/", "x", ""};
	assert_true(authfail_fingerprint(a, 3) == authfail_fingerprint(b, 3));
	assert_true(authfail_fingerprint(a, 3) != authfail_fingerprint(c, 3));
	assert_true(authfail_fingerprint(b, 3) != authfail_fingerprint(d, 3));
	assert_true(fp(1) != fp(2));
}

static void test_burst_then_rate(void **state)
{
	(void)state;
	struct authfail_limiter *l = authfail_limiter_new(&limits, 16);
	struct authfail_summary sum;
	/* Different requests: the burst is recorded, the rest is counted. */
	for (int i = 0; i < 3; i++) {
		assert_true(note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(i), T0, &sum));
		assert_int_equal(sum.suppressed, 0);
	}
	assert_false(note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(3), T0, &sum));
	assert_false(note(l, "10.0.0.1", AUTH_FAILURE_MISSING, fp(4), T0 + 9999, &sum));
	assert_int_equal(sum.suppressed, 0);
	/* 6 a minute: one more every 10 s, and the next record reports the rest. */
	assert_true(note(l, "10.0.0.1", AUTH_FAILURE_MALFORMED, fp(5), T0 + 10000, &sum));
	assert_int_equal(sum.suppressed, 2);
	assert_string_equal(sum.source, "10.0.0.1");
	assert_int_equal(sum.by_reason[AUTH_FAILURE_UNKNOWN], 1);
	assert_int_equal(sum.by_reason[AUTH_FAILURE_MISSING], 1);
	assert_int_equal(sum.by_reason[AUTH_FAILURE_MALFORMED], 0);
	assert_false(note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(6), T0 + 10000, &sum));
	/* Another address has a bucket of its own. */
	assert_true(note(l, "10.0.0.2", AUTH_FAILURE_UNKNOWN, fp(6), T0 + 10000, &sum));
	/* An hour later the bucket is full again, never fuller than the burst. */
	uint64_t later = T0 + 3600u * 1000u;
	int recorded = 0;
	for (int i = 0; i < 10; i++)
		recorded += note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(100 + i), later, &sum);
	assert_int_equal(recorded, 3);
	authfail_limiter_free(l);
}

static void test_repeats_are_folded_and_keep_the_rate(void **state)
{
	(void)state;
	struct authfail_limiter *l = authfail_limiter_new(&limits, 16);
	struct authfail_summary sum;
	/* A client retrying the same bad request: one record, then a count. */
	assert_true(note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(1), T0, &sum));
	for (int i = 1; i <= 2000; i++)
		assert_false(note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(1), T0 + (uint64_t)i, &sum));
	assert_int_equal(sum.suppressed, 0);
	/* The repeats took nothing from the address's bucket: someone else behind
	 * it (a NAT) still gets its failures recorded, and the count comes along. */
	assert_true(note(l, "10.0.0.1", AUTH_FAILURE_MISSING, fp(2), T0 + 2001, &sum));
	assert_int_equal(sum.suppressed, 2000);
	assert_int_equal(sum.by_reason[AUTH_FAILURE_UNKNOWN], 2000);
	assert_int_equal(sum.top, AUTH_FAILURE_UNKNOWN);
	assert_true(note(l, "10.0.0.1", AUTH_FAILURE_MALFORMED, fp(3), T0 + 2002, &sum));
	assert_int_equal(sum.suppressed, 0);
	/* The same request after another one is not a repeat. */
	assert_false(note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(1), T0 + 2003, &sum)); /* bucket empty */
	authfail_limiter_free(l);

	/* Nor is one that comes back after summary_ms of quiet. */
	l = authfail_limiter_new(&limits, 16);
	assert_true(note(l, "a", AUTH_FAILURE_UNKNOWN, fp(1), T0, &sum));
	assert_false(note(l, "a", AUTH_FAILURE_UNKNOWN, fp(1), T0 + 59999, &sum));
	assert_true(note(l, "a", AUTH_FAILURE_UNKNOWN, fp(1), T0 + 59999 + 60000, &sum));
	assert_int_equal(sum.suppressed, 1);
	/* The same credential with another reason (it was revoked since) is not either. */
	assert_true(note(l, "a", AUTH_FAILURE_REVOKED, fp(1), T0 + 120000, &sum));
	authfail_limiter_free(l);
}

static void test_flush_reports_when_due(void **state)
{
	(void)state;
	struct authfail_limiter *l = authfail_limiter_new(&limits, 16);
	struct authfail_summary sum;
	struct collected c = {0};
	assert_true(note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(1), T0, &sum));
	for (int i = 0; i < 50; i++)
		note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(1), T0 + 1, &sum);
	/* Not due before summary_ms since the last event of the address. */
	assert_int_equal(authfail_limiter_flush(l, T0 + 59999, false, collect, &c), 0);
	assert_int_equal(authfail_limiter_flush(l, T0 + 60000, false, collect, &c), 1);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.s[0].source, "10.0.0.1");
	assert_int_equal(c.s[0].suppressed, 50);
	/* Reported once. */
	assert_int_equal(authfail_limiter_flush(l, T0 + 600000, false, collect, &c), 0);
	/* A steady stream reports every summary_ms by itself, without a flush. */
	uint64_t t = T0 + 600000;
	assert_true(note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(2), t, &sum));
	size_t summaries = 0;
	uint64_t total = 0;
	for (uint64_t ms = 1; ms <= 180001; ms += 100) {
		note(l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(2), t + ms, &sum);
		summaries += sum.suppressed > 0;
		total += sum.suppressed;
	}
	assert_int_equal(summaries, 3);
	assert_int_equal(total, 1801); /* every one of them, nothing left pending */
	/* At shutdown everything pending is reported, due or not. */
	note(l, "10.0.0.3", AUTH_FAILURE_UNKNOWN, fp(9), t + 180001, &sum);
	note(l, "10.0.0.3", AUTH_FAILURE_UNKNOWN, fp(9), t + 180002, &sum);
	c.n = 0;
	assert_int_equal(authfail_limiter_flush(l, t + 180003, true, collect, &c), 1);
	assert_string_equal(c.s[0].source, "10.0.0.3");
	assert_int_equal(c.s[0].suppressed, 1);
	authfail_limiter_free(l);
}

static void test_all_sources_are_bounded_together(void **state)
{
	(void)state;
	/* Burst 3 each, so 30 for all; 6 a minute each, so 60 for all. */
	struct authfail_limiter *l = authfail_limiter_new(&limits, 1024);
	struct authfail_summary sum;
	char src[32];
	int recorded = 0;
	for (int i = 0; i < 100; i++) {
		snprintf(src, sizeof(src), "10.0.%d.%d", i / 256, i % 256);
		recorded += note(l, src, AUTH_FAILURE_UNKNOWN, fp(i), T0, &sum);
	}
	assert_int_equal(recorded, 30);
	/* One second later: one more for all (60 a minute). */
	recorded = 0;
	for (int i = 100; i < 200; i++) {
		snprintf(src, sizeof(src), "10.0.%d.%d", i / 256, i % 256);
		recorded += note(l, src, AUTH_FAILURE_UNKNOWN, fp(i), T0 + 1000, &sum);
	}
	assert_int_equal(recorded, 1);
	/* Summaries of a flush take from the same bucket: at most 30 at once. */
	size_t n = 0, flushed;
	struct authfail_limiter *m = authfail_limiter_new(&limits, 1024);
	for (int i = 0; i < 100; i++) {
		snprintf(src, sizeof(src), "10.1.%d.%d", i / 256, i % 256);
		note(m, src, AUTH_FAILURE_UNKNOWN, fp(1), T0, &sum);
		note(m, src, AUTH_FAILURE_UNKNOWN, fp(1), T0, &sum); /* a repeat: pending */
	}
	while ((flushed = authfail_limiter_flush(m, T0 + 3600000, false, collect_none, NULL)) > 0)
		n += flushed;
	assert_int_equal(n, 30);
	authfail_limiter_free(m);
	authfail_limiter_free(l);
}

static void test_table_is_bounded(void **state)
{
	(void)state;
	struct authfail_limiter *l = authfail_limiter_new(&limits, 2);
	struct authfail_summary sum;
	assert_true(note(l, "a", AUTH_FAILURE_UNKNOWN, fp(1), T0, &sum));
	assert_true(note(l, "b", AUTH_FAILURE_UNKNOWN, fp(1), T0, &sum));
	/* Full of sources whose buckets are not full again: the third shares "*". */
	assert_true(note(l, "c", AUTH_FAILURE_UNKNOWN, fp(1), T0, &sum));
	assert_false(note(l, "d", AUTH_FAILURE_UNKNOWN, fp(1), T0, &sum)); /* "*" saw fp(1) last: a repeat */
	struct collected c = {0};
	assert_int_equal(authfail_limiter_flush(l, T0 + 60000, false, collect, &c), 1);
	assert_string_equal(c.s[0].source, AUTHFAIL_OVERFLOW_SOURCE);
	/* Once a bucket is full again (3 at 6 a minute: 30 s) and nothing is
	 * pending, its source is forgotten to make room. */
	assert_true(note(l, "e", AUTH_FAILURE_UNKNOWN, fp(1), T0 + 60000, &sum));
	assert_true(note(l, "e", AUTH_FAILURE_UNKNOWN, fp(2), T0 + 60000, &sum));
	assert_true(note(l, "e", AUTH_FAILURE_UNKNOWN, fp(3), T0 + 60000, &sum));
	assert_false(note(l, "e", AUTH_FAILURE_UNKNOWN, fp(4), T0 + 60000, &sum)); /* its own bucket */
	/* A long key is cut, and still finds its own entry. */
	char long_key[200];
	memset(long_key, 'x', sizeof(long_key) - 1);
	long_key[sizeof(long_key) - 1] = '\0';
	assert_true(note(l, long_key, AUTH_FAILURE_UNKNOWN, fp(1), T0 + 120000, &sum));
	assert_false(note(l, long_key, AUTH_FAILURE_UNKNOWN, fp(1), T0 + 120001, &sum));
	authfail_limiter_free(l);
}

static void test_off_records_everything(void **state)
{
	(void)state;
	struct authfail_limits off = {.per_min = 0, .burst = 1};
	struct authfail_limiter *l = authfail_limiter_new(&off, 4);
	struct authfail_summary sum;
	for (int i = 0; i < 1000; i++) {
		assert_true(note(l, "a", AUTH_FAILURE_UNKNOWN, fp(1), T0, &sum));
		assert_int_equal(sum.suppressed, 0);
	}
	authfail_limiter_free(l);
}

struct hammer {
	struct authfail_limiter *l;
	int id, recorded;
	uint64_t suppressed;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	struct authfail_summary sum;
	for (int i = 0; i < 5000; i++) {
		h->recorded += note(h->l, "10.0.0.1", AUTH_FAILURE_UNKNOWN, fp(h->id * 100000 + i), T0, &sum);
		h->suppressed += sum.suppressed;
	}
	return NULL;
}

static void test_thread_safe(void **state)
{
	(void)state;
	struct authfail_limiter *l = authfail_limiter_new(&limits, 16);
	struct hammer h[4];
	pthread_t t[4];
	for (int i = 0; i < 4; i++) {
		h[i] = (struct hammer){.l = l, .id = i};
		assert_int_equal(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
	}
	int recorded = 0;
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		recorded += h[i].recorded;
	}
	/* The clock stands still: exactly the burst was recorded, the rest is pending. */
	assert_int_equal(recorded, 3);
	struct collected c = {0};
	assert_int_equal(authfail_limiter_flush(l, T0, true, collect, &c), 1);
	assert_int_equal(c.s[0].suppressed, 4 * 5000 - 3);
	authfail_limiter_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fingerprint),
	    cmocka_unit_test(test_burst_then_rate),
	    cmocka_unit_test(test_repeats_are_folded_and_keep_the_rate),
	    cmocka_unit_test(test_flush_reports_when_due),
	    cmocka_unit_test(test_all_sources_are_bounded_together),
	    cmocka_unit_test(test_table_is_bounded),
	    cmocka_unit_test(test_off_records_everything),
	    cmocka_unit_test(test_thread_safe),
	};
	return cmocka_run_group_tests_name("auth-failures", tests, NULL, NULL);
}
