/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envd's filesystem.Filesystem/WatchDir (docs/e2b.md, "Watching
 * directories"): a Connect server stream of a directory's changes, from a
 * WATCH stream of the guest agent (proto.h).
 *
 *   request   {"path", "recursive", "includeEntry", "allowNetworkMounts"}
 *   stream    {"start":{}} once the guest's watches are in place, then
 *             {"filesystem":{"name":REL,"type":"EVENT_TYPE_…"}} per event
 *             and {"keepalive":{}} every E2B_WATCH_KEEPALIVE_MS
 *   end       {} when the watched directory goes away; an error when events
 *             were lost (resource_exhausted: the guest's or the kernel's
 *             queue overflowed, or a directory could not be watched), when
 *             the sandbox goes away (unavailable), or at Connect-Timeout-Ms
 *             (deadline_exceeded)
 *
 * A missing directory answers not_found, a file invalid_argument, before
 * the stream starts. The guest's watch is cancelled (SIGNAL) when the
 * client goes away. With includeEntry, create, write and chmod events
 * carry the EntryInfo of their path (the guest's stat of it as it sent the
 * event, api-e2b-entry.h; none when the path is gone by then).
 */
#include <errno.h>
#include <string.h>

#include "api-e2b-entry.h"
#include "api-e2b-fs.h"
#include "api-e2b.h"
#include "api-handlers.h"
#include "connect-wire.h"
#include "guest-channel.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "util.h"

/* The SDK's own keepalive interval is 50 s; envd pings more often so that
 * proxies do not time the stream out. */
#define E2B_WATCH_KEEPALIVE_MS 20000
/* How long the guest may take to put its watches in place (a recursive
 * watch of a large tree walks it). */
#define E2B_WATCH_START_MS 30000
/* How often a waiting reader looks whether its client went away. */
#define E2B_WATCH_POLL_MS 500

struct watch_reader {
	struct sandbox *sb;
	struct guest_channel *ch;
	struct guest_stream *s; /* our reference */
	struct guest_cursor cur;
	uint8_t *buf; /* envelopes not yet written: buf[off .. len) */
	size_t off, len, cap;
	uint64_t keepalive_at, deadline_ms; /* deadline 0: none */
	int conn_fd;
	bool finished; /* the end-of-stream envelope is in buf */
	/* includeEntry: the watched directory and the guest's account files
	 * (owner and group names). */
	bool include_entry;
	char root[E2B_PATH_MAX + 1];
	struct e2b_fs_accounts acc;
};

static void reader_push(struct watch_reader *w, uint8_t *env, size_t n)
{
	if (w->off == w->len)
		w->off = w->len = 0;
	if (w->len + n > w->cap) {
		w->cap = MAX(w->cap * 2, w->len + n);
		w->buf = xrealloc(w->buf, w->cap);
	}
	memcpy(w->buf + w->len, env, n);
	w->len += n;
	free(env);
}

static void reader_push_msg(struct watch_reader *w, json_t *msg /* stolen */)
{
	size_t n;
	uint8_t *env = connect_envelope(0, msg, &n);
	json_decref(msg);
	reader_push(w, env, n);
}

static void reader_end(struct watch_reader *w, const struct al_error *err)
{
	size_t n;
	uint8_t *env = connect_end_stream(err, &n);
	reader_push(w, env, n);
	w->finished = true;
}

