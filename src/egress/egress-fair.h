/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fair sharing of the egress gateway between sandboxes (issue 17, docs/egress.md
 * "Fair sharing"): plain data structures, no locks (the caller holds its own),
 * no I/O, so that they are tested alone (tests/unit/test-egress-fair.c).
 *
 * 1. A fair queue: work items (DNS lookups) queued per flow (a sandbox) and
 *    handed out round-robin between flows, each flow with a cap on its pending
 *    items (queued + running) and on its running ones, so that one flow's
 *    backlog of slow work never stands in front of another flow's item.
 * 2. An aggregator of repeated denials: below a burst per window every denial
 *    is its own record; past it, denials of the same kind are folded into one
 *    record per kind and window that says how many it stands for ("count").
 */
#ifndef AIRLOCK_EGRESS_FAIR_H
#define AIRLOCK_EGRESS_FAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* ------------------------------------------------------------ fair queue */

struct egress_fairq_item {
	struct egress_fairq_item *next;
};

struct egress_fairq_flow {
	struct egress_fairq_item *head, *tail;
	unsigned queued, running;
	bool in_ring;
	struct egress_fairq_flow *ring_next;
};

struct egress_fairq {
	struct egress_fairq_flow *ring_head, *ring_tail; /* flows with queued items, in service order */
	size_t queued;                                   /* items of every flow */
	size_t queued_max;
	unsigned flow_pending_max; /* queued + running, per flow */
	unsigned flow_running_max;
};

void egress_fairq_init(struct egress_fairq *q, size_t queued_max, unsigned flow_pending_max, unsigned flow_running_max);
/* Queues item for flow: 0, -EAGAIN (the flow has flow_pending_max items
 * queued or running) or -ENOSPC (queued_max items wait in all). */
int egress_fairq_push(struct egress_fairq *q, struct egress_fairq_flow *flow, struct egress_fairq_item *item);
/* The next item to run: the oldest of the first flow in service order that
 * runs fewer than flow_running_max items; that flow then goes to the end of
 * the order. NULL when no queued item may run now. The caller calls
 * egress_fairq_done() for the flow when the item has run. */
struct egress_fairq_item *egress_fairq_pop(struct egress_fairq *q, struct egress_fairq_flow **ret_flow);
void egress_fairq_done(struct egress_fairq *q, struct egress_fairq_flow *flow);

/* ------------------------------------------------------------ denials */

#define EGRESS_AGG_KEY_MAX 384
#define EGRESS_AGG_SLOTS 16 /* kinds folded at once per sandbox; more share one last slot */

struct egress_agg_slot {
	char key[EGRESS_AGG_KEY_MAX]; /* "" for the shared last slot */
	uint64_t first_ms;            /* monotonic: the first folded denial */
	uint64_t count;               /* denials folded (0: free) */
	json_t *sample;               /* the first folded record (a reference) */
};

struct egress_agg {
	uint64_t window_ms;
	unsigned burst; /* denials sent as their own records per window */
	uint64_t window_start_ms;
	unsigned sent;
	struct egress_agg_slot slots[EGRESS_AGG_SLOTS + 1];
	unsigned pending; /* slots with count > 0 */
};

void egress_agg_init(struct egress_agg *a, uint64_t window_ms, unsigned burst);
void egress_agg_release(struct egress_agg *a);

/* The kind of an event for aggregation in key: false when the event is not a
 * denial or failure (it is never folded). Kinds: type, verdict, proto, rule,
 * the host's last two labels (the zone; a random-label flood is one kind),
 * and the reason only for events without a host. */
bool egress_agg_key(const char *type, const json_t *data, char *key, size_t size);

/* A denial of kind key at now_ms: true when it is to be sent as its own
 * record; false when it was folded (msg's "data" is kept, referenced, if it
 * is the first of its slot). */
bool egress_agg_offer(struct egress_agg *a, const char *key, json_t *msg, uint64_t now_ms);

/* Hands each slot whose window is over at now_ms (every slot when all) to
 * emit: the first folded record with "count": N in its data (a new reference
 * for emit to keep or release), and frees the slot. Returns how many. */
size_t egress_agg_flush(struct egress_agg *a, uint64_t now_ms, bool all, void (*emit)(json_t *msg, void *arg),
                        void *arg);

#endif
