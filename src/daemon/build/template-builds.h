/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template builds and imports (docs/templates.md): the entry points the API
 * starts as jobs (template-job.h), and the operator's settings for them.
 *
 * An import runs airlock-oci (src/oci) on the uploaded archive and publishes
 * its ext4 image. A build runs each RUN and COPY of a Dockerfile in a real
 * sandbox of the image so far, under the build network policy, and keeps the
 * disk after each such step as a layer of the build cache (template-cache.c),
 * keyed by the steps and their inputs, so that an unchanged step is not run
 * again.
 */
#ifndef AIRLOCK_TEMPLATE_BUILDS_H
#define AIRLOCK_TEMPLATE_BUILDS_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "sandbox-model.h"
#include "template-job.h"

#define TEMPLATE_UPLOAD_MAX_MIB_DEFAULT 4096
#define TEMPLATE_BUILD_ARGS_MAX 64
#define TEMPLATE_BUILD_HEADROOM_MIB 1024 /* a build's disk: its parent's size + this, by default */
#define TEMPLATE_STEP_TIMEOUT_S_DEFAULT 1800
#define TEMPLATE_CACHE_MIB_DEFAULT 20480
#define TEMPLATE_JOBS_STOP_S 60 /* a stopping daemon waits this long for its builds to end */

struct template_build_config {
	const char *oci_bin;            /* airlock-oci, next to airlockd */
	const char *qemu_img;           /* qemu-img */
	const char *build_network_json; /* --build-network-policy (canonical JSON); NULL: deny all */
	uint64_t max_upload_bytes;      /* --max-template-upload-mib */
	unsigned step_timeout_s;        /* --build-step-timeout-s: one RUN at most */
	uint64_t cache_max_bytes;       /* --build-cache-mib: the layers kept */
	unsigned max_disk_mib;          /* --max-disk-mib: a build's disk at most */
};

void template_builds_configure(const struct template_build_config *c);
const struct template_build_config *template_builds_config(void);

/* An import of the archive at `archive` (inside staging, a directory of
 * template_staging_new, which the job owns from here) as name. The name is
 * held (template_hold_name) by the caller and released by the job. */
int template_import_start(const char *name, const char *tenant, char *staging, struct template_job **ret,
                          struct al_error *err);

struct template_build_params {
	char name[SANDBOX_TEMPLATE_NAME_MAX + 1];
	char tenant[64];      /* "": the operator's (shared) */
	char dockerfile[256]; /* its path in the context */
	struct kv_list build_args;
	char *network_json; /* NULL: the operator's build policy */
	bool no_cache, snapshot;
	unsigned disk_mib; /* 0: the parent's size + TEMPLATE_BUILD_HEADROOM_MIB */
};

/* A build of the context tar staging/context.tar (staging as above); p is
 * taken over (its build_args and network_json freed with the job). */
int template_build_start(struct template_build_params *p, char *staging, struct template_job **ret,
                         struct al_error *err);

/* Files of a staging directory. */
#define TEMPLATE_UPLOAD_FILE "upload"

#endif
