/* SPDX-License-Identifier: Apache-2.0 */
/* Running a command in a sandbox (the non-streaming exec) and the env it
 * gets. The sandbox is held by sandbox_acquire; its env is read under
 * sb->lock. */

#include "ca.h"
#include "json-cleanup.h"
#include "metrics.h"
#include "process.h"
#include "secrets.h"
#include "util.h"
#include "sandbox-internal.h"
#include "templates.h"

/* The variables that point TLS clients at a bundle that trusts the Airlock
 * CA (the sandbox's own env may override them). */
static void ca_env(const char *bundle, json_t *o)
{
	if (!bundle[0])
		return;
	static const char *const names[] = {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		json_object_set_new(o, names[i], json_string(bundle));
	json_object_set_new(o, "NODE_EXTRA_CA_CERTS", json_string(CA_GUEST_CERT));
}

char **sandbox_env_merge(struct sandbox *sb, const struct kv_list *over, size_t *ret_n)
{
	/* Lowest first: the template's ENV, the CA variables, the sandbox's env, the secrets'
	 * placeholders, then the request's own env. */
	cleanup_json json_t *o = json_object();
	struct template_start ts;
	if (template_start_get(sb->rec.template_name, &ts)) {
		size_t i;
		json_t *kv;
		json_array_foreach (ts.env, i, kv) {
			const char *s = json_string_value(kv), *eq = s ? strchr(s, '=') : NULL;
			if (eq && eq > s) {
				cleanup_free char *k = xstrndup(s, (size_t)(eq - s));
				json_object_set_new(o, k, json_string(eq + 1));
			}
		}
		template_start_release(&ts);
	}
	pthread_mutex_lock(&sb->lock);
	cleanup_json json_t *own = json_loads(sb->rec.env_json, 0, NULL);
	ca_env(sb->rec.ca_bundle, o);
	if (json_is_object(own))
		json_object_update(o, own);
	secret_bindings_env(sb->rec.secrets_json, o);
	pthread_mutex_unlock(&sb->lock);
	for (size_t i = 0; i < over->n; i++)
		json_object_set_new(o, over->keys[i], json_string(over->values[i]));
	size_t n = json_object_size(o), k = 0;
	char **env = xcalloc(n + 1, sizeof(char *));
	const char *key;
	json_t *v;
	json_object_foreach (o, key, v) {
		env[k++] = xasprintf("%s=%s", key, json_string_value(v));
	}
	*ret_n = k;
	return env;
}

struct exec_request sandbox_exec_defaults(struct sandbox *sb, const struct exec_request *req, char *cwd,
                                          size_t cwd_size)
{
	struct exec_request r = *req;
	struct template_start ts;
	if ((!req->cwd_default && !req->user_default) || !template_start_get(sb->rec.template_name, &ts))
		return r;
	if (req->cwd_default && ts.workdir[0]) {
		strlcpy_al(cwd, ts.workdir, cwd_size);
		r.cwd = cwd;
	}
	if (req->user_default && ts.has_user) {
		r.uid = ts.uid;
		r.gid = ts.gid;
	}
	template_start_release(&ts);
	return r;
}

int sandbox_exec(const char *id, const char *tenant, const struct exec_request *req, struct exec_result *ret,
                 char ret_process_id[32], struct al_error *err)
{
	struct sandbox *sb = NULL;
	int r = sandbox_acquire(id, tenant, &sb, err);
	if (r < 0)
		return r;
	size_t n_env = 0;
	char **env = sandbox_env_merge(sb, &req->env, &n_env);
	char cwd[PATH_MAX];
	struct exec_request with_defaults = sandbox_exec_defaults(sb, req, cwd, sizeof(cwd));
	req = &with_defaults;
	struct guest_channel *ch = sb->ch;
	uint64_t start = now_ms_monotonic();
	uint64_t deadline = start + (uint64_t)req->timeout_s * 1000u + GUEST_EXEC_GRACE_MS;
	struct guest_stream *s = NULL;
	char pid[PROCESS_ID_MAX + 1];
	r = process_start(sb->procs, ch, req, env, n_env, GUEST_STREAM_COLLECT, pid, &s, err);
	sandbox_env_free(env, n_env);
	if (r == 0 && req->stdin_data) {
		/* A zero-length send is the EOF, so empty stdin is just that. */
		r = guest_stream_send_data(ch, s, AIRLOCK_FRAME_STDIN, req->stdin_data, req->stdin_len, deadline);
		if (r == 0 && req->stdin_len > 0)
			r = guest_stream_send_data(ch, s, AIRLOCK_FRAME_STDIN, NULL, 0, deadline);
		if (r == -EPIPE)
			r = 0; /* the process ended without reading it all */
		if (r < 0)
			r = al_error_set(err, r == -ETIMEDOUT ? AL_ERR_TIMEOUT : AL_ERR_GUEST, -r,
			                 "cannot send stdin to the command: %s", strerror(-r));
	}
	if (r == 0 && (r = guest_stream_wait_done(ch, s, deadline)) < 0) {
		char why[512] = "";
		guest_channel_dead(ch, why, sizeof(why));
		r = r == -ETIMEDOUT ? al_error_set(err, AL_ERR_TIMEOUT, ETIMEDOUT,
		                                   "the guest agent did not report the command's end in time")
		                    : al_error_set(err, AL_ERR_GUEST, -r,
		                                   "the sandbox's guest went away during the command: %s", why);
	}
	if (r == 0) {
		uint8_t type = 0;
		cleanup_json json_t *result = NULL;
		guest_stream_done(ch, s, &type, &result);
		struct exec_result res = {0};
		r = guest_result_to_exit(type, result, &res.status, err);
		if (r == 0) {
			guest_stream_take_output(ch, s, res.out);
			/* Past max_output_bytes the output was dropped as it came: counted. */
			if (res.out[0].truncated || res.out[1].truncated)
				metrics_count_exec_truncated((res.out[0].total - res.out[0].len) +
				                             (res.out[1].total - res.out[1].len));
			res.duration_ms = now_ms_monotonic() - start;
			*ret = res;
			strlcpy_al(ret_process_id, pid, 32);
		}
	}
	if (s)
		guest_stream_unref(ch, s);
	sandbox_release(sb);
	return r;
}
