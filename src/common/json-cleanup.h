/* SPDX-License-Identifier: Apache-2.0 */
#ifndef AIRLOCK_JSON_CLEANUP_H
#define AIRLOCK_JSON_CLEANUP_H

#include <jansson.h>

/* jansson ships json_decrefp(); this is the tree's spelling of it. */
#define cleanup_json __attribute__((cleanup(json_decrefp)))

#endif
