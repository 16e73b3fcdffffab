/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for src/daemon/obs/metrics.c: the exposition is parsed back and
 * checked against text format 0.0.4 (HELP/TYPE before samples, cumulative
 * monotonic buckets ending in +Inf == _count), and counting is thread-safe. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "error.h"
#include "metrics.h"
#include "util.h"

#define SAMPLES_MAX 256

struct sample {
	char name[96];
	char labels[128]; /* raw text between the braces, "" if none */
	double value;
};

struct exposition {
	struct sample s[SAMPLES_MAX];
	size_t n;
	char typed[32][96]; /* families seen in # TYPE, in order */
	char types[32][16];
	size_t n_typed;
};

/* The family a sample belongs to (histogram suffixes stripped). */
static void family_of(const char *name, char *out, size_t size)
{
	strlcpy_al(out, name, size);
	static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
	size_t n = strlen(out);
	for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
		size_t k = strlen(suffixes[i]);
		if (n > k && !strcmp(out + n - k, suffixes[i]) && strstr(out, "_seconds")) {
			out[n - k] = '\0';
			return;
		}
	}
}

static void parse_exposition(const char *text, struct exposition *e)
{
	memset(e, 0, sizeof(*e));
	assert_true(strlen(text) > 0);
	assert_int_equal(text[strlen(text) - 1], '\n');
	cleanup_free char *copy = xstrdup(text);
	char *save = NULL;
	bool help_seen = false;
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "# HELP ", 7)) {
			help_seen = true;
			continue;
		}
		if (!strncmp(line, "# TYPE ", 7)) {
			assert_true(help_seen); /* we always write HELP first */
			help_seen = false;
			assert_true(e->n_typed < 32);
			char *sp = strchr(line + 7, ' ');
			assert_non_null(sp);
			*sp = '\0';
			strlcpy_al(e->typed[e->n_typed], line + 7, sizeof(e->typed[0]));
			strlcpy_al(e->types[e->n_typed], sp + 1, sizeof(e->types[0]));
			assert_true(!strcmp(sp + 1, "counter") || !strcmp(sp + 1, "gauge") ||
			            !strcmp(sp + 1, "histogram"));
			e->n_typed++;
			continue;
		}
		assert_int_not_equal(line[0], '#');
		assert_true(e->n < SAMPLES_MAX);
		struct sample *s = &e->s[e->n++];
		size_t name_len = strcspn(line, "{ ");
		assert_true(name_len > 0 && name_len < sizeof(s->name));
		memcpy(s->name, line, name_len);
		const char *p = line + name_len;
		if (*p == '{') {
			const char *close = strchr(p, '}');
			assert_non_null(close);
			assert_true((size_t)(close - p - 1) < sizeof(s->labels));
			memcpy(s->labels, p + 1, (size_t)(close - p - 1));
			p = close + 1;
		}
		assert_int_equal(*p, ' ');
		char *end = NULL;
		s->value = strtod(p + 1, &end);
		assert_true(end != p + 1 && *end == '\0');
		/* Every sample belongs to the family most recently TYPEd. */
		char fam[96];
		family_of(s->name, fam, sizeof(fam));
		assert_true(e->n_typed > 0);
		assert_string_equal(fam, e->typed[e->n_typed - 1]);
	}
}

static const struct sample *find(const struct exposition *e, const char *name, const char *labels)
{
	for (size_t i = 0; i < e->n; i++)
		if (!strcmp(e->s[i].name, name) && !strcmp(e->s[i].labels, labels))
			return &e->s[i];
	return NULL;
}

/* Checks one histogram and returns its +Inf count. */
static double check_histogram(const struct exposition *e, const char *fam, size_t want_buckets)
{
	char bucket[128], sum[128], count[128];
	snprintf(bucket, sizeof(bucket), "%s_bucket", fam);
	snprintf(sum, sizeof(sum), "%s_sum", fam);
	snprintf(count, sizeof(count), "%s_count", fam);
	double prev_le = -INFINITY, prev_count = 0;
	size_t n = 0;
	bool inf_seen = false;
	for (size_t i = 0; i < e->n; i++) {
		if (strcmp(e->s[i].name, bucket))
			continue;
		assert_false(inf_seen); /* +Inf is last */
		const char *l = e->s[i].labels;
		assert_int_equal(strncmp(l, "le=\"", 4), 0);
		assert_int_equal(l[strlen(l) - 1], '"');
		double le = strcmp(l, "le=\"+Inf\"") ? strtod(l + 4, NULL) : INFINITY;
		inf_seen = isinf(le);
		assert_true(le > prev_le);
		assert_true(e->s[i].value >= prev_count); /* cumulative */
		prev_le = le;
		prev_count = e->s[i].value;
		n++;
	}
	assert_true(inf_seen);
	assert_int_equal(n, want_buckets + 1);
	const struct sample *c = find(e, count, "");
	assert_non_null(c);
	assert_non_null(find(e, sum, ""));
	assert_true(c->value == prev_count);
	return prev_count;
}

