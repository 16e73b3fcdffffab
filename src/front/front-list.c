/* SPDX-License-Identifier: Apache-2.0 */
/* Lists the cluster answers as one: the same request (principal, query)
 * sent to every node that is up, their arrays merged, plus what only the
 * index knows (sandboxes on no node, the cluster's own events). A node
 * that does not answer is left out; a node's refusal of the request (a bad
 * query) is the answer, since every node would refuse it alike. */
#include <pthread.h>

#include "front.h"
#include "json-cleanup.h"
#include "util.h"

#define EVENTS_MAX 10000   /* lines of a merged GET /v1/events: the newest */
#define E2B_LIST_LIMIT 100 /* E2B's largest page, and its default */

/* Calls fn(json, ctx) with each node's parsed answer to the client's
 * request. 0, or 1 when a node's refusal was answered. */
static int fan_out(struct front_conn *c, bool json_lines, void (*fn)(json_t *j, void *ctx), void *ctx)
{
	struct al_error err = {0};
	cleanup_free struct front_node *v = NULL;
	size_t n = 0;
	if (front_nodes_up(&v, &n, &err) < 0) {
		front_reply_error(c, &err);
		return 1;
	}
	cleanup_free char *target = xasprintf("%s%s%s", c->path, c->query[0] ? "?" : "", c->query);
	for (size_t i = 0; i < n; i++) {
		struct front_answer a = {0};
		int r = front_node_call(v[i].url, "GET", target, front_principal_tenant(c), NULL, FRONT_CALL_TIMEOUT_MS,
		                        FRONT_LIST_BODY_MAX, &a);
		if (r < 0) {
			fprintf(stderr, "airlock-api: %s left out of %s: %s\n", v[i].name, c->path, strerror(-r));
			continue;
		}
		if (a.status != 200) {
			front_reply_body(c, a.status, a.body, a.len);
			front_answer_release(&a);
			return 1;
		}
		for (char *line = a.body, *next; line && *line; line = next) {
			next = json_lines ? strchr(line, '\n') : NULL;
			if (next)
				*next++ = '\0';
			json_t *j = json_loads(line, 0, NULL);
			if (j)
				fn(j, ctx);
		}
		front_answer_release(&a);
	}
	return 0;
}

/* ------------------------------------------------------------ sorting and merging */

struct merge {
	const char *key;    /* the answer's array member; NULL: the answer is the array */
	const char *sort;   /* the member items are ordered by */
	bool desc;          /* newest first */
	const char *dedupe; /* items with the same value of this member count once; NULL: none */
	json_t *items;
};

static void merge_release(struct merge *m)
{
	json_decref(m->items);
}

static void merge_add(json_t *j, void *ctx)
{
	cleanup_json json_t *answer = j;
	struct merge *m = ctx;
	json_t *arr = m->key ? json_object_get(answer, m->key) : answer;
	size_t i;
	json_t *item;
	json_array_foreach (arr, i, item)
		json_array_append(m->items, item);
}

static const char *sort_key;
static bool sort_desc;

static int item_cmp(const void *a, const void *b)
{
	const char *x = json_string_value(json_object_get(*(json_t *const *)a, sort_key));
	const char *y = json_string_value(json_object_get(*(json_t *const *)b, sort_key));
	int r = strcmp(x ? x : "", y ? y : "");
	return sort_desc ? -r : r;
}

/* The items sorted (qsort under a lock: the comparison reads globals),
 * with duplicates of m->dedupe left out. */
static json_t *merge_finish(struct merge *m)
{
	static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;
	size_t n = json_array_size(m->items);
	cleanup_free json_t **v = xcalloc(n ? n : 1, sizeof(*v));
	for (size_t i = 0; i < n; i++)
		v[i] = json_array_get(m->items, i);
	pthread_mutex_lock(&sort_lock);
	sort_key = m->sort;
	sort_desc = m->desc;
	qsort(v, n, sizeof(*v), item_cmp);
	pthread_mutex_unlock(&sort_lock);
	json_t *out = json_array();
	cleanup_json json_t *seen = json_object();
	for (size_t i = 0; i < n; i++) {
		const char *d = m->dedupe ? json_string_value(json_object_get(v[i], m->dedupe)) : NULL;
		if (d && json_object_get(seen, d))
			continue;
		if (d)
			json_object_set_new(seen, d, json_true());
		json_array_append(out, v[i]);
	}
	return out;
}

