/* SPDX-License-Identifier: Apache-2.0 */
#include "process.h"

#include <pthread.h>

#include "events.h"
#include "json-cleanup.h"
#include "metrics.h"
#include "util.h"

struct process {
	struct process *next; /* newest first */
	char id[PROCESS_ID_MAX + 1];
	json_t *cmd;
	char tag[EXEC_TAG_MAX + 1];
	bool pty;
	bool stdin_stream;           /* takes stdin through POST .../stdin */
	struct guest_stream *stream; /* NULL once the output is forgotten */
	uint64_t started_ms;         /* realtime */
	uint64_t start_mono;
	uint64_t ended_ms; /* realtime, 0 while running; atomic (written by the monitor thread) */
	struct process_table *table;
	/* What is left once the stream is gone. */
	uint8_t final_type;
	json_t *final_result;
	uint64_t final_bytes, final_dropped;
	/* What the request gave besides its cmd, while the process runs
	 * (process_config); env NULL when it was above PROCESS_CONFIG_ENV_MAX. */
	char *cwd;
	json_t *env;
};

struct process_table {
	pthread_mutex_t lock;
	char sandbox_id[32];
	char tenant[64];
	unsigned next_id;
	struct process *list;
};

static process_exit_fn exit_hook;

void process_set_exit_hook(process_exit_fn fn)
{
	exit_hook = fn;
}

bool process_id_valid(const char *id)
{
	size_t n = strlen(id);
	if (n < 3 || n > PROCESS_ID_MAX || strncmp(id, "p-", 2))
		return false;
	for (size_t i = 2; i < n; i++)
		if (id[i] < '0' || id[i] > '9')
			return false;
	return true;
}

