/* SPDX-License-Identifier: Apache-2.0 */
#include "metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>

#include "error.h"
#include "util.h"

#define HIST_BUCKETS_MAX 16
#define HTTP_STATUS_MIN 100
#define HTTP_STATUS_MAX 599

struct histogram {
	const char *name;
	const char *help;
	size_t n_bounds;
	double bounds[HIST_BUCKETS_MAX];       /* upper bounds, increasing; +Inf is implicit */
	uint64_t counts[HIST_BUCKETS_MAX + 1]; /* per bucket (not cumulative); last is +Inf */
	double sum;
	uint64_t count;
};

struct metrics {
	struct histogram create, exec;
	/* The accelerator (accel.h): "kvm", "tcg" or "probing", its CPU model,
	 * why, and how long its probe took (0: none). */
	char accel[8], accel_cpu[64], accel_reason[512];
	uint64_t accel_probe_ms;
	uint64_t requests[HTTP_STATUS_MAX - HTTP_STATUS_MIN + 1];
	uint64_t errors[AL_ERR__COUNT];
	uint64_t boot_failures;
	uint64_t egress_decisions[4][2]; /* egress_protos x {allow, deny} */
	uint64_t egress_bytes_up, egress_bytes_down;
	uint64_t egress_restarts;
	bool egress_up;
	uint64_t rate_limited;
	unsigned starts_active, starts_waiting;
	uint64_t start_waits, start_rejections;
	uint64_t exec_truncated;
	uint64_t output_dropped[3]; /* dropped_kinds */
	uint64_t console_rotations;
	uint64_t watchdog_kills[2]; /* watchdog_whats */
	uint64_t watchdog_reprieves;
	uint64_t auth_failures[4]; /* auth_reasons */
	uint64_t auth_unrecorded;
	uint64_t api_shed[2], api_refused[2]; /* api_listeners */
	unsigned netns_pool_ready;
	uint64_t netns_takes[2]; /* {new, pool} */
};

static const char *const egress_protos[] = {"http", "tls", "tcp", "dns"};
static const char *const dropped_kinds[] = {"exec", "log", "console"};
static const char *const watchdog_whats[] = {"vmm", "agent"};
static const char *const auth_reasons[] = {"missing", "malformed", "unknown", "revoked"};
static const char *const api_listeners[] = {"unix", "tcp"};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#define METRICS_INIT                                                                                                   \
	{                                                                                                              \
		.create = {.name = "airlock_sandbox_create_seconds",                                                   \
		           .help = "Time from a create request to a running sandbox (or failure).",                    \
		           .n_bounds = 11,                                                                             \
		           .bounds = {0.25, 0.5, 1, 2, 3, 5, 8, 13, 20, 30, 60}},                                      \
		.exec = {.name = "airlock_exec_seconds",                                                               \
		         .help = "Duration of exec commands, start to exit.",                                          \
		         .n_bounds = 11,                                                                               \
		         .bounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}},                         \
	}

static struct metrics m = METRICS_INIT;

void metrics_reset(void)
{
	pthread_mutex_lock(&lock);
	m = (struct metrics)METRICS_INIT;
	pthread_mutex_unlock(&lock);
}

static void histogram_observe(struct histogram *h, double v)
{
	if (isnan(v) || v < 0) /* a clock glitch: count it as 0 */
		v = 0;
	size_t i = 0;
	while (i < h->n_bounds && v > h->bounds[i])
		i++;
	pthread_mutex_lock(&lock);
	h->counts[i]++;
	if (isfinite(v))
		h->sum += v;
	h->count++;
	pthread_mutex_unlock(&lock);
}

void metrics_observe_create(double seconds)
{
	histogram_observe(&m.create, seconds);
}

void metrics_observe_exec(double seconds)
{
	histogram_observe(&m.exec, seconds);
}

void metrics_count_request(int http_status)
{
	if (http_status < HTTP_STATUS_MIN || http_status > HTTP_STATUS_MAX)
		return;
	pthread_mutex_lock(&lock);
	m.requests[http_status - HTTP_STATUS_MIN]++;
	pthread_mutex_unlock(&lock);
}

