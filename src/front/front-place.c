/* SPDX-License-Identifier: Apache-2.0 */
/* Creates: the tenant's cluster quota, then best-of-K placement on the nodes
 * that are up and have the template, the request forwarded to the best one
 * (the next one when it answers 503 or cannot be reached). Adopt: a sandbox
 * that is on no node restored on one (a resume, a recovery). */
#include "front.h"
#include "json-cleanup.h"
#include "util.h"

#define TEMPLATE_NAME_MAX 63
#define E2B_TEMPLATE_DEFAULT "base"
#define E2B_VCPUS 1
#define E2B_MEMORY_MIB 512
#define NATIVE_TEMPLATE_DEFAULT "minimal"
#define NATIVE_VCPUS_DEFAULT 1
#define NATIVE_MEMORY_MIB_DEFAULT 256
#define ANSWER_MAX (1u << 20)

static int node_cmp(const void *a, const void *b)
{
	const struct front_node *x = a, *y = b;
	if (x->memory_free_mib != y->memory_free_mib)
		return x->memory_free_mib > y->memory_free_mib ? -1 : 1;
	return x->sandboxes < y->sandboxes ? -1 : x->sandboxes > y->sandboxes;
}

int front_place_candidates(const struct front_place *p, struct front_node **ret, size_t *ret_n, struct al_error *err)
{
	const char *params[] = {p->template_name};
	cleanup_pgresult PGresult *res = NULL;
	int r = front_pg_exec("choose a node",
	                      /* What the nodes hold now, from their rows (written as a create
	                       * starts): not the last renewal's figures, which creates in a
	                       * row would all find the same. */
	                      "SELECT n.name, n.url, n.memory_total_mib - coalesce(u.memory_mib, 0),"
	                      " coalesce(u.sandboxes, 0) FROM airlock_nodes n LEFT JOIN (SELECT node,"
	                      " sum(memory_mib) AS memory_mib, count(*) AS sandboxes FROM airlock_sandboxes"
	                      " WHERE node IS NOT NULL AND state NOT IN ('deleted', 'error', 'stopped')"
	                      " GROUP BY node) u ON u.node = n.name WHERE n.state = 'up'"
	                      " AND n.lease_until > now() AND (n.templates @> jsonb_build_array($1::text)"
	                      " OR EXISTS (SELECT 1 FROM airlock_templates t WHERE t.name = $1))"
	                      " ORDER BY random() LIMIT 256",
	                      1, params, &res, err);
	if (r < 0)
		return r;
	size_t n = 0;
	struct front_node *v = front_nodes_from(res, &n);
	/* Best of K random nodes first; the others after them, best first. */
	size_t k = MIN(n, (size_t)(front_cfg.place_k ? front_cfg.place_k : 1));
	qsort(v, k, sizeof(*v), node_cmp);
	qsort(v + k, n - k, sizeof(*v), node_cmp);
	*ret = v;
	*ret_n = n;
	return 0;
}

static int quota_check(const char *tenant, const struct front_place *p, struct al_error *err)
{
	long long q[4];
	struct front_usage u;
	int r = front_tenant_quotas(tenant, q, err);
	if (r < 0 || (r = front_tenant_usage(tenant, &u, err)) < 0)
		return r;
	if (q[0] && u.sandboxes + 1 > q[0])
		return al_error_set(
		    err, AL_ERR_QUOTA, EDQUOT,
		    "tenant %s may run at most %lld sandboxes and has %lld; delete one or raise the quota "
		    "with PUT /v1/tenants/%s",
		    tenant, q[0], u.sandboxes, tenant);
	if (q[1] && u.vcpus + p->vcpus > q[1])
		return al_error_set(
		    err, AL_ERR_QUOTA, EDQUOT,
		    "tenant %s may use at most %lld vCPUs and uses %lld, so %lld more do not fit; delete a "
		    "sandbox, ask for fewer vCPUs or raise the quota with PUT /v1/tenants/%s",
		    tenant, q[1], u.vcpus, p->vcpus, tenant);
	if (q[2] && u.memory_mib + p->memory_mib > q[2])
		return al_error_set(
		    err, AL_ERR_QUOTA, EDQUOT,
		    "tenant %s may use at most %lld MiB of memory and uses %lld MiB, so %lld MiB more do "
		    "not fit; delete a sandbox, ask for less memory or raise the quota with PUT "
		    "/v1/tenants/%s",
		    tenant, q[2], u.memory_mib, p->memory_mib, tenant);
	return 0;
}

