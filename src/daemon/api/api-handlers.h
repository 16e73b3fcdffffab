/* SPDX-License-Identifier: Apache-2.0 */
/* Handlers of the route table (api-routes.c); one file per resource. */
#ifndef AIRLOCK_API_HANDLERS_H
#define AIRLOCK_API_HANDLERS_H

#include "api.h"

#define API_HANDLER(name) void name(const struct api_request *req __attribute__((unused)), struct api_response *resp)
#define API_UPLOAD(name) int name(const struct api_request *req, struct api_upload *ret, struct al_error *err)

/* api-sandboxes.c */
API_HANDLER(api_healthz);
API_HANDLER(api_sandbox_list);
API_HANDLER(api_sandbox_create);
API_HANDLER(api_sandbox_get);
API_HANDLER(api_sandbox_delete);
API_HANDLER(api_sandbox_exec);
API_HANDLER(api_sandbox_metrics);
API_HANDLER(api_sandbox_pause);
API_HANDLER(api_sandbox_resume);
API_HANDLER(api_sandbox_fork);
API_HANDLER(api_sandbox_recover);
API_HANDLER(api_sandbox_timeout);
API_HANDLER(api_sandbox_network_get);
API_HANDLER(api_sandbox_network_put);
API_HANDLER(api_snapshot_create);
API_HANDLER(api_snapshot_list);
API_HANDLER(api_snapshot_get);
API_HANDLER(api_snapshot_delete);
/* api-processes.c */
API_HANDLER(api_process_start);
API_HANDLER(api_process_list);
API_HANDLER(api_process_get);
API_HANDLER(api_process_output);
API_UPLOAD(api_process_stdin);
API_HANDLER(api_process_signal);
API_HANDLER(api_process_resize);
API_HANDLER(api_process_wait);
API_HANDLER(api_process_attach);
/* api-files.c */
API_HANDLER(api_file_get);
API_UPLOAD(api_file_put);
API_HANDLER(api_file_stat);
API_HANDLER(api_file_list);
API_HANDLER(api_file_mkdir);
API_HANDLER(api_file_remove);
API_HANDLER(api_file_rename);
API_HANDLER(api_archive_get);
API_UPLOAD(api_archive_put);
/* api-pools.c */
API_HANDLER(api_pool_list);
API_HANDLER(api_ports_list);
API_HANDLER(api_port_put);
API_HANDLER(api_port_delete);
API_HANDLER(api_port_connect);
/* The /metrics series of the sandboxes' ports (caller frees). */
char *ports_metrics_text(void);
/* A port's URLs on the proxy ("" without one): PORT-ID.DOMAIN and the path form. */
void api_port_urls(const char *id, unsigned port, char *url, size_t url_size, char *path_url, size_t path_size);
/* The exposed ports of a record, for the sandbox's JSON. */
struct sandbox_record;
json_t *api_ports_json(const struct sandbox_record *r);
API_HANDLER(api_pool_put);
/* The warm pools' series for /metrics (the caller frees it). */
char *pools_metrics_text(void);
/* api-admin.c */
API_HANDLER(api_token_create);
API_HANDLER(api_token_list);
API_HANDLER(api_token_revoke);
API_HANDLER(api_tenant_put);
API_HANDLER(api_tenant_get);
API_HANDLER(api_events);
API_HANDLER(api_prometheus);
/* api-secrets.c */
API_HANDLER(api_secret_set);
API_HANDLER(api_secret_list);
API_HANDLER(api_secret_get);
API_HANDLER(api_secret_delete);
API_HANDLER(api_ca_get);
/* api-templates.c */
API_HANDLER(api_template_list);
API_HANDLER(api_template_get);
API_HANDLER(api_template_delete);
API_UPLOAD(api_template_build);
API_UPLOAD(api_template_import);
/* api-ui.c */
API_HANDLER(api_ui_get);

/* api-e2b.c */
API_HANDLER(api_e2b_health);
/* api-e2b-control.c */
API_HANDLER(api_e2b_create);
API_HANDLER(api_e2b_list);
API_HANDLER(api_e2b_list_v1);
API_HANDLER(api_e2b_get);
API_HANDLER(api_e2b_kill);
API_HANDLER(api_e2b_timeout);
API_HANDLER(api_e2b_pause);
API_HANDLER(api_e2b_connect);
API_HANDLER(api_e2b_resume);
API_HANDLER(api_e2b_network_put);
API_HANDLER(api_e2b_metrics);
API_HANDLER(api_e2b_unsupported);
/* api-e2b-process.c */
API_HANDLER(api_e2b_process_start);
API_HANDLER(api_e2b_process_connect);
API_HANDLER(api_e2b_process_list);
API_HANDLER(api_e2b_process_send_input);
API_HANDLER(api_e2b_process_close_stdin);
API_HANDLER(api_e2b_process_send_signal);
API_HANDLER(api_e2b_process_update);
API_HANDLER(api_e2b_process_stream_input);
/* api-e2b-fs.c */
API_HANDLER(api_e2b_fs_stat);
API_HANDLER(api_e2b_fs_list_dir);
API_HANDLER(api_e2b_fs_make_dir);
API_HANDLER(api_e2b_fs_move);
API_HANDLER(api_e2b_fs_remove);
/* api-e2b-files.c */
API_HANDLER(api_e2b_files_get);
API_UPLOAD(api_e2b_files_post);

/* api-files.c, shared with E2B's envd (api-e2b-fs.c, api-e2b-files.c). One
 * FILE_OP (proto.h) on sb's channel: *ret_result is the OK payload; with
 * entries (a list) the listed entries are appended, within the list limits. */
struct sandbox;
int api_file_op(struct sandbox *sb, json_t *msg, const char *what, json_t **ret_result, json_t *entries,
                struct al_error *err);
/* Answers with the bytes of the regular file at path (an absolute guest
 * path), streamed; takes over sb (released when the answer is done). */
void api_file_send(const struct api_request *req, struct api_response *resp, struct sandbox *sb, const char *path);

/* api-e2b-watch.c */
API_HANDLER(api_e2b_watch_dir);

/* api-admin.c: a 200 answer with a text body (text is taken over). */
void api_answer_text(struct api_response *resp, char *text, const char *content_type);
/* The same with len bytes of data (taken over). */
void api_answer_bytes(struct api_response *resp, uint8_t *data, size_t len, const char *content_type);

/* Shared by the handlers: the running sandbox named by the first path
 * parameter, within the caller's tenant; answers the error itself. */
struct sandbox;
struct sandbox *api_sandbox_acquire(const struct api_request *req, struct api_response *resp);
/* Answers a JSON body parse failure etc. */
json_t *api_parse_json_object(const struct api_request *req, struct api_response *resp);

/* api-sandboxes.c: JSON lines of process output. */
struct guest_stream;
struct exec_request;
json_t *api_output_line(uint8_t type, const uint8_t *data, size_t len);
json_t *api_exit_line(uint8_t type, json_t *result, uint64_t duration_ms);
/* Answers with the JSON lines of s's output; takes over the sandbox and stream references. */
void api_stream_output(const struct api_request *req, struct api_response *resp, struct sandbox *sb,
                       struct guest_stream *s, bool from_start, bool follow, bool kill_on_close, json_t *first_line);
/* Starts a LOG-mode process (env merged, stdin sent); answers errors itself. */
int api_start_process(const struct api_request *req, struct api_response *resp, struct sandbox *sb,
                      const struct exec_request *er, char ret_pid[32], struct guest_stream **ret_stream);

/* api-cluster.c */
API_HANDLER(api_cluster_adopt);

#endif