void metrics_count_error(const char *code)
{
	if (!code)
		return;
	/* Only names from the error table become labels, so a caller cannot grow
	 * the series set with arbitrary strings. */
	for (int i = AL_ERR_NONE + 1; i < AL_ERR__COUNT; i++) {
		if (!strcmp(code, al_error_code_name((enum al_error_code)i))) {
			pthread_mutex_lock(&lock);
			m.errors[i]++;
			pthread_mutex_unlock(&lock);
			return;
		}
	}
}

void metrics_count_boot_failure(void)
{
	pthread_mutex_lock(&lock);
	m.boot_failures++;
	pthread_mutex_unlock(&lock);
}

void metrics_count_egress_decision(const char *proto, const char *verdict)
{
	int v = !strcmp(verdict, "allow") ? 0 : !strcmp(verdict, "deny") ? 1 : -1;
	for (size_t i = 0; v >= 0 && i < ARRAY_SIZE(egress_protos); i++)
		if (!strcmp(proto, egress_protos[i])) {
			pthread_mutex_lock(&lock);
			m.egress_decisions[i][v]++;
			pthread_mutex_unlock(&lock);
		}
}

void metrics_add_egress_bytes(uint64_t up, uint64_t down)
{
	pthread_mutex_lock(&lock);
	m.egress_bytes_up += up;
	m.egress_bytes_down += down;
	pthread_mutex_unlock(&lock);
}

void metrics_set_egress_up(bool up)
{
	pthread_mutex_lock(&lock);
	m.egress_up = up;
	pthread_mutex_unlock(&lock);
}

void metrics_count_egress_restart(void)
{
	pthread_mutex_lock(&lock);
	m.egress_restarts++;
	pthread_mutex_unlock(&lock);
}

static void count(uint64_t *counter, uint64_t n)
{
	pthread_mutex_lock(&lock);
	*counter += n;
	pthread_mutex_unlock(&lock);
}

void metrics_count_rate_limited(void)
{
	count(&m.rate_limited, 1);
}

void metrics_set_starts(unsigned active, unsigned waiting)
{
	pthread_mutex_lock(&lock);
	m.starts_active = active;
	m.starts_waiting = waiting;
	pthread_mutex_unlock(&lock);
}

void metrics_count_start_waited(void)
{
	count(&m.start_waits, 1);
}

void metrics_count_start_rejected(void)
{
	count(&m.start_rejections, 1);
}

void metrics_count_exec_truncated(uint64_t dropped)
{
	pthread_mutex_lock(&lock);
	m.exec_truncated++;
	m.output_dropped[0] += dropped;
	pthread_mutex_unlock(&lock);
}

void metrics_add_output_dropped(const char *kind, uint64_t bytes)
{
	for (size_t i = 1; kind && i < ARRAY_SIZE(dropped_kinds); i++)
		if (!strcmp(kind, dropped_kinds[i]))
			count(&m.output_dropped[i], bytes);
}

void metrics_count_console_rotation(void)
{
	count(&m.console_rotations, 1);
}

void metrics_count_watchdog_kill(const char *unresponsive)
{
	for (size_t i = 0; unresponsive && i < ARRAY_SIZE(watchdog_whats); i++)
		if (!strcmp(unresponsive, watchdog_whats[i]))
			count(&m.watchdog_kills[i], 1);
}

void metrics_count_watchdog_reprieve(void)
{
	count(&m.watchdog_reprieves, 1);
}

void metrics_count_auth_failure(const char *reason)
{
	for (size_t i = 0; reason && i < ARRAY_SIZE(auth_reasons); i++)
		if (!strcmp(reason, auth_reasons[i]))
			count(&m.auth_failures[i], 1);
}

void metrics_count_auth_failure_unrecorded(void)
{
	count(&m.auth_unrecorded, 1);
}

