/* SPDX-License-Identifier: Apache-2.0 */
/* Requests for one sandbox: forwarded to the node its row names; answered
 * from its row when it is on no node (paused into the shared store, or
 * lost); a resume of such a sandbox adopted by a node first. */
#include "front.h"
#include "json-cleanup.h"
#include "util.h"

#define STATE_MAX 31
#define ANSWER_MAX (1u << 20)

struct sandbox_row {
	bool on_node;
	char node[CLUSTER_NODE_NAME_MAX + 1];
	char url[CLUSTER_NODE_URL_MAX + 1];
	char proxy_url[CLUSTER_NODE_URL_MAX + 1]; /* its ports proxy; "" without one */
	char tenant[FRONT_TENANT_MAX + 1];
	char state[STATE_MAX + 1];
	char template_name[64];
	long long vcpus, memory_mib;
	bool has_snapshot;
	json_t *record;
};

static void sandbox_row_release(struct sandbox_row *r)
{
	json_decref(r->record);
	r->record = NULL;
}

/* -ENOENT when there is no row. */
static int row_read(const char *id, struct sandbox_row *ret, struct al_error *err)
{
	const char *params[] = {id};
	cleanup_pgresult PGresult *res = NULL;
	int r = front_pg_exec("read a sandbox's row",
	                      "SELECT s.node, s.tenant, s.state, s.record, s.snapshot IS NOT NULL, s.template, s.vcpus,"
	                      " s.memory_mib, coalesce(n.url, ''), coalesce(n.proxy_url, '') FROM airlock_sandboxes s"
	                      " LEFT JOIN airlock_nodes n ON n.name = s.node WHERE s.id = $1",
	                      1, params, &res, err);
	if (r < 0)
		return r;
	if (PQntuples(res) != 1)
		return -ENOENT;
	struct sandbox_row row = {.on_node = !PQgetisnull(res, 0, 0)};
	strlcpy_al(row.node, PQgetvalue(res, 0, 0), sizeof(row.node));
	strlcpy_al(row.tenant, PQgetvalue(res, 0, 1), sizeof(row.tenant));
	strlcpy_al(row.state, PQgetvalue(res, 0, 2), sizeof(row.state));
	row.record = json_loads(PQgetvalue(res, 0, 3), 0, NULL);
	row.has_snapshot = PQgetvalue(res, 0, 4)[0] == 't';
	strlcpy_al(row.template_name, PQgetvalue(res, 0, 5), sizeof(row.template_name));
	row.vcpus = strtoll(PQgetvalue(res, 0, 6), NULL, 10);
	row.memory_mib = strtoll(PQgetvalue(res, 0, 7), NULL, 10);
	strlcpy_al(row.url, PQgetvalue(res, 0, 8), sizeof(row.url));
	strlcpy_al(row.proxy_url, PQgetvalue(res, 0, 9), sizeof(row.proxy_url));
	if (!row.record)
		row.record = json_object();
	*ret = row;
	return 0;
}

static void forward_to(struct front_conn *c, const char *url, const char *node, const char *id, bool delegate)
{
	struct front_forward f = {
	    .url = url, .delegate = delegate, .ws_protocol = c->ws_rewrite ? c->ws_protocol : NULL};
	if (url[0] && front_forward(c, &f) == 0)
		return;
	if (id)
		front_reply_errorf(
		    c, AL_ERR_UNAVAILABLE,
		    "node %s, which holds sandbox %s, cannot be reached; if it is lost its sandboxes are "
		    "recovered on other nodes shortly: retry",
		    node, id);
	else
		front_reply_errorf(c, AL_ERR_UNAVAILABLE, "node %s cannot be reached: retry", node);
}

