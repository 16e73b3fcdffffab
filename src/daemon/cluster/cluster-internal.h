/* SPDX-License-Identifier: Apache-2.0 */
/* What the files of cluster/ share: the node's one cluster state. */
#ifndef AIRLOCK_CLUSTER_INTERNAL_H
#define AIRLOCK_CLUSTER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cluster-db.h"
#include "cluster-node.h"
#include "store.h"

#define CLUSTER_HANDED_OFF_MAX 64 /* ids recently moved away, whose local writes the index ignores */

struct cluster {
	struct cluster_config cfg;
	struct cluster_key key;
	struct store *store;
	unsigned host_memory_mib;
	json_t *(*record_json)(const struct sandbox_record *r);
	/* The lease thread's connection, and the one of index writes and moves:
	 * a slow write never delays a renewal. */
	struct cluster_db lease_db, index_db;
	pthread_mutex_t lock; /* guards what follows */
	pthread_cond_t wake;
	int64_t epoch;                /* 0: not registered */
	uint64_t lease_until_mono_ms; /* this node's view of its lease: never later than the database's */
	bool fenced;                  /* lease lost: no new work, sandboxes frozen, until registered again */
	bool dirty;                   /* an index write failed: the lease thread writes every record again */
	bool stopping;
	char handed_off[CLUSTER_HANDED_OFF_MAX][SANDBOX_ID_MAX + 1];
	unsigned handed_off_next;
	char (*frozen)[SANDBOX_ID_MAX + 1]; /* sandboxes a fence paused */
	size_t n_frozen;
	pthread_t thread;
};

extern struct cluster *cl; /* NULL when not in a cluster */

/* The epoch as text, or "0"; with cl->lock not held. */
void cluster_epoch_text(char out[24]);
/* Whether this node may act now: registered, not fenced, its lease valid on
 * its own clock. */
bool cluster_valid_now(void);
/* 0 when this node may take new work now, else 503 saying why (core's gate). */
int cluster_gate(const char *what, struct al_error *err);

/* cluster-index.c. Writes r's row, fenced by this node's epoch and lease:
 * *ret_mine false when the row is another node's (or on no node) or when
 * this node is fenced (then also *ret_fenced). With index_db.lock NOT held. */
int cluster_index_write(const struct sandbox_record *r, bool *ret_mine, bool *ret_fenced, struct al_error *err);
/* The store's observer (store_set_observer). */
void cluster_index_observe(const struct sandbox_record *r);
void cluster_handed_off_add(const char *id);
bool cluster_handed_off(const char *id);
/* It comes back here (an adopt): its writes count again. */
void cluster_handed_off_clear(const char *id);
/* Calls fn on each record of this node's store that is not deleted. */
void cluster_records_each(void (*fn)(const struct sandbox_record *r, void *ctx), void *ctx);
/* Writes every live local record again; deletes (here) those whose rows are
 * another node's: they are stale. */
void cluster_index_resync(void);

/* cluster-lease.c */
int cluster_lease_start(struct al_error *err);
void cluster_lease_stop(void);

/* cluster-store.c: the shared snapshot store. */
struct snapshot_info;
/* Copies the local snapshot's files into the store; *ret_key names it. */
int cluster_store_publish(const struct snapshot_info *snap, const char *sandbox_id, char ret_key[72],
                          uint64_t *ret_bytes, json_t **ret_manifest, struct al_error *err);
/* A file by content (sha256 hex) and its manifest; *ret_key names the
 * manifest. */
int cluster_store_put(const char *path, const char *sha, json_t *manifest, char ret_key[72], struct al_error *err);
/* The manifest of key, checked against it. */
int cluster_store_manifest(const char *key, json_t **ret, struct al_error *err);
/* The file of digest sha copied to dst (new). The caller checks the copy. */
int cluster_store_get(const char *sha, const char *dst, struct al_error *err);
/* Makes a local snapshot (new id, tenant's) of the stored one, its files
 * checked against their digests. */
int cluster_store_fetch(const char *key, const char *tenant, struct snapshot_info *ret, struct al_error *err);

/* cluster-templates.c: templates through the shared store. */
void cluster_templates_start(void);
void cluster_templates_prune(void);

/* cluster-secrets.c: secrets' rows in PostgreSQL, under the cluster's key. */
void cluster_secrets_start(void);

/* cluster-move.c: pause = a snapshot in the shared store, the VM gone. */
int cluster_pause(const char *id, const char *tenant, struct sandbox_record *ret, struct al_error *err);

#endif
