/* SPDX-License-Identifier: Apache-2.0 */
/* Every route of the API in one table: what the server matches, what
 * `airlockd --print-routes` prints, and what docs/api/openapi.yaml must
 * describe (tests/integration/test_openapi.py checks both ways). */
#include "api-handlers.h"
#include "api-request.h"
#include "auth.h"
#include "connect-wire.h"
#include "secrets.h"
#include "util.h"

#define KIB 1024u
#define SMALL (64u * KIB)
#define TEMPLATE_UPLOAD_ROUTE_MAX ((size_t)1 << 40)

static const struct api_route api_routes[] = {
    {"GET", "/healthz", 0, api_healthz, NULL, false},
    /* SECURITY: host-wide numbers (every tenant's sandboxes, creates, errors,
     * egress decisions, auth failures): the operator's, never a tenant's. A
     * tenant reads its own sandboxes' numbers at /v1/sandboxes/{id}/metrics. */
    {"GET", "/metrics", 0, api_prometheus, NULL, true},
    {"GET", "/v1/sandboxes", 0, api_sandbox_list, NULL, false},
    {"POST", "/v1/sandboxes", API_CREATE_BODY_MAX, api_sandbox_create, NULL, false},
    {"GET", "/v1/sandboxes/{id}", 0, api_sandbox_get, NULL, false},
    {"DELETE", "/v1/sandboxes/{id}", 0, api_sandbox_delete, NULL, false},
    {"POST", "/v1/sandboxes/{id}/exec", API_EXEC_BODY_MAX, api_sandbox_exec, NULL, false},
    {"GET", "/v1/sandboxes/{id}/metrics", 0, api_sandbox_metrics, NULL, false},
    {"POST", "/v1/sandboxes/{id}/pause", 0, api_sandbox_pause, NULL, false},
    {"POST", "/v1/sandboxes/{id}/resume", 0, api_sandbox_resume, NULL, false},
    {"POST", "/v1/sandboxes/{id}/snapshots", SMALL, api_snapshot_create, NULL, false},
    {"POST", "/v1/sandboxes/{id}/fork", SMALL, api_sandbox_fork, NULL, false},
    {"POST", "/v1/sandboxes/{id}/recover", SMALL, api_sandbox_recover, NULL, false},
    {"POST", "/v1/sandboxes/{id}/timeout", SMALL, api_sandbox_timeout, NULL, false},
    {"GET", "/v1/sandboxes/{id}/network", 0, api_sandbox_network_get, NULL, false},
    {"PUT", "/v1/sandboxes/{id}/network", API_NETWORK_BODY_MAX, api_sandbox_network_put, NULL, false},
    {"GET", "/v1/sandboxes/{id}/ports", 0, api_ports_list, NULL, false},
    {"PUT", "/v1/sandboxes/{id}/ports/{port}", SMALL, api_port_put, NULL, false},
    {"DELETE", "/v1/sandboxes/{id}/ports/{port}", 0, api_port_delete, NULL, false},
    {"GET", "/v1/sandboxes/{id}/ports/{port}/connect", 0, api_port_connect, NULL, false},
    {"GET", "/v1/snapshots", 0, api_snapshot_list, NULL, false},
    {"GET", "/v1/snapshots/{id}", 0, api_snapshot_get, NULL, false},
    {"DELETE", "/v1/snapshots/{id}", 0, api_snapshot_delete, NULL, false},
    {"POST", "/v1/sandboxes/{id}/processes", API_EXEC_BODY_MAX, api_process_start, NULL, false},
    {"GET", "/v1/sandboxes/{id}/processes", 0, api_process_list, NULL, false},
    {"GET", "/v1/sandboxes/{id}/processes/{pid}", 0, api_process_get, NULL, false},
    {"GET", "/v1/sandboxes/{id}/processes/{pid}/output", 0, api_process_output, NULL, false},
    {"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", EXEC_STDIN_MAX * 2, NULL, api_process_stdin, false},
    {"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", SMALL, api_process_signal, NULL, false},
    {"POST", "/v1/sandboxes/{id}/processes/{pid}/resize", SMALL, api_process_resize, NULL, false},
    {"GET", "/v1/sandboxes/{id}/processes/{pid}/wait", 0, api_process_wait, NULL, false},
    /* The PTY attach, also as a WebSocket for browsers (docs/api.md). */
    {"GET", "/v1/sandboxes/{id}/processes/{pid}/attach", 0, api_process_attach, NULL, false, API_ROUTE_NATIVE, true},
    {"GET", "/v1/sandboxes/{id}/files", 0, api_file_get, NULL, false},
    {"PUT", "/v1/sandboxes/{id}/files", 0, NULL, api_file_put, false},
    {"GET", "/v1/sandboxes/{id}/files/stat", 0, api_file_stat, NULL, false},
    {"GET", "/v1/sandboxes/{id}/files/list", 0, api_file_list, NULL, false},
    {"POST", "/v1/sandboxes/{id}/files/mkdir", SMALL, api_file_mkdir, NULL, false},
    {"POST", "/v1/sandboxes/{id}/files/remove", SMALL, api_file_remove, NULL, false},
    {"POST", "/v1/sandboxes/{id}/files/rename", SMALL, api_file_rename, NULL, false},
    {"GET", "/v1/sandboxes/{id}/archive", 0, api_archive_get, NULL, false},
    {"PUT", "/v1/sandboxes/{id}/archive", 0, NULL, api_archive_put, false},
    {"POST", "/v1/tokens", AUTH_BODY_MAX, api_token_create, NULL, true},
    {"GET", "/v1/tokens", 0, api_token_list, NULL, true},
    {"DELETE", "/v1/tokens/{id}", 0, api_token_revoke, NULL, true},
    {"PUT", "/v1/tenants/{name}", AUTH_BODY_MAX, api_tenant_put, NULL, true},
    {"GET", "/v1/tenants/{name}", 0, api_tenant_get, NULL, false},
    {"GET", "/v1/events", 0, api_events, NULL, false},
    {"GET", "/v1/pools", 0, api_pool_list, NULL, false},
    {"PUT", "/v1/pools", POOL_BODY_MAX, api_pool_put, NULL, false},
    {"POST", "/v1/secrets", SECRET_BODY_MAX, api_secret_set, NULL, false},
    {"GET", "/v1/secrets", 0, api_secret_list, NULL, false},
    {"GET", "/v1/secrets/{name}", 0, api_secret_get, NULL, false},
    {"DELETE", "/v1/secrets/{name}", 0, api_secret_delete, NULL, false},
    {"GET", "/v1/ca", 0, api_ca_get, NULL, false},
    /* Templates (api-templates.c): the uploads' limit is --max-template-upload-mib. */
    {"POST", "/v1/cluster/sandboxes/{id}/adopt", SMALL, api_cluster_adopt, NULL, true},
    {"GET", "/v1/templates", 0, api_template_list, NULL, false},
    {"POST", "/v1/templates", TEMPLATE_UPLOAD_ROUTE_MAX, NULL, api_template_build, false},
    {"POST", "/v1/templates/import", TEMPLATE_UPLOAD_ROUTE_MAX, NULL, api_template_import, false},
    {"GET", "/v1/templates/{name}", 0, api_template_get, NULL, false},
    {"DELETE", "/v1/templates/{name}", 0, api_template_delete, NULL, false},
    /* The web console's static files (api-ui.c, docs/console.md): TCP only,
     * no token; not the API, so neither in openapi.yaml nor in --print-routes.
     * The pattern ending in a "*" segment matches /ui and every path below it. */
    {"GET", "/ui/*", 0, api_ui_get, NULL, false, API_ROUTE_UI},
    {"HEAD", "/ui/*", 0, api_ui_get, NULL, false, API_ROUTE_UI},
    /* E2B compatibility (api-e2b.h, docs/e2b.md): not in openapi.yaml (E2B's
     * own specs describe them); each answers only under its own prefix. */
    {"GET", "/e2b/envd/health", 0, api_e2b_health, NULL, false, API_ROUTE_E2B_ENVD},
    /* api-e2b-control.c: E2B's control API (docs/e2b.md, "Control API"). */
    {"POST", "/e2b/v2/sandboxes", API_CREATE_BODY_MAX, api_e2b_create, NULL, false, API_ROUTE_E2B_CONTROL},
    {"GET", "/e2b/v2/sandboxes", 0, api_e2b_list, NULL, false, API_ROUTE_E2B_CONTROL},
    {"GET", "/e2b/sandboxes", 0, api_e2b_list_v1, NULL, false, API_ROUTE_E2B_CONTROL},
    {"GET", "/e2b/sandboxes/{id}", 0, api_e2b_get, NULL, false, API_ROUTE_E2B_CONTROL},
    {"DELETE", "/e2b/sandboxes/{id}", 0, api_e2b_kill, NULL, false, API_ROUTE_E2B_CONTROL},
    {"POST", "/e2b/sandboxes/{id}/timeout", SMALL, api_e2b_timeout, NULL, false, API_ROUTE_E2B_CONTROL},
    {"POST", "/e2b/sandboxes/{id}/pause", SMALL, api_e2b_pause, NULL, false, API_ROUTE_E2B_CONTROL},
    {"POST", "/e2b/v2/sandboxes/{id}/connect", SMALL, api_e2b_connect, NULL, false, API_ROUTE_E2B_CONTROL},
    {"POST", "/e2b/sandboxes/{id}/connect", SMALL, api_e2b_connect, NULL, false, API_ROUTE_E2B_CONTROL},
    {"POST", "/e2b/sandboxes/{id}/resume", SMALL, api_e2b_resume, NULL, false, API_ROUTE_E2B_CONTROL},
    {"PUT", "/e2b/sandboxes/{id}/network", API_NETWORK_BODY_MAX, api_e2b_network_put, NULL, false,
     API_ROUTE_E2B_CONTROL},
    {"GET", "/e2b/sandboxes/{id}/metrics", 0, api_e2b_metrics, NULL, false, API_ROUTE_E2B_CONTROL},
    {"POST", "/e2b/sandboxes/{id}/fork", SMALL, api_e2b_unsupported, NULL, false, API_ROUTE_E2B_CONTROL},
    {"POST", "/e2b/sandboxes/{id}/snapshots", SMALL, api_e2b_unsupported, NULL, false, API_ROUTE_E2B_CONTROL},
    {"GET", "/e2b/snapshots", 0, api_e2b_unsupported, NULL, false, API_ROUTE_E2B_CONTROL},
    {"DELETE", "/e2b/templates/{id}", 0, api_e2b_unsupported, NULL, false, API_ROUTE_E2B_CONTROL},
    {"GET", "/e2b/sandboxes/{id}/logs", 0, api_e2b_unsupported, NULL, false, API_ROUTE_E2B_CONTROL},
    {"GET", "/e2b/v2/sandboxes/{id}/logs", 0, api_e2b_unsupported, NULL, false, API_ROUTE_E2B_CONTROL},
    /* envd's process service (api-e2b-process.c); StreamInput only says it is not served. */
    {"POST", "/e2b/envd/process.Process/Start", CONNECT_ENVELOPE_HEADER + CONNECT_MESSAGE_MAX, api_e2b_process_start,
     NULL, false, API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/process.Process/Connect", SMALL, api_e2b_process_connect, NULL, false, API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/process.Process/List", SMALL, api_e2b_process_list, NULL, false, API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/process.Process/SendInput", CONNECT_MESSAGE_MAX, api_e2b_process_send_input, NULL, false,
     API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/process.Process/CloseStdin", SMALL, api_e2b_process_close_stdin, NULL, false,
     API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/process.Process/SendSignal", SMALL, api_e2b_process_send_signal, NULL, false,
     API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/process.Process/Update", SMALL, api_e2b_process_update, NULL, false, API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/process.Process/StreamInput", SMALL, api_e2b_process_stream_input, NULL, false,
     API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/filesystem.Filesystem/Stat", SMALL, api_e2b_fs_stat, NULL, false, API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/filesystem.Filesystem/ListDir", SMALL, api_e2b_fs_list_dir, NULL, false, API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/filesystem.Filesystem/MakeDir", SMALL, api_e2b_fs_make_dir, NULL, false, API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/filesystem.Filesystem/Move", SMALL, api_e2b_fs_move, NULL, false, API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/filesystem.Filesystem/Remove", SMALL, api_e2b_fs_remove, NULL, false, API_ROUTE_E2B_ENVD},
    {"GET", "/e2b/envd/files", 0, api_e2b_files_get, NULL, false, API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/files", 0, NULL, api_e2b_files_post, false, API_ROUTE_E2B_ENVD},
    {"POST", "/e2b/envd/filesystem.Filesystem/WatchDir", 64 * 1024, api_e2b_watch_dir, NULL, false, API_ROUTE_E2B_ENVD},
};

/* Matches one path against a pattern, collecting the {…} segments. */
static bool pattern_match(const char *pattern, const char *path, struct api_request *req)
{
	size_t n_params = 0;
	const char *p = pattern, *u = path;
	while (*p && *u) {
		if (*p != '/' || *u != '/')
			return false;
		p++;
		u++;
		if (p[0] == '*' && p[1] == '\0')
			return true; /* a last segment "*": the rest of the path, whatever it is (or none) */
		const char *pe = strchrnul(p, '/'), *ue = strchrnul(u, '/');
		size_t plen = (size_t)(pe - p), ulen = (size_t)(ue - u);
		if (plen > 2 && p[0] == '{' && p[plen - 1] == '}') {
			/* SECURITY: a parameter is one non-empty segment of bounded length; each
			 * handler validates its shape (ids, names) before using it. */
			if (ulen == 0 || ulen > API_PARAM_MAX || n_params >= API_PARAMS_MAX)
				return false;
			if (req) {
				memcpy(req->params[n_params], u, ulen);
				req->params[n_params][ulen] = '\0';
			}
			n_params++;
		} else if (plen != ulen || memcmp(p, u, plen) != 0) {
			return false;
		}
		p = pe;
		u = ue;
	}
	if (*u == '\0' && !strcmp(p, "/*"))
		return true;
	return *p == '\0' && (*u == '\0' || (u[0] == '/' && u[1] == '\0'));
}

const struct api_route *api_route_match(const char *method, const char *path, struct api_request *req,
                                        bool *ret_path_known, char *allowed, size_t allowed_size)
{
	*ret_path_known = false;
	size_t o = 0;
	if (allowed_size)
		allowed[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(api_routes); i++) {
		if (!pattern_match(api_routes[i].pattern, path, NULL))
			continue;
		*ret_path_known = true;
		if (!strcmp(api_routes[i].method, method)) {
			pattern_match(api_routes[i].pattern, path, req);
			return &api_routes[i];
		}
		int n = snprintf(allowed + o, allowed_size - o, "%s%s", o ? ", " : "", api_routes[i].method);
		if (n > 0 && (size_t)n < allowed_size - o)
			o += (size_t)n;
	}
	return NULL;
}

/* The API's routes: the console's static files are not (docs/console.md). */
void api_print_routes(FILE *f)
{
	for (size_t i = 0; i < ARRAY_SIZE(api_routes); i++)
		if (api_routes[i].kind != API_ROUTE_UI)
			fprintf(f, "%s %s\n", api_routes[i].method, api_routes[i].pattern);
}