/* ------------------------------------------------------------ sandboxes */

/* The rows of sandboxes on no node that a list shows (the caller's tenant's). */
static int offline_rows(struct front_conn *c, bool e2b, json_t *items, struct al_error *err)
{
	const char *params[] = {front_principal_tenant(c)};
	cleanup_pgresult PGresult *res = NULL;
	int r = front_pg_exec("list the sandboxes on no node",
	                      "SELECT record, state FROM airlock_sandboxes WHERE node IS NULL"
	                      " AND state IN ('paused', 'lost', 'recovering') AND ($1::text IS NULL OR tenant = $1)"
	                      " LIMIT 100000",
	                      1, params, &res, err);
	if (r < 0)
		return r;
	for (int i = 0; i < PQntuples(res); i++) {
		cleanup_json json_t *rec = json_loads(PQgetvalue(res, i, 0), 0, NULL);
		const char *state = PQgetvalue(res, i, 1);
		if (!json_is_object(rec) || (e2b && strcmp(state, "paused")))
			continue;
		json_array_append_new(items, e2b ? front_e2b_listed(rec, "paused") : json_incref(rec));
	}
	return 0;
}

/* The raw value of name in a query ("" when absent or too long). */
static void query_value(const char *query, const char *name, char *out, size_t size)
{
	size_t n = strlen(name);
	out[0] = '\0';
	for (const char *p = query; p && *p; p = strchr(p, '&'), p = p ? p + 1 : NULL) {
		size_t len = strcspn(p, "&");
		if (len > n && !strncmp(p, name, n) && p[n] == '=' && len - n - 1 < size) {
			memcpy(out, p + n + 1, len - n - 1);
			out[len - n - 1] = '\0';
		}
	}
}

/* Which rows on no node a list shows: native lists all (paused, lost,
 * recovering); E2B's v2 list the paused ones unless its state filter leaves
 * them out, its v1 list only running ones (E2B's v1 semantics). A metadata
 * filter is the nodes' to apply: rows on no node are then left out. */
static bool offline_wanted(const struct front_conn *c, bool e2b)
{
	if (!e2b)
		return true;
	char state[128];
	query_value(c->query, "state", state, sizeof(state));
	return !strcmp(c->path, "/e2b/v2/sandboxes") && (!state[0] || strstr(state, "paused")) &&
	       !strstr(c->query, "metadata=");
}

/* E2B's v2 page: at most limit (default E2B_LIST_LIMIT) of the merged items. */
static void e2b_page(const struct front_conn *c, json_t *arr)
{
	char limit[16];
	long n = E2B_LIST_LIMIT;
	query_value(c->query, "limit", limit, sizeof(limit));
	if (limit[0] && parse_int_range(limit, 1, E2B_LIST_LIMIT, &n) < 0)
		n = E2B_LIST_LIMIT;
	while (json_array_size(arr) > (size_t)n)
		json_array_remove(arr, json_array_size(arr) - 1);
}