static const char *const states[] = {"creating", "running", "stopped"};

static void test_empty_render(void **state)
{
	(void)state;
	metrics_reset();
	cleanup_free char *text = metrics_render(NULL, 0, NULL);
	static struct exposition e;
	parse_exposition(text, &e);
	assert_true(check_histogram(&e, "airlock_sandbox_create_seconds", 11) == 0);
	assert_true(check_histogram(&e, "airlock_exec_seconds", 11) == 0);
	const struct sample *b = find(&e, "airlock_boot_failures_total", "");
	assert_non_null(b);
	assert_true(b->value == 0);
	/* Every error code is present from the start (zeros). */
	assert_non_null(find(&e, "airlock_errors_total", "code=\"quota_exceeded\""));
	assert_non_null(find(&e, "airlock_errors_total", "code=\"invalid_argument\""));
	assert_null(find(&e, "airlock_errors_total", "code=\"ok\""));
	assert_null(find(&e, "airlock_sandboxes", "state=\"running\""));
}

static void test_histograms_and_counters(void **state)
{
	(void)state;
	metrics_reset();
	metrics_observe_create(0.1);  /* le 0.25 */
	metrics_observe_create(0.25); /* le 0.25: bounds are inclusive */
	metrics_observe_create(4);    /* le 5 */
	metrics_observe_create(61);   /* +Inf */
	metrics_observe_create(-3);   /* clock glitch: counts as 0 */
	metrics_observe_create(NAN);
	metrics_observe_exec(0.004);
	metrics_observe_exec(10);
	metrics_observe_exec(11);
	metrics_count_request(200);
	metrics_count_request(200);
	metrics_count_request(429);
	metrics_count_request(99);  /* ignored */
	metrics_count_request(600); /* ignored */
	metrics_count_error("quota_exceeded");
	metrics_count_error("not_found");
	metrics_count_error("not_found");
	metrics_count_error("made_up_code"); /* ignored: bounded labels */
	metrics_count_error(NULL);
	metrics_count_boot_failure();
	metrics_count_auth_failure("unknown");
	metrics_count_auth_failure("unknown");
	metrics_count_auth_failure("missing");
	metrics_count_auth_failure("made_up"); /* ignored: bounded labels */
	metrics_count_auth_failure(NULL);
	metrics_count_auth_failure_unrecorded();
	metrics_count_api_connection("tcp", "shed");
	metrics_count_api_connection("tcp", "shed");
	metrics_count_api_connection("unix", "refused");
	metrics_count_api_connection("udp", "shed");     /* ignored */
	metrics_count_api_connection("tcp", "whatever"); /* ignored */
	unsigned counts[] = {1, 3, 0};
	cleanup_free char *text = metrics_render(counts, ARRAY_SIZE(counts), states);
	static struct exposition e;
	parse_exposition(text, &e);

	assert_true(check_histogram(&e, "airlock_sandbox_create_seconds", 11) == 6);
	assert_true(find(&e, "airlock_sandbox_create_seconds_bucket", "le=\"0.25\"")->value == 4);
	assert_true(find(&e, "airlock_sandbox_create_seconds_bucket", "le=\"3\"")->value == 4);
	assert_true(find(&e, "airlock_sandbox_create_seconds_bucket", "le=\"5\"")->value == 5);
	assert_true(find(&e, "airlock_sandbox_create_seconds_bucket", "le=\"60\"")->value == 5);
	assert_true(fabs(find(&e, "airlock_sandbox_create_seconds_sum", "")->value - 65.35) < 1e-6);

	assert_true(check_histogram(&e, "airlock_exec_seconds", 11) == 3);
	assert_true(find(&e, "airlock_exec_seconds_bucket", "le=\"0.005\"")->value == 1);
	assert_true(find(&e, "airlock_exec_seconds_bucket", "le=\"10\"")->value == 2);

	assert_true(find(&e, "airlock_api_requests_total", "code=\"200\"")->value == 2);
	assert_true(find(&e, "airlock_api_requests_total", "code=\"429\"")->value == 1);
	assert_null(find(&e, "airlock_api_requests_total", "code=\"99\""));
	assert_null(find(&e, "airlock_api_requests_total", "code=\"600\""));
	assert_true(find(&e, "airlock_errors_total", "code=\"quota_exceeded\"")->value == 1);
	assert_true(find(&e, "airlock_errors_total", "code=\"not_found\"")->value == 2);
	assert_null(find(&e, "airlock_errors_total", "code=\"made_up_code\""));
	assert_true(find(&e, "airlock_boot_failures_total", "")->value == 1);
	assert_true(find(&e, "airlock_sandboxes", "state=\"running\"")->value == 3);
	assert_true(find(&e, "airlock_sandboxes", "state=\"stopped\"")->value == 0);
	assert_true(find(&e, "airlock_auth_failures_total", "reason=\"unknown\"")->value == 2);
	assert_true(find(&e, "airlock_auth_failures_total", "reason=\"missing\"")->value == 1);
	assert_true(find(&e, "airlock_auth_failures_total", "reason=\"revoked\"")->value == 0);
	assert_null(find(&e, "airlock_auth_failures_total", "reason=\"made_up\""));
	assert_true(find(&e, "airlock_auth_failures_unrecorded_total", "")->value == 1);
	assert_true(find(&e, "airlock_api_connections_shed_total", "listener=\"tcp\"")->value == 2);
	assert_true(find(&e, "airlock_api_connections_shed_total", "listener=\"unix\"")->value == 0);
	assert_true(find(&e, "airlock_api_connections_refused_total", "listener=\"unix\"")->value == 1);
	assert_null(find(&e, "airlock_api_connections_shed_total", "listener=\"udp\""));

	/* Families are typed once each, with the right type. */
	for (size_t i = 0; i < e.n_typed; i++)
		for (size_t j = i + 1; j < e.n_typed; j++)
			assert_string_not_equal(e.typed[i], e.typed[j]);
	assert_non_null(strstr(text, "# TYPE airlock_exec_seconds histogram\n"));
	assert_non_null(strstr(text, "# TYPE airlock_api_requests_total counter\n"));
	assert_non_null(strstr(text, "# TYPE airlock_sandboxes gauge\n"));
}

