/* SPDX-License-Identifier: Apache-2.0 */
/* E2B's envd process messages as Airlock's (api-e2b-process-request.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "api-e2b-process-request.h"
#include "connect-wire.h"
#include "json-cleanup.h"
#include "json-field.h"
#include "util.h"

/* A field of a message, NULL when absent or null (protobuf's JSON: both mean the default). */
static json_t *field(const json_t *msg, const char *name)
{
	json_t *v = json_object_get(msg, name);
	return json_is_null(v) ? NULL : v;
}

/* SECURITY: a uint32 of a client's message: a JSON integer or a decimal
 * string (protobuf's JSON allows both), within 0..UINT32_MAX. */
static int u32_parse(const json_t *v, uint32_t *ret)
{
	if (json_is_integer(v)) {
		json_int_t n = json_integer_value(v);
		if (n < 0 || n > (json_int_t)UINT32_MAX)
			return -ERANGE;
		*ret = (uint32_t)n;
		return 0;
	}
	uint64_t x;
	if (connect_digits_parse(json_string_value(v), &x) < 0)
		return -EINVAL;
	if (x > UINT32_MAX)
		return -ERANGE;
	*ret = (uint32_t)x;
	return 0;
}

/* SECURITY: an optional string field: a JSON string without NUL of at most max bytes. */
static int string_field(const json_t *msg, const char *name, size_t max, const char **ret, struct al_error *err)
{
	json_t *v = field(msg, name);
	*ret = NULL;
	if (!v)
		return 0;
	if (!json_is_string(v) || json_string_has_nul(v) || json_string_length(v) > max)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s must be a string of at most %zu bytes",
		                    name, max);
	*ret = json_string_value(v);
	return 0;
}

int e2b_selector_parse(const json_t *msg, struct e2b_selector *ret, struct al_error *err)
{
	json_t *p = field(msg, "process");
	json_t *pid = json_is_object(p) ? field(p, "pid") : NULL, *tag = json_is_object(p) ? field(p, "tag") : NULL;
	*ret = (struct e2b_selector){0};
	if (!json_is_object(p) || (pid && tag) || (!pid && !tag))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "process must be a selector: {\"pid\": N} or {\"tag\": \"…\"}");
	if (pid && u32_parse(pid, &ret->pid) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "process.pid must be a uint32");
	if (tag && (string_field(p, "tag", EXEC_TAG_MAX, &ret->tag, err) < 0))
		return -EINVAL;
	return 0;
}

static void env_add(struct kv_list *env, const char *key, const char *value)
{
	env->keys[env->n] = xstrdup(key);
	env->values[env->n] = xstrdup(value);
	env->n++;
}

static bool env_has(const struct kv_list *env, const char *key)
{
	for (size_t i = 0; i < env->n; i++)
		if (!strcmp(env->keys[i], key))
			return true;
	return false;
}

/* SECURITY: the ProcessConfig of a client's StartRequest: cmd, args and
 * envs within the limits of an Airlock exec (sandbox-model.h), cwd an envd
 * path (e2b_path_resolve). The guest runs it as u; nothing here touches a
 * host path. */