static const char *event_type_name(const char *op)
{
	static const struct {
		const char *op, *type;
	} map[] = {
	    {"create", "EVENT_TYPE_CREATE"}, {"write", "EVENT_TYPE_WRITE"}, {"remove", "EVENT_TYPE_REMOVE"},
	    {"rename", "EVENT_TYPE_RENAME"}, {"chmod", "EVENT_TYPE_CHMOD"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (!strcmp(op, map[i].op))
			return map[i].type;
	return NULL;
}

/* One WATCH_EVENTS chunk of the log: the channel's checked copy
 * (guest_watch_events_check), so its shape is known. Events become
 * envelopes; a loss ends the stream. */
static void reader_chunk(struct watch_reader *w, const uint8_t *data, size_t len)
{
	cleanup_json json_t *j = json_loadb((const char *)data, len, 0, NULL);
	size_t i;
	json_t *e;
	json_array_foreach (json_object_get(j, "events"), i, e) {
		const char *type = event_type_name(json_string_value(json_object_get(e, "op")));
		if (!type)
			continue;
		json_t *fs = json_pack("{s:O, s:s}", "name", json_object_get(e, "name"), "type", type);
		json_t *entry = json_object_get(e, "entry");
		if (w->include_entry && entry) {
			/* Both checked: the root by e2b_fs_path, the name by the channel. */
			char path[2 * E2B_PATH_MAX + 2];
			snprintf(path, sizeof(path), "%s%s%s", w->root, strcmp(w->root, "/") ? "/" : "",
			         json_string_value(json_object_get(e, "name")));
			json_object_set_new(fs, "entry", e2b_entry_info(entry, path, w->acc.passwd, w->acc.group));
		}
		reader_push_msg(w, json_pack("{s:o}", "filesystem", fs));
	}
	json_int_t lost = json_integer_value(json_object_get(j, "lost"));
	json_int_t unwatched = json_integer_value(json_object_get(j, "unwatched"));
	if (lost > 0 || unwatched > 0) {
		struct al_error err = {0};
		if (lost > 0)
			al_error_set(&err, AL_ERR_QUOTA, ENOBUFS,
			             "events were lost: the watch's queue in the sandbox overflowed (%lld times; a "
			             "consumer slower than the changes, or more than %d events waiting); watch again "
			             "and list the directory to catch up",
			             (long long)lost, AIRLOCK_WATCH_QUEUE_MAX);
		else
			al_error_set(&err, AL_ERR_QUOTA, ENOSPC,
			             "%lld directories could not be watched: the sandbox has %d directory watches at "
			             "most; watch a smaller tree",
			             (long long)unwatched, AIRLOCK_WATCH_WATCHES_MAX);
		reader_end(w, &err);
	}
}

/* The guest's stream ended: how the Connect stream ends. */
static void reader_guest_done(struct watch_reader *w)
{
	uint8_t type = 0;
	cleanup_json json_t *result = NULL;
	guest_stream_done(w->ch, w->s, &type, &result);
	struct al_error err = {0};
	if (type == AIRLOCK_FRAME_ERROR)
		guest_result_to_error(result, "the directory watch", &err);
	else if (type != AIRLOCK_FRAME_OK)
		al_error_set(&err, AL_ERR_UNAVAILABLE, ECONNRESET, "the sandbox went away; the watch ended");
	/* OK: the watched directory went away, a clean end. */
	reader_end(w, type == AIRLOCK_FRAME_OK ? NULL : &err);
}

static ssize_t watch_read(void *ctx, uint8_t *buf, size_t max)
{
	struct watch_reader *w = ctx;
	for (;;) {
		if (w->off < w->len) {
			size_t n = MIN(max, w->len - w->off);
			memcpy(buf, w->buf + w->off, n);
			w->off += n;
			return (ssize_t)n;
		}
		if (w->finished)
			return 0;
		uint64_t now = now_ms_monotonic();
		if (w->deadline_ms && now >= w->deadline_ms) {
			struct al_error err = {0};
			al_error_set(&err, AL_ERR_TIMEOUT, ETIMEDOUT,
			             "the watch reached its timeout (Connect-Timeout-Ms)");
			reader_end(w, &err);
			continue;
		}
		if (now >= w->keepalive_at) {
			reader_push_msg(w, json_pack("{s:{}}", "keepalive"));
			w->keepalive_at = now + E2B_WATCH_KEEPALIVE_MS;
			continue;
		}
		uint64_t until = MIN(w->keepalive_at, now + E2B_WATCH_POLL_MS);
		if (w->deadline_ms)
			until = MIN(until, w->deadline_ms);
		uint8_t type;
		uint8_t *data = NULL;
		size_t len;
		uint64_t dropped = 0;
		int r = guest_cursor_read(w->ch, &w->cur, until, &type, &data, &len, &dropped);
		if (r == -ETIMEDOUT) {
			if (api_client_gone(w->conn_fd))
				return -1;
			continue;
		}
		if (r == 1) {
			reader_chunk(w, data, len);
			free(data);
			if (dropped && !w->finished) {
				/* Not expected: the log keeps what its reader has not read. */
				struct al_error err = {0};
				al_error_set(&err, AL_ERR_INTERNAL, ENOBUFS,
				             "events were lost on the host; watch again");
				reader_end(w, &err);
			}
			continue;
		}
		reader_guest_done(w);
	}
}

static void watch_reader_free(void *ctx)
{
	struct watch_reader *w = ctx;
	if (!guest_stream_done(w->ch, w->s, NULL, NULL)) {
		/* The client went away (or the stream ended on our side): the
		 * guest's watch goes too. */
		cleanup_json json_t *sig = json_object();
		guest_stream_send_control(w->ch, w->s, AIRLOCK_FRAME_SIGNAL, sig);
	}
	guest_cursor_close(w->ch, &w->cur);
	guest_stream_unref(w->ch, w->s);
	sandbox_release(w->sb);
	e2b_fs_accounts_release(&w->acc);
	free(w->buf);
	free(w);
}

/* SECURITY: the request message is client input: "path" a string (checked
 * by e2b_path_resolve), the flags booleans when present. */
static int watch_request_parse(const struct api_request *req, json_t **ret_msg, bool *ret_recursive,
                               bool *ret_include_entry, struct al_error *err)
{
	cleanup_json json_t *msg = NULL;
	int r = connect_request_unwrap((const uint8_t *)req->body, req->body_len, &msg, err);
	if (r < 0)
		return r;
	if (!json_is_string(json_object_get(msg, "path")))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "WatchDir: \"path\" must be a string");
	const char *flags[] = {"recursive", "includeEntry", "allowNetworkMounts"};
	for (size_t i = 0; i < ARRAY_SIZE(flags); i++) {
		json_t *v = json_object_get(msg, flags[i]);
		if (v && !json_is_boolean(v))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "WatchDir: \"%s\" must be a boolean",
			                    flags[i]);
	}
	*ret_recursive = json_is_true(json_object_get(msg, "recursive"));
	*ret_include_entry = json_is_true(json_object_get(msg, "includeEntry"));
	*ret_msg = TAKE_PTR(msg);
	return 0;
}