static void test_label_escaping(void **state)
{
	(void)state;
	metrics_reset();
	const char *const odd[] = {"a\"b\\c\nd"};
	unsigned n[] = {7};
	cleanup_free char *text = metrics_render(n, 1, odd);
	assert_non_null(strstr(text, "airlock_sandboxes{state=\"a\\\"b\\\\c\\nd\"} 7\n"));
}

/* Issue 17: a sandbox's gateway records folded or dropped, per sandbox;
 * a forgotten sandbox's counts move to sandbox="". */
static void test_egress_suppressed(void **state)
{
	(void)state;
	metrics_reset();
	metrics_add_egress_suppressed("sb-a", "mallory", 100, 0);
	metrics_add_egress_suppressed("sb-a", "mallory", 5, 7);
	metrics_add_egress_suppressed("sb-b", "", 1, 0);
	metrics_add_egress_decisions("dns", "deny", 105);
	cleanup_free char *text = metrics_render(NULL, 0, NULL);
	assert_non_null(strstr(text, "airlock_egress_events_suppressed_total{sandbox=\"sb-a\",tenant=\"mallory\","
	                             "kind=\"aggregated\"} 105\n"));
	assert_non_null(strstr(text, "airlock_egress_events_suppressed_total{sandbox=\"sb-a\",tenant=\"mallory\","
	                             "kind=\"dropped\"} 7\n"));
	assert_non_null(strstr(text, "airlock_egress_decisions_total{proto=\"dns\",verdict=\"deny\"} 105\n"));
	metrics_forget_egress_sandbox("sb-a");
	cleanup_free char *after = metrics_render(NULL, 0, NULL);
	assert_null(strstr(after, "sandbox=\"sb-a\""));
	assert_non_null(strstr(after, "airlock_egress_events_suppressed_total{sandbox=\"\",tenant=\"\","
	                              "kind=\"aggregated\"} 105\n"));
	assert_non_null(strstr(after, "sandbox=\"sb-b\""));
}

#define THREADS 8
#define PER_THREAD 5000

static void *hammer(void *arg)
{
	(void)arg;
	for (int i = 0; i < PER_THREAD; i++) {
		metrics_observe_exec(0.02);
		metrics_count_request(200);
		metrics_count_error("timeout");
	}
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	metrics_reset();
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, hammer, NULL), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	cleanup_free char *text = metrics_render(NULL, 0, NULL);
	static struct exposition e;
	parse_exposition(text, &e);
	assert_true(check_histogram(&e, "airlock_exec_seconds", 11) == THREADS * PER_THREAD);
	assert_true(find(&e, "airlock_exec_seconds_bucket", "le=\"0.01\"")->value == 0);
	assert_true(find(&e, "airlock_exec_seconds_bucket", "le=\"0.025\"")->value == THREADS * PER_THREAD);
	assert_true(find(&e, "airlock_api_requests_total", "code=\"200\"")->value == THREADS * PER_THREAD);
	assert_true(find(&e, "airlock_errors_total", "code=\"timeout\"")->value == THREADS * PER_THREAD);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_empty_render),   cmocka_unit_test(test_histograms_and_counters),
	    cmocka_unit_test(test_label_escaping), cmocka_unit_test(test_egress_suppressed),
	    cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
