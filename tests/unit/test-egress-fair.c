/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the gateway's fair sharing (src/egress/egress-fair.c, issue
 * 17): the per-sandbox round-robin queue of DNS lookups and the aggregation
 * of repeated denials. No sockets, no threads. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "egress-fair.h"
#include "json-cleanup.h"
#include "util.h"

struct job {
	struct egress_fairq_item item; /* first: the queue hands it back */
	int flow, n;
};

static void test_round_robin_between_flows(void **state)
{
	(void)state;
	struct egress_fairq q;
	egress_fairq_init(&q, 100, 50, 100);
	struct egress_fairq_flow a = {0}, b = {0};
	struct job ja[20], jb[2];
	/* A floods first; B's two items come after twenty of A's. */
	for (int i = 0; i < 20; i++) {
		ja[i] = (struct job){.flow = 0, .n = i};
		assert_int_equal(egress_fairq_push(&q, &a, &ja[i].item), 0);
	}
	for (int i = 0; i < 2; i++) {
		jb[i] = (struct job){.flow = 1, .n = i};
		assert_int_equal(egress_fairq_push(&q, &b, &jb[i].item), 0);
	}
	/* Served A, B, A, B, then the rest of A in order. */
	int want_flow[] = {0, 1, 0, 1, 0, 0};
	int want_n[] = {0, 0, 1, 1, 2, 3};
	for (size_t i = 0; i < ARRAY_SIZE(want_flow); i++) {
		struct egress_fairq_flow *f = NULL;
		struct job *j = (struct job *)egress_fairq_pop(&q, &f);
		assert_non_null(j);
		assert_int_equal(j->flow, want_flow[i]);
		assert_int_equal(j->n, want_n[i]);
		assert_ptr_equal(f, j->flow ? &b : &a);
	}
	assert_int_equal(q.queued, 16);
}

static void test_running_cap_lets_another_flow_through(void **state)
{
	(void)state;
	struct egress_fairq q;
	egress_fairq_init(&q, 100, 50, 2);
	struct egress_fairq_flow a = {0}, b = {0};
	struct job ja[10], jb = {.flow = 1};
	for (int i = 0; i < 10; i++) {
		ja[i] = (struct job){.flow = 0, .n = i};
		assert_int_equal(egress_fairq_push(&q, &a, &ja[i].item), 0);
	}
	struct egress_fairq_flow *f = NULL;
	assert_non_null(egress_fairq_pop(&q, &f));
	assert_non_null(egress_fairq_pop(&q, &f));
	/* A holds its two workers: nothing more of A may run. */
	assert_null(egress_fairq_pop(&q, &f));
	/* B's item runs at once although A queued first. */
	assert_int_equal(egress_fairq_push(&q, &b, &jb.item), 0);
	struct job *j = (struct job *)egress_fairq_pop(&q, &f);
	assert_ptr_equal(j, &jb);
	assert_ptr_equal(f, &b);
	egress_fairq_done(&q, &b);
	/* One of A's ends: A may run one more. */
	egress_fairq_done(&q, &a);
	j = (struct job *)egress_fairq_pop(&q, &f);
	assert_non_null(j);
	assert_int_equal(j->n, 2);
	assert_null(egress_fairq_pop(&q, &f));
}

static void test_pending_caps(void **state)
{
	(void)state;
	struct egress_fairq q;
	egress_fairq_init(&q, 6, 4, 4);
	struct egress_fairq_flow a = {0}, b = {0}, c = {0};
	struct job j[12];
	for (int i = 0; i < 4; i++)
		assert_int_equal(egress_fairq_push(&q, &a, &j[i].item), 0);
	/* The flow's share, then the whole queue. */
	assert_int_equal(egress_fairq_push(&q, &a, &j[4].item), -EAGAIN);
	assert_int_equal(egress_fairq_push(&q, &b, &j[5].item), 0);
	assert_int_equal(egress_fairq_push(&q, &b, &j[6].item), 0);
	assert_int_equal(egress_fairq_push(&q, &c, &j[7].item), -ENOSPC);
	/* Running items count against the flow's share until done. */
	struct egress_fairq_flow *f = NULL;
	assert_non_null(egress_fairq_pop(&q, &f));
	assert_ptr_equal(f, &a);
	assert_int_equal(egress_fairq_push(&q, &a, &j[8].item), -EAGAIN);
	egress_fairq_done(&q, &a);
	assert_int_equal(egress_fairq_push(&q, &a, &j[8].item), 0);
}

/* ------------------------------------------------------------ aggregation */

static json_t *deny_msg(const char *host, int i)
{
	json_t *m = json_pack("{ss ss ss s{ss ss ss sn si}}", "op", "event", "sandbox", "sb-a", "type", "network.dns",
	                      "data", "proto", "dns", "host", host, "verdict", "deny", "rule", "i", i);
	assert_non_null(m);
	return m;
}