void metrics_count_api_connection(const char *listener, const char *what)
{
	bool shed = what && !strcmp(what, "shed"), refused = what && !strcmp(what, "refused");
	for (size_t i = 0; listener && (shed || refused) && i < ARRAY_SIZE(api_listeners); i++)
		if (!strcmp(listener, api_listeners[i]))
			count(shed ? &m.api_shed[i] : &m.api_refused[i], 1);
}

/* Label values: backslash, double quote and newline escaped (format 0.0.4). */
static void put_label_value(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '"')
			fputs("\\\"", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static void render_histogram(FILE *f, const struct histogram *h)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name);
	uint64_t cumulative = 0;
	for (size_t i = 0; i < h->n_bounds; i++) {
		cumulative += h->counts[i];
		fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bounds[i], (unsigned long long)cumulative);
	}
	cumulative += h->counts[h->n_bounds];
	fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", h->name, (unsigned long long)cumulative);
	fprintf(f, "%s_sum %.9g\n", h->name, h->sum);
	fprintf(f, "%s_count %llu\n", h->name, (unsigned long long)h->count);
}

void metrics_set_accel(const char *accel, const char *cpu, const char *reason, uint64_t probe_ms)
{
	pthread_mutex_lock(&lock);
	strlcpy_al(m.accel, accel, sizeof(m.accel));
	strlcpy_al(m.accel_cpu, cpu, sizeof(m.accel_cpu));
	strlcpy_al(m.accel_reason, reason, sizeof(m.accel_reason));
	m.accel_probe_ms = probe_ms;
	pthread_mutex_unlock(&lock);
}

void metrics_set_netns_pool(unsigned ready)
{
	pthread_mutex_lock(&lock);
	m.netns_pool_ready = ready;
	pthread_mutex_unlock(&lock);
}

void metrics_count_netns_take(bool pooled)
{
	pthread_mutex_lock(&lock);
	m.netns_takes[pooled ? 1 : 0]++;
	pthread_mutex_unlock(&lock);
}

