/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-api, the cluster's stateless front (docs/cluster.md): clients talk
 * to it as to one airlockd; it authenticates them against PostgreSQL, places
 * creates on nodes, forwards everything of a sandbox to its node with a
 * delegation (include/airlock/cluster.h), serves tokens and tenants itself,
 * and one front at a time reaps the sandboxes of lost nodes.
 *
 *   front-main.c     flags, listeners, one thread per connection
 *   front-conn.c     a connection: its head, authentication, answers
 *   front-route.c    which handler a request goes to
 *   front-head.c     the head parser and rewriter (pure, fuzzed)
 *   front-pg.c       the connection pool and the schema
 *   front-node.c     connections to nodes: forward and relay, calls
 *   front-auth.c     tokens and tenants
 *   front-place.c    creates: quotas, best-of-K placement, adopt
 *   front-sandbox.c  requests for one sandbox (its node, or its row)
 *   front-list.c     lists merged from every node
 *   front-reaper.c   lost nodes' sandboxes recovered elsewhere
 */
#ifndef AIRLOCK_FRONT_H
#define AIRLOCK_FRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "airlock/cluster.h"
#include "cluster-auth.h"
#include "error.h"
#include "front-delegation.h"
#include "front-head.h"

#define FRONT_TENANT_MAX 63             /* [a-z0-9][a-z0-9_-]{0,62} */
#define FRONT_BODY_MAX (1024 * 1024)    /* a body the front reads itself (creates, tokens, tenants) */
#define FRONT_PATH_MAX 1024             /* a request path: longer is 400, as airlockd says */
#define FRONT_NODES_MAX 256             /* nodes a placement or a fan-out considers */
#define FRONT_LIST_BODY_MAX (64u << 20) /* one node's answer to a list */
#define FRONT_HEAD_TIMEOUT_MS 10000     /* a client's head must arrive within this */
#define FRONT_BODY_TIMEOUT_MS 60000     /* a body the front reads (at most 1 MiB) must arrive within this */
#define FRONT_CONNECT_TIMEOUT_MS 2000   /* a node that does not accept within this is tried no more */
#define FRONT_CALL_TIMEOUT_MS 30000     /* a call of the front's own to a node (lists, probes) */
#define FRONT_ADOPT_TIMEOUT_MS 300000   /* an adopt restores a VM: as long as a boot may take */
#define FRONT_AUTH_MAX 512              /* an Authorization / X-API-KEY value the front reads */
#define FRONT_WS_PROTOCOLS_MAX 1024     /* a Sec-WebSocket-Protocol value the front reads */

struct front_config {
	const char *conninfo;
	struct cluster_key key;
	const char *listen;
	const char *socket_path;
	unsigned place_k;
	unsigned reaper_interval_ms;
	unsigned lost_grace_s;
};
extern struct front_config front_cfg;

/* ------------------------------------------------------------ a connection (front-conn.c) */

enum front_kind {
	FRONT_NATIVE,      /* Airlock's API: Authorization: Bearer */
	FRONT_E2B_CONTROL, /* /e2b/...: X-API-KEY, E2B's error bodies */
	FRONT_E2B_ENVD,    /* /e2b/envd/...: the node checks X-Access-Token */
};

struct front_conn {
	int fd;
	bool operator; /* the unix socket: no token, every tenant */
	char remote[64];
	char buf[FRONT_HEAD_MAX];
	size_t have; /* bytes in buf: the head, then what came after it */
	struct front_head head;
	enum front_kind kind;
	char method[FRONT_METHOD_MAX + 1];
	char path[FRONT_PATH_MAX + 1];
	char query[FRONT_HEAD_MAX];
	char tenant[FRONT_TENANT_MAX + 1]; /* the token's tenant ("" for the operator) */
	bool answered;
	bool ws_rewrite; /* the token came as a WebSocket subprotocol: send ws_protocol instead */
	char ws_protocol[FRONT_WS_PROTOCOLS_MAX];
};

/* Serves the one request of an accepted connection (the caller closes it). */
void front_conn_serve(struct front_conn *c);

/* Answers: E2B routes get E2B's {"code","message"}, the others the API's
 * {"error":{"code","message"}}. Each closes the exchange (Connection: close). */