static int config_parse(const json_t *p, const struct e2b_user *u, struct exec_request *er, struct al_error *err)
{
	const char *cmd = NULL, *cwd = NULL;
	if (!json_is_object(p))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "process must be a ProcessConfig {\"cmd\", \"args\", \"envs\", \"cwd\"}");
	if (string_field(p, "cmd", EXEC_ARG_MAX, &cmd, err) < 0 || string_field(p, "cwd", E2B_PATH_MAX, &cwd, err) < 0)
		return -EINVAL;
	if (!cmd || !cmd[0])
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "process.cmd is required (the program to run)");
	json_t *args = field(p, "args"), *envs = field(p, "envs");
	if ((args && !json_is_array(args)) || json_array_size(args) >= EXEC_ARGV_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "process.args must be an array of fewer than %d strings", EXEC_ARGV_MAX);
	if ((envs && !json_is_object(envs)) || json_object_size(envs) > ENV_ENTRIES_MAX - 2)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "process.envs must be an object of at most %d strings", ENV_ENTRIES_MAX - 2);
	size_t total = strlen(cmd), i;
	json_t *v;
	json_array_foreach (args, i, v) {
		if (!json_is_string(v) || json_string_has_nul(v) || json_string_length(v) > EXEC_ARG_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "process.args[%zu] must be a string of at most %u bytes", i, EXEC_ARG_MAX);
		total += json_string_length(v);
	}
	if (total > EXEC_ARGV_TOTAL_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "process.cmd and args are %zu bytes together; the limit is %u", total,
		                    EXEC_ARGV_TOTAL_MAX);
	const char *key;
	json_object_foreach (envs, key, v) {
		if (!env_name_valid(key))
			return al_error_set(
			    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			    "process.envs: name \"%.64s\" must match [A-Za-z_][A-Za-z0-9_]* (at most %d "
			    "bytes)",
			    key, ENV_NAME_MAX);
		if (!json_is_string(v) || json_string_has_nul(v) || json_string_length(v) > ENV_VALUE_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "process.envs.%.64s must be a string of at most %u bytes", key,
			                    ENV_VALUE_MAX);
	}
	char dir[E2B_PATH_MAX + 1];
	if (e2b_path_resolve(u, cwd && cwd[0] ? cwd : u->home, dir, err) < 0)
		return -EINVAL;

	er->argc = 1 + json_array_size(args);
	er->argv = xcalloc(er->argc + 1, sizeof(char *));
	er->argv[0] = xstrdup(cmd);
	json_array_foreach (args, i, v)
		er->argv[i + 1] = xstrdup(json_string_value(v));
	er->env.keys = xcalloc(json_object_size(envs) + 2, sizeof(char *));
	er->env.values = xcalloc(json_object_size(envs) + 2, sizeof(char *));
	json_object_foreach (envs, key, v)
		env_add(&er->env, key, json_string_value(v));
	/* envd's environment of a user's process. */
	if (!env_has(&er->env, "HOME"))
		env_add(&er->env, "HOME", u->home);
	if (!env_has(&er->env, "USER"))
		env_add(&er->env, "USER", u->name);
	er->cwd = xstrdup(dir);
	return 0;
}

/* SECURITY: {size: {rows, cols}} within the PTY limits; a missing rows or cols
 * is 0 (refused); no size at all is 24 x 80 with defaults. */
static int pty_size_parse(const json_t *pty, bool defaults, unsigned *ret_rows, unsigned *ret_cols,
                          struct al_error *err)
{
	json_t *size = json_is_object(pty) ? field(pty, "size") : NULL;
	uint32_t rows = defaults && !size ? 24 : 0, cols = defaults && !size ? 80 : 0;
	if (!json_is_object(pty) || (size && !json_is_object(size)) ||
	    (size && field(size, "rows") && u32_parse(field(size, "rows"), &rows) < 0) ||
	    (size && field(size, "cols") && u32_parse(field(size, "cols"), &cols) < 0) || rows < 1 ||
	    rows > PTY_ROWS_MAX || cols < 1 || cols > PTY_COLS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "pty must be {\"size\": {\"rows\": 1..%d, \"cols\": 1..%d}}", PTY_ROWS_MAX,
		                    PTY_COLS_MAX);
	*ret_rows = rows;
	*ret_cols = cols;
	return 0;
}

int e2b_start_request_parse(const json_t *msg, const struct e2b_user *u, uint64_t timeout_ms, struct exec_request *ret,
                            struct al_error *err)
{
	struct exec_request er = {0};
	json_t *pty = field(msg, "pty"), *stdin_v = field(msg, "stdin");
	const char *tag = NULL;
	int r = config_parse(field(msg, "process"), u, &er, err);
	if (r == 0 && (r = string_field(msg, "tag", EXEC_TAG_MAX, &tag, err)) == 0 && stdin_v &&
	    !json_is_boolean(stdin_v))
		r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "stdin must be true or false");
	if (r == 0 && pty)
		r = pty_size_parse(pty, true, &er.pty_rows, &er.pty_cols, err);
	if (r == 0 && timeout_ms > (uint64_t)EXEC_TIMEOUT_S_MAX * 1000u)
		r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                 "Connect-Timeout-Ms is above %u ms (%u s, the longest a process may be given); use "
		                 "timeoutMs: 0 for no timeout",
		                 EXEC_TIMEOUT_S_MAX * 1000u, EXEC_TIMEOUT_S_MAX);
	if (r < 0) {
		exec_request_release(&er);
		return r;
	}
	strlcpy_al(er.tag, tag ? tag : "", sizeof(er.tag));
	er.uid = u->uid;
	er.gid = u->gid;
	er.stdin_stream = json_is_true(stdin_v) || pty;
	er.max_output_bytes = EXEC_OUTPUT_DEFAULT;
	/* envd kills a started process when the call's timeout passes (E2B's
	 * timeoutMs, 60 s unless given; 0: none): the exec's own timeout,
	 * rounded up to Airlock's seconds. */
	er.timeout_s = (unsigned)((timeout_ms + 999) / 1000);
	er.timeout_given = timeout_ms > 0;
	*ret = er;
	return 0;
}