struct emitted {
	json_t *msgs[32];
	size_t n;
};

static void collect(json_t *msg, void *arg)
{
	struct emitted *e = arg;
	assert_true(e->n < ARRAY_SIZE(e->msgs));
	e->msgs[e->n++] = msg;
}

static void test_keys(void **state)
{
	(void)state;
	char k1[EGRESS_AGG_KEY_MAX], k2[EGRESS_AGG_KEY_MAX];
	cleanup_json json_t *a = deny_msg("x1.slow.test", 0), *b = deny_msg("x2.slow.test", 0);
	cleanup_json json_t *c = deny_msg("x1.other.test", 0);
	assert_true(egress_agg_key("network.dns", json_object_get(a, "data"), k1, sizeof(k1)));
	assert_true(egress_agg_key("network.dns", json_object_get(b, "data"), k2, sizeof(k2)));
	assert_string_equal(k1, k2); /* random labels of one zone: one kind */
	assert_true(egress_agg_key("network.dns", json_object_get(c, "data"), k2, sizeof(k2)));
	assert_string_not_equal(k1, k2);
	/* Allowed answers are never folded; failures are. */
	cleanup_json json_t *ok =
	    json_pack("{ss ss ss}", "proto", "dns", "host", "www.allowed.test", "verdict", "allow");
	assert_false(egress_agg_key("network.dns", ok, k1, sizeof(k1)));
	json_object_set_new(ok, "reason", json_string("resolving: timeout"));
	assert_true(egress_agg_key("network.dns", ok, k1, sizeof(k1)));
	cleanup_json json_t *close = json_pack("{ss ss}", "proto", "tls", "verdict", "allow");
	assert_false(egress_agg_key("network.close", close, k1, sizeof(k1)));
	assert_true(egress_agg_key("network.deny", close, k1, sizeof(k1)));
}

static void test_burst_then_counted_records(void **state)
{
	(void)state;
	struct egress_agg a;
	egress_agg_init(&a, 1000, 3);
	struct emitted out = {0};
	int sent = 0;
	/* 103 denials of one kind within the window: 3 sent, 100 folded. */
	for (int i = 0; i < 103; i++) {
		cleanup_json json_t *m = deny_msg("r.slow.test", i);
		if (egress_agg_offer(&a, "k", m, 100 + (uint64_t)i))
			sent++;
	}
	assert_int_equal(sent, 3);
	assert_int_equal(a.pending, 1);
	/* Not before its window is over. */
	assert_int_equal(egress_agg_flush(&a, 1000, false, collect, &out), 0);
	assert_int_equal(egress_agg_flush(&a, 1103, false, collect, &out), 1);
	assert_int_equal(out.n, 1);
	json_t *d = json_object_get(out.msgs[0], "data");
	assert_int_equal(json_integer_value(json_object_get(d, "count")), 100);
	assert_int_equal(json_integer_value(json_object_get(d, "i")), 3); /* the first folded one */
	assert_int_equal(a.pending, 0);
	json_decref(out.msgs[0]);
	/* A new window: the burst again. */
	cleanup_json json_t *m = deny_msg("r.slow.test", 0);
	assert_true(egress_agg_offer(&a, "k", m, 5000));
	egress_agg_release(&a);
}

static void test_more_kinds_than_slots_share_one(void **state)
{
	(void)state;
	struct egress_agg a;
	egress_agg_init(&a, 1000, 0);
	for (int i = 0; i < EGRESS_AGG_SLOTS + 10; i++) {
		char key[32];
		snprintf(key, sizeof(key), "kind-%d", i);
		cleanup_json json_t *m = deny_msg("a.b.test", i);
		assert_false(egress_agg_offer(&a, key, m, 10));
	}
	assert_int_equal(a.pending, EGRESS_AGG_SLOTS + 1);
	struct emitted out = {0};
	/* "all": every slot now, whatever its window. */
	assert_int_equal(egress_agg_flush(&a, 10, true, collect, &out), EGRESS_AGG_SLOTS + 1);
	uint64_t total = 0;
	for (size_t i = 0; i < out.n; i++) {
		json_t *d = json_object_get(out.msgs[i], "data");
		total += (uint64_t)json_integer_value(json_object_get(d, "count"));
		json_decref(out.msgs[i]);
	}
	/* Nothing is lost: every denial is in some record's count. */
	assert_int_equal(total, EGRESS_AGG_SLOTS + 10);
	egress_agg_release(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_robin_between_flows),
	    cmocka_unit_test(test_running_cap_lets_another_flow_through),
	    cmocka_unit_test(test_pending_caps),
	    cmocka_unit_test(test_keys),
	    cmocka_unit_test(test_burst_then_counted_records),
	    cmocka_unit_test(test_more_kinds_than_slots_share_one),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
