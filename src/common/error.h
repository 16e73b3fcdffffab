/* SPDX-License-Identifier: Apache-2.0 */
/* A caller-owned error record for failures a person must read (API responses,
 * CLI, jailer, policy): the message is formed once where the failure happened
 * and prefixed on the way up. */
#ifndef AIRLOCK_ERROR_H
#define AIRLOCK_ERROR_H

#include <stddef.h>

#define AL_ERROR_MSG_MAX 1024

enum al_error_code {
	AL_ERR_NONE = 0,
	AL_ERR_INVALID_ARGUMENT,  /* 400 */
	AL_ERR_NOT_FOUND,         /* 404 */
	AL_ERR_METHOD,            /* 405 */
	AL_ERR_CONFLICT,          /* 409 */
	AL_ERR_TOO_LARGE,         /* 413 */
	AL_ERR_UNSUPPORTED_MEDIA, /* 415 */
	AL_ERR_BOOT_FAILED,       /* 500 */
	AL_ERR_INTERNAL,          /* 500 */
	AL_ERR_UNAVAILABLE,       /* 503 */
	AL_ERR_TIMEOUT,           /* 504 */
	AL_ERR_GUEST,             /* 502: the guest misbehaved or went away */
	AL_ERR_QUOTA,             /* 429: a tenant quota would be exceeded */
	AL_ERR_UNAUTHORIZED,      /* 401: missing, invalid or revoked token */
	AL_ERR_FORBIDDEN,         /* 403: the token's tenant may not do this */
	AL_ERR__COUNT,            /* keep last: the number of codes */
};

struct al_error {
	enum al_error_code code;
	char message[AL_ERROR_MSG_MAX];
};

/* Sets code and message; returns -errnum (or -EINVAL if errnum is 0) so it can
 * be returned directly: return al_error_set(err, AL_ERR_..., EINVAL, "..."). */
int al_error_set(struct al_error *err, enum al_error_code code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Prepends "prefix: " to the message. */
void al_error_prefix(struct al_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Machine-readable code name ("invalid_argument") and HTTP status. */
const char *al_error_code_name(enum al_error_code code);
int al_error_http_status(enum al_error_code code);

#endif