void front_reply_json(struct front_conn *c, int status, json_t *body);
void front_reply_error(struct front_conn *c, const struct al_error *err);
void front_reply_errorf(struct front_conn *c, enum al_error_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void front_reply_empty(struct front_conn *c, int status);
void front_reply_raw(struct front_conn *c, int status, const char *type, const char *body, size_t len);
/* A JSON body as it is (a node's answer, a row's record). */
void front_reply_body(struct front_conn *c, int status, const char *body, size_t len);
/* The request's body, which must be framed by Content-Length (at most max):
 * read whole into *ret (NUL-terminated). An error is answered. */
int front_read_body(struct front_conn *c, size_t max, char **ret, size_t *ret_len);
/* The body as a JSON object (front_read_body; empty: {}), with only the
 * members named in allowed (NULL-terminated). An error is answered. */
int front_read_json(struct front_conn *c, size_t max, const char *const *allowed, json_t **ret);
/* The delegation's principal for this request: NULL for the operator. */
const char *front_principal_tenant(const struct front_conn *c);

/* ------------------------------------------------------------ routing (front-route.c) */

void front_route(struct front_conn *c);
bool front_path_is(const struct front_conn *c, const char *method, const char *path);

/* ------------------------------------------------------------ PostgreSQL (front-pg.c) */

int front_pg_init(const char *conninfo, struct al_error *err);
/* Runs sql with text parameters on a pooled connection. The result holds
 * rows or nothing (PGRES_TUPLES_OK / PGRES_COMMAND_OK); anything else is
 * -EIO with AL_ERR_UNAVAILABLE naming what. */
int front_pg_exec(const char *what, const char *sql, int n, const char *const *params, PGresult **ret,
                  struct al_error *err);
/* A connection of its own (the reaper's, for its session lock): NULL when
 * the database cannot be reached. */
PGconn *front_pg_connect(void);
static inline void pqclearp(PGresult **r)
{
	if (*r)
		PQclear(*r);
}
#define cleanup_pgresult __attribute__((cleanup(pqclearp)))

/* ------------------------------------------------------------ nodes (front-node.c) */

struct front_node {
	char name[CLUSTER_NODE_NAME_MAX + 1];
	char url[CLUSTER_NODE_URL_MAX + 1];
	int64_t memory_free_mib;
	int64_t sandboxes;
};

/* The delegation for tenant (NULL: the operator): the X-Airlock-Principal
 * value and the Authorization value that proves it. */
void front_delegation(const char *tenant, char principal[CLUSTER_PRINCIPAL_MAX + 1],
                      char authorization[FRONT_DELEGATION_AUTH_MAX]);
/* TCP keepalive that notices a peer gone without a word in about 2 minutes
 * (streams and upgrades have no idle limit). */
void front_keepalive(int fd);
/* A connection to the node at url ("http://host:port"); -errno. */
int front_node_connect(const char *url, int *ret_fd);

struct front_forward {
	const char *url;
	const char *target; /* NULL: the client's */
	const char *body;   /* a body the front read (creates): sent after the head */
	size_t body_len;
	bool delegate;           /* add the delegation (else the client's credentials pass) */
	const char *ws_protocol; /* see front_rewrite */
	bool retry_503;          /* a 503 (or no node) is returned as 1, nothing sent to the client */
};
/* Sends the client's request to a node and relays the answer (and, for a
 * protocol switch or a body still coming, both ways) until the node closes.
 * 0 when something was answered, 1 when f->retry_503 and the node answered
 * 503 or could not be reached (nothing sent to the client), -errno when the
 * node could not be reached otherwise (nothing sent either). */
int front_forward(struct front_conn *c, const struct front_forward *f);

struct front_answer {
	int status;
	char *body; /* NUL-terminated, dechunked */
	size_t len;
};
void front_answer_release(struct front_answer *a);
/* A call of the front's own: METHOD target with the delegation of tenant
 * (NULL: operator), an optional JSON body; the answer read whole (at most
 * max bytes). -errno when the node cannot be reached or its answer is not
 * HTTP. */
int front_node_call(const char *url, const char *method, const char *target, const char *tenant, const char *body,
                    int timeout_ms, size_t max, struct front_answer *ret);
/* The nodes that are up (lease not lapsed), at most FRONT_NODES_MAX. */
int front_nodes_up(struct front_node **ret, size_t *ret_n, struct al_error *err);
/* The rows of a query of (name, url, free memory MiB, sandboxes), as nodes. */
struct front_node *front_nodes_from(PGresult *res, size_t *ret_n);

/* ------------------------------------------------------------ handlers */

void front_auth_token_create(struct front_conn *c);
void front_auth_token_list(struct front_conn *c);
void front_auth_token_revoke(struct front_conn *c, const char *id);
void front_auth_tenant_put(struct front_conn *c, const char *name);
void front_auth_tenant_get(struct front_conn *c, const char *name);
/* Checks the request's credential (TCP); writes c->tenant. An error is answered. */
int front_authenticate(struct front_conn *c);
bool front_tenant_name_valid(const char *s);

struct front_usage {
	long long sandboxes, vcpus, memory_mib;
};
int front_tenant_usage(const char *tenant, struct front_usage *ret, struct al_error *err);
/* max_sandboxes, max_vcpus, max_memory_mib, max_snapshot_mib (0: unlimited; no row: all 0). */
int front_tenant_quotas(const char *tenant, long long ret[4], struct al_error *err);

/* The create (native or E2B). */
void front_create(struct front_conn *c);
struct front_place {
	const char *template_name;
	long long vcpus, memory_mib;
};
/* Candidates for a sandbox of p: best-of-K first, then the rest, best first. */
int front_place_candidates(const struct front_place *p, struct front_node **ret, size_t *ret_n, struct al_error *err);
/* Adopts sandbox id (its row: node NULL, a snapshot) on one of the
 * candidates for p: 0 with the node's url and answer; -EBUSY when another
 * took it (409), -EAGAIN when no node could (err says why). */
int front_adopt(const char *id, const struct front_place *p, char ret_url[CLUSTER_NODE_URL_MAX + 1],
                char ret_node[CLUSTER_NODE_NAME_MAX + 1], struct front_answer *ret, struct al_error *err);

void front_sandbox_request(struct front_conn *c, const char *id);
/* E2B's ListedSandbox of a sandbox on no node, from its record. */
json_t *front_e2b_listed(const json_t *record, const char *state);
/* A request for a port of sandbox id (host or path form): to its node's ports proxy. */
void front_proxy_request(struct front_conn *c, const char *id);
/* E2B's envd (E2b-Sandbox-Id): to its node's API, X-Access-Token as it is. */
void front_envd_request(struct front_conn *c, const char *id);
void front_any_node_request(struct front_conn *c);

void front_list_sandboxes(struct front_conn *c, bool e2b);
void front_list_merged(struct front_conn *c, const char *key, const char *dedupe_field);
void front_list_events(struct front_conn *c);
/* Asks every node until one answers other than 404 (snapshots, templates by name). */
void front_probe_nodes(struct front_conn *c);

/* ------------------------------------------------------------ the reaper (front-reaper.c) */

void front_reaper_start(void);
/* One round: lost nodes' sandboxes marked, recovering ones adopted. */
int front_reaper_round(PGconn *db, struct al_error *err);

#endif
