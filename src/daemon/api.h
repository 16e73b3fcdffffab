/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP API: server glue (api-server.c) and one handler file per resource. */
#ifndef AIRLOCK_API_H
#define AIRLOCK_API_H

#include <jansson.h>
#include <stddef.h>

#include "error.h"

struct api_request {
	const char *method;
	const char *path;    /* without the query string */
	const char *arg_all; /* ?all=..., or NULL */
	const char *body;
	size_t body_len;
};

struct api_response {
	int status;   /* HTTP status */
	json_t *body; /* owned; NULL for no body */
};

/* Sets an error answer from err. */
void api_response_error(struct api_response *resp, const struct al_error *err);

/* Max body size accepted for a method + path (0: no body allowed). */
size_t api_body_limit(const char *method, const char *path);
/* Routes one request. */
void api_dispatch(const struct api_request *req, struct api_response *resp);

/* The server: listens on a unix socket (mode 0660). */
struct api_server;
int api_server_start(const char *socket_path, struct api_server **ret, struct al_error *err);
void api_server_stop(struct api_server *s);

#endif