/* SECURITY: the base64 is decoded within E2B_INPUT_MAX before anything is kept. */
int e2b_input_parse(const json_t *msg, uint8_t **ret, size_t *ret_len, bool *ret_pty, struct al_error *err)
{
	json_t *in = field(msg, "input");
	json_t *stdin_v = json_is_object(in) ? field(in, "stdin") : NULL;
	json_t *pty_v = json_is_object(in) ? field(in, "pty") : NULL;
	json_t *data = stdin_v ? stdin_v : pty_v;
	if (!data || (stdin_v && pty_v) || !json_is_string(data) || json_string_has_nul(data))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "input must be {\"stdin\": BASE64} or {\"pty\": BASE64}");
	uint8_t *bytes = NULL;
	size_t len = 0;
	if (connect_base64_decode(json_string_value(data), E2B_INPUT_MAX, &bytes, &len) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "input.%s must be base64 of at most %u bytes",
		                    stdin_v ? "stdin" : "pty", E2B_INPUT_MAX);
	*ret = bytes;
	*ret_len = len;
	*ret_pty = pty_v != NULL;
	return 0;
}

int e2b_signal_parse(const json_t *msg, int *ret, struct al_error *err)
{
	json_t *v = field(msg, "signal");
	const char *name = json_string_value(v);
	int sig = -1;
	if (name && !strcmp(name, "SIGNAL_SIGKILL"))
		sig = SIGKILL;
	else if (name && !strcmp(name, "SIGNAL_SIGTERM"))
		sig = SIGTERM;
	else if (json_is_integer(v) && (json_integer_value(v) == SIGKILL || json_integer_value(v) == SIGTERM))
		sig = (int)json_integer_value(v);
	if (sig < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "signal must be SIGNAL_SIGTERM (15) or SIGNAL_SIGKILL (9)");
	*ret = sig;
	return 0;
}

int e2b_update_parse(const json_t *msg, bool *ret_has, unsigned *ret_rows, unsigned *ret_cols, struct al_error *err)
{
	json_t *pty = field(msg, "pty");
	*ret_has = false;
	if (!pty)
		return 0;
	int r = pty_size_parse(pty, false, ret_rows, ret_cols, err);
	if (r == 0)
		*ret_has = true;
	return r;
}

/* Go's names of signals (envd reports a process's end as Go's os.ProcessState does). */
static const char *signal_text(int sig)
{
	static const struct {
		int sig;
		const char *text;
	} names[] = {
	    {SIGHUP, "hangup"},
	    {SIGINT, "interrupt"},
	    {SIGQUIT, "quit"},
	    {SIGILL, "illegal instruction"},
	    {SIGTRAP, "trace/breakpoint trap"},
	    {SIGABRT, "aborted"},
	    {SIGBUS, "bus error"},
	    {SIGFPE, "floating point exception"},
	    {SIGKILL, "killed"},
	    {SIGUSR1, "user defined signal 1"},
	    {SIGSEGV, "segmentation fault"},
	    {SIGUSR2, "user defined signal 2"},
	    {SIGPIPE, "broken pipe"},
	    {SIGALRM, "alarm clock"},
	    {SIGTERM, "terminated"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (names[i].sig == sig)
			return names[i].text;
	return NULL;
}

json_t *e2b_end_event(bool exited, int exit_code, int signal, bool timed_out)
{
	char status[64];
	if (exited) {
		snprintf(status, sizeof(status), "exit status %d", exit_code);
	} else {
		const char *name = signal_text(signal);
		if (name)
			snprintf(status, sizeof(status), "signal: %s", name);
		else
			snprintf(status, sizeof(status), "signal: signal %d", signal);
	}
	json_t *end =
	    json_pack("{s:i, s:b, s:s}", "exitCode", exited ? exit_code : -1, "exited", exited, "status", status);
	if (!exited || exit_code != 0) {
		char error[160];
		snprintf(error, sizeof(error), "%s%s", status,
		         timed_out ? " (the call's timeout passed: E2B's timeoutMs, 0 for none)" : "");
		json_object_set_new(end, "error", json_string(error));
	}
	return end;
}
