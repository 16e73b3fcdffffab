/* SPDX-License-Identifier: Apache-2.0 */
/* Which handler a request goes to: the ports proxy's forms and E2B's envd
 * (the node checks their credentials), /healthz, then every other route
 * after the client's token was checked. */
#include "front.h"
#include "json-cleanup.h"
#include "util.h"

#define PARAM_MAX 128

typedef void (*front_handler)(struct front_conn *c, const char *param);

struct front_route {
	const char *method, *pattern; /* pattern: one "{}" segment at most, or a trailing "*" */
	front_handler handler;
	bool operator_only;
};

static void h_create(struct front_conn *c, const char *p)
{
	(void)p;
	front_create(c);
}
static void h_list(struct front_conn *c, const char *p)
{
	(void)p;
	front_list_sandboxes(c, c->kind == FRONT_E2B_CONTROL);
}
static void h_snapshots(struct front_conn *c, const char *p)
{
	(void)p;
	front_list_merged(c, "snapshots", NULL);
}
static void h_templates(struct front_conn *c, const char *p)
{
	(void)p;
	front_list_merged(c, "templates", "name");
}
static void h_events(struct front_conn *c, const char *p)
{
	(void)p;
	front_list_events(c);
}
static void h_probe(struct front_conn *c, const char *p)
{
	(void)p;
	front_probe_nodes(c);
}
static void h_any(struct front_conn *c, const char *p)
{
	(void)p;
	front_any_node_request(c);
}
static void h_token_create(struct front_conn *c, const char *p)
{
	(void)p;
	front_auth_token_create(c);
}
static void h_token_list(struct front_conn *c, const char *p)
{
	(void)p;
	front_auth_token_list(c);
}
static void h_sandbox(struct front_conn *c, const char *id)
{
	front_sandbox_request(c, id);
}
static void h_not_clustered(struct front_conn *c, const char *p)
{
	(void)p;
	front_reply_errorf(c, AL_ERR_INVALID_ARGUMENT,
	                   "%s %s is not available in cluster mode yet (docs/cluster.md): use a node's own API",
	                   c->method, c->path);
}

static const struct front_route routes[] = {
    {"POST", "/v1/sandboxes", h_create, false},
    {"GET", "/v1/sandboxes", h_list, false},
    {"*", "/v1/sandboxes/{}*", h_sandbox, false},
    {"GET", "/v1/snapshots", h_snapshots, false},
    {"GET", "/v1/snapshots/{}", h_probe, false},
    {"DELETE", "/v1/snapshots/{}", h_probe, false},
    {"GET", "/v1/templates", h_templates, false},
    {"GET", "/v1/templates/{}", h_probe, false},
    /* A node builds or imports it and shares it through the store. */
    {"POST", "/v1/templates", h_any, false},
    {"POST", "/v1/templates/import", h_any, false},
    {"DELETE", "/v1/templates/{}", h_any, false},
    {"GET", "/v1/events", h_events, false},
    {"GET", "/v1/ca", h_any, false},
    {"POST", "/v1/tokens", h_token_create, true},
    {"GET", "/v1/tokens", h_token_list, true},
    {"DELETE", "/v1/tokens/{}", front_auth_token_revoke, true},
    {"PUT", "/v1/tenants/{}", front_auth_tenant_put, true},
    {"GET", "/v1/tenants/{}", front_auth_tenant_get, false},
    {"*", "/v1/secrets*", h_any, false}, /* a node keeps them in PostgreSQL (cluster-secrets.c) */
    {"*", "/v1/pools", h_not_clustered, false},
    {"GET", "/metrics", h_not_clustered, true},
    {"POST", "/e2b/v2/sandboxes", h_create, false},
    {"GET", "/e2b/v2/sandboxes", h_list, false},
    {"GET", "/e2b/sandboxes", h_list, false},
    {"*", "/e2b/sandboxes/{}*", h_sandbox, false},
    {"*", "/e2b/v2/sandboxes/{}*", h_sandbox, false},
    {"*", "/e2b/snapshots", h_any, false},
    {"*", "/e2b/templates/{}", h_any, false},
};

/* Matches path against pattern; the {} segment (1 to PARAM_MAX bytes) to param. */
static bool pattern_match(const char *pattern, const char *path, char param[PARAM_MAX + 1])
{
	const char *brace = strstr(pattern, "{}");
	size_t pre = brace ? (size_t)(brace - pattern) : strcspn(pattern, "*");
	if (strncmp(pattern, path, pre))
		return false;
	const char *rest = pattern + pre, *u = path + pre;
	if (brace) {
		size_t n = strcspn(u, "/");
		if (n == 0 || n > PARAM_MAX)
			return false;
		memcpy(param, u, n);
		param[n] = '\0';
		rest += 2;
		u += n;
	}
	if (*rest == '*')
		return *u == '\0' || *u == '/';
	return !strcmp(rest, u) || (u[0] == '/' && u[1] == '\0' && *rest == '\0');
}