/* Waits for the guest's first WATCH_EVENTS (its watches are in place) or its
 * ERROR (no such directory...). */
static int watch_wait_started(struct watch_reader *w, struct al_error *err)
{
	uint8_t type;
	uint8_t *data = NULL;
	size_t len;
	uint64_t dropped = 0;
	int r =
	    guest_cursor_read(w->ch, &w->cur, now_ms_monotonic() + E2B_WATCH_START_MS, &type, &data, &len, &dropped);
	if (r == 1) {
		cleanup_json json_t *j = json_loadb((const char *)data, len, 0, NULL);
		free(data);
		if (!json_is_true(json_object_get(j, "started")))
			return al_error_set(err, AL_ERR_GUEST, EPROTO, "the guest agent did not confirm the watch");
		reader_push_msg(w, json_pack("{s:{}}", "start"));
		/* Directories left unwatched at the start end the stream at once. */
		if (json_integer_value(json_object_get(j, "unwatched")) > 0) {
			cleanup_free char *text = json_dumps(j, JSON_COMPACT);
			reader_chunk(w, (const uint8_t *)text, strlen(text));
		}
		return 0;
	}
	if (r == -ETIMEDOUT)
		return al_error_set(err, AL_ERR_TIMEOUT, ETIMEDOUT, "the guest did not start the watch within %d s",
		                    E2B_WATCH_START_MS / 1000);
	uint8_t rtype = 0;
	cleanup_json json_t *result = NULL;
	guest_stream_done(w->ch, w->s, &rtype, &result);
	if (rtype != AIRLOCK_FRAME_ERROR)
		return al_error_set(err, AL_ERR_UNAVAILABLE, ECONNRESET,
		                    "the sandbox went away before the watch began");
	const char *code = json_string_value(json_object_get(result, "code"));
	r = guest_result_to_error(result, "the directory watch", err);
	if (code && !strcmp(code, "enotdir"))
		err->code = AL_ERR_INVALID_ARGUMENT; /* envd: "path is not a directory" */
	else if (code && (!strcmp(code, "emfile") || !strcmp(code, "enospc")))
		err->code = AL_ERR_QUOTA;
	return r;
}

