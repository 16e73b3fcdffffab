/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The event bus (docs/api.md, "Events"): every lifecycle change, exec, token
 * change and failed authentication is appended to table `events` of the state
 * store's database, numbered by `seq` (strictly increasing, never reused), and
 * wakes the followers of GET /v1/events?follow=true.
 *
 * A follow handler loops:
 *
 *     uint64_t cursor = filter.since;
 *     for (;;) {
 *             json_t *batch; uint64_t last;
 *             if (events_read(&filter, cursor, 256, &batch, &last, &err) < 0) break;
 *             ... write each element of batch as one JSON line; json_decref(batch) ...
 *             cursor = last;
 *             int r = events_wait(cursor, now_ms_monotonic() + 15000);
 *             if (r == -ESHUTDOWN) break;   (-ETIMEDOUT: send nothing or a keep-alive, loop)
 *     }
 *
 * events_read() advances *ret_last_seq past events that did not match the
 * filter, so the loop never spins on them.
 *
 * The database keeps the newest EVENTS_KEEP_DEFAULT events; older ones are
 * deleted in batches (every EVENTS_PRUNE_EVERY_DEFAULT inserts), so the table
 * may briefly hold up to one batch more. One sandbox keeps at most
 * EVENTS_KEEP_PER_SANDBOX_DEFAULT of them (its oldest go first), so that its
 * flood cannot push out the events of every other sandbox (issue 17).
 */
#ifndef AIRLOCK_EVENTS_H
#define AIRLOCK_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "error.h"

struct store;

#define EVENTS_KEEP_DEFAULT 100000u
#define EVENTS_PRUNE_EVERY_DEFAULT 1000u
#define EVENTS_KEEP_PER_SANDBOX_DEFAULT 20000u /* a fifth of the log */
#define EVENTS_READ_MAX 1000u                  /* largest batch events_read() returns */
#define EVENT_TYPE_MAX 64
#define EVENT_SANDBOX_MAX 64

/* Creates the table if needed, prunes it, and starts accepting events.
 * The store must outlive events_shutdown(). May be called again after
 * events_shutdown() (tests do). */
int events_init(struct store *s, struct al_error *err);
/* Stops accepting events and detaches from the store: events_emit() drops
 * from now on, and every events_wait() (current and future) returns
 * -ESHUTDOWN. Call before store_close(). */
void events_shutdown(void);
/* Changes retention (keep the newest `keep` events; prune every
 * `prune_every` inserts). For tests and configuration; 0 keeps a value. */
void events_set_retention(size_t keep, size_t prune_every);
/* Changes one sandbox's share (the newest `keep_per_sandbox` events of a
 * sandbox are kept, as far as `keep` allows). 0 keeps the value. */
void events_set_sandbox_share(size_t keep_per_sandbox);

/* Appends an event. type is required ("sandbox.state", "exec.start", ...);
 * tenant and sandbox may be NULL; data (an object, or NULL for {}) is stolen.
 * Thread-safe; never fails the caller: an error is logged and the event is
 * dropped (also before events_init() and after events_shutdown()). */
void events_emit(const char *type, const char *tenant, const char *sandbox, json_t *data);

/* NULL / 0 fields match everything. type_prefix matches by string prefix
 * ("sandbox." matches "sandbox.state"); tenant and sandbox match exactly;
 * since is exclusive (the last seq the client has seen). The strings are
 * borrowed. */
struct event_filter {
	const char *sandbox;
	const char *type_prefix;
	const char *tenant;
	uint64_t since;
};

/*
 * Reads up to max (1..EVENTS_READ_MAX; larger is capped, 0 means the cap)
 * events with seq > MAX(after_seq, f->since) that match f, oldest first, as
 * a new JSON array of
 *   {"seq","time","type","tenant","sandbox","data"}
 * (tenant and sandbox null when absent). *ret_last_seq is the cursor for the
 * next call: the seq of the last event returned if the batch is full, else
 * the newest seq that existed when the read began (events that did not match
 * are skipped for good), never less than the starting point.
 */
int events_read(const struct event_filter *f, uint64_t after_seq, size_t max, json_t **ret_array,
                uint64_t *ret_last_seq, struct al_error *err);

/* Blocks until an event newer than after_seq exists (0, at once if one
 * already does), until deadline_ms on the now_ms_monotonic() clock passes
 * (-ETIMEDOUT), or until events_shutdown() (-ESHUTDOWN). */
int events_wait(uint64_t after_seq, uint64_t deadline_ms);

/* The newest seq emitted (0 if none). */
uint64_t events_last_seq(void);

/*
 * Validates the query parameters of GET /v1/events (each NULL when absent)
 * into *ret (whose strings point into the arguments) and *ret_follow:
 *   since   decimal u64
 *   type    1..EVENT_TYPE_MAX chars of [a-z._]
 *   sandbox 1..EVENT_SANDBOX_MAX chars of [A-Za-z0-9_-]
 *   follow  "true", "false", "1" or "0"
 * SECURITY: the values are client input; they reach SQL only as bound
 * parameters, but are checked here so that errors name the parameter. The
 * tenant field is left NULL: the handler sets it from the token.
 */
int event_filter_parse_query(const char *sandbox, const char *type, const char *since, const char *follow,
                             struct event_filter *ret, bool *ret_follow, struct al_error *err);

#endif
