/* SPDX-License-Identifier: Apache-2.0 */
#include "json-field.h"

#include <errno.h>
#include <string.h>

bool json_string_has_nul(const json_t *s)
{
	return json_is_string(s) && memchr(json_string_value(s), '\0', json_string_length(s)) != NULL;
}

int json_field_string(const json_t *obj, const char *field, const char **ret, struct al_error *err)
{
	const json_t *v = json_object_get(obj, field);
	*ret = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || json_string_has_nul(v))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: must be a string without NUL bytes",
		                    field);
	*ret = json_string_value(v);
	return 0;
}
