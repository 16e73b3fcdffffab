/* SPDX-License-Identifier: Apache-2.0 */
/* E2B compatibility (docs/e2b.md): E2B's SDK, unmodified, drives Airlock
 * when E2B_API_URL is http://HOST:PORT/e2b and E2B_SANDBOX_URL is
 * http://HOST:PORT/e2b/envd on airlockd's TCP listener.
 *
 * - The control API (API_ROUTE_E2B_CONTROL, api-e2b-control.c): X-API-KEY
 *   is an Airlock tenant token.
 * - The in-sandbox API "envd" (API_ROUTE_E2B_ENVD): Connect RPCs
 *   (connect-wire.h) and /files, for the sandbox named by E2b-Sandbox-Id,
 *   authenticated by X-Access-Token, the sandbox's envd access token.
 *
 * This file (api-e2b.c): the envd token, the authentication of both kinds
 * and their error bodies. */
#ifndef AIRLOCK_API_E2B_H
#define AIRLOCK_API_E2B_H

#include <stdbool.h>

#include "api-e2b-parse.h"
#include "api.h"
#include "auth.h"
#include "error.h"
#include "store.h"

/* The envd version E2B's SDK is told: its feature gates (envd/versions.ts
 * in the SDK) switch on what this server serves: default user (0.4.0),
 * CloseStdin (0.5.2), octet-stream uploads (0.5.7), entry metadata (0.6.2),
 * entries in watch events (0.6.3), network-mount watches (0.6.4). */
#define E2B_ENVD_VERSION "0.6.4"
#define E2B_ENVD_TOKEN_PREFIX "ea_"
#define E2B_ENVD_TOKEN_LEN (sizeof(E2B_ENVD_TOKEN_PREFIX) - 1 + 64)

/* The envd access token of a sandbox: "ea_" + hex(HMAC(host key, tenant,
 * id)). Only this host can make it; it lasts as long as the sandbox. */
int e2b_envd_token(const char *tenant, const char *sandbox_id, char ret[E2B_ENVD_TOKEN_LEN + 1]);

/* SECURITY: the headers of a request to the control API. X-API-KEY must be
 * a valid tenant token (auth_token_verify); ret_failure says why not, for
 * the failed-authentication log. */
int e2b_control_authenticate(const char *api_key, char ret_tenant[TENANT_NAME_MAX + 1], enum auth_failure *ret_failure,
                             struct al_error *err);
/* SECURITY: the headers of a request to envd. E2b-Sandbox-Id must name a
 * sandbox of this host and X-Access-Token must be its envd token (compared
 * in constant time); a wrong token and an unknown sandbox get the same
 * answer. Fills the sandbox's tenant and id. */
int e2b_envd_authenticate(const char *sandbox_id, const char *access_token, char ret_tenant[TENANT_NAME_MAX + 1],
                          char ret_id[SANDBOX_ID_MAX + 1], enum auth_failure *ret_failure, struct al_error *err);

/* ---- users and paths (api-e2b-user.c; their parsers: api-e2b-parse.h) ---- */

struct sandbox;
/* SECURITY: the user named by the request (Authorization: Basic
 * base64(NAME:) on RPCs, ?username= on /files; E2B_DEFAULT_USER when
 * neither), a name of [A-Za-z0-9._-] (not starting with '-') of at most
 * E2B_USER_NAME_MAX bytes, looked up in the guest's /etc/passwd (read as
 * hostile input: bounded, each line checked). Answers errors into resp
 * (400 for a malformed name, 400 for a user the guest does not have). */
int e2b_user_resolve(const struct api_request *req, struct sandbox *sb, struct e2b_user *ret,
                     struct api_response *resp);
/* Rewrites an error answer ({"error":{"code","message"}}, status >= 400)
 * into the form a route of this kind answers with: the control API's
 * {"code":STATUS,"message"}; a Connect unary error (its status from its
 * code); a Connect stream's 200 with one end-of-stream envelope. Other
 * answers are left as they are. */
void e2b_error_render(enum api_route_kind kind, bool connect_stream, struct api_response *resp);

#endif
