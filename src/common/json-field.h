/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Members of a JSON object as request parsers read them. jansson keeps a
 * string's length next to its bytes and accepts "\u0000" where asked to, so
 * a string may hold a NUL that C would silently cut at: these helpers say so
 * instead.
 */
#ifndef AIRLOCK_JSON_FIELD_H
#define AIRLOCK_JSON_FIELD_H

#include <stdbool.h>

#include <jansson.h>

#include "error.h"

/* Does the JSON string s hold a NUL byte? (false for a non-string) */
bool json_string_has_nul(const json_t *s);

/*
 * Member field of obj, a string without NUL bytes: *ret is its text (owned
 * by obj), or NULL when the member is absent or null. Anything else is
 * -EINVAL (AL_ERR_INVALID_ARGUMENT, "FIELD: must be a string without NUL
 * bytes") and *ret is NULL.
 */
int json_field_string(const json_t *obj, const char *field, const char **ret, struct al_error *err);

#endif
