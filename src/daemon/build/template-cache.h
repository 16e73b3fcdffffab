/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The layer cache of template builds: the disk after each RUN, COPY or ADD
 * of a build, kept as a hidden template (templates.h) named
 * TEMPLATE_CACHE_PREFIX + its key, so that the next step, or the same step of
 * a later build, boots a sandbox from it like from any template. The key is
 * SHA-256 over the owner, the parent template's identity and the canonical
 * text and inputs of every step up to this one: a layer is reused only by
 * the same tenant, for the same steps on the same inputs. Each layer's
 * template.json holds the build's state after it (env, workdir, user, ...).
 * Least recently used layers go when the cache is over --build-cache-mib.
 */
#ifndef AIRLOCK_TEMPLATE_CACHE_H
#define AIRLOCK_TEMPLATE_CACHE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "sandbox-model.h"

#define TEMPLATE_CACHE_KEY_HEX 48 /* of the SHA-256: the name stays within a template name's 63 */

/* The layer's template name for a key (32 bytes). */
void template_cache_name(const uint8_t key[32], char out[SANDBOX_TEMPLATE_NAME_MAX + 1]);
/* The state a layer recorded (owned), or NULL when there is no such layer
 * (its use is noted, for the LRU). */
json_t *template_cache_get(const char *name);
/* Keeps image (a raw ext4 disk, moved) as layer name with state. */
int template_cache_put(const char *name, const char *tenant, const char *image, json_t *state, struct al_error *err);
/* Removes the least recently used unused layers beyond max_bytes. */
void template_cache_prune(uint64_t max_bytes);

#endif
