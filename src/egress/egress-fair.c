/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fair sharing of the gateway between sandboxes (egress-fair.h): the
 * round-robin queue of DNS lookups and the aggregation of repeated denials.
 */
#include "egress-fair.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

/* ------------------------------------------------------------ fair queue */

void egress_fairq_init(struct egress_fairq *q, size_t queued_max, unsigned flow_pending_max, unsigned flow_running_max)
{
	*q = (struct egress_fairq){
	    .queued_max = queued_max,
	    .flow_pending_max = flow_pending_max,
	    .flow_running_max = flow_running_max,
	};
}

static void ring_append(struct egress_fairq *q, struct egress_fairq_flow *flow)
{
	flow->ring_next = NULL;
	flow->in_ring = true;
	if (q->ring_tail)
		q->ring_tail->ring_next = flow;
	else
		q->ring_head = flow;
	q->ring_tail = flow;
}

int egress_fairq_push(struct egress_fairq *q, struct egress_fairq_flow *flow, struct egress_fairq_item *item)
{
	if (flow->queued + flow->running >= q->flow_pending_max)
		return -EAGAIN;
	if (q->queued >= q->queued_max)
		return -ENOSPC;
	item->next = NULL;
	if (flow->tail)
		flow->tail->next = item;
	else
		flow->head = item;
	flow->tail = item;
	flow->queued++;
	q->queued++;
	if (!flow->in_ring)
		ring_append(q, flow);
	return 0;
}

struct egress_fairq_item *egress_fairq_pop(struct egress_fairq *q, struct egress_fairq_flow **ret_flow)
{
	struct egress_fairq_flow *prev = NULL, *flow = q->ring_head;
	while (flow && flow->running >= q->flow_running_max) {
		prev = flow;
		flow = flow->ring_next;
	}
	if (!flow)
		return NULL;
	/* Out of the order; back at its end if it has more. */
	if (prev)
		prev->ring_next = flow->ring_next;
	else
		q->ring_head = flow->ring_next;
	if (q->ring_tail == flow)
		q->ring_tail = prev;
	flow->in_ring = false;
	flow->ring_next = NULL;

	struct egress_fairq_item *item = flow->head;
	flow->head = item->next;
	if (!flow->head)
		flow->tail = NULL;
	item->next = NULL;
	flow->queued--;
	flow->running++;
	q->queued--;
	if (flow->head)
		ring_append(q, flow);
	*ret_flow = flow;
	return item;
}

void egress_fairq_done(struct egress_fairq *q, struct egress_fairq_flow *flow)
{
	(void)q;
	if (flow->running > 0)
		flow->running--;
}

/* ------------------------------------------------------------ denials */

void egress_agg_init(struct egress_agg *a, uint64_t window_ms, unsigned burst)
{
	*a = (struct egress_agg){.window_ms = window_ms, .burst = burst};
}

void egress_agg_release(struct egress_agg *a)
{
	for (size_t i = 0; i < ARRAY_SIZE(a->slots); i++) {
		json_decref(a->slots[i].sample);
		a->slots[i] = (struct egress_agg_slot){0};
	}
	a->pending = 0;
}

static const char *str_or(const json_t *data, const char *key, const char *dflt)
{
	const char *s = json_string_value(json_object_get(data, key));
	return s ? s : dflt;
}

/* The last two labels of a host name ("b.example" of "a.b.example"); an IP
 * literal or a short name whole. */
static const char *host_zone(const char *host)
{
	const char *last = strrchr(host, '.');
	if (!last || strchr(host, ':'))
		return host;
	const char *p = last;
	while (p > host && p[-1] != '.')
		p--;
	return p > host ? p : host;
}

bool egress_agg_key(const char *type, const json_t *data, char *key, size_t size)
{
	const char *verdict = str_or(data, "verdict", "");
	bool failure = strcmp(type, "network.dns") == 0 && json_is_string(json_object_get(data, "reason"));
	if (strcmp(type, "network.deny") != 0 && strcmp(verdict, "deny") != 0 && !failure)
		return false;
	const char *host = json_string_value(json_object_get(data, "host"));
	int n = snprintf(key, size, "%s|%s|%s|%s|%s|%s", type, verdict, str_or(data, "proto", ""),
	                 str_or(data, "rule", ""), host ? host_zone(host) : "", host ? "" : str_or(data, "reason", ""));
	if (n < 0)
		return false;
	return true; /* a truncated key only merges kinds that share its start */
}

static struct egress_agg_slot *slot_for(struct egress_agg *a, const char *key)
{
	struct egress_agg_slot *free_slot = NULL;
	for (size_t i = 0; i < EGRESS_AGG_SLOTS; i++) {
		struct egress_agg_slot *s = &a->slots[i];
		if (s->count > 0 && strcmp(s->key, key) == 0)
			return s;
		if (!free_slot && s->count == 0)
			free_slot = s;
	}
	if (free_slot) {
		strlcpy_al(free_slot->key, key, sizeof(free_slot->key));
		return free_slot;
	}
	/* More kinds than slots (random zones): one shared slot for the rest. */
	return &a->slots[EGRESS_AGG_SLOTS];
}

bool egress_agg_offer(struct egress_agg *a, const char *key, json_t *msg, uint64_t now_ms)
{
	if (now_ms - a->window_start_ms >= a->window_ms) {
		a->window_start_ms = now_ms;
		a->sent = 0;
	}
	if (a->sent < a->burst) {
		a->sent++;
		return true;
	}
	struct egress_agg_slot *s = slot_for(a, key);
	if (s->count++ == 0) {
		s->first_ms = now_ms;
		s->sample = json_incref(msg);
		a->pending++;
	}
	return false;
}

size_t egress_agg_flush(struct egress_agg *a, uint64_t now_ms, bool all, void (*emit)(json_t *msg, void *arg),
                        void *arg)
{
	size_t n = 0;
	for (size_t i = 0; i < ARRAY_SIZE(a->slots); i++) {
		struct egress_agg_slot *s = &a->slots[i];
		if (s->count == 0 || (!all && now_ms - s->first_ms < a->window_ms))
			continue;
		json_t *msg = s->sample;
		json_t *data = json_object_get(msg, "data");
		if (json_is_object(data)) {
			json_object_set_new(data, "count", json_integer((json_int_t)s->count));
			if (i == EGRESS_AGG_SLOTS)
				json_object_set_new(data, "kinds", json_string("several"));
		}
		*s = (struct egress_agg_slot){0};
		a->pending--;
		emit(msg, arg);
		n++;
	}
	return n;
}
