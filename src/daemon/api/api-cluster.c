/* SPDX-License-Identifier: Apache-2.0 */
/* The node's routes for a front in cluster mode (docs/cluster.md). */
#include "api-handlers.h"
#include "cluster-node.h"
#include "sandbox.h"

/* POST /v1/cluster/sandboxes/{id}/adopt: operator only (a front's
 * delegation). The sandbox comes from the shared store, under its id. */
API_HANDLER(api_cluster_adopt)
{
	struct al_error err = {0};
	struct sandbox_record rec;
	if (!sandbox_id_valid(req->params[0])) {
		api_response_errorf(resp, AL_ERR_NOT_FOUND, "no sandbox %.40s", req->params[0]);
		return;
	}
	if (cluster_adopt(req->params[0], &rec, &err) < 0) {
		api_response_error(resp, &err);
		if (err.code == AL_ERR_UNAVAILABLE)
			resp->retry_after_s = 1;
		return;
	}
	resp->body = api_sandbox_json(&rec);
	sandbox_record_release(&rec);
}