bool front_path_is(const struct front_conn *c, const char *method, const char *path)
{
	return !strcmp(c->method, method) && !strcmp(c->path, path);
}

static void healthz(struct front_conn *c)
{
	struct al_error err = {0};
	cleanup_pgresult PGresult *res = NULL;
	if (front_pg_exec("count the nodes",
	                  "SELECT count(*) FROM airlock_nodes WHERE state = 'up' AND lease_until > now()", 0, NULL,
	                  &res, &err) < 0) {
		front_reply_error(c, &err);
		return;
	}
	json_int_t up = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	front_reply_json(c, 200, json_pack("{s:s, s:s, s:I}", "status", "ok", "role", "front", "nodes_up", up));
}

/* Requests whose credential the node checks (ports, envd), or none. */
static bool route_unauthenticated(struct front_conn *c)
{
	char host[FRONT_HOST_MAX + 1], id[FRONT_SANDBOX_ID_LEN + 1];
	if (front_head_value(&c->head, "Host", host, sizeof(host)) == 1 && front_proxy_host(host, id) == 0) {
		front_proxy_request(c, id);
		return true;
	}
	static const char path_form[] = "/sandbox/";
	const char *p = c->path + strlen(path_form);
	if (!strncmp(c->path, path_form, strlen(path_form)) && front_sandbox_id_valid(p, strcspn(p, "/"))) {
		memcpy(id, p, FRONT_SANDBOX_ID_LEN);
		id[FRONT_SANDBOX_ID_LEN] = '\0';
		front_proxy_request(c, id);
		return true;
	}
	if (!strcmp(c->path, "/healthz")) {
		if (strcmp(c->method, "GET"))
			front_reply_errorf(c, AL_ERR_METHOD, "%s is not allowed on /healthz (allowed: GET)", c->method);
		else
			healthz(c);
		return true;
	}
	if (!strcmp(c->path, "/ui") || !strncmp(c->path, "/ui/", 4)) {
		front_any_node_request(c);
		return true;
	}
	return false;
}

static void envd_request(struct front_conn *c)
{
	char id[FRONT_SANDBOX_ID_LEN + 2];
	if (front_head_value(&c->head, "E2b-Sandbox-Id", id, sizeof(id)) != 1 ||
	    !front_sandbox_id_valid(id, strlen(id))) {
		front_reply_errorf(c, AL_ERR_NOT_FOUND,
		                   "E2b-Sandbox-Id must name a sandbox (sb-…) of this cluster; set E2B_SANDBOX_URL to "
		                   "http://HOST:PORT/e2b/envd");
		return;
	}
	front_envd_request(c, id);
}

static void dispatch(struct front_conn *c)
{
	char param[PARAM_MAX + 1] = "", allowed[128] = "";
	size_t o = 0;
	for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
		if (!pattern_match(routes[i].pattern, c->path, param))
			continue;
		if (strcmp(routes[i].method, "*") && strcmp(routes[i].method, c->method)) {
			o += (size_t)snprintf(allowed + o, sizeof(allowed) - MIN(o, sizeof(allowed)), "%s%s",
			                      o ? ", " : "", routes[i].method);
			o = MIN(o, sizeof(allowed) - 1);
			continue;
		}
		if (routes[i].operator_only && !c->operator) {
			front_reply_errorf(c, AL_ERR_FORBIDDEN,
			                   "%s %s is for the operator: use the unix socket (tokens cannot do this)",
			                   c->method, routes[i].pattern);
			return;
		}
		routes[i].handler(c, param);
		return;
	}
	if (o)
		front_reply_errorf(c, AL_ERR_METHOD, "%s is not allowed on %s (allowed: %s)", c->method, c->path,
		                   allowed);
	else
		front_reply_errorf(c, AL_ERR_NOT_FOUND, "no such endpoint: %s %.200s (see docs/api.md)", c->method,
		                   c->path);
}

void front_route(struct front_conn *c)
{
	if (route_unauthenticated(c))
		return;
	if (c->kind != FRONT_NATIVE && c->operator) {
		front_reply_errorf(c, AL_ERR_NOT_FOUND,
		                   "E2B's API is served on the TCP listener (airlock-api --listen), not on the unix "
		                   "socket");
		return;
	}
	if (c->kind == FRONT_E2B_ENVD) {
		envd_request(c);
		return;
	}
	if (!c->operator&& front_authenticate(c) < 0)
		return;
	dispatch(c);
}
