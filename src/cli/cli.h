/* SPDX-License-Identifier: Apache-2.0 */
/* Internal header of the airlock CLI: the connection, the shared helpers of
 * cli-main.c, and the verbs each topic file implements. */
#ifndef AIRLOCK_CLI_H
#define AIRLOCK_CLI_H

#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>

#include "cli-http.h"
#include "error.h"
#include "json-cleanup.h"
#include "util.h"

#define EXIT_CLIENT 125 /* the request failed (not the command) */
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124

/* Set once by main from the global options and the environment. */
extern bool cli_opt_json;

/* SECURITY: text that came from a guest or from another tenant's data (file
 * names, process commands, sandbox names and labels, events, the daemon's
 * relayed errors), made safe for a terminal: C0 controls, DEL, C1 controls,
 * bidirectional overrides and invalid UTF-8 are written as \xNN or \uNNNN.
 * The result lives until 16 more calls (a ring; main thread only), so several
 * can go into one printf. NULL gives "(null)". --json output does not need it
 * (JSON escapes controls). */
const char *cli_esc(const char *s);
/* cli_esc() of obj's string member key. */
const char *cli_esc_json(json_t *obj, const char *key);

/* Prints "airlock: MSG\nRun 'airlock --help' for usage." and returns EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "airlock: MSG" and returns EXIT_CLIENT. */
int cli_client_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the daemon's error answer (status, body) and returns EXIT_CLIENT. */
int cli_report(long status, json_t *body);
/* Prints "airlock: " and err's message and returns EXIT_CLIENT. */
int cli_report_error(const struct al_error *err);
/* One JSON request; any status but want_status is reported (EXIT_CLIENT). On
 * success *ret is the answer (an empty object for an empty body). */
int cli_call(const char *method, const char *path, json_t *body, long want_status, json_t **ret);
/* cli_call() for a verb that lists: the answer's array `key` in *ret_list (a new
 * reference; an empty array if the answer has none). With --json the array
 * is printed here instead and *ret_list is NULL: nothing is left to do. */
int cli_call_list(const char *method, const char *path, json_t *body, long want_status, const char *key,
                  json_t **ret_list);
/* GET path and print its array `key` (cli_call_list): with --json as JSON,
 * else a header line (header_fmt with the column names), then print_row for
 * each element. */
