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
	uint64_t proxy_requests[HTTP_STATUS_MAX - HTTP_STATUS_MIN + 1];
	uint64_t errors[AL_ERR__COUNT];
	/* From here on uint64_t, gauges too: a struct family points at them. */
	uint64_t boot_failures;
	uint64_t egress_decisions[4][2]; /* egress_protos x {allow, deny} */
	uint64_t egress_bytes[2];        /* egress_directions */
	uint64_t egress_restarts;
	uint64_t egress_up;
	uint64_t rate_limited;
	uint64_t starts_active, starts_waiting;
	uint64_t start_waits, start_rejections;
	uint64_t exec_truncated;
	uint64_t output_dropped[3]; /* dropped_kinds */
	uint64_t console_rotations;
	uint64_t watchdog_kills[2]; /* watchdog_whats */
	uint64_t watchdog_reprieves;
	uint64_t auth_failures[4]; /* auth_reasons */
	uint64_t auth_unrecorded;
	uint64_t api_shed[2], api_refused[2]; /* api_listeners */
	uint64_t netns_pool_ready;
	uint64_t netns_takes[2]; /* netns_froms */
	uint64_t proxy_connections;
};

static const char *const egress_protos[] = {"http", "tls", "tcp", "dns"};
static const char *const dropped_kinds[] = {"exec", "log", "console"};
static const char *const watchdog_whats[] = {"vmm", "agent"};
static const char *const auth_reasons[] = {"missing", "malformed", "unknown", "revoked"};
static const char *const api_listeners[] = {"unix", "tcp"};
static const char *const egress_directions[] = {"up", "down"};
static const char *const netns_froms[] = {"pool", "new"};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* airlock_egress_events_suppressed_total, per sandbox (under lock): a
 * bounded table; [0] is sandbox "" (the rest, and sandboxes forgotten). */
struct suppressed {
	char sandbox[65], tenant[65];
	uint64_t counts[2]; /* suppressed_kinds */
};
static const char *const suppressed_kinds[] = {"aggregated", "dropped"};
static struct suppressed suppressed[METRICS_EGRESS_SANDBOXES_MAX + 1];
static size_t n_suppressed = 1;

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
	memset(suppressed, 0, sizeof(suppressed));
	n_suppressed = 1;
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

static void count(uint64_t *counter, uint64_t n)
{
	pthread_mutex_lock(&lock);
	*counter += n;
	pthread_mutex_unlock(&lock);
}

/* The counter of the label value name, if it is one of names[] (a bounded
 * label set: any other name is ignored). */
static void count_by_name(uint64_t counters[], const char *const names[], size_t n_names, const char *name, uint64_t n)
{
	for (size_t i = 0; name && i < n_names; i++)
		if (!strcmp(name, names[i]))
			count(&counters[i], n);
}

void metrics_count_request(int http_status)
{
	if (http_status < HTTP_STATUS_MIN || http_status > HTTP_STATUS_MAX)
		return;
	count(&m.requests[http_status - HTTP_STATUS_MIN], 1);
}

void metrics_count_proxy_request(int http_status)
{
	if (http_status < HTTP_STATUS_MIN || http_status > HTTP_STATUS_MAX)
		return;
	count(&m.proxy_requests[http_status - HTTP_STATUS_MIN], 1);
}

void metrics_proxy_connection(bool open)
{
	pthread_mutex_lock(&lock);
	if (open)
		m.proxy_connections++;
	else if (m.proxy_connections)
		m.proxy_connections--;
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
			count(&m.errors[i], 1);
			return;
		}
	}
}

void metrics_count_boot_failure(void)
{
	count(&m.boot_failures, 1);
}

void metrics_count_egress_decision(const char *proto, const char *verdict)
{
	metrics_add_egress_decisions(proto, verdict, 1);
}

void metrics_add_egress_decisions(const char *proto, const char *verdict, uint64_t n)
{
	int v = !strcmp(verdict, "allow") ? 0 : !strcmp(verdict, "deny") ? 1 : -1;
	for (size_t i = 0; v >= 0 && i < ARRAY_SIZE(egress_protos); i++)
		if (!strcmp(proto, egress_protos[i]))
			count(&m.egress_decisions[i][v], n);
}

