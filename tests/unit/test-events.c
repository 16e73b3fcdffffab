/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the event bus (src/daemon/store/events.c) on a real SQLite store
 * in a temporary directory: emit/read, filters, cursors, retention, waiting,
 * shutdown and query validation. */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "events.h"
#include "json-cleanup.h"
#include "store.h"
#include "util.h"

static char dir[PATH_MAX];
static char db[PATH_MAX + 16];
static struct store *st;

static int setup(void **state)
{
	(void)state;
	const char *base = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/airlock-test-events-XXXXXX", base ? base : "/tmp");
	if (!mkdtemp(dir))
		return -1;
	snprintf(db, sizeof(db), "%s/airlock.db", dir);
	struct al_error err = {0};
	events_set_retention(EVENTS_KEEP_DEFAULT, EVENTS_PRUNE_EVERY_DEFAULT);
	if (store_open(db, &st, &err) < 0 || events_init(st, &err) < 0) {
		fprintf(stderr, "setup: %s\n", err.message);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	events_shutdown();
	store_close(st);
	st = NULL;
	return rm_rf(dir);
}

static json_t *read_all(const struct event_filter *f, uint64_t after, size_t max, uint64_t *ret_last)
{
	json_t *arr = NULL;
	struct al_error err = {0};
	uint64_t last = 0;
	assert_int_equal(events_read(f, after, max, &arr, &last, &err), 0);
	assert_true(json_is_array(arr));
	if (ret_last)
		*ret_last = last;
	return arr;
}

static uint64_t seq_of(json_t *ev)
{
	return (uint64_t)json_integer_value(json_object_get(ev, "seq"));
}

static const char *str_of(json_t *ev, const char *k)
{
	return json_string_value(json_object_get(ev, k));
}

static long long count_rows(void)
{
	sqlite3_stmt *s = NULL;
	assert_int_equal(sqlite3_prepare_v2(store_db(st), "SELECT count(*) FROM events", -1, &s, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	long long n = sqlite3_column_int64(s, 0);
	sqlite3_finalize(s);
	return n;
}

static void emit_sample(void)
{
	events_emit("sandbox.state", "team-a", "sb-1", json_pack("{s:s}", "state", "creating"));
	events_emit("exec.start", "team-a", "sb-1",
	            json_pack("{s:I, s:[s]}", "process_id", (json_int_t)1, "cmd", "ls"));
	events_emit("sandbox.state", "team-b", "sb-2", json_pack("{s:s}", "state", "running"));
	events_emit("auth.failure", NULL, NULL, json_pack("{s:s, s:s}", "reason", "unknown", "remote", "10.0.0.1"));
	events_emit("sandbox.state", "team-a", "sb-1", json_pack("{s:s}", "state", "running"));
	events_emit("token.created", "team-a", NULL, NULL);
}

static void test_emit_and_read(void **state)
{
	(void)state;
	assert_int_equal(events_last_seq(), 0);
	emit_sample();
	assert_int_equal(events_last_seq(), 6);
	struct event_filter f = {0};
	uint64_t last = 0;
	cleanup_json json_t *all = read_all(&f, 0, 0, &last);
	assert_int_equal(json_array_size(all), 6);
	assert_int_equal(last, 6);
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(seq_of(json_array_get(all, i)), i + 1);

	json_t *e0 = json_array_get(all, 0);
	assert_string_equal(str_of(e0, "type"), "sandbox.state");
	assert_string_equal(str_of(e0, "tenant"), "team-a");
	assert_string_equal(str_of(e0, "sandbox"), "sb-1");
	assert_string_equal(str_of(json_object_get(e0, "data"), "state"), "creating");
	const char *t = str_of(e0, "time");
	assert_non_null(t);
	assert_int_equal(strlen(t), 24); /* 2026-11-29T18:01:02.123Z */
	assert_int_equal(t[23], 'Z');

	json_t *e3 = json_array_get(all, 3);
	assert_true(json_is_null(json_object_get(e3, "tenant")));
	assert_true(json_is_null(json_object_get(e3, "sandbox")));
	json_t *e5 = json_array_get(all, 5); /* NULL data is {} */
	assert_true(json_is_object(json_object_get(e5, "data")));
	assert_int_equal(json_object_size(json_object_get(e5, "data")), 0);

	/* Exactly the six keys of the API. */
	assert_int_equal(json_object_size(e0), 6);

	/* Missing type: dropped, not stored. */
	events_emit(NULL, "x", NULL, json_object());
	events_emit("", "x", NULL, NULL);
	assert_int_equal(events_last_seq(), 6);
}

static void test_filters(void **state)
{
	(void)state;
	emit_sample();
	uint64_t last = 0;

	struct event_filter by_sandbox = {.sandbox = "sb-1"};
	cleanup_json json_t *a = read_all(&by_sandbox, 0, 0, &last);
	assert_int_equal(json_array_size(a), 3);
	assert_int_equal(last, 6); /* short batch: cursor skips to the newest */

	struct event_filter by_prefix = {.type_prefix = "sandbox."};
	cleanup_json json_t *b = read_all(&by_prefix, 0, 0, NULL);
	assert_int_equal(json_array_size(b), 3);
	for (size_t i = 0; i < 3; i++)
		assert_string_equal(str_of(json_array_get(b, i), "type"), "sandbox.state");

	struct event_filter by_exact_type = {.type_prefix = "exec.start"};
	cleanup_json json_t *c = read_all(&by_exact_type, 0, 0, NULL);
	assert_int_equal(json_array_size(c), 1);

	/* A prefix is a prefix of the type, not a pattern: '_' is no wildcard. */
	struct event_filter underscore = {.type_prefix = "sandbox_"};
	cleanup_json json_t *d = read_all(&underscore, 0, 0, NULL);
	assert_int_equal(json_array_size(d), 0);

	struct event_filter by_tenant = {.tenant = "team-b"};
	cleanup_json json_t *e = read_all(&by_tenant, 0, 0, NULL);
	assert_int_equal(json_array_size(e), 1);
	assert_string_equal(str_of(json_array_get(e, 0), "sandbox"), "sb-2");

	/* All filters at once, and since is exclusive. */
	struct event_filter all = {.tenant = "team-a", .sandbox = "sb-1", .type_prefix = "sandbox.", .since = 1};
	cleanup_json json_t *g = read_all(&all, 0, 0, NULL);
	assert_int_equal(json_array_size(g), 1);
	assert_int_equal(seq_of(json_array_get(g, 0)), 5);

	/* The larger of since and after_seq wins. */
	struct event_filter since4 = {.since = 4};
	cleanup_json json_t *h = read_all(&since4, 2, 0, NULL);
	assert_int_equal(json_array_size(h), 2);
	assert_int_equal(seq_of(json_array_get(h, 0)), 5);
	cleanup_json json_t *i = read_all(&since4, 5, 0, &last);
	assert_int_equal(json_array_size(i), 1);
	assert_int_equal(last, 6);

	/* Nothing new: the cursor stays where it was. */
	struct event_filter none = {0};
	cleanup_json json_t *j = read_all(&none, 6, 0, &last);
	assert_int_equal(json_array_size(j), 0);
	assert_int_equal(last, 6);
	cleanup_json json_t *k = read_all(&none, 100, 0, &last);
	assert_int_equal(json_array_size(k), 0);
	assert_int_equal(last, 100);
}

static void test_batches(void **state)
{
	(void)state;
	for (int i = 0; i < 25; i++)
		events_emit("exec.exit", "t", "sb-x", json_pack("{s:i}", "exit_code", i));
	struct event_filter f = {0};
	uint64_t cursor = 0, expect = 1;
	size_t batches = 0;
	for (;;) {
		uint64_t last = 0;
		cleanup_json json_t *a = read_all(&f, cursor, 10, &last);
		if (json_array_size(a) == 0) {
			assert_int_equal(last, cursor);
			break;
		}
		assert_true(json_array_size(a) <= 10);
		for (size_t i = 0; i < json_array_size(a); i++)
			assert_int_equal(seq_of(json_array_get(a, i)), expect++);
		/* A full batch ends exactly at its last event. */
		assert_int_equal(last, seq_of(json_array_get(a, json_array_size(a) - 1)));
		cursor = last;
		batches++;
	}
	assert_int_equal(expect, 26);
	assert_int_equal(batches, 3);
}

static void test_retention(void **state)
{
	(void)state;
	events_set_retention(10, 5);
	for (int i = 0; i < 103; i++)
		events_emit("sandbox.state", "t", "sb-r", json_pack("{s:i}", "i", i));
	/* Pruned in batches: between keep and keep + prune_every - 1 rows. */
	long long n = count_rows();
	assert_true(n >= 10 && n < 15);
	struct event_filter f = {0};
	cleanup_json json_t *a = read_all(&f, 0, 0, NULL);
	assert_int_equal((long long)json_array_size(a), n);
	assert_int_equal(seq_of(json_array_get(a, json_array_size(a) - 1)), 103); /* the newest are kept */

	/* Reopening prunes to exactly `keep`, and seqs are never reused. */
	events_shutdown();
	struct al_error err = {0};
	assert_int_equal(events_init(st, &err), 0);
	assert_int_equal(count_rows(), 10);
	assert_int_equal(events_last_seq(), 103);
	events_emit("sandbox.state", "t", "sb-r", NULL);
	assert_int_equal(events_last_seq(), 104);
}

/* Issue 17: one sandbox's flood cannot push every other sandbox's events
 * out: past its share, its own oldest go first. */
static void test_sandbox_share(void **state)
{
	(void)state;
	events_set_retention(100, 10);
	events_set_sandbox_share(20);
	for (int i = 0; i < 5; i++)
		events_emit("sandbox.state", "quiet", "sb-quiet", json_pack("{s:i}", "i", i));
	for (int i = 0; i < 1000; i++)
		events_emit("network.dns", "loud", "sb-loud", json_pack("{s:i}", "i", i));
	struct event_filter f = {.sandbox = "sb-quiet"};
	cleanup_json json_t *quiet = read_all(&f, 0, 0, NULL);
	assert_int_equal(json_array_size(quiet), 5);
	f.sandbox = "sb-loud";
	cleanup_json json_t *loud = read_all(&f, 0, 0, NULL);
	/* Its share, up to one batch more, and its newest are kept. */
	assert_true(json_array_size(loud) >= 20 && json_array_size(loud) < 30);
	assert_int_equal(seq_of(json_array_get(loud, json_array_size(loud) - 1)), 1005);
	events_set_sandbox_share(EVENTS_KEEP_PER_SANDBOX_DEFAULT);
}

static void test_seq_survives_restart_after_full_prune(void **state)
{
	(void)state;
	for (int i = 0; i < 3; i++)
		events_emit("token.created", "t", NULL, NULL);
	events_shutdown();
	assert_int_equal(sqlite3_exec(store_db(st), "DELETE FROM events", NULL, NULL, NULL), SQLITE_OK);
	struct al_error err = {0};
	assert_int_equal(events_init(st, &err), 0);
	assert_int_equal(events_last_seq(), 3);
	events_emit("token.created", "t", NULL, NULL);
	assert_int_equal(events_last_seq(), 4);
}

static void test_wait_timeout_and_immediate(void **state)
{
	(void)state;
	uint64_t t0 = now_ms_monotonic();
	assert_int_equal(events_wait(0, t0 + 100), -ETIMEDOUT);
	assert_true(now_ms_monotonic() >= t0 + 100);
	/* A deadline in the past returns at once. */
	assert_int_equal(events_wait(0, 0), -ETIMEDOUT);

	events_emit("exec.start", NULL, NULL, NULL);
	t0 = now_ms_monotonic();
	assert_int_equal(events_wait(0, t0 + 10000), 0);
	assert_true(now_ms_monotonic() - t0 < 1000);
	assert_int_equal(events_wait(1, now_ms_monotonic() + 50), -ETIMEDOUT);
}

static void *emit_later(void *arg)
{
	usleep((useconds_t)(uintptr_t)arg * 1000);
	events_emit("sandbox.state", "t", "sb-w", json_pack("{s:s}", "state", "stopped"));
	return NULL;
}

static void test_wait_wakes_on_emit(void **state)
{
	(void)state;
	pthread_t t;
	uint64_t t0 = now_ms_monotonic();
	assert_int_equal(pthread_create(&t, NULL, emit_later, (void *)(uintptr_t)100), 0);
	assert_int_equal(events_wait(0, t0 + 10000), 0);
	uint64_t dt = now_ms_monotonic() - t0;
	pthread_join(t, NULL);
	assert_true(dt >= 90 && dt < 5000);
	struct event_filter f = {0};
	cleanup_json json_t *a = read_all(&f, 0, 0, NULL);
	assert_int_equal(json_array_size(a), 1);
}

static void *shutdown_later(void *arg)
{
	(void)arg;
	usleep(100 * 1000);
	events_shutdown();
	return NULL;
}

static void *wait_thread(void *arg)
{
	int *r = arg;
	*r = events_wait(0, now_ms_monotonic() + 20000);
	return NULL;
}

static void test_shutdown_wakes_waiters(void **state)
{
	(void)state;
	pthread_t waiters[3], killer;
	int results[3] = {1, 1, 1};
	uint64_t t0 = now_ms_monotonic();
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&waiters[i], NULL, wait_thread, &results[i]), 0);
	assert_int_equal(pthread_create(&killer, NULL, shutdown_later, NULL), 0);
	for (int i = 0; i < 3; i++)
		pthread_join(waiters[i], NULL);
	pthread_join(killer, NULL);
	assert_true(now_ms_monotonic() - t0 < 10000);
	for (int i = 0; i < 3; i++)
		assert_int_equal(results[i], -ESHUTDOWN);
	/* After shutdown: waits fail at once, emits are dropped, reads fail. */
	assert_int_equal(events_wait(0, now_ms_monotonic() + 10000), -ESHUTDOWN);
	events_emit("sandbox.state", NULL, NULL, NULL);
	struct event_filter f = {0};
	json_t *arr = NULL;
	uint64_t last = 0;
	struct al_error err = {0};
	assert_int_equal(events_read(&f, 0, 0, &arr, &last, &err), -ESHUTDOWN);
	assert_int_equal(err.code, AL_ERR_UNAVAILABLE);
	assert_null(arr);
	assert_int_equal(count_rows(), 0);
}

#define EMITTERS 4
#define PER_EMITTER 200

static void *emitter(void *arg)
{
	(void)arg;
	for (int i = 0; i < PER_EMITTER; i++)
		events_emit("exec.exit", "t", "sb-c", json_pack("{s:i}", "i", i));
	return NULL;
}

static void test_concurrent_emit(void **state)
{
	(void)state;
	pthread_t t[EMITTERS];
	for (int i = 0; i < EMITTERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, emitter, NULL), 0);
	/* A follower reading while they emit sees each event once, in order. */
	struct event_filter f = {0};
	uint64_t cursor = 0, prev = 0;
	size_t seen = 0;
	while (seen < EMITTERS * PER_EMITTER) {
		uint64_t last;
		cleanup_json json_t *a = read_all(&f, cursor, 64, &last);
		for (size_t i = 0; i < json_array_size(a); i++) {
			uint64_t s = seq_of(json_array_get(a, i));
			assert_true(s > prev);
			prev = s;
			seen++;
		}
		cursor = last;
		if (seen < EMITTERS * PER_EMITTER)
			assert_true(events_wait(cursor, now_ms_monotonic() + 10000) == 0);
	}
	for (int i = 0; i < EMITTERS; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(seen, EMITTERS * PER_EMITTER);
	assert_int_equal(events_last_seq(), EMITTERS * PER_EMITTER);
}

static void test_parse_query(void **state)
{
	(void)state;
	struct event_filter f;
	bool follow = true;
	struct al_error err = {0};
	assert_int_equal(event_filter_parse_query(NULL, NULL, NULL, NULL, &f, &follow, &err), 0);
	assert_null(f.sandbox);
	assert_null(f.type_prefix);
	assert_null(f.tenant);
	assert_int_equal(f.since, 0);
	assert_false(follow);

	assert_int_equal(event_filter_parse_query("sb-5f0c1a9e2b7d4c13", "sandbox.", "42", "true", &f, &follow, &err),
	                 0);
	assert_string_equal(f.sandbox, "sb-5f0c1a9e2b7d4c13");
	assert_string_equal(f.type_prefix, "sandbox.");
	assert_int_equal(f.since, 42);
	assert_true(follow);
	assert_int_equal(event_filter_parse_query(NULL, "auth_x.y", "0", "0", &f, &follow, &err), 0);
	assert_false(follow);

	char long_type[EVENT_TYPE_MAX + 2], ok_type[EVENT_TYPE_MAX + 1];
	memset(long_type, 'a', sizeof(long_type) - 1);
	long_type[sizeof(long_type) - 1] = '\0';
	memset(ok_type, 'a', sizeof(ok_type) - 1);
	ok_type[sizeof(ok_type) - 1] = '\0';
	assert_int_equal(event_filter_parse_query(NULL, ok_type, NULL, NULL, &f, &follow, &err), 0);
	char long_sb[EVENT_SANDBOX_MAX + 2];
	memset(long_sb, 'b', sizeof(long_sb) - 1);
	long_sb[sizeof(long_sb) - 1] = '\0';

	static const struct {
		const char *sandbox, *type, *since, *follow, *field;
	} bad[] = {
	    {NULL, NULL, "", NULL, "since"},
	    {NULL, NULL, "-1", NULL, "since"},
	    {NULL, NULL, "+1", NULL, "since"},
	    {NULL, NULL, " 1", NULL, "since"},
	    {NULL, NULL, "1x", NULL, "since"},
	    {NULL, NULL, "18446744073709551616", NULL, "since"},
	    {NULL, NULL, "9223372036854775808", NULL, "since"}, /* beyond SQLite's integers */
	    {NULL, "", NULL, NULL, "type"},
	    {NULL, "Sandbox.", NULL, NULL, "type"},
	    {NULL, "sandbox.*", NULL, NULL, "type"},
	    {NULL, "sandbox%", NULL, NULL, "type"},
	    {NULL, "exec-start", NULL, NULL, "type"},
	    {"", NULL, NULL, NULL, "sandbox"},
	    {"sb 1", NULL, NULL, NULL, "sandbox"},
	    {"sb-1'", NULL, NULL, NULL, "sandbox"},
	    {"../x", NULL, NULL, NULL, "sandbox"},
	    {NULL, NULL, NULL, "yes", "follow"},
	    {NULL, NULL, NULL, "", "follow"},
	    {NULL, NULL, NULL, "TRUE", "follow"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		f.since = 777;
		err = (struct al_error){0};
		assert_int_equal(event_filter_parse_query(bad[i].sandbox, bad[i].type, bad[i].since, bad[i].follow, &f,
		                                          &follow, &err),
		                 -EINVAL);
		assert_int_equal(err.code, AL_ERR_INVALID_ARGUMENT);
		assert_int_equal(strncmp(err.message, bad[i].field, strlen(bad[i].field)), 0);
		assert_int_equal(f.since, 777); /* untouched on failure */
	}
	assert_int_equal(event_filter_parse_query(NULL, long_type, NULL, NULL, &f, &follow, &err), -EINVAL);
	assert_int_equal(event_filter_parse_query(long_sb, NULL, NULL, NULL, &f, &follow, &err), -EINVAL);
	long_sb[EVENT_SANDBOX_MAX] = '\0';
	assert_int_equal(event_filter_parse_query(long_sb, NULL, NULL, NULL, &f, &follow, &err), 0);
}

static void test_emit_before_init_is_dropped(void **state)
{
	(void)state;
	events_shutdown();
	events_emit("sandbox.state", NULL, NULL, json_object()); /* no crash, no leak */
	struct al_error err = {0};
	assert_int_equal(events_init(st, &err), 0);
	assert_int_equal(count_rows(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_emit_and_read, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_filters, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_batches, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_retention, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sandbox_share, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_seq_survives_restart_after_full_prune, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wait_timeout_and_immediate, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wait_wakes_on_emit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_shutdown_wakes_waiters, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_concurrent_emit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_parse_query, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_emit_before_init_is_dropped, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