/* E2B's ListedSandbox of a sandbox on no node, from its record. */
json_t *front_e2b_listed(const json_t *rec, const char *state)
{
	const char *tpl = json_string_value(json_object_get(rec, "template"));
	const char *created = json_string_value(json_object_get(rec, "created_at"));
	json_t *meta = json_object_get(rec, "metadata");
	return json_pack("{s:s?, s:s?, s:s?, s:s, s:I, s:I, s:I, s:s?, s:s?, s:O, s:s, s:[]}", "sandboxID",
	                 json_string_value(json_object_get(rec, "id")), "templateID", tpl, "alias", tpl, "clientID",
	                 "airlock", "cpuCount", json_integer_value(json_object_get(rec, "vcpus")), "memoryMB",
	                 json_integer_value(json_object_get(rec, "memory_mib")), "diskSizeMB",
	                 json_integer_value(json_object_get(rec, "disk_mib")), "startedAt", created, "endAt", created,
	                 "metadata", json_is_object(meta) ? meta : json_object(), "state", state, "volumeMounts");
}

static bool is_resume(const struct front_conn *c, const char *rest)
{
	if (strcmp(c->method, "POST"))
		return false;
	if (!strcmp(rest, "/resume"))
		return true;
	return c->kind == FRONT_E2B_CONTROL && !strcmp(rest, "/connect");
}

/* A resume of a sandbox on no node: a node adopts it, then the request is
 * answered (native: the adopt's answer) or forwarded to that node (E2B). */
static void resume_adopt(struct front_conn *c, const char *id, const struct sandbox_row *row)
{
	struct front_place p = {
	    .template_name = row->template_name, .vcpus = row->vcpus, .memory_mib = row->memory_mib};
	char url[CLUSTER_NODE_URL_MAX + 1], node[CLUSTER_NODE_NAME_MAX + 1];
	struct front_answer a = {0};
	struct al_error err = {0};
	int r = front_adopt(id, &p, url, node, &a, &err);
	if (r == -EBUSY) {
		struct sandbox_row now = {0};
		if (row_read(id, &now, &err) == 0 && now.on_node)
			forward_to(c, now.url, now.node, id, true);
		else
			front_reply_error(c, &err);
		sandbox_row_release(&now);
		return;
	}
	if (r < 0) {
		front_reply_error(c, &err);
		return;
	}
	if (c->kind == FRONT_NATIVE)
		front_reply_body(c, a.status, a.body, a.len);
	else
		forward_to(c, url, node, id, true);
	front_answer_release(&a);
}