/* An integer member that the node will check: read only when it is one. */
static long long int_or(const json_t *j, const char *field, long long def)
{
	json_t *v = json_object_get(j, field);
	return json_is_integer(v) && json_integer_value(v) > 0 ? (long long)json_integer_value(v) : def;
}

/* What placement needs of a create's body: the node checks the rest. */
static int create_parse(const struct front_conn *c, const char *body, size_t len, json_t **ret_j,
                        struct front_place *ret, struct al_error *err)
{
	bool e2b = c->kind == FRONT_E2B_CONTROL;
	json_error_t jerr;
	json_t *j = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr) : json_object();
	*ret_j = j;
	if (!j)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "request body is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
		                    jerr.column);
	if (!json_is_object(j))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "request body must be a JSON object");
	const char *field = e2b ? "templateID" : "template";
	json_t *t = json_object_get(j, field);
	ret->template_name = e2b ? E2B_TEMPLATE_DEFAULT : NATIVE_TEMPLATE_DEFAULT;
	if (t && !json_is_null(t)) {
		const char *name = json_string_value(t);
		if (!name || strlen(name) != json_string_length(t) || !name_valid(name, TEMPLATE_NAME_MAX))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "%s: must be an installed template name ([a-z0-9][a-z0-9_-]{0,62})", field);
		ret->template_name = name;
	}
	ret->vcpus = e2b ? E2B_VCPUS : int_or(j, "vcpus", NATIVE_VCPUS_DEFAULT);
	ret->memory_mib = e2b ? E2B_MEMORY_MIB : int_or(j, "memory_mib", NATIVE_MEMORY_MIB_DEFAULT);
	return 0;
}

/* The tenant a create is for: the token's, or for the operator the body's
 * "tenant" (default "default"; the node checks it). */
static const char *create_tenant(const struct front_conn *c, const json_t *j)
{
	if (!c->operator)
		return c->tenant;
	const char *t = json_string_value(json_object_get(j, "tenant"));
	return t && front_tenant_name_valid(t) ? t : "default";
}

/* The node that holds snapshot id (a restore is made there): 0 with its
 * template and size, -ENOENT when no node knows it. */
static int snapshot_node(const struct front_conn *c, const char *id, struct front_node *ret_node,
                         struct front_place *ret, json_t **ret_snap, struct al_error *err)
{
	struct front_node *nodes = NULL;
	size_t n = 0;
	int r = front_nodes_up(&nodes, &n, err);
	if (r < 0)
		return r;
	cleanup_free char *target = xasprintf("/v1/snapshots/%s", id);
	r = -ENOENT;
	for (size_t i = 0; i < n && r == -ENOENT; i++) {
		struct front_answer a = {0};
		if (front_node_call(nodes[i].url, "GET", target, front_principal_tenant(c), NULL, FRONT_CALL_TIMEOUT_MS,
		                    ANSWER_MAX, &a) == 0 &&
		    a.status == 200) {
			json_t *s = json_loads(a.body, 0, NULL);
			if (json_is_object(s)) {
				*ret_node = nodes[i];
				ret->template_name = json_string_value(json_object_get(s, "template"));
				ret->vcpus = int_or(s, "vcpus", 1);
				ret->memory_mib = int_or(s, "memory_mib", 0);
				*ret_snap = s;
				r = ret->template_name ? 0 : -ENOENT;
			} else {
				json_decref(s);
			}
		}
		front_answer_release(&a);
	}
	free(nodes);
	return r;
}