char *metrics_render(const unsigned state_counts[], size_t n_states, const char *const state_names[])
{
	pthread_mutex_lock(&lock);
	struct metrics snap = m;
	pthread_mutex_unlock(&lock);

	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		abort();

	fputs("# HELP airlock_sandboxes Sandboxes by state.\n# TYPE airlock_sandboxes gauge\n", f);
	for (size_t i = 0; i < n_states; i++) {
		if (!state_names[i])
			continue;
		fputs("airlock_sandboxes{state=\"", f);
		put_label_value(f, state_names[i]);
		fprintf(f, "\"} %u\n", state_counts[i]);
	}

	render_histogram(f, &snap.create);
	render_histogram(f, &snap.exec);

	fputs("# HELP airlock_api_requests_total API responses by HTTP status.\n"
	      "# TYPE airlock_api_requests_total counter\n",
	      f);
	for (int i = 0; i < (int)ARRAY_SIZE(snap.requests); i++)
		if (snap.requests[i])
			fprintf(f, "airlock_api_requests_total{code=\"%d\"} %llu\n", i + HTTP_STATUS_MIN,
			        (unsigned long long)snap.requests[i]);

	/* Every error code is rendered, zeros too: a bounded set, and rate()
	 * works from the first error on. */
	fputs("# HELP airlock_errors_total API error responses by error code.\n"
	      "# TYPE airlock_errors_total counter\n",
	      f);
	for (int i = AL_ERR_NONE + 1; i < AL_ERR__COUNT; i++)
		fprintf(f, "airlock_errors_total{code=\"%s\"} %llu\n", al_error_code_name((enum al_error_code)i),
		        (unsigned long long)snap.errors[i]);

	fprintf(f,
	        "# HELP airlock_boot_failures_total Sandboxes whose VM did not come up.\n"
	        "# TYPE airlock_boot_failures_total counter\n"
	        "airlock_boot_failures_total %llu\n",
	        (unsigned long long)snap.boot_failures);

	fputs("# HELP airlock_egress_decisions_total Egress gateway decisions (connections and DNS queries).\n"
	      "# TYPE airlock_egress_decisions_total counter\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(egress_protos); i++)
		for (int v = 0; v < 2; v++)
			fprintf(f, "airlock_egress_decisions_total{proto=\"%s\",verdict=\"%s\"} %llu\n",
			        egress_protos[i], v ? "deny" : "allow",
			        (unsigned long long)snap.egress_decisions[i][v]);
	fprintf(f,
	        "# HELP airlock_egress_bytes_total Bytes relayed by the egress gateway (up: guest to server).\n"
	        "# TYPE airlock_egress_bytes_total counter\n"
	        "airlock_egress_bytes_total{direction=\"up\"} %llu\n"
	        "airlock_egress_bytes_total{direction=\"down\"} %llu\n"
	        "# HELP airlock_egress_up Whether the egress gateway is running.\n"
	        "# TYPE airlock_egress_up gauge\n"
	        "airlock_egress_up %d\n"
	        "# HELP airlock_egress_restarts_total Restarts of the egress gateway after it died.\n"
	        "# TYPE airlock_egress_restarts_total counter\n"
	        "airlock_egress_restarts_total %llu\n",
	        (unsigned long long)snap.egress_bytes_up, (unsigned long long)snap.egress_bytes_down,
	        snap.egress_up ? 1 : 0, (unsigned long long)snap.egress_restarts);

	fprintf(f,
	        "# HELP airlock_rate_limited_total API requests refused (429) because a tenant passed its rate.\n"
	        "# TYPE airlock_rate_limited_total counter\n"
	        "airlock_rate_limited_total %llu\n"
	        "# HELP airlock_starts_active Sandbox boots and restores running now.\n"
	        "# TYPE airlock_starts_active gauge\n"
	        "airlock_starts_active %u\n"
	        "# HELP airlock_starts_waiting Creates waiting for a start slot (--max-concurrent-starts).\n"
	        "# TYPE airlock_starts_waiting gauge\n"
	        "airlock_starts_waiting %u\n"
	        "# HELP airlock_start_waits_total Creates that had to wait for a start slot.\n"
	        "# TYPE airlock_start_waits_total counter\n"
	        "airlock_start_waits_total %llu\n"
	        "# HELP airlock_start_rejections_total Creates refused (503) after waiting for a start slot too long.\n"
	        "# TYPE airlock_start_rejections_total counter\n"
	        "airlock_start_rejections_total %llu\n"
	        "# HELP airlock_exec_output_truncated_total Collected execs whose output passed max_output_bytes.\n"
	        "# TYPE airlock_exec_output_truncated_total counter\n"
	        "airlock_exec_output_truncated_total %llu\n",
	        (unsigned long long)snap.rate_limited, snap.starts_active, snap.starts_waiting,
	        (unsigned long long)snap.start_waits, (unsigned long long)snap.start_rejections,
	        (unsigned long long)snap.exec_truncated);
	fputs("# HELP airlock_output_dropped_bytes_total Guest output dropped by a bounded buffer (exec: past "
	      "max_output_bytes; log: out of a process's kept log; console: rotated away).\n"
	      "# TYPE airlock_output_dropped_bytes_total counter\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(dropped_kinds); i++)
		fprintf(f, "airlock_output_dropped_bytes_total{kind=\"%s\"} %llu\n", dropped_kinds[i],
		        (unsigned long long)snap.output_dropped[i]);
	fprintf(f,
	        "# HELP airlock_console_rotations_total Rotations of a sandbox's console log (it keeps one old file).\n"
	        "# TYPE airlock_console_rotations_total counter\n"
	        "airlock_console_rotations_total %llu\n",
	        (unsigned long long)snap.console_rotations);
	fputs("# HELP airlock_watchdog_kills_total VMMs the watchdog killed, by what stopped answering.\n"
	      "# TYPE airlock_watchdog_kills_total counter\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(watchdog_whats); i++)
		fprintf(f, "airlock_watchdog_kills_total{unresponsive=\"%s\"} %llu\n", watchdog_whats[i],
		        (unsigned long long)snap.watchdog_kills[i]);
	fprintf(f,
	        "# HELP airlock_watchdog_reprieves_total Silent VMMs the watchdog did not kill at --watchdog-s because "
	        "they had been waiting for a CPU (an overloaded host, or their CPU quota).\n"
	        "# TYPE airlock_watchdog_reprieves_total counter\n"
	        "airlock_watchdog_reprieves_total %llu\n",
	        (unsigned long long)snap.watchdog_reprieves);
	fputs("# HELP airlock_auth_failures_total Failed authentications on the TCP listener (401), by reason.\n"
	      "# TYPE airlock_auth_failures_total counter\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(auth_reasons); i++)
		fprintf(f, "airlock_auth_failures_total{reason=\"%s\"} %llu\n", auth_reasons[i],
		        (unsigned long long)snap.auth_failures[i]);
	fprintf(f,
	        "# HELP airlock_auth_failures_unrecorded_total Failed authentications counted in an auth.failure "
	        "summary instead of an event of their own.\n"
	        "# TYPE airlock_auth_failures_unrecorded_total counter\n"
	        "airlock_auth_failures_unrecorded_total %llu\n",
	        (unsigned long long)snap.auth_unrecorded);
	fputs("# HELP airlock_api_connections_shed_total Idle API connections closed to make room for a new one.\n"
	      "# TYPE airlock_api_connections_shed_total counter\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(api_listeners); i++)
		fprintf(f, "airlock_api_connections_shed_total{listener=\"%s\"} %llu\n", api_listeners[i],
		        (unsigned long long)snap.api_shed[i]);
	fputs("# HELP airlock_api_connections_refused_total API connections refused: every connection in the way "
	      "was busy.\n"
	      "# TYPE airlock_api_connections_refused_total counter\n",
	      f);
	for (size_t i = 0; i < ARRAY_SIZE(api_listeners); i++)
		fprintf(f, "airlock_api_connections_refused_total{listener=\"%s\"} %llu\n", api_listeners[i],
		        (unsigned long long)snap.api_refused[i]);

	fprintf(f,
	        "# HELP airlock_netns_pool_ready Network namespaces made ahead, ready for a create (--netns-pool).\n"
	        "# TYPE airlock_netns_pool_ready gauge\n"
	        "airlock_netns_pool_ready %u\n"
	        "# HELP airlock_netns_takes_total Network namespaces of starting sandboxes: from the pool or made "
	        "then.\n"
	        "# TYPE airlock_netns_takes_total counter\n"
	        "airlock_netns_takes_total{from=\"pool\"} %llu\n"
	        "airlock_netns_takes_total{from=\"new\"} %llu\n",
	        snap.netns_pool_ready, (unsigned long long)snap.netns_takes[1],
	        (unsigned long long)snap.netns_takes[0]);

	if (snap.accel[0]) {
		fputs("# HELP airlock_accel_info The accelerator of QEMU's guests (kvm, tcg; probing while its probe "
		      "runs), its CPU model and why it was chosen.\n"
		      "# TYPE airlock_accel_info gauge\n"
		      "airlock_accel_info{accel=\"",
		      f);
		put_label_value(f, snap.accel);
		fputs("\",cpu=\"", f);
		put_label_value(f, snap.accel_cpu);
		fputs("\",reason=\"", f);
		put_label_value(f, snap.accel_reason);
		fprintf(f,
		        "\"} 1\n"
		        "# HELP airlock_accel_probe_seconds How long the accelerator's probe took (0: none ran).\n"
		        "# TYPE airlock_accel_probe_seconds gauge\n"
		        "airlock_accel_probe_seconds %.3f\n",
		        (double)snap.accel_probe_ms / 1000.0);
	}

	if (fclose(f) != 0 || !buf)
		abort();
	return buf;
}