int cli_print_table(const char *path, const char *key, void (*print_row)(json_t *row), const char *header_fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* METHOD PREFIX/ID/SUFFIX for each of n ids, printing each id done; EXIT_CLIENT if any failed. */
int cli_call_each(const char *method, const char *prefix, const char *suffix, char **ids, int n, long want_status);
/* A request whose 200 answer goes to req's on_line or on_bytes; any other
 * answer is reported (EXIT_CLIENT). */
int cli_call_streamed(struct cli_req *req);
/* The answer of a verb that makes or brings back one thing (a sandbox, a
 * snapshot): all of it with --json, else its id; what names the thing in the
 * error when the answer has no id. */
int cli_print_answer_id(json_t *answer, const char *what);
/* "LABEL WORD WORD...", the label padded to width, or "LABEL if_empty". */
void cli_print_word_list(const char *label, int width, json_t *words, const char *if_empty);
/* Appends "key=value" of arg to obj; usage error if there is no '='. */
int cli_add_kv(json_t *obj, const char *flag, const char *arg);
/* The exit status of an exit object (exit_code, signal, timed_out). */
int cli_exit_status_of(json_t *exit_obj);
/* GET path, each line of a 200 answer to on_line (JSON lines, followed
 * streams); any other answer reported (EXIT_CLIENT). */
int cli_get_lines(const char *path, int (*on_line)(void *ud, char *line, size_t len, struct al_error *err));
/* Prints json compactly (--json) or indented, with a newline. */
void cli_print_json(json_t *v, bool compact);
/* "/v1/sandboxes/ID/REST?path=ESCAPED" with path URL-encoded. */
char *cli_path_with_query(const char *prefix, const char *key, const char *value);

/* getopt_long for the small verbs: 'h' prints help, 'j' sets cli_opt_json, any
 * other option goes to on_opt (optarg set). *ret_first: the first operand. */
int cli_small_opts(int argc, char **argv, const char *shorts, const struct option *longs, int *ret_first,
                   int (*on_opt)(int c, void *ud), void *ud);
int cli_no_opt(int c, void *ud);
extern const struct option cli_json_only[]; /* --json, --help */
/* The options of cli_json_only and one operand, a sandbox id (usage error
 * "VERB takes one sandbox id" else). */
int cli_sandbox_operand(int argc, char **argv, const char **ret_id);

/* Verbs, each (argc, argv) with argv[0] the verb name. */
int cli_cmd_run(int argc, char **argv);
int cli_cmd_exec(int argc, char **argv);
int cli_cmd_ps(int argc, char **argv);
int cli_cmd_logs(int argc, char **argv);
int cli_cmd_network(int argc, char **argv);
/* logs --network: the gateway's decisions for one sandbox (events). */
int cli_network_logs(const char *sandbox, bool follow);
/* Appends RULE to body.network.<list> (created on first use). */
void cli_network_add_rule(json_t *create_body, const char *list, const char *rule);
int cli_cmd_kill(int argc, char **argv);
int cli_cmd_wait(int argc, char **argv);
int cli_cmd_cp(int argc, char **argv);
int cli_cmd_fs(int argc, char **argv);
int cli_cmd_stats(int argc, char **argv);
int cli_cmd_token(int argc, char **argv);
int cli_cmd_tenant(int argc, char **argv);
int cli_cmd_events(int argc, char **argv);
int cli_cmd_snapshot(int argc, char **argv);
int cli_cmd_snapshots(int argc, char **argv);
int cli_cmd_restore(int argc, char **argv);
int cli_cmd_fork(int argc, char **argv);
int cli_cmd_recover(int argc, char **argv);
int cli_cmd_timeout(int argc, char **argv);
int cli_cmd_secret(int argc, char **argv);
int cli_cmd_ca(int argc, char **argv);
int cli_cmd_pool(int argc, char **argv);
int cli_cmd_info(int argc, char **argv);
int cli_cmd_expose(int argc, char **argv);
int cli_cmd_unexpose(int argc, char **argv);
int cli_cmd_ports(int argc, char **argv);
int cli_cmd_port_forward(int argc, char **argv);
int cli_cmd_template(int argc, char **argv);
/* --secret ENV=NAME: adds the grant to a create (or fork) body's "secrets". */
int cli_secret_grant_add(json_t *body, const char *arg);

/* cli-exec.c: the exec body's "cmd" (argv of n_cmd words). */
void cli_exec_set_cmd(json_t *body, char **cmd, int n_cmd);
/* Runs body's command in sandbox id streaming (or buffered with
 * stream=false); returns the command's exit status. */
int cli_exec_run(const char *id, json_t *body, bool stream, bool force_stdin);
/* POST /v1/sandboxes/ID/processes: starts body's command in the background;
 * *ret_proc is the daemon's answer (the process, with its id). */
int cli_process_start(const char *id, json_t *body, json_t **ret_proc);
/* cli-upgrade.c: an upgraded connection to the daemon (libcurl does no
 * upgrades): GET path with "Connection: Upgrade", "Upgrade: protocol".
 * On 101 *ret_fd is the connection and the bytes that came after the
 * answer's head (at most extra_size) are in extra, *ret_extra_len of them;
 * else the failure or the daemon's refusal is reported on stderr (what
 * names the request) and EXIT_CLIENT returned. */
#define CLI_UPGRADE_HEAD_MAX (16u << 10) /* the 101 answer's head */
int cli_upgrade(const char *path, const char *protocol, const char *what, int *ret_fd, uint8_t *extra,
                size_t extra_size, size_t *ret_extra_len);
/* SECURITY: ids that go into a request line written by hand: only
 * [A-Za-z0-9._-], 1-128 of them. */
bool cli_id_ok(const char *s);
/* cli-pty.c: starts cmd with a PTY in sandbox id and attaches to it. */
int cli_pty_exec(const char *id, json_t *body, bool forward_stdin);

#endif