API_HANDLER(api_e2b_watch_dir)
{
	struct al_error err = {0};
	cleanup_json json_t *msg = NULL;
	bool recursive = false, include_entry = false;
	if (watch_request_parse(req, &msg, &recursive, &include_entry, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	uint64_t timeout_ms = 0;
	const char *timeout = api_header(req, "Connect-Timeout-Ms");
	if (timeout && connect_timeout_parse(timeout, &timeout_ms) < 0) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "Connect-Timeout-Ms must be 1 to 10 digits");
		return;
	}
	struct sandbox *sb = api_sandbox_acquire(req, resp);
	if (!sb)
		return;
	struct e2b_user user;
	char path[E2B_PATH_MAX + 1];
	if (e2b_user_resolve(req, sb, &user, resp) < 0) {
		sandbox_release(sb);
		return;
	}
	if (e2b_fs_path(&user, json_string_value(json_object_get(msg, "path")), path, &err) < 0) {
		sandbox_release(sb);
		api_response_error(resp, &err);
		return;
	}
	struct watch_reader *w = xcalloc(1, sizeof(*w));
	w->sb = sb;
	w->ch = sandbox_channel(sb);
	w->conn_fd = req->conn_fd;
	w->include_entry = include_entry;
	strlcpy_al(w->root, path, sizeof(w->root));
	if (include_entry && e2b_fs_accounts_read(sb, &w->acc, &err) < 0) {
		sandbox_release(sb);
		free(w);
		api_response_error(resp, &err);
		return;
	}
	cleanup_json json_t *gmsg =
	    json_pack("{s:s, s:b, s:b}", "path", path, "recursive", recursive, "entries", include_entry);
	int r = guest_stream_start(w->ch, AIRLOCK_FRAME_WATCH, gmsg, GUEST_STREAM_LOG, 0, &w->s, &err);
	if (r == 0 && guest_cursor_open(w->ch, w->s, true, &w->cur) < 0)
		r = al_error_set(&err, AL_ERR_INTERNAL, EBUSY, "no reader for the watch");
	if (r == 0)
		r = watch_wait_started(w, &err);
	if (r < 0) {
		if (w->s) {
			watch_reader_free(w); /* also cancels a watch that came too late */
		} else {
			sandbox_release(sb);
			free(w);
		}
		api_response_error(resp, &err);
		return;
	}
	uint64_t now = now_ms_monotonic();
	w->keepalive_at = now + E2B_WATCH_KEEPALIVE_MS;
	w->deadline_ms = timeout_ms ? now + timeout_ms : 0;
	resp->status = 200;
	resp->content_type = CONNECT_STREAM_CONTENT_TYPE;
	resp->content_length = -1;
	resp->reader = watch_read;
	resp->reader_free = watch_reader_free;
	resp->reader_ctx = w;
}
