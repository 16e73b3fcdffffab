/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cluster mode's wire formats (docs/cluster.md): what airlockd nodes and the
 * airlock-api front share. They talk through PostgreSQL (the tables below),
 * the shared snapshot store (a directory every node mounts), and HTTP: the
 * front forwards a client's request to the node that holds its sandbox with a
 * delegation in place of the client's token.
 *
 * Delegation (front -> node). The front has checked the client's token
 * against airlock_tokens; it sends the node
 *
 *   X-Airlock-Principal: tenant:<name>;exp=<unix seconds>   or   operator;exp=<unix seconds>
 *   Authorization: Bearer acl_<base64url, no padding, of HMAC-SHA256(key, CLUSTER_HMAC_LABEL + principal)>
 *
 * where key is the cluster key (--cluster-key-file, the same bytes on every
 * node and front) and principal the header's whole value. A node accepts it
 * while exp is in [now, now + CLUSTER_DELEGATION_TTL_S]; the front sets
 * exp = now + 60. SECURITY: only holders of the cluster key can make one; a
 * node checks the MAC in constant time, and the principal's tenant name
 * with tenant_name_valid.
 */
#ifndef AIRLOCK_CLUSTER_H
#define AIRLOCK_CLUSTER_H

#define CLUSTER_HMAC_LABEL "airlock-cluster-v1\n"
#define CLUSTER_TOKEN_PREFIX "acl_"
#define CLUSTER_PRINCIPAL_HEADER "X-Airlock-Principal"
#define CLUSTER_PRINCIPAL_MAX 128    /* longest X-Airlock-Principal value */
#define CLUSTER_DELEGATION_TTL_S 300 /* furthest exp a node accepts */
#define CLUSTER_KEY_MIN 32           /* bytes of the cluster key file, at least */
#define CLUSTER_KEY_MAX 4096
#define CLUSTER_NODE_NAME_MAX 63 /* [a-z0-9][a-z0-9_-]{0,62}, as tenant names */
#define CLUSTER_NODE_URL_MAX 255 /* "http://host:port" a front reaches a node at */
#define CLUSTER_LEASE_S_DEFAULT 10

/* Node states in airlock_nodes.state. */
#define CLUSTER_NODE_UP "up"
#define CLUSTER_NODE_LOST "lost" /* its lease lapsed: the front's reaper took it over */

/*
 * The schema, made by whichever process starts first (under an advisory
 * lock): idempotent. Times are the database's (now()), never a host's.
 *
 * airlock_nodes: one row per airlockd (url: its API; proxy_url: its ports
 *   proxy, --proxy-listen, "" without one). epoch grows by one at every
 *   registration and when the reaper declares the node lost; a node's every
 *   write names its epoch and is refused (0 rows) once it is not current or
 *   its lease has lapsed: it is fenced.
 * airlock_sandboxes: the index. node is NULL while the sandbox is on no node
 *   (paused: its snapshot is in the shared store; or lost). record is the
 *   sandbox as GET /v1/sandboxes/{id} shows it; bindings its secret
 *   bindings (ids and placeholders: no value). snapshot is the key of its
 *   latest durable snapshot in the shared store (a paused sandbox's, or its
 *   newest POST .../snapshots), or NULL.
 * airlock_snapshots: the snapshots published to the shared store.
 * airlock_tenants, airlock_tokens: as the single host's tenants and tokens
 *   tables (tokens stored as the SHA-256 hex of the secret).
 * airlock_secrets: every tenant's secrets (store/secrets.h), the value
 *   AES-256-GCM under the key the nodes derive from the cluster key.
 * airlock_templates: the built and imported templates in the shared store
 *   (key: their manifest's), which any node fetches when it needs one.
 * airlock_events: cluster events (node.up, node.lost, sandbox.recovered,
 *   sandbox.lost, sandbox.moved ...).
 */
