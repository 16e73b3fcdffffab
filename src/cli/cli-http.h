/* SPDX-License-Identifier: Apache-2.0 */
#ifndef AIRLOCK_CLI_HTTP_H
#define AIRLOCK_CLI_HTTP_H

#include <jansson.h>

/* Max answer the CLI accepts from the daemon (an exec answer carries two
 * capped output streams, base64-encoded at worst). */
#define CLI_RESPONSE_MAX (200u << 20)

/* One request to airlockd over its unix socket. On a transport failure
 * returns < 0 with a message in errbuf; otherwise 0 with the HTTP status and
 * the parsed JSON body (NULL when empty). */
int cli_http(const char *socket_path, const char *method, const char *path, json_t *body, long *ret_status,
	     json_t **ret_body, char *errbuf, size_t errbuf_size);

#endif