/* Forwards the create to each candidate in turn. */
static void create_forward(struct front_conn *c, const struct front_node *v, size_t n, const char *body, size_t len,
                           const char *template_name)
{
	for (size_t i = 0; i < n; i++) {
		struct front_forward f = {
		    .url = v[i].url, .body = body, .body_len = len, .delegate = true, .retry_503 = true};
		if (front_forward(c, &f) == 0)
			return;
	}
	front_reply_errorf(c, AL_ERR_UNAVAILABLE,
	                   "no node of the cluster can take a sandbox of template %s now (%zu up with it; each was "
	                   "busy or unreachable); retry later, or add nodes",
	                   template_name, n);
}

void front_create(struct front_conn *c)
{
	cleanup_free char *body = NULL;
	size_t len = 0;
	if (front_read_body(c, FRONT_BODY_MAX, &body, &len) < 0)
		return;
	struct al_error err = {0};
	struct front_place p = {0};
	cleanup_json json_t *j = NULL, *snap = NULL;
	if (create_parse(c, body, len, &j, &p, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	cleanup_free struct front_node *nodes = NULL;
	size_t n = 0;
	const char *snapshot = c->kind == FRONT_NATIVE ? json_string_value(json_object_get(j, "snapshot")) : NULL;
	int r = 0;
	if (snapshot) {
		nodes = xcalloc(1, sizeof(*nodes));
		n = 1;
		r = snapshot_node(c, snapshot, nodes, &p, &snap, &err);
		if (r == -ENOENT)
			r = al_error_set(&err, AL_ERR_NOT_FOUND, ENOENT, "no snapshot with id \"%.64s\"", snapshot);
	}
	if (r == 0)
		r = quota_check(create_tenant(c, j), &p, &err);
	if (r == 0 && !snapshot)
		r = front_place_candidates(&p, &nodes, &n, &err);
	if (r == 0 && n == 0)
		r = al_error_set(&err, AL_ERR_UNAVAILABLE, EAGAIN,
		                 "no node of the cluster is up with template %s; start a node that has it, or pick "
		                 "another template",
		                 p.template_name);
	if (r < 0) {
		front_reply_error(c, &err);
		return;
	}
	create_forward(c, nodes, n, body, len, p.template_name);
}

/* ------------------------------------------------------------ adopt */

int front_adopt(const char *id, const struct front_place *p, char ret_url[CLUSTER_NODE_URL_MAX + 1],
                char ret_node[CLUSTER_NODE_NAME_MAX + 1], struct front_answer *ret, struct al_error *err)
{
	cleanup_free struct front_node *v = NULL;
	size_t n = 0;
	int r = front_place_candidates(p, &v, &n, err);
	if (r < 0)
		return r;
	cleanup_free char *target = xasprintf("/v1/cluster/sandboxes/%s/adopt", id);
	al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN, "no node of the cluster is up with template %s",
	             p->template_name);
	for (size_t i = 0; i < n; i++) {
		struct front_answer a = {0};
		r = front_node_call(v[i].url, "POST", target, NULL, "{}", FRONT_ADOPT_TIMEOUT_MS, ANSWER_MAX, &a);
		if (r < 0) {
			al_error_set(err, AL_ERR_UNAVAILABLE, -r, "node %s could not be reached: %s", v[i].name,
			             strerror(-r));
			continue;
		}
		if (a.status >= 200 && a.status < 300) {
			strlcpy_al(ret_url, v[i].url, CLUSTER_NODE_URL_MAX + 1);
			strlcpy_al(ret_node, v[i].name, CLUSTER_NODE_NAME_MAX + 1);
			*ret = a;
			return 0;
		}
		al_error_set(err, a.status == 409 ? AL_ERR_CONFLICT : AL_ERR_UNAVAILABLE, EAGAIN,
		             "node %s refused to adopt %s (%d): %.300s", v[i].name, id, a.status, a.body);
		front_answer_release(&a);
		if (err->code == AL_ERR_CONFLICT)
			return -EBUSY;
	}
	return -EAGAIN;
}
