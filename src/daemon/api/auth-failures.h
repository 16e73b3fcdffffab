/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What failed authentications on the TCP listener leave in the event log
 * (docs/api.md, "Limits"): bounded per client address and in all, so that
 * clients without a token cannot push the log's history out (it keeps the
 * newest 100,000 events), and nothing is lost: what is not recorded one by
 * one is counted and reported.
 *
 * For each failure the caller gives the client's address key (source), the
 * reason, and a fingerprint of what was sent (request line and credential):
 *
 *  - a failure with the same reason and fingerprint as the source's previous
 *    one, less than `summary_ms` after it, is a repeat (a client retrying the
 *    same bad request): it is folded into the source's count and takes
 *    nothing from its rate, so a retry loop does not hide what others at
 *    the same address (a NAT) do;
 *  - any other failure is recorded while the source's bucket and the bucket
 *    of all sources both allow it: `burst` at once, then `per_min` a minute
 *    (GCRA: exact integer arithmetic, no drift);
 *  - what was not recorded is counted by reason and reported as one summary
 *    per source: together with the source's next recorded failure, else by
 *    authfail_limiter_flush() once `summary_ms` passed since the source's
 *    last event. Summaries of the flush also take from the bucket of all
 *    sources (one that finds it empty waits for the next flush).
 *
 * The table keeps at most max_sources sources. When it is full, a source
 * with nothing to report and a full bucket is forgotten (the same as a new
 * one); when none can be, failures go to one shared source "*".
 */
#ifndef AIRLOCK_AUTH_FAILURES_H
#define AIRLOCK_AUTH_FAILURES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"

#define AUTHFAIL_SOURCE_MAX 63
#define AUTHFAIL_SOURCES_MAX 4096
#define AUTHFAIL_SUMMARY_MS 60000u
#define AUTHFAIL_OVERFLOW_SOURCE "*"
/* The bucket of all sources is this many times a source's. */
#define AUTHFAIL_TOTAL_FACTOR 10u

struct authfail_limits {
	unsigned per_min;    /* per source; 0: no limit (every failure is recorded) */
	unsigned burst;      /* per source, >= 1 */
	uint64_t summary_ms; /* how often a source's summary may come, > 0 */
};

/* Failures of one source that were not recorded one by one. */
struct authfail_summary {
	char source[AUTHFAIL_SOURCE_MAX + 1];
	uint64_t suppressed;                     /* > 0 */
	uint64_t by_reason[AUTH_FAILURE__COUNT]; /* sums to suppressed */
	enum auth_failure top;                   /* the most frequent reason */
};

struct authfail_limiter;

struct authfail_limiter *authfail_limiter_new(const struct authfail_limits *lim, size_t max_sources);
void authfail_limiter_free(struct authfail_limiter *l);

/* Thread-safe. One failed authentication at monotonic now_ms (> 0). true:
 * record it as its own event. When earlier failures of the source are to be
 * reported now, *ret_summary is filled (suppressed > 0; else it is zeroed):
 * the caller records it too. source longer than AUTHFAIL_SOURCE_MAX is cut. */
bool authfail_limiter_note(struct authfail_limiter *l, const char *source, enum auth_failure reason,
                           uint64_t fingerprint, uint64_t now_ms, struct authfail_summary *ret_summary);

/* Reports the summaries that are due at now_ms, or every pending one with
 * all (at shutdown, whatever the buckets say), through fn, called with the
 * limiter's lock held (fn must not call back into it). Returns how many. */
size_t authfail_limiter_flush(struct authfail_limiter *l, uint64_t now_ms, bool all,
                              void (*fn)(void *ctx, const struct authfail_summary *s), void *ctx);

/* A fingerprint of what a failed request sent (FNV-1a over the strings, each
 * with its terminating NUL; NULL counts as ""). Not a secret's hash: it is
 * kept only in memory, and a collision only folds two failures into one count. */
uint64_t authfail_fingerprint(const char *const parts[], size_t n);

#endif
