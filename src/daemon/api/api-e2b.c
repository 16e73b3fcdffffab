/* SPDX-License-Identifier: Apache-2.0 */
/* E2B compatibility: the envd token, authentication and error bodies (api-e2b.h). */
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "api-e2b.h"
#include "api-handlers.h"
#include "connect-wire.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "secrets.h"
#include "util.h"

#define ENVD_TOKEN_PURPOSE "airlock e2b envd access token v1"
#define API_KEY_MAX 256

int e2b_envd_token(const char *tenant, const char *sandbox_id, char ret[E2B_ENVD_TOKEN_LEN + 1])
{
	uint8_t mac[SECRET_MAC_BYTES];
	int r = secret_key_mac(ENVD_TOKEN_PURPOSE, tenant, sandbox_id, mac);
	if (r < 0)
		return r;
	size_t o = strlcpy_al(ret, E2B_ENVD_TOKEN_PREFIX, E2B_ENVD_TOKEN_LEN + 1);
	for (size_t i = 0; i < sizeof(mac); i++)
		snprintf(ret + o + 2 * i, 3, "%02x", mac[i]);
	explicit_bzero(mac, sizeof(mac));
	return 0;
}

int e2b_control_authenticate(const char *api_key, char ret_tenant[TENANT_NAME_MAX + 1], enum auth_failure *ret_failure,
                             struct al_error *err)
{
	/* The key is the token itself; auth_token_verify parses it as a Bearer value. */
	if (api_key && strlen(api_key) > API_KEY_MAX) {
		*ret_failure = AUTH_FAILURE_MALFORMED;
		return al_error_set(err, AL_ERR_UNAUTHORIZED, EACCES,
		                    "X-API-KEY is longer than %u bytes: it must be an Airlock token (alk_…)",
		                    API_KEY_MAX);
	}
	char bearer[API_KEY_MAX + 8];
	if (api_key)
		snprintf(bearer, sizeof(bearer), "Bearer %s", api_key);
	int r = auth_token_verify(api_key ? bearer : NULL, ret_tenant, ret_failure, err);
	explicit_bzero(bearer, sizeof(bearer));
	if (r < 0 && err->code == AL_ERR_UNAUTHORIZED)
		al_error_set(err, AL_ERR_UNAUTHORIZED, EACCES,
		             "X-API-KEY must be a valid Airlock token of a tenant (airlock token create); E2B "
		             "keys are not Airlock tokens");
	return r;
}

int e2b_envd_authenticate(const char *sandbox_id, const char *access_token, char ret_tenant[TENANT_NAME_MAX + 1],
                          char ret_id[SANDBOX_ID_MAX + 1], enum auth_failure *ret_failure, struct al_error *err)
{
	if (!sandbox_id || !sandbox_id_valid(sandbox_id))
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT,
		                    "E2b-Sandbox-Id must name a sandbox (sb-…) of this airlockd; set "
		                    "E2B_SANDBOX_URL to http://HOST:PORT/e2b/envd");
	*ret_failure = AUTH_FAILURE_MISSING;
	if (access_token) {
		*ret_failure = AUTH_FAILURE_MALFORMED;
		if (strlen(access_token) == E2B_ENVD_TOKEN_LEN)
			*ret_failure = AUTH_FAILURE_UNKNOWN;
	}
	const char *denied = "X-Access-Token is not this sandbox's envd access token (the envdAccessToken "
	                     "its create or connect answered)";
	if (*ret_failure != AUTH_FAILURE_UNKNOWN)
		return al_error_set(err, AL_ERR_UNAUTHORIZED, EACCES, "%s", denied);
	struct sandbox_record rec;
	struct al_error ignored = {0};
	/* SECURITY: the lookup is the operator's (it finds any tenant's sandbox);
	 * only a token made for that tenant and id lets the request through, and
	 * an unknown id answers as a wrong token does. */
	if (sandbox_get(sandbox_id, NULL, &rec, &ignored) < 0)
		return al_error_set(err, AL_ERR_UNAUTHORIZED, EACCES, "%s", denied);
	char want[E2B_ENVD_TOKEN_LEN + 1];
	int r = e2b_envd_token(rec.tenant, rec.id, want);
	bool ok = r == 0 && CRYPTO_memcmp(want, access_token, E2B_ENVD_TOKEN_LEN) == 0;
	explicit_bzero(want, sizeof(want));
	if (ok) {
		strlcpy_al(ret_tenant, rec.tenant, TENANT_NAME_MAX + 1);
		strlcpy_al(ret_id, rec.id, SANDBOX_ID_MAX + 1);
	}
	sandbox_record_release(&rec);
	if (!ok)
		return al_error_set(err, AL_ERR_UNAUTHORIZED, EACCES, "%s", denied);
	return 0;
}

void e2b_error_render(enum api_route_kind kind, bool connect_stream, struct api_response *resp)
{
	json_t *e = json_object_get(resp->body, "error");
	if (kind == API_ROUTE_NATIVE || kind == API_ROUTE_UI || resp->status < 400 || !json_is_object(e) ||
	    resp->reader || resp->upgrade)
		return;
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	/* code and msg point into the old body: it is released on return.
	 * (clang's -Wunused-variable does not count the cleanup as a use.) */
	cleanup_json json_t *old = resp->body;
	(void)old;
	resp->body = NULL;
	if (kind == API_ROUTE_E2B_CONTROL) {
		resp->body = json_pack("{s:i, s:s}", "code", resp->status, "message", msg ? msg : "");
		return;
	}
	struct al_error err = {.code = AL_ERR_INTERNAL};
	for (int i = 1; code && i < AL_ERR__COUNT; i++)
		if (!strcmp(code, al_error_code_name((enum al_error_code)i)))
			err.code = (enum al_error_code)i;
	strlcpy_al(err.message, msg ? msg : "", sizeof(err.message));
	if (connect_stream) {
		size_t len = 0;
		uint8_t *buf = connect_end_stream(&err, &len);
		api_answer_bytes(resp, buf, len, CONNECT_STREAM_CONTENT_TYPE);
		return;
	}
	const char *name = connect_code_name(err.code);
	resp->status = connect_code_http_status(name);
	resp->body = json_pack("{s:s, s:s}", "code", name, "message", err.message);
}

/* envd's health check: 204 while the sandbox runs. Otherwise (paused,
 * killed, ...) 502, as E2B's proxy answers for a sandbox it cannot reach:
 * the SDK's isRunning() reads exactly that status as false, and anything
 * else as an error. The body is not an Airlock error, so it stays as it is. */
API_HANDLER(api_e2b_health)
{
	struct sandbox_record rec;
	struct al_error err = {0};
	if (sandbox_get(req->params[0], req->tenant, &rec, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	if (rec.state == SANDBOX_RUNNING) {
		resp->status = 204;
	} else {
		char msg[128];
		snprintf(msg, sizeof(msg), "sandbox %s is %s", rec.id, sandbox_state_name(rec.state));
		resp->status = 502;
		resp->body = json_pack("{s:i, s:s, s:s}", "code", 502, "message", msg, "sandboxId", rec.id);
	}
	sandbox_record_release(&rec);
}