void metrics_add_egress_bytes(uint64_t up, uint64_t down)
{
	pthread_mutex_lock(&lock);
	m.egress_bytes[0] += up;
	m.egress_bytes[1] += down;
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
	count(&m.egress_restarts, 1);
}

void metrics_add_egress_suppressed(const char *sandbox, const char *tenant, uint64_t aggregated, uint64_t dropped)
{
	pthread_mutex_lock(&lock);
	struct suppressed *e = NULL;
	for (size_t i = 1; i < n_suppressed && !e; i++)
		if (!strcmp(suppressed[i].sandbox, sandbox))
			e = &suppressed[i];
	if (!e && n_suppressed < ARRAY_SIZE(suppressed) && sandbox[0]) {
		e = &suppressed[n_suppressed++];
		strlcpy_al(e->sandbox, sandbox, sizeof(e->sandbox));
		strlcpy_al(e->tenant, tenant ? tenant : "", sizeof(e->tenant));
	}
	if (!e)
		e = &suppressed[0];
	e->counts[0] += aggregated;
	e->counts[1] += dropped;
	pthread_mutex_unlock(&lock);
}

void metrics_forget_egress_sandbox(const char *sandbox)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 1; i < n_suppressed; i++) {
		if (strcmp(suppressed[i].sandbox, sandbox) != 0)
			continue;
		for (size_t k = 0; k < ARRAY_SIZE(suppressed_kinds); k++)
			suppressed[0].counts[k] += suppressed[i].counts[k];
		suppressed[i] = suppressed[--n_suppressed];
		break;
	}
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
	/* Not "exec": metrics_count_exec_truncated() counts those. */
	count_by_name(m.output_dropped + 1, dropped_kinds + 1, ARRAY_SIZE(dropped_kinds) - 1, kind, bytes);
}

void metrics_count_console_rotation(void)
{
	count(&m.console_rotations, 1);
}

void metrics_count_watchdog_kill(const char *unresponsive)
{
	count_by_name(m.watchdog_kills, watchdog_whats, ARRAY_SIZE(watchdog_whats), unresponsive, 1);
}

void metrics_count_watchdog_reprieve(void)
{
	count(&m.watchdog_reprieves, 1);
}

void metrics_count_auth_failure(const char *reason)
{
	count_by_name(m.auth_failures, auth_reasons, ARRAY_SIZE(auth_reasons), reason, 1);
}

void metrics_count_auth_failure_unrecorded(void)
{
	count(&m.auth_unrecorded, 1);
}

