/* SPDX-License-Identifier: Apache-2.0 */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

int al_error_set(struct al_error *err, enum al_error_code code, int errnum, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		err->code = code;
		vsnprintf(err->message, sizeof(err->message), fmt, ap);
		va_end(ap);
	}
	if (errnum < 0)
		errnum = -errnum;
	return errnum ? -errnum : -EINVAL;
}

void al_error_prefix(struct al_error *err, const char *fmt, ...)
{
	if (!err)
		return;
	char prefix[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	char joined[sizeof(prefix) + AL_ERROR_MSG_MAX + 2];
	snprintf(joined, sizeof(joined), "%s: %s", prefix, err->message);
	strlcpy_al(err->message, joined, sizeof(err->message));
}

static const struct {
	const char *name;
	int status;
} codes[] = {
    [AL_ERR_NONE] = {"ok", 200},
    [AL_ERR_INVALID_ARGUMENT] = {"invalid_argument", 400},
    [AL_ERR_NOT_FOUND] = {"not_found", 404},
    [AL_ERR_METHOD] = {"method_not_allowed", 405},
    [AL_ERR_CONFLICT] = {"conflict", 409},
    [AL_ERR_TOO_LARGE] = {"payload_too_large", 413},
    [AL_ERR_UNSUPPORTED_MEDIA] = {"unsupported_media_type", 415},
    [AL_ERR_BOOT_FAILED] = {"boot_failed", 500},
    [AL_ERR_INTERNAL] = {"internal", 500},
    [AL_ERR_UNAVAILABLE] = {"unavailable", 503},
    [AL_ERR_TIMEOUT] = {"timeout", 504},
    [AL_ERR_GUEST] = {"guest_error", 502},
    [AL_ERR_QUOTA] = {"quota_exceeded", 429},
    [AL_ERR_UNAUTHORIZED] = {"unauthorized", 401},
    [AL_ERR_FORBIDDEN] = {"forbidden", 403},
};

const char *al_error_code_name(enum al_error_code code)
{
	if ((size_t)code >= ARRAY_SIZE(codes) || !codes[code].name)
		return "internal";
	return codes[code].name;
}

int al_error_http_status(enum al_error_code code)
{
	if ((size_t)code >= ARRAY_SIZE(codes) || !codes[code].name)
		return 500;
	return codes[code].status;
}
