/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The templates sandboxes start from (docs/templates.md). A template is a
 * directory holding rootfs.ext4 (the ext4 image every sandbox's disk is an
 * overlay over) and template.json (what it is: its source, parent, owner,
 * and the start configuration: env, workdir, user, cmd, entrypoint).
 *
 *   <image-dir>/templates/NAME   built-in: made by `make images`, the operator's
 *   <state-dir>/templates/NAME   built from a Dockerfile or imported from an image
 *
 * Names are one namespace on the host (as E2B's template aliases are), so a
 * sandbox record, a snapshot, a pool and a template snapshot name a template
 * by its name alone. A template with a tenant is that tenant's: no other
 * tenant sees or starts it (it is "unknown" to them); one without (the
 * operator's, made over the unix socket) is shared by all.
 */
#ifndef AIRLOCK_TEMPLATES_H
#define AIRLOCK_TEMPLATES_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "sandbox-model.h"

#define TEMPLATE_ROOTFS "rootfs.ext4"
#define TEMPLATE_META "template.json"
#define TEMPLATE_META_MAX (1024 * 1024)
#define TEMPLATES_MAX 1024 /* in <state-dir>/templates: a build past it is refused */

enum template_source {
	TEMPLATE_BUILTIN,    /* make images: <image-dir>/templates */
	TEMPLATE_DOCKERFILE, /* POST /v1/templates */
	TEMPLATE_IMAGE,      /* POST /v1/templates/import */
	TEMPLATE_CACHE,      /* a layer of the build cache: hidden (template-cache.h) */
};

/* The build cache's layers are named TEMPLATE_CACHE_PREFIX + key
 * (sandbox-model.h): never listed, never a name a client may give, and
 * another tenant's answer as unknown. */

/* The metadata key of a build's sandbox (its value: the template's name);
 * a restart deletes such sandboxes, whose build ended with the daemon. */
#define TEMPLATE_BUILD_METADATA "airlock.build"

struct template_info {
	char name[SANDBOX_TEMPLATE_NAME_MAX + 1];
	char tenant[64]; /* "": the operator's, shared */
	enum template_source source;
	char dir[PATH_MAX];
	uint64_t size_bytes; /* of rootfs.ext4 as the guest sees it */
	json_t *meta;        /* template.json (owned; {} when it has none) */
};

struct template_usage {
	unsigned sandboxes, snapshots, pools;
};

/* <state-dir>/templates (malloc'd). */
char *templates_own_dir(void);
/* The state dir's templates/ (made if missing); leftovers of builds a
 * crashed daemon left (.staging-*, .trash-*) are removed. */
int templates_init(struct al_error *err);

/* A template tenant may use (tenant NULL: the admin, any). Another tenant's
 * is -ENOENT, worded as one that does not exist. */
int template_find(const char *name, const char *tenant, struct template_info *ret, struct al_error *err);
void template_info_release(struct template_info *t);
/* Its directory: the state dir's if it has one, else the image dir's
 * (no visibility check: for names already in records). */
int template_dir(const char *name, char *out, size_t size);
/* The API's object (docs/api.md, "Templates"), with its usage. */
json_t *template_to_json(const struct template_info *t, const struct template_usage *u);
/* Every template tenant may use (NULL: all), as API objects, by name. */
json_t *templates_list_json(const char *tenant);
/* Sandboxes (not deleted), snapshots and warm pools that use name: all of
 * them (tenant NULL), or only tenant's (what a tenant is shown: another
 * tenant's use of a shared template is not its business). */
int template_usage_get(const char *name, const char *tenant, struct template_usage *ret, struct al_error *err);
/* What the start of a sandbox of name takes from its template: its env
 * ("K=V" strings), workdir, uid and gid. false when it sets none. */
struct template_start {
	json_t *env; /* array, owned; NULL: none */
	char workdir[PATH_MAX];
	bool has_user;
	unsigned uid, gid;
};
bool template_start_get(const char *name, struct template_start *ret);
void template_start_release(struct template_start *s);

/* A build or an import of name for tenant is about to begin: the name is
 * held (another build of it is 409) until template_release_name. Refused:
 * an invalid name, a built-in one, another tenant's, one in use (a rebuild
 * replaces an unused template only), more than TEMPLATES_MAX. */
int template_hold_name(const char *name, const char *tenant, struct al_error *err);
void template_release_name(const char *name);
/* A new empty directory under the state dir's templates/ to make one in
 * (malloc'd path); removed by template_discard unless published. */
int template_staging_new(char **ret, struct al_error *err);
void template_discard(const char *staging);
/* Writes meta as staging/template.json and moves staging into place as
 * name, replacing an unused template of that name (held by the caller). */
int template_publish(const char *name, const char *staging, json_t *meta, struct al_error *err);
/* Removes a built or imported template no sandbox, snapshot or pool uses. */
int template_delete(const char *name, const char *tenant, struct al_error *err);

/* Cluster mode (cluster-templates.c): a template published here (not a
 * cache layer) goes into the shared store too; one deleted here leaves it;
 * a name this host does not have is looked for there before a lookup gives
 * up (fetch answers 0 once it put the template in place). Set once at
 * start-up. */
struct template_hooks {
	void (*published)(const char *name, const char *dir, json_t *meta);
	void (*deleted)(const char *name);
	int (*fetch)(const char *name);
	/* 0 and the owner ("": the operator's) of a name the cluster has. */
	int (*owner)(const char *name, char owner[64]);
};
void templates_set_hooks(const struct template_hooks *h);

#endif