#define CLUSTER_SCHEMA_SQL                                                                                             \
	"CREATE TABLE IF NOT EXISTS airlock_nodes ("                                                                   \
	" name text PRIMARY KEY, url text NOT NULL, epoch bigint NOT NULL, state text NOT NULL,"                       \
	" lease_until timestamptz NOT NULL, started_at timestamptz NOT NULL DEFAULT now(),"                            \
	" vcpus_total integer NOT NULL DEFAULT 0, vcpus_used integer NOT NULL DEFAULT 0,"                              \
	" memory_total_mib bigint NOT NULL DEFAULT 0, memory_used_mib bigint NOT NULL DEFAULT 0,"                      \
	" memory_free_mib bigint NOT NULL DEFAULT 0, sandboxes integer NOT NULL DEFAULT 0,"                            \
	" templates jsonb NOT NULL DEFAULT '[]', proxy_url text NOT NULL DEFAULT '',"                                  \
	" updated_at timestamptz NOT NULL DEFAULT now());"                                                             \
	"CREATE TABLE IF NOT EXISTS airlock_sandboxes ("                                                               \
	" id text PRIMARY KEY, tenant text NOT NULL, node text, node_epoch bigint, state text NOT NULL,"               \
	" template text NOT NULL DEFAULT '', vcpus integer NOT NULL DEFAULT 0, memory_mib integer NOT NULL DEFAULT 0," \
	" record jsonb NOT NULL, bindings jsonb NOT NULL DEFAULT '[]', snapshot text,"                                 \
	" updated_at timestamptz NOT NULL DEFAULT now());"                                                             \
	"CREATE INDEX IF NOT EXISTS airlock_sandboxes_node ON airlock_sandboxes (node);"                               \
	"CREATE INDEX IF NOT EXISTS airlock_sandboxes_tenant ON airlock_sandboxes (tenant);"                           \
	"CREATE TABLE IF NOT EXISTS airlock_snapshots ("                                                               \
	" key text PRIMARY KEY, tenant text NOT NULL, sandbox text NOT NULL, manifest jsonb NOT NULL,"                 \
	" bytes bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now());"                                      \
	"CREATE TABLE IF NOT EXISTS airlock_tenants ("                                                                 \
	" name text PRIMARY KEY, max_sandboxes integer NOT NULL DEFAULT 0, max_vcpus integer NOT NULL DEFAULT 0,"      \
	" max_memory_mib integer NOT NULL DEFAULT 0, max_snapshot_mib integer NOT NULL DEFAULT 0);"                    \
	"CREATE TABLE IF NOT EXISTS airlock_tokens ("                                                                  \
	" id text PRIMARY KEY, tenant text NOT NULL, hash text NOT NULL UNIQUE, description text NOT NULL DEFAULT ''," \
	" created_at timestamptz NOT NULL DEFAULT now(), revoked_at timestamptz);"                                     \
	"CREATE TABLE IF NOT EXISTS airlock_secrets ("                                                                 \
	" tenant text NOT NULL, name text NOT NULL, id text NOT NULL UNIQUE, spec text NOT NULL, value bytea NOT "     \
	"NULL,"                                                                                                        \
	" created_ms bigint NOT NULL, updated_ms bigint NOT NULL, PRIMARY KEY (tenant, name));"                        \
	"CREATE TABLE IF NOT EXISTS airlock_templates ("                                                               \
	" name text PRIMARY KEY, tenant text NOT NULL DEFAULT '', key text NOT NULL,"                                  \
	" updated_at timestamptz NOT NULL DEFAULT now());"                                                             \
	"CREATE TABLE IF NOT EXISTS airlock_events ("                                                                  \
	" seq bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(), node text, tenant text, sandbox text,"     \
	" type text NOT NULL, data jsonb NOT NULL DEFAULT '{}');"

/* The advisory lock keys (pg_advisory_lock) of the schema's creation and of
 * the reaper (one front at a time takes lost nodes over). */
#define CLUSTER_LOCK_SCHEMA 0x41a1c001
#define CLUSTER_LOCK_REAPER 0x41a1c002

/*
 * The shared snapshot store (--shared-store DIR on nodes):
 *   DIR/blobs/<sha256 hex>        a file of a snapshot (memory, disk ...), by content
 *   DIR/snapshots/<key>.json      its manifest: {"sandbox","tenant","files":{"name":"sha256"},
 *                                 "snapshot": the snapshot.json the node wrote}
 * key = "cs-" + the SHA-256 hex of the manifest's bytes. Files are written to
 * DIR/tmp/, fsynced, renamed into place, and the directory fsynced: a key in
 * airlock_sandboxes.snapshot always names a complete snapshot.
 *
 * Node-only routes, for a front (principal operator):
 *   POST /v1/cluster/sandboxes/{id}/adopt   takes a sandbox whose row has
 *     node NULL and a snapshot: restores it here under its own id (resume on
 *     another node, recovery of a lost node's sandboxes). 409 if another node
 *     took it first.
 */
#define CLUSTER_STORE_KEY_PREFIX "cs-"

#endif