struct process_table *process_table_new(const char *sandbox_id, const char *tenant)
{
	struct process_table *t = xcalloc(1, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	strlcpy_al(t->sandbox_id, sandbox_id, sizeof(t->sandbox_id));
	strlcpy_al(t->tenant, tenant, sizeof(t->tenant));
	t->next_id = 1;
	return t;
}

static void process_forget_output(struct process *p, struct guest_channel *ch)
{
	if (!p->stream)
		return;
	guest_stream_set_done_cb(ch, p->stream, NULL, NULL);
	if (!guest_stream_done(ch, p->stream, &p->final_type, &p->final_result)) {
		p->final_type = 0;
		p->final_result = json_pack("{s:s, s:s}", "code", "forgotten", "message", "the process was dropped");
	}
	guest_stream_stats(ch, p->stream, &p->final_bytes, &p->final_dropped);
	/* Bytes that fell out of its kept log (no reader came for them). */
	metrics_add_output_dropped("log", p->final_dropped);
	p->final_dropped = p->final_bytes; /* none of it can be read any more */
	guest_stream_unref(ch, p->stream);
	p->stream = NULL;
}

static void process_drop_config(struct process *p)
{
	free(p->cwd);
	p->cwd = NULL;
	if (p->env)
		json_decref(p->env);
	p->env = NULL;
}

static void process_free(struct process *p, struct guest_channel *ch)
{
	process_forget_output(p, ch);
	process_drop_config(p);
	json_decref(p->cmd);
	if (p->final_result)
		json_decref(p->final_result);
	free(p);
}

void process_table_free(struct process_table *t, struct guest_channel *ch)
{
	if (!t)
		return;
	while (t->list) {
		struct process *p = t->list;
		t->list = p->next;
		process_free(p, ch);
	}
	pthread_mutex_destroy(&t->lock);
	free(t);
}

static void on_done(void *ctx, uint8_t type, json_t *result)
{
	struct process *p = ctx;
	uint64_t now = now_ms_realtime();
	__atomic_store_n(&p->ended_ms, now ? now : 1, __ATOMIC_RELEASE);
	if (exit_hook)
		exit_hook(p->table->sandbox_id, p->table->tenant, p->id, type, result,
		          now_ms_monotonic() - p->start_mono);
}

/* Keeps the table bounded; with t->lock held. */
static void table_trim(struct process_table *t, struct guest_channel *ch)
{
	size_t exited = 0;
	for (struct process **pp = &t->list; *pp;) {
		struct process *p = *pp;
		bool running = __atomic_load_n(&p->ended_ms, __ATOMIC_ACQUIRE) == 0;
		if (!running) {
			process_drop_config(p);
			exited++;
			if (exited > PROCESS_KEEP_EXITED) {
				*pp = p->next;
				process_free(p, ch);
				continue;
			}
			if (exited > PROCESS_KEEP_OUTPUT)
				process_forget_output(p, ch);
		}
		pp = &p->next;
	}
}

int process_start(struct process_table *t, struct guest_channel *ch, const struct exec_request *req, char **env,
                  size_t n_env, enum guest_stream_mode mode, char ret_id[PROCESS_ID_MAX + 1],
                  struct guest_stream **ret_stream, struct al_error *err)
{
	cleanup_json json_t *msg = guest_exec_message(req, env, n_env);
	struct guest_stream *s = NULL;
	int r = guest_stream_start(ch, AIRLOCK_FRAME_EXEC, msg, mode, req->max_output_bytes, &s, err);
	if (r < 0)
		return r;
	struct process *p = xcalloc(1, sizeof(*p));
	p->table = t;
	p->cmd = json_array();
	for (size_t i = 0; i < req->argc; i++)
		json_array_append_new(p->cmd, json_string(req->argv[i]));
	strlcpy_al(p->tag, req->tag, sizeof(p->tag));
	p->pty = req->pty_rows > 0;
	p->stdin_stream = req->stdin_stream || p->pty;
	p->stream = s;
	p->cwd = xstrdup(req->cwd ? req->cwd : "/");
	size_t env_bytes = 0;
	for (size_t i = 0; i < req->env.n; i++)
		env_bytes += strlen(req->env.keys[i]) + strlen(req->env.values[i]);
	if (env_bytes <= PROCESS_CONFIG_ENV_MAX) {
		p->env = json_object();
		for (size_t i = 0; i < req->env.n; i++)
			json_object_set_new(p->env, req->env.keys[i], json_string(req->env.values[i]));
	}
	p->started_ms = now_ms_realtime();
	p->start_mono = now_ms_monotonic();
	pthread_mutex_lock(&t->lock);
	snprintf(p->id, sizeof(p->id), "p-%u", t->next_id++);
	p->next = t->list;
	t->list = p;
	table_trim(t, ch);
	guest_stream_ref(ch, s);
	pthread_mutex_unlock(&t->lock);
	events_emit("exec.start", t->tenant, t->sandbox_id,
	            json_pack("{s:s, s:O}", "process_id", p->id, "cmd", p->cmd));
	guest_stream_set_done_cb(ch, s, on_done, p);
	strlcpy_al(ret_id, p->id, PROCESS_ID_MAX + 1);
	*ret_stream = s;
	return 0;
}

static json_t *time_or_null(uint64_t ms)
{
	if (!ms)
		return json_null();
	char buf[32];
	format_time_rfc3339(ms, buf);
	return json_string(buf);
}

/* With t->lock held. */
static json_t *process_to_json(struct process *p, struct guest_channel *ch)
{
	uint8_t type = p->final_type;
	json_t *result = p->final_result ? json_incref(p->final_result) : NULL;
	uint64_t bytes = p->final_bytes, dropped = p->final_dropped;
	bool done = p->stream ? guest_stream_done(ch, p->stream, &type, &result) : true;
	if (p->stream)
		guest_stream_stats(ch, p->stream, &bytes, &dropped);
	struct exec_exit ex = {0};
	bool have_exit = done && result && guest_result_to_exit(type, result, &ex, NULL) == 0;
	json_t *o =
	    json_pack("{s:s, s:O, s:s, s:s, s:b, s:b, s:o, s:o, s:b, s:o, s:o, s:I, s:I}", "id", p->id, "cmd", p->cmd,
	              "tag", p->tag, "state", done ? "exited" : "running", "pty", p->pty, "stdin_stream",
	              p->stdin_stream, "exit_code", have_exit && ex.exited ? json_integer(ex.exit_code) : json_null(),
	              "signal", have_exit && !ex.exited ? json_integer(ex.signal) : json_null(), "timed_out",
	              have_exit && ex.timed_out, "started_at", time_or_null(p->started_ms), "ended_at",
	              time_or_null(done ? __atomic_load_n(&p->ended_ms, __ATOMIC_ACQUIRE) : 0), "output_bytes",
	              (json_int_t)bytes, "output_dropped", (json_int_t)dropped);
	if (done && !have_exit && result) {
		/* It never ran, or the guest went away: say why. */
		struct al_error e = {0};
		guest_result_to_error(result, "the process", &e);
		json_object_set_new(o, "error", json_string(e.message));
	}
	if (result)
		json_decref(result);
	return o;
}

int process_get(struct process_table *t, struct guest_channel *ch, const char *id, json_t **ret_json,
                struct guest_stream **ret_stream, struct al_error *err)
{
	pthread_mutex_lock(&t->lock);
	struct process *p = t->list;
	while (p && strcmp(p->id, id))
		p = p->next;
	if (!p) {
		pthread_mutex_unlock(&t->lock);
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "no process \"%.32s\" in sandbox %s", id,
		                    t->sandbox_id);
	}
	if (ret_json)
		*ret_json = process_to_json(p, ch);
	if (ret_stream) {
		*ret_stream = p->stream;
		if (p->stream)
			guest_stream_ref(ch, p->stream);
	}
	pthread_mutex_unlock(&t->lock);
	return 0;
}

int process_config(struct process_table *t, const char *id, char **ret_cwd, json_t **ret_env, struct al_error *err)
{
	pthread_mutex_lock(&t->lock);
	struct process *p = t->list;
	while (p && strcmp(p->id, id))
		p = p->next;
	if (!p || !p->cwd) {
		pthread_mutex_unlock(&t->lock);
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "no running process \"%.32s\" in sandbox %s", id,
		                    t->sandbox_id);
	}
	*ret_cwd = xstrdup(p->cwd);
	*ret_env = p->env ? json_deep_copy(p->env) : json_object();
	pthread_mutex_unlock(&t->lock);
	return 0;
}

json_t *process_list(struct process_table *t, struct guest_channel *ch)
{
	json_t *arr = json_array();
	pthread_mutex_lock(&t->lock);
	for (struct process *p = t->list; p; p = p->next)
		json_array_append_new(arr, process_to_json(p, ch));
	pthread_mutex_unlock(&t->lock);
	return arr;
}
