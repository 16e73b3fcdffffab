/* SPDX-License-Identifier: Apache-2.0 */
/* /v1/secrets (write-only credentials, per tenant) and /v1/ca (the Airlock
 * CA's certificate). */
#include "api-handlers.h"
#include "api-request.h"
#include "auth.h"
#include "ca.h"
#include "egress-supervisor.h"
#include "json-cleanup.h"
#include "secrets.h"
#include "util.h"

/* The tenant a request means. A token means its own (naming another is
 * 403); the admin names one with `given` (body or ?tenant=), else
 * fallback (NULL: every tenant, for the list). False when answered. */
static bool pick_tenant(const struct api_request *req, const char *given, const char *fallback,
                        char out[TENANT_NAME_MAX + 1], bool *ret_all, struct api_response *resp)
{
	*ret_all = false;
	if (given && !tenant_name_valid(given)) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
		                    "tenant: must be a name of 1 to 63 characters from [a-z0-9_-]");
		return false;
	}
	/* SECURITY: a token sees and changes only its own tenant's secrets. */
	if (req->tenant) {
		if (given && strcmp(given, req->tenant)) {
			api_response_errorf(resp, AL_ERR_FORBIDDEN,
			                    "tenant: your token belongs to tenant \"%s\"; it cannot use the secrets of "
			                    "\"%s\"",
			                    req->tenant, given);
			return false;
		}
		strlcpy_al(out, req->tenant, TENANT_NAME_MAX + 1);
		return true;
	}
	if (given)
		strlcpy_al(out, given, TENANT_NAME_MAX + 1);
	else if (fallback)
		strlcpy_al(out, fallback, TENANT_NAME_MAX + 1);
	else
		*ret_all = true;
	return true;
}

API_HANDLER(api_secret_set)
{
	struct al_error err = {0};
	struct secret_request sr = {0};
	int r = secret_request_parse(req->body, req->body_len, &sr, &err);
	/* SECURITY: the body held the value: wipe it (the server's buffer is
	 * ours until the answer). */
	explicit_bzero((char *)req->body, req->body_len);
	if (r < 0) {
		api_response_error(resp, &err);
		return;
	}
	char tenant[TENANT_NAME_MAX + 1];
	bool all;
	if (!pick_tenant(req, sr.tenant[0] ? sr.tenant : NULL, TENANT_DEFAULT, tenant, &all, resp)) {
		secret_request_release(&sr);
		return;
	}
	struct secret_info info;
	bool created = false;
	r = secret_set(tenant, &sr, &created, &info, &err);
	secret_request_release(&sr);
	if (r < 0) {
		api_response_error(resp, &err);
		return;
	}
	/* Rotation takes effect before the answer: the gateway has the new
	 * value for every sandbox that uses this secret. */
	egress_secret_changed(tenant, info.name);
	resp->status = created ? 201 : 200;
	resp->body = secret_info_to_json(&info);
	secret_info_release(&info);
}

API_HANDLER(api_secret_list)
{
	struct al_error err = {0};
	char tenant[TENANT_NAME_MAX + 1];
	bool all;
	if (!pick_tenant(req, api_query(req, "tenant"), NULL, tenant, &all, resp))
		return;
	struct secret_info *v = NULL;
	size_t n = 0;
	if (secret_list(all ? NULL : tenant, &v, &n, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		json_array_append_new(arr, secret_info_to_json(&v[i]));
		secret_info_release(&v[i]);
	}
	free(v);
	resp->body = json_pack("{s:o}", "secrets", arr);
}

API_HANDLER(api_secret_get)
{
	struct al_error err = {0};
	char tenant[TENANT_NAME_MAX + 1];
	bool all;
	if (!pick_tenant(req, api_query(req, "tenant"), TENANT_DEFAULT, tenant, &all, resp))
		return;
	struct secret_info info;
	if (secret_get(tenant, req->params[0], &info, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	resp->body = secret_info_to_json(&info);
	secret_info_release(&info);
}

API_HANDLER(api_secret_delete)
{
	struct al_error err = {0};
	char tenant[TENANT_NAME_MAX + 1];
	bool all;
	if (!pick_tenant(req, api_query(req, "tenant"), TENANT_DEFAULT, tenant, &all, resp))
		return;
	if (secret_delete(tenant, req->params[0], NULL, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	/* Gone from every sandbox's bindings before the answer. */
	egress_secret_changed(tenant, req->params[0]);
	resp->status = 204;
}

API_HANDLER(api_ca_get)
{
	(void)req;
	const char *pem = ca_cert_pem();
	if (!pem) {
		api_response_errorf(resp, AL_ERR_UNAVAILABLE, "the Airlock CA is not loaded");
		return;
	}
	api_answer_text(resp, xstrdup(pem), "text/plain; charset=utf-8");
}
