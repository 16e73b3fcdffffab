/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cluster mode of one airlockd (docs/cluster.md): this node's lease and its
 * sandboxes' rows in the cluster's PostgreSQL, fencing, and the moves of a
 * sandbox between nodes through the shared snapshot store (a pause here, an
 * adopt on any node). Without --cluster-db none of it runs and airlockd is
 * the single host it always was.
 */
#ifndef AIRLOCK_CLUSTER_NODE_H
#define AIRLOCK_CLUSTER_NODE_H

#include <jansson.h>
#include <stdbool.h>

#include "cluster-auth.h"
#include "error.h"

struct sandbox_record;

struct cluster_config {
	const char *db_conninfo;  /* --cluster-db; NULL: not in a cluster */
	const char *key_file;     /* --cluster-key-file */
	const char *node_name;    /* --node-name (default: the host name) */
	const char *node_url;     /* --node-url: how fronts reach this node's TCP listener */
	const char *shared_store; /* --shared-store DIR */
	const char *proxy_url;    /* http://HOST:PORT of its ports proxy (--proxy-listen), or NULL */
	unsigned lease_s;         /* --node-lease-s */
};

/* Checks the flags (all of them are needed once --cluster-db is given). */
int cluster_config_check(const struct cluster_config *cfg, struct al_error *err);

/* Before sandboxes_init: loads the key, connects, makes the schema, and
 * puts the secrets' rows in PostgreSQL (their bindings are resolved as
 * sandboxes are re-attached). record_json makes the API's view of a record
 * (what the index keeps and a front shows for a sandbox on no node). */
struct store;
int cluster_prepare(const struct cluster_config *cfg, json_t *(*record_json)(const struct sandbox_record *r),
                    struct store *store, unsigned host_memory_mib, struct al_error *err);
/* Once the API answers: registers this node (a new epoch), reconciles its
 * sandboxes with the index and starts the lease thread. */
int cluster_start(struct al_error *err);
/* Stops the lease thread and lets the lease lapse (the node's sandboxes stay
 * its own until the reaper of a front takes them over). */
void cluster_stop(void);
bool cluster_enabled(void);

/* The key delegations are checked with (cluster-auth.h); NULL when not in a
 * cluster. */
const struct cluster_key *cluster_key_get(void);

/* {"node","epoch","lease","fenced"} for /healthz; NULL when not in a cluster. */
json_t *cluster_health_json(void);

/* POST /v1/cluster/sandboxes/{id}/adopt: claims the sandbox's row (on no
 * node, with a snapshot), fetches its snapshot from the shared store and
 * restores it here under its own id. 409 if another node has it. */
int cluster_adopt(const char *id, struct sandbox_record *ret, struct al_error *err);

/* POST .../snapshots in cluster mode: the new local snapshot goes into the
 * shared store and becomes the sandbox's latest (airlock_sandboxes.snapshot),
 * the one a recovery restores. */
struct snapshot_info;
int cluster_snapshot_publish(const char *sandbox_id, const struct snapshot_info *snap, struct al_error *err);

#endif