void metrics_count_api_connection(const char *listener, const char *what)
{
	bool shed = what && !strcmp(what, "shed"), refused = what && !strcmp(what, "refused");
	if (shed || refused)
		count_by_name(shed ? m.api_shed : m.api_refused, api_listeners, ARRAY_SIZE(api_listeners), listener, 1);
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
	count(&m.netns_takes[pooled ? 0 : 1], 1);
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

static void put_header(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_sandboxes(FILE *f, const unsigned state_counts[], size_t n_states, const char *const state_names[])
{
	put_header(f, "airlock_sandboxes", "gauge", "Sandboxes by state.");
	for (size_t i = 0; i < n_states; i++) {
		if (!state_names[i])
			continue;
		fputs("airlock_sandboxes{state=\"", f);
		put_label_value(f, state_names[i]);
		fprintf(f, "\"} %u\n", state_counts[i]);
	}
}

static void render_histogram(FILE *f, const struct histogram *h)
{
	put_header(f, h->name, "histogram", h->help);
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

static void render_requests(FILE *f, const struct metrics *s)
{
	put_header(f, "airlock_api_requests_total", "counter", "API responses by HTTP status.");
	for (int i = 0; i < (int)ARRAY_SIZE(s->requests); i++)
		if (s->requests[i])
			fprintf(f, "airlock_api_requests_total{code=\"%d\"} %llu\n", i + HTTP_STATUS_MIN,
			        (unsigned long long)s->requests[i]);
	put_header(f, "airlock_proxy_requests_total", "counter",
	           "Requests through the port proxy (--proxy-listen) by HTTP status.");
	for (int i = 0; i < (int)ARRAY_SIZE(s->proxy_requests); i++)
		if (s->proxy_requests[i])
			fprintf(f, "airlock_proxy_requests_total{code=\"%d\"} %llu\n", i + HTTP_STATUS_MIN,
			        (unsigned long long)s->proxy_requests[i]);
	/* Every error code is rendered, zeros too: a bounded set, and rate()
	 * works from the first error on. */
	put_header(f, "airlock_errors_total", "counter", "API error responses by error code.");
	for (int i = AL_ERR_NONE + 1; i < AL_ERR__COUNT; i++)
		fprintf(f, "airlock_errors_total{code=\"%s\"} %llu\n", al_error_code_name((enum al_error_code)i),
		        (unsigned long long)s->errors[i]);
}

static void render_egress_decisions(FILE *f, const struct metrics *s)
{
	put_header(f, "airlock_egress_decisions_total", "counter",
	           "Egress gateway decisions (connections and DNS queries).");
	for (size_t i = 0; i < ARRAY_SIZE(egress_protos); i++)
		for (int v = 0; v < 2; v++)
			fprintf(f, "airlock_egress_decisions_total{proto=\"%s\",verdict=\"%s\"} %llu\n",
			        egress_protos[i], v ? "deny" : "allow", (unsigned long long)s->egress_decisions[i][v]);
}

/* Under lock (a copy of the table would be 140 KiB). */
static void render_egress_suppressed(FILE *f)
{
	put_header(f, "airlock_egress_events_suppressed_total", "counter",
	           "Egress gateway records of a sandbox folded into counted records (aggregated) or dropped (its "
	           "share of the gateway's event queue was full).");
	for (size_t i = 0; i < n_suppressed; i++)
		for (size_t k = 0; k < ARRAY_SIZE(suppressed_kinds); k++) {
			fputs("airlock_egress_events_suppressed_total{sandbox=\"", f);
			put_label_value(f, suppressed[i].sandbox);
			fputs("\",tenant=\"", f);
			put_label_value(f, suppressed[i].tenant);
			fprintf(f, "\",kind=\"%s\"} %llu\n", suppressed_kinds[k],
			        (unsigned long long)suppressed[i].counts[k]);
		}
}

/* A metric family of one sample (label NULL) or of one a label value:
 * values[i] for label_values[i]. */
struct family {
	const char *name, *type, *help;
	const char *label;
	const char *const *label_values;
	size_t n;
	const uint64_t *values;
};

static void render_family(FILE *f, const struct family *fam)
{
	put_header(f, fam->name, fam->type, fam->help);
	if (!fam->label) {
		fprintf(f, "%s %llu\n", fam->name, (unsigned long long)fam->values[0]);
		return;
	}
	for (size_t i = 0; i < fam->n; i++)
		fprintf(f, "%s{%s=\"%s\"} %llu\n", fam->name, fam->label, fam->label_values[i],
		        (unsigned long long)fam->values[i]);
}

#define ONE(name, type, help, field)                                                                                   \
	{                                                                                                              \
		name, type, help, NULL, NULL, 1, &(field)                                                              \
	}
#define BY(name, help, label, values, field)                                                                           \
	{                                                                                                              \
		name, "counter", help, label, values, ARRAY_SIZE(values), field                                        \
	}

/* The counters and gauges after the egress decisions, in the order they are
 * rendered. */
static void render_families(FILE *f, const struct metrics *s)
{
	const struct family families[] = {
	    BY("airlock_egress_bytes_total", "Bytes relayed by the egress gateway (up: guest to server).", "direction",
	       egress_directions, s->egress_bytes),
	    ONE("airlock_egress_up", "gauge", "Whether the egress gateway is running.", s->egress_up),
	    ONE("airlock_egress_restarts_total", "counter", "Restarts of the egress gateway after it died.",
	        s->egress_restarts),
	    ONE("airlock_rate_limited_total", "counter", "API requests refused (429) because a tenant passed its rate.",
	        s->rate_limited),
	    ONE("airlock_starts_active", "gauge", "Sandbox boots and restores running now.", s->starts_active),
	    ONE("airlock_starts_waiting", "gauge", "Creates waiting for a start slot (--max-concurrent-starts).",
	        s->starts_waiting),
	    ONE("airlock_start_waits_total", "counter", "Creates that had to wait for a start slot.", s->start_waits),
	    ONE("airlock_start_rejections_total", "counter",
	        "Creates refused (503) after waiting for a start slot too long.", s->start_rejections),
	    ONE("airlock_exec_output_truncated_total", "counter",
	        "Collected execs whose output passed max_output_bytes.", s->exec_truncated),
	    BY("airlock_output_dropped_bytes_total",
	       "Guest output dropped by a bounded buffer (exec: past max_output_bytes; log: out of a process's kept "
	       "log; console: rotated away).",
	       "kind", dropped_kinds, s->output_dropped),
	    ONE("airlock_console_rotations_total", "counter",
	        "Rotations of a sandbox's console log (it keeps one old file).", s->console_rotations),
	    BY("airlock_watchdog_kills_total", "VMMs the watchdog killed, by what stopped answering.", "unresponsive",
	       watchdog_whats, s->watchdog_kills),
	    ONE("airlock_watchdog_reprieves_total", "counter",
	        "Silent VMMs the watchdog did not kill at --watchdog-s because they had been waiting for a CPU (an "
	        "overloaded host, or their CPU quota).",
	        s->watchdog_reprieves),
	    BY("airlock_auth_failures_total", "Failed authentications on the TCP listener (401), by reason.", "reason",
	       auth_reasons, s->auth_failures),
	    ONE("airlock_auth_failures_unrecorded_total", "counter",
	        "Failed authentications counted in an auth.failure summary instead of an event of their own.",
	        s->auth_unrecorded),
	    BY("airlock_api_connections_shed_total", "Idle API connections closed to make room for a new one.",
	       "listener", api_listeners, s->api_shed),
	    BY("airlock_api_connections_refused_total",
	       "API connections refused: every connection in the way was busy.", "listener", api_listeners,
	       s->api_refused),
	    ONE("airlock_netns_pool_ready", "gauge",
	        "Network namespaces made ahead, ready for a create (--netns-pool).", s->netns_pool_ready),
	    ONE("airlock_proxy_connections", "gauge", "Client connections of the port proxy open now.",
	        s->proxy_connections),
	    BY("airlock_netns_takes_total", "Network namespaces of starting sandboxes: from the pool or made then.",
	       "from", netns_froms, s->netns_takes),
	};
	for (size_t i = 0; i < ARRAY_SIZE(families); i++)
		render_family(f, &families[i]);
}

static void render_accel(FILE *f, const struct metrics *s)
{
	put_header(f, "airlock_accel_info", "gauge",
	           "The accelerator of QEMU's guests (kvm, tcg; probing while its probe runs), its CPU model and why "
	           "it was chosen.");
	fputs("airlock_accel_info{accel=\"", f);
	put_label_value(f, s->accel);
	fputs("\",cpu=\"", f);
	put_label_value(f, s->accel_cpu);
	fputs("\",reason=\"", f);
	put_label_value(f, s->accel_reason);
	fputs("\"} 1\n", f);
	put_header(f, "airlock_accel_probe_seconds", "gauge", "How long the accelerator's probe took (0: none ran).");
	fprintf(f, "airlock_accel_probe_seconds %.3f\n", (double)s->accel_probe_ms / 1000.0);
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
	render_sandboxes(f, state_counts, n_states, state_names);
	render_histogram(f, &snap.create);
	render_histogram(f, &snap.exec);
	render_requests(f, &snap);
	render_family(f, &(struct family)ONE("airlock_boot_failures_total", "counter",
	                                     "Sandboxes whose VM did not come up.", snap.boot_failures));
	render_egress_decisions(f, &snap);
	pthread_mutex_lock(&lock);
	render_egress_suppressed(f);
	pthread_mutex_unlock(&lock);
	render_families(f, &snap);
	if (snap.accel[0])
		render_accel(f, &snap);
	if (fclose(f) != 0 || !buf)
		abort();
	return buf;
}