void front_list_sandboxes(struct front_conn *c, bool e2b)
{
	struct merge m __attribute__((cleanup(merge_release))) = {.key = e2b ? NULL : "sandboxes",
	                                                          .sort = e2b ? "startedAt" : "created_at",
	                                                          .desc = !strstr(c->query, "order=asc"),
	                                                          .dedupe = e2b ? "sandboxID" : "id",
	                                                          .items = json_array()};
	if (fan_out(c, false, merge_add, &m))
		return;
	struct al_error err = {0};
	if (offline_wanted(c, e2b) && offline_rows(c, e2b, m.items, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	json_t *out = merge_finish(&m);
	if (e2b && !strcmp(c->path, "/e2b/v2/sandboxes"))
		e2b_page(c, out);
	front_reply_json(c, 200, e2b ? out : json_pack("{s:o}", "sandboxes", out));
}

void front_list_merged(struct front_conn *c, const char *key, const char *dedupe_field)
{
	struct merge m __attribute__((cleanup(merge_release))) = {.key = key,
	                                                          .sort = dedupe_field ? dedupe_field : "created_at",
	                                                          .desc = !dedupe_field,
	                                                          .dedupe = dedupe_field,
	                                                          .items = json_array()};
	if (fan_out(c, false, merge_add, &m))
		return;
	front_reply_json(c, 200, json_pack("{s:o}", key, merge_finish(&m)));
}

/* ------------------------------------------------------------ events */

static void event_add(json_t *j, void *ctx)
{
	json_array_append_new(ctx, j);
}

/* The cluster's own events (node.lost, sandbox.recovered ...), when the
 * client asked for no cursor of a node's. */
static int cluster_events(struct front_conn *c, json_t *items, struct al_error *err)
{
	const char *params[] = {front_principal_tenant(c)};
	cleanup_pgresult PGresult *res = NULL;
	int r =
	    front_pg_exec("read the cluster's events",
	                  "SELECT json_build_object('seq', seq, 'time', to_char(at AT TIME ZONE 'UTC',"
	                  " 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), 'type', type, 'tenant', tenant, 'sandbox', sandbox,"
	                  " 'node', node, 'data', data)::text FROM airlock_events"
	                  " WHERE $1::text IS NULL OR tenant = $1 ORDER BY seq DESC LIMIT 10000",
	                  1, params, &res, err);
	if (r < 0)
		return r;
	for (int i = 0; i < PQntuples(res); i++) {
		json_t *e = json_loads(PQgetvalue(res, i, 0), 0, NULL);
		if (e)
			json_array_append_new(items, e);
	}
	return 0;
}

static void events_write(struct front_conn *c, json_t *sorted)
{
	size_t n = json_array_size(sorted), from = n > EVENTS_MAX ? n - EVENTS_MAX : 0;
	size_t cap = 4096, len = 0;
	cleanup_free char *out = xmalloc(cap);
	for (size_t i = from; i < n; i++) {
		cleanup_free char *line = json_dumps(json_array_get(sorted, i), JSON_COMPACT);
		size_t l = line ? strlen(line) : 0;
		while (len + l + 2 > cap)
			out = xrealloc(out, cap *= 2);
		memcpy(out + len, line, l);
		len += l;
		out[len++] = '\n';
	}
	front_reply_raw(c, 200, "application/x-ndjson", out, len);
}

void front_list_events(struct front_conn *c)
{
	if (strstr(c->query, "follow=true") || strstr(c->query, "follow=1")) {
		front_reply_errorf(c, AL_ERR_INVALID_ARGUMENT,
		                   "GET /v1/events?follow=true is not available in cluster mode yet (docs/cluster.md): "
		                   "poll with since=, or follow one node's events on the node itself");
		return;
	}
	struct merge m __attribute__((cleanup(merge_release))) = {.sort = "time", .items = json_array()};
	if (fan_out(c, true, event_add, m.items))
		return;
	struct al_error err = {0};
	if (!strstr(c->query, "since=") && !strstr(c->query, "sandbox=") && cluster_events(c, m.items, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	cleanup_json json_t *sorted = merge_finish(&m);
	events_write(c, sorted);
}

/* ------------------------------------------------------------ one object, wherever it is */

void front_probe_nodes(struct front_conn *c)
{
	struct al_error err = {0};
	cleanup_free struct front_node *v = NULL;
	size_t n = 0;
	if (front_nodes_up(&v, &n, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	cleanup_free char *target = xasprintf("%s%s%s", c->path, c->query[0] ? "?" : "", c->query);
	for (size_t i = 0; i < n; i++) {
		struct front_answer a = {0};
		if (front_node_call(v[i].url, c->method, target, front_principal_tenant(c), NULL, FRONT_CALL_TIMEOUT_MS,
		                    FRONT_LIST_BODY_MAX, &a) < 0)
			continue;
		if (a.status != 404) {
			front_reply_body(c, a.status, a.body, a.len);
			front_answer_release(&a);
			return;
		}
		front_answer_release(&a);
	}
	front_reply_errorf(c, AL_ERR_NOT_FOUND, "no node of the cluster knows %s", c->path);
}
