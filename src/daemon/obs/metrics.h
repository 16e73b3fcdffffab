/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Daemon-wide Prometheus metrics for GET /metrics (docs/api.md, "Prometheus
 * metrics"), rendered in text exposition format 0.0.4:
 *
 *   airlock_sandboxes{state="…"}                 gauge (counts given to render)
 *   airlock_sandbox_create_seconds               histogram
 *   airlock_exec_seconds                         histogram
 *   airlock_api_requests_total{code="<HTTP status>"}  counter
 *   airlock_errors_total{code="<al_error code name>"} counter
 *   airlock_boot_failures_total                  counter
 *   airlock_egress_decisions_total{proto="http|tls|tcp|dns",verdict="allow|deny"} counter
 *   airlock_egress_bytes_total{direction="up|down"} counter
 *   airlock_egress_up                            gauge (the gateway is running)
 *   airlock_egress_restarts_total                counter
 *   airlock_egress_events_suppressed_total{sandbox,tenant,kind="aggregated|dropped"}  counter
 *       (gateway records folded into counted records, or dropped; one series
 *       per live sandbox that had any, at most METRICS_EGRESS_SANDBOXES_MAX,
 *       then sandbox="" for the rest)
 *   airlock_rate_limited_total                   counter (429: a tenant over its request rate)
 *   airlock_starts_active, airlock_starts_waiting    gauges (boots/restores running, waiting for a slot)
 *   airlock_start_waits_total, airlock_start_rejections_total  counters (waited; 503 after waiting)
 *   airlock_exec_output_truncated_total          counter (collected execs past max_output_bytes)
 *   airlock_output_dropped_bytes_total{kind="exec|log|console"}  counter
 *   airlock_console_rotations_total              counter
 *   airlock_watchdog_kills_total{unresponsive="vmm|agent"}  counter
 *   airlock_watchdog_reprieves_total             counter (silent, but waiting for a CPU: not killed yet)
 *   airlock_auth_failures_total{reason="missing|malformed|unknown|revoked"}  counter (every 401)
 *   airlock_auth_failures_unrecorded_total       counter (401s folded into an auth.failure summary)
 *   airlock_api_connections_shed_total{listener="unix|tcp"}    counter (idle, closed to make room)
 *   airlock_api_connections_refused_total{listener="unix|tcp"} counter (every slot busy)
 *   airlock_proxy_connections                    gauge (client connections of the port proxy)
 *   airlock_proxy_requests_total{code="<HTTP status>"}  counter (answers of the port proxy)
 *
 * All functions are thread-safe and never fail; state is process-global and
 * needs no initialisation. Label sets are bounded: HTTP statuses 100..599,
 * the names of enum al_error_code, and the fixed lists above.
 */
#ifndef AIRLOCK_METRICS_H
#define AIRLOCK_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Seconds from POST /v1/sandboxes to running (or failure). Negative or NaN
 * values count as 0. */
void metrics_observe_create(double seconds);
/* Seconds of one exec, start to exit. */
void metrics_observe_exec(double seconds);
/* One API response with this status; statuses outside 100..599 are ignored. */
void metrics_count_request(int http_status);
/* One error response, by al_error_code_name() (e.g. "invalid_argument");
 * a name that is not one of those is ignored (bounded label set). */
void metrics_count_error(const char *code);
void metrics_count_boot_failure(void);

/* One decision of the egress gateway; other proto/verdict values are ignored
 * (bounded label set). */
void metrics_count_egress_decision(const char *proto, const char *verdict);
/* n of them at once (a counted record of the gateway stands for n). */
void metrics_add_egress_decisions(const char *proto, const char *verdict, uint64_t n);
void metrics_add_egress_bytes(uint64_t up, uint64_t down);
void metrics_set_egress_up(bool up);
void metrics_count_egress_restart(void);
/* A sandbox's gateway records that reached the event log only inside a
 * counted record (aggregated), or not at all (dropped: the gateway's queue
 * was full for it; counted in a network.dropped record). */
#define METRICS_EGRESS_SANDBOXES_MAX 1024
void metrics_add_egress_suppressed(const char *sandbox, const char *tenant, uint64_t aggregated, uint64_t dropped);
/* The sandbox is gone: its series go (their counts stay in the sandbox="" series). */
void metrics_forget_egress_sandbox(const char *sandbox);

/* Limits (docs/api.md, "Limits"). */
void metrics_count_rate_limited(void);
void metrics_set_starts(unsigned active, unsigned waiting);
void metrics_count_start_waited(void);
void metrics_count_start_rejected(void);
/* A collected exec whose output passed max_output_bytes by dropped bytes. */
void metrics_count_exec_truncated(uint64_t dropped);
/* Output that fell out of a bounded buffer: "log" (a process's kept log),
 * "console" (the rotated console log); other kinds are ignored. */
void metrics_add_output_dropped(const char *kind, uint64_t bytes);
void metrics_count_console_rotation(void);
/* The watchdog killed a VMM: what stopped answering, "vmm" or "agent". */
void metrics_count_watchdog_kill(const char *unresponsive);
void metrics_count_watchdog_reprieve(void);
/* A failed authentication on the TCP listener, by reason ("missing",
 * "malformed", "unknown", "revoked"; others are ignored), and one that was
 * not recorded as an event of its own (it is in a summary). */
void metrics_count_auth_failure(const char *reason);
void metrics_count_auth_failure_unrecorded(void);
/* A connection to the "unix" or "tcp" listener was "shed" (idle, closed to
 * make room) or "refused" (every slot in the way busy); others are ignored. */
void metrics_count_api_connection(const char *listener, const char *what);
/* The port proxy (api/proxy-server.c): one answer with this status (its own
 * or the guest's); a client connection opened or closed. */
void metrics_count_proxy_request(int http_status);
void metrics_proxy_connection(bool open);

/* The network namespace pool (netns.h): how many are ready; each start's
 * namespace, from the pool or made then. */
void metrics_set_netns_pool(unsigned ready);
/* The accelerator of the daemon (accel.h), for airlock_accel_info. */
void metrics_set_accel(const char *accel, const char *cpu, const char *reason, uint64_t probe_ms);
void metrics_count_netns_take(bool pooled);

/* The whole exposition, NUL-terminated, for the caller to free. state_counts[i]
 * is the number of sandboxes in state state_names[i] (e.g. sandbox_state_name()
 * for each enum sandbox_state). n_states may be 0. */
char *metrics_render(const unsigned state_counts[], size_t n_states, const char *const state_names[]);

/* Zeroes everything (tests). */
void metrics_reset(void);

#endif