static void row_delete(struct front_conn *c, const char *id)
{
	const char *params[] = {id};
	cleanup_pgresult PGresult *res = NULL;
	struct al_error err = {0};
	if (front_pg_exec("delete a sandbox on no node",
	                  "UPDATE airlock_sandboxes SET state = 'deleted', node_epoch = NULL, updated_at = now(),"
	                  " record = jsonb_set(record, '{state}', '\"deleted\"') WHERE id = $1 AND node IS NULL"
	                  " RETURNING record",
	                  1, params, &res, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	if (PQntuples(res) != 1) { /* a node took it meanwhile: it deletes it */
		front_sandbox_request(c, id);
		return;
	}
	if (c->kind != FRONT_NATIVE) {
		front_reply_empty(c, 204);
		return;
	}
	const char *rec = PQgetvalue(res, 0, 0);
	front_reply_body(c, 200, rec, strlen(rec));
}

/* A sandbox on no node: what can be answered without one. */
static void offline_request(struct front_conn *c, const char *id, const char *rest, const struct sandbox_row *row)
{
	bool deleted = !strcmp(row->state, "deleted"), lost = !strcmp(row->state, "lost");
	if (c->kind != FRONT_NATIVE && deleted) {
		front_reply_errorf(c, AL_ERR_NOT_FOUND, "no sandbox with id \"%s\"", id);
	} else if (!strcmp(c->method, "GET") && !rest[0]) {
		json_t *o = c->kind == FRONT_NATIVE ? json_incref(row->record)
		                                    : front_e2b_listed(row->record, lost ? "lost" : "paused");
		front_reply_json(c, 200, o);
	} else if (!strcmp(c->method, "DELETE") && !rest[0]) {
		row_delete(c, id);
	} else if (deleted) {
		front_reply_errorf(c, AL_ERR_CONFLICT, "sandbox %s is deleted", id);
	} else if (lost || !row->has_snapshot) {
		front_reply_errorf(c, AL_ERR_CONFLICT, "sandbox %s was lost with its node and had no snapshot", id);
	} else if (is_resume(c, rest)) {
		resume_adopt(c, id, row);
	} else {
		front_reply_errorf(c, AL_ERR_CONFLICT, "sandbox %s is paused: resume it first", id);
	}
}

void front_sandbox_request(struct front_conn *c, const char *id)
{
	struct al_error err = {0};
	struct sandbox_row row __attribute__((cleanup(sandbox_row_release))) = {0};
	int r = front_sandbox_id_valid(id, strlen(id)) ? row_read(id, &row, &err) : -ENOENT;
	/* SECURITY: another tenant's sandbox is answered as one that does not exist. */
	if (r == -ENOENT || (r == 0 && !c->operator&& strcmp(row.tenant, c->tenant))) {
		front_reply_errorf(c, AL_ERR_NOT_FOUND, "no sandbox with id \"%.64s\"", id);
		return;
	}
	if (r < 0) {
		front_reply_error(c, &err);
		return;
	}
	if (row.on_node) {
		forward_to(c, row.url, row.node, id, true);
		return;
	}
	const char *rest = strstr(c->path, id) + strlen(id);
	offline_request(c, id, rest, &row);
}

/* Adopts a sandbox on no node whose auto_resume is on (traffic to its ports
 * resumes it); the row read again afterwards. */
static void auto_resume(const char *id, struct sandbox_row *row)
{
	struct al_error err = {0};
	struct front_place p = {row->template_name, row->vcpus, row->memory_mib};
	struct front_answer a = {0};
	char url[CLUSTER_NODE_URL_MAX + 1], node[CLUSTER_NODE_NAME_MAX + 1];
	front_adopt(id, &p, url, node, &a, &err);
	front_answer_release(&a);
	sandbox_row_release(row);
	if (row_read(id, row, &err) < 0)
		row->on_node = false;
}

/* Ports (the node's ports proxy) and envd (its API): the node checks the
 * credential the request carries. */
static void passthrough_request(struct front_conn *c, const char *id, bool ports)
{
	struct al_error err = {0};
	struct sandbox_row row __attribute__((cleanup(sandbox_row_release))) = {0};
	int r = row_read(id, &row, &err);
	if (r == -ENOENT || (r == 0 && !strcmp(row.state, "deleted"))) {
		front_reply_errorf(c, AL_ERR_NOT_FOUND, "no sandbox with id \"%.64s\"", id);
		return;
	}
	if (r < 0) {
		front_reply_error(c, &err);
		return;
	}
	if (!row.on_node && json_is_true(json_object_get(row.record, "auto_resume")) && row.has_snapshot)
		auto_resume(id, &row);
	if (!row.on_node) {
		front_reply_errorf(c, c->kind == FRONT_E2B_ENVD ? AL_ERR_GUEST : AL_ERR_CONFLICT,
		                   "sandbox %s is paused: resume it first (or set its auto_resume)", id);
		return;
	}
	if (ports && !row.proxy_url[0]) {
		front_reply_errorf(c, AL_ERR_UNAVAILABLE,
		                   "node %s, which holds sandbox %s, runs no ports proxy (airlockd --proxy-listen)",
		                   row.node, id);
		return;
	}
	forward_to(c, ports ? row.proxy_url : row.url, row.node, id, false);
}

void front_proxy_request(struct front_conn *c, const char *id)
{
	passthrough_request(c, id, true);
}

void front_envd_request(struct front_conn *c, const char *id)
{
	passthrough_request(c, id, false);
}

void front_any_node_request(struct front_conn *c)
{
	struct al_error err = {0};
	cleanup_free struct front_node *v = NULL;
	size_t n = 0;
	if (front_nodes_up(&v, &n, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	if (n == 0) {
		front_reply_errorf(c, AL_ERR_UNAVAILABLE, "no node of the cluster is up");
		return;
	}
	size_t pick = (size_t)(now_ms_monotonic() % n);
	forward_to(c, v[pick].url, v[pick].name, NULL, c->operator|| c->tenant[0]);
}
