/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-egress's side of the control channel (ctlmsg.h, docs/egress.md
 * "Control protocol"): a thread reads airlockd's requests and applies them
 * (add, policy, remove, ping), answering each with ack or nack in order; a
 * second thread sends the audit events queued by every other thread. Also
 * the sandbox table and each sandbox's list of connections, its secret
 * bindings ("secrets", or "bindings" in "add") and the Airlock CA ("ca").
 *
 * SECURITY: airlockd is trusted (it is the parent and holds every privilege
 * this process lacks), but its messages are still checked strictly: a
 * malformed request is refused, never half-applied. Secret values and the
 * CA key are never logged or put in a reply, and their text in the received
 * message is wiped before the message is released. A sandbox's identity
 * is the listener fds it was added with; nothing a guest sends can change
 * which sandbox a connection belongs to.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "ctlmsg.h"
#include "egress-runtime.h"
#include "json-cleanup.h"
#include "util.h"

#define CTL_PROTOCOL_VERSION 1

struct egress_event_node {
	struct egress_event_node *next;
	struct egress_sandbox *sb; /* a reference: its share of the queue */
	json_t *msg;
};

/* ------------------------------------------------------------ tenants */

/* The tenant's connection counter, a new reference; NULL for "" (a sandbox
 * without a tenant has its own limit only). */
static struct egress_tenant *tenant_get(struct egress_runtime *rt, const char *name)
{
	if (!name[0])
		return NULL;
	pthread_mutex_lock(&rt->tenant_lock);
	struct egress_tenant *t = rt->tenants;
	while (t && strcmp(t->name, name) != 0)
		t = t->next;
	if (!t) {
		t = xcalloc(1, sizeof(*t));
		strlcpy_al(t->name, name, sizeof(t->name));
		t->next = rt->tenants;
		rt->tenants = t;
	}
	t->refs++;
	pthread_mutex_unlock(&rt->tenant_lock);
	return t;
}

static void tenant_put(struct egress_runtime *rt, struct egress_tenant *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&rt->tenant_lock);
	if (--t->refs == 0) {
		struct egress_tenant **p = &rt->tenants;
		while (*p != t)
			p = &(*p)->next;
		*p = t->next;
		free(t);
	}
	pthread_mutex_unlock(&rt->tenant_lock);
}

/* Counts one more connection against the tenant (and takes a reference for
 * it), if the tenant's limit allows. */
static bool tenant_take(struct egress_runtime *rt, struct egress_tenant *t)
{
	pthread_mutex_lock(&rt->tenant_lock);
	bool ok = t->n_conns < rt->opt.max_connections_per_tenant;
	if (ok) {
		t->n_conns++;
		t->refs++;
	}
	pthread_mutex_unlock(&rt->tenant_lock);
	return ok;
}

static void tenant_release(struct egress_runtime *rt, struct egress_tenant *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&rt->tenant_lock);
	t->n_conns--;
	pthread_mutex_unlock(&rt->tenant_lock);
	tenant_put(rt, t);
}

/* ------------------------------------------------------------ sandboxes */

struct egress_sandbox *egress_sandbox_ref(struct egress_sandbox *sb)
{
	atomic_fetch_add_explicit(&sb->refs, 1, memory_order_relaxed);
	return sb;
}

void egress_sandbox_unref(struct egress_sandbox *sb)
{
	if (!sb || atomic_fetch_sub_explicit(&sb->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (size_t i = 0; i < EGRESS_FD_COUNT; i++)
		if (sb->fds[i] >= 0)
			close(sb->fds[i]);
	egress_policy_slot_release(&sb->policy);
	egress_bindings_slot_release(&sb->bindings);
	egress_agg_release(&sb->ev_agg);
	tenant_put(sb->rt, sb->tenant_conns);
	pthread_mutex_destroy(&sb->lock);
	free(sb->names);
	free(sb);
}

struct egress_sandbox *egress_sandbox_by_key(struct egress_runtime *rt, uint64_t key)
{
	for (struct egress_sandbox *sb = rt->sandboxes; sb; sb = sb->next)
		if (sb->key == key)
			return sb;
	return NULL;
}

static struct egress_sandbox *sandbox_by_id(struct egress_runtime *rt, const char *id)
{
	for (struct egress_sandbox *sb = rt->sandboxes; sb; sb = sb->next)
		if (strcmp(sb->id, id) == 0)
			return sb;
	return NULL;
}

bool egress_sandbox_removed(struct egress_sandbox *sb)
{
	pthread_mutex_lock(&sb->lock);
	bool removed = sb->removed;
	pthread_mutex_unlock(&sb->lock);
	return removed;
}

bool egress_sandbox_track(struct egress_sandbox *sb, struct egress_track *t, bool dns)
{
	const struct egress_options *o = &sb->rt->opt;
	pthread_mutex_lock(&sb->lock);
	bool ok = !sb->removed &&
	          (dns ? sb->n_dns_tcp < EGRESS_DNS_TCP_PER_SANDBOX : sb->n_conns < o->max_connections_per_sandbox);
	/* SECURITY: the tenant's limit too (issue 17): many sandboxes of one
	 * tenant cannot take the gateway's every connection. The counter is
	 * the sandbox's as of now (loop_lock is held by the caller); the
	 * connection keeps it, so that a re-add cannot make it miscount. */
	t->counted = NULL;
	if (ok && !dns && sb->tenant_conns) {
		ok = tenant_take(sb->rt, sb->tenant_conns);
		if (ok)
			t->counted = sb->tenant_conns;
	}
	if (ok) {
		if (dns)
			sb->n_dns_tcp++;
		else
			sb->n_conns++;
		t->next = sb->tracks.next;
		t->prev = &sb->tracks;
		sb->tracks.next->prev = t;
		sb->tracks.next = t;
	}
	pthread_mutex_unlock(&sb->lock);
	return ok;
}

void egress_sandbox_untrack(struct egress_sandbox *sb, struct egress_track *t, bool dns)
{
	pthread_mutex_lock(&sb->lock);
	t->prev->next = t->next;
	t->next->prev = t->prev;
	t->next = t->prev = NULL;
	if (dns)
		sb->n_dns_tcp--;
	else
		sb->n_conns--;
	struct egress_tenant *counted = TAKE_PTR(t->counted);
	pthread_mutex_unlock(&sb->lock);
	tenant_release(sb->rt, counted);
}

int egress_sandbox_set_upstream(struct egress_sandbox *sb, struct egress_track *t, int fd)
{
	pthread_mutex_lock(&sb->lock);
	bool removed = sb->removed;
	t->upstream_fd = removed ? -1 : fd;
	pthread_mutex_unlock(&sb->lock);
	return removed && fd >= 0 ? -ECANCELED : 0;
}

/* "remove": every connection of the sandbox ends now. Their threads see
 * EOF or an error and clean up; the fds stay theirs to close. */
static void sandbox_shutdown(struct egress_sandbox *sb)
{
	pthread_mutex_lock(&sb->lock);
	sb->removed = true;
	for (struct egress_track *t = sb->tracks.next; t != &sb->tracks; t = t->next) {
		shutdown(t->client_fd, SHUT_RDWR);
		if (t->upstream_fd >= 0)
			shutdown(t->upstream_fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&sb->lock);
}

static void close_fds(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

/* ------------------------------------------------------------ events */

/* Puts a message on the queue within the sandbox's share of it (force: a
 * summary or a drop report, bounded per sandbox and window, goes in even
 * past it). rt->ev_lock held. Returns false when it was dropped (counted in
 * sb->ev_dropped, reported later in a "network.dropped" record). */
static bool event_queue_locked(struct egress_runtime *rt, struct egress_sandbox *sb, json_t *msg, bool force)
{
	if (!force && (rt->ev_len >= EGRESS_EVENT_QUEUE_MAX || sb->ev_queued >= EGRESS_EVENT_QUEUE_PER_SANDBOX)) {
		/* airlockd is not reading fast enough, or this sandbox floods:
		 * losing audit records is bad, blocking every connection on
		 * it is worse. Counted per sandbox, and the count is sent. */
		json_decref(msg);
		sb->ev_dropped++;
		rt->ev_dropped++;
		if (!sb->ev_pending) {
			sb->ev_pending = true;
			sb->ev_pending_next = rt->ev_pending;
			rt->ev_pending = egress_sandbox_ref(sb);
		}
		return false;
	}
	struct egress_event_node *n = xmalloc(sizeof(*n));
	*n = (struct egress_event_node){.sb = egress_sandbox_ref(sb), .msg = msg};
	sb->ev_queued++;
	if (rt->ev_tail)
		rt->ev_tail->next = n;
	else
		rt->ev_head = n;
	rt->ev_tail = n;
	rt->ev_len++;
	pthread_cond_signal(&rt->ev_cond);
	return true;
}

static void event_log(struct egress_sandbox *sb, const char *type, const json_t *data)
{
	if (sb->rt->opt.log_level < EGRESS_LOG_INFO)
		return;
	/* SECURITY: the data holds canonical hosts and escaped guest text
	 * only; ENSURE_ASCII keeps the line printable anyway. */
	cleanup_free char *text = json_dumps(data, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_SORT_KEYS);
	egress_log(EGRESS_LOG_INFO, "%s %s %s", sb->id, type, text ? text : "{}");
}

void egress_event(struct egress_sandbox *sb, const char *type, json_t *data)
{
	struct egress_runtime *rt = sb->rt;
	json_t *msg = json_pack("{ssssssso}", "op", "event", "sandbox", sb->id, "type", type, "data", data);
	if (!msg)
		abort();
	char key[EGRESS_AGG_KEY_MAX];
	bool foldable = egress_agg_key(type, data, key, sizeof(key));
	pthread_mutex_lock(&rt->ev_lock);
	/* SECURITY (issue 17): a sandbox's flood of denials becomes a few
	 * counted records per window, so that it cannot push the records of
	 * other sandboxes out of the queue or out of airlockd's log. */
	if (foldable && !egress_agg_offer(&sb->ev_agg, key, msg, now_ms_monotonic())) {
		if (!sb->ev_pending) {
			sb->ev_pending = true;
			sb->ev_pending_next = rt->ev_pending;
			rt->ev_pending = egress_sandbox_ref(sb);
		}
		pthread_mutex_unlock(&rt->ev_lock);
		json_decref(msg);
		return;
	}
	json_incref(msg);
	bool queued = event_queue_locked(rt, sb, msg, false);
	pthread_mutex_unlock(&rt->ev_lock);
	if (queued)
		event_log(sb, type, data);
	json_decref(msg);
}

static void event_emit_summary(json_t *msg, void *arg)
{
	struct egress_sandbox *sb = arg;
	event_queue_locked(sb->rt, sb, msg, true);
}

/* The sandbox's folded denials whose window is over as counted records (a
 * removed sandbox's too: the list holds it), and its drops as one
 * "network.dropped" record. rt->ev_lock held (a leaf: no sandbox lock
 * here). Returns whether the sandbox still has something pending. */
static bool event_flush_sandbox(struct egress_runtime *rt, struct egress_sandbox *sb, uint64_t now_ms)
{
	egress_agg_flush(&sb->ev_agg, now_ms, false, event_emit_summary, sb);
	/* At most one drop report a second, past the share as it is. */
	if (sb->ev_dropped && now_ms - sb->ev_dropped_report_ms >= 1000) {
		json_t *msg = json_pack("{sssssss{sIss}}", "op", "event", "sandbox", sb->id, "type", "network.dropped",
		                        "data", "dropped", (json_int_t)sb->ev_dropped, "reason",
		                        "the gateway's event queue was full for this sandbox");
		if (!msg)
			abort();
		sb->ev_dropped = 0;
		sb->ev_dropped_report_ms = now_ms;
		event_queue_locked(rt, sb, msg, true);
	}
	return sb->ev_agg.pending > 0 || sb->ev_dropped > 0;
}

/* Every sandbox on rt->ev_pending flushed; those with nothing left go off
 * the list (their references are dropped after the lock, in *ret_done). */
static void event_tick_locked(struct egress_runtime *rt, struct egress_sandbox **ret_done)
{
	uint64_t now = now_ms_monotonic();
	struct egress_sandbox **p = &rt->ev_pending;
	while (*p) {
		struct egress_sandbox *sb = *p;
		if (event_flush_sandbox(rt, sb, now)) {
			p = &sb->ev_pending_next;
			continue;
		}
		*p = sb->ev_pending_next;
		sb->ev_pending = false;
		sb->ev_pending_next = *ret_done;
		*ret_done = sb;
	}
}

static int ctl_send(struct egress_runtime *rt, json_t *msg)
{
	pthread_mutex_lock(&rt->send_lock);
	int r = ctlmsg_send(rt->ctl_fd, msg, NULL, 0);
	pthread_mutex_unlock(&rt->send_lock);
	return r;
}

/* Waits until events are queued, flushing folded denials once a second
 * while some are pending; returns the queue's list (rt->ev_lock held). */
static struct egress_event_node *event_wait_locked(struct egress_runtime *rt)
{
	for (;;) {
		struct egress_sandbox *done = NULL;
		event_tick_locked(rt, &done);
		if (done) {
			/* Unreferenced outside the lock (the last reference frees). */
			pthread_mutex_unlock(&rt->ev_lock);
			while (done) {
				struct egress_sandbox *next = done->ev_pending_next;
				egress_sandbox_unref(done);
				done = next;
			}
			pthread_mutex_lock(&rt->ev_lock);
			continue;
		}
		if (rt->ev_head)
			break;
		if (rt->ev_pending) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&rt->ev_cond, &rt->ev_lock, &ts);
		} else {
			pthread_cond_wait(&rt->ev_cond, &rt->ev_lock);
		}
	}
	struct egress_event_node *list = rt->ev_head;
	rt->ev_head = rt->ev_tail = NULL;
	rt->ev_len = 0;
	for (struct egress_event_node *n = list; n; n = n->next)
		n->sb->ev_queued--;
	return list;
}

static void *event_sender_main(void *arg)
{
	struct egress_runtime *rt = arg;
	uint64_t dropped_logged = 0;
	for (;;) {
		pthread_mutex_lock(&rt->ev_lock);
		struct egress_event_node *list = event_wait_locked(rt);
		uint64_t dropped = rt->ev_dropped;
		pthread_mutex_unlock(&rt->ev_lock);
		if (dropped != dropped_logged && (dropped & (dropped - 1)) == 0)
			egress_log(EGRESS_LOG_WARN,
			           "%llu audit events dropped so far (each counted in a network.dropped record)",
			           (unsigned long long)dropped);
		dropped_logged = dropped;
		while (list) {
			struct egress_event_node *n = list;
			list = n->next;
			int r = ctl_send(rt, n->msg);
			if (r < 0 && r != -EPIPE && r != -ECONNRESET)
				egress_log(EGRESS_LOG_WARN, "sending an event: %s", strerror(-r));
			json_decref(n->msg);
			egress_sandbox_unref(n->sb);
			free(n);
		}
	}
	return NULL;
}

/* ------------------------------------------------------------ requests */

static bool id_valid(const char *s, size_t len, size_t max, bool empty_ok)
{
	if (len > max || (len == 0 && !empty_ok))
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
		      c == '_' || c == '.'))
			return false;
	}
	return true;
}

static int check_keys(const json_t *msg, const char *const *keys, size_t n, struct al_error *err)
{
	const char *key;
	const json_t *v;
	json_object_foreach ((json_t *)msg, key, v) {
		bool known = false;
		for (size_t i = 0; i < n && !known; i++)
			known = strcmp(key, keys[i]) == 0;
		if (!known) {
			char shown[64];
			egress_text_escape((const uint8_t *)key, strlen(key), shown, sizeof(shown));
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "unknown field \"%s\"", shown);
		}
	}
	return 0;
}

/* A request about one sandbox: no field but keys, and a valid "sandbox". */
static int check_sandbox_request(const json_t *msg, const char *const *keys, size_t n, const char **ret,
                                 struct al_error *err)
{
	int r = check_keys(msg, keys, n, err);
	if (r < 0)
		return r;
	const json_t *v = json_object_get(msg, "sandbox");
	if (!json_is_string(v) || !id_valid(json_string_value(v), json_string_length(v), EGRESS_SANDBOX_ID_MAX, false))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"sandbox\" must be an id of 1-%d characters [A-Za-z0-9._-]",
		                    EGRESS_SANDBOX_ID_MAX);
	*ret = json_string_value(v);
	return 0;
}

/* The sandbox with this id, a new reference in *ret; or -ENOENT. */
static int sandbox_get(struct egress_runtime *rt, const char *id, struct egress_sandbox **ret, struct al_error *err)
{
	pthread_mutex_lock(&rt->loop_lock);
	struct egress_sandbox *sb = sandbox_by_id(rt, id);
	if (sb)
		egress_sandbox_ref(sb);
	pthread_mutex_unlock(&rt->loop_lock);
	if (!sb)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "no sandbox %s", id);
	*ret = sb;
	return 0;
}

/* The three fds of "add": [TCP listener, DNS UDP socket, DNS TCP listener],
 * AF_INET sockets of the right types, the stream ones listening. */
static int check_add_fds(const int *fds, size_t nfds, struct al_error *err)
{
	static const int types[EGRESS_FD_COUNT] = {SOCK_STREAM, SOCK_DGRAM, SOCK_STREAM};
	static const char *const names[EGRESS_FD_COUNT] = {"TCP listener", "DNS UDP socket", "DNS TCP listener"};
	if (nfds != EGRESS_FD_COUNT)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"add\" needs 3 fds (TCP listener, DNS UDP socket, DNS TCP listener), got %zu",
		                    nfds);
	for (size_t i = 0; i < EGRESS_FD_COUNT; i++) {
		int type = 0, domain = 0, listening = 0;
		socklen_t l1 = sizeof(type), l2 = sizeof(domain), l3 = sizeof(listening);
		if (getsockopt(fds[i], SOL_SOCKET, SO_TYPE, &type, &l1) < 0 ||
		    getsockopt(fds[i], SOL_SOCKET, SO_DOMAIN, &domain, &l2) < 0 ||
		    getsockopt(fds[i], SOL_SOCKET, SO_ACCEPTCONN, &listening, &l3) < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOTSOCK, "fd %zu (%s): not a socket", i,
			                    names[i]);
		if (type != types[i] || domain != AF_INET || (type == SOCK_STREAM) != (listening != 0))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "fd %zu (%s): wrong kind of socket (AF_INET %s%s expected)", i, names[i],
			                    types[i] == SOCK_STREAM ? "stream" : "datagram",
			                    types[i] == SOCK_STREAM ? ", listening" : "");
	}
	/* The loop must never block on them. This flag lives in the open
	 * file description, which airlockd shares: it does not use them. */
	for (size_t i = 0; i < EGRESS_FD_COUNT; i++) {
		int fl = fcntl(fds[i], F_GETFL);
		if (fl < 0 || fcntl(fds[i], F_SETFL, fl | O_NONBLOCK) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "fd %zu: O_NONBLOCK: %m", i);
	}
	return 0;
}

static int handle_add(struct egress_runtime *rt, const json_t *msg, int *fds, size_t nfds, struct al_error *err)
{
	static const char *const keys[] = {"op", "seq", "sandbox", "tenant", "policy", "bindings"};
	const char *id;
	int r = check_sandbox_request(msg, keys, ARRAY_SIZE(keys), &id, err);
	if (r < 0)
		return r;
	const json_t *tj = json_object_get(msg, "tenant");
	if (tj && !json_is_null(tj) &&
	    (!json_is_string(tj) || !id_valid(json_string_value(tj), json_string_length(tj), EGRESS_TENANT_MAX, true)))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"tenant\" must be null or an id of at most %d characters [A-Za-z0-9._-]",
		                    EGRESS_TENANT_MAX);
	const char *tenant = json_is_string(tj) ? json_string_value(tj) : "";
	const json_t *pj = json_object_get(msg, "policy");
	if (!pj)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"add\" without a \"policy\"");
	cleanup_egress_policy struct egress_policy *policy = NULL;
	cleanup_egress_bindings struct egress_bindings *bindings = NULL;
	if ((r = egress_policy_parse(pj, &policy, err)) < 0 ||
	    (r = egress_bindings_parse(json_object_get(msg, "bindings"), &bindings, err)) < 0 ||
	    (r = check_add_fds(fds, nfds, err)) < 0)
		return r;
	size_t na = egress_policy_allow_count(policy), nd = egress_policy_deny_count(policy);
	size_t nb = egress_bindings_count(bindings);

	pthread_mutex_lock(&rt->loop_lock);
	struct egress_sandbox *sb = sandbox_by_id(rt, id);
	bool created = false;
	if (sb) {
		/* Re-added (airlockd restarted us, or re-created its
		 * listeners): new fds and policy, same connections. */
		egress_loop_unwatch(rt, sb);
		close_fds(sb->fds, EGRESS_FD_COUNT);
	} else if (rt->n_sandboxes >= EGRESS_SANDBOXES_MAX) {
		pthread_mutex_unlock(&rt->loop_lock);
		return al_error_set(err, AL_ERR_UNAVAILABLE, ENOSPC, "too many sandboxes (at most %d)",
		                    EGRESS_SANDBOXES_MAX);
	} else {
		sb = xcalloc(1, sizeof(*sb));
		atomic_init(&sb->refs, 1); /* the table's */
		sb->rt = rt;
		strlcpy_al(sb->id, id, sizeof(sb->id));
		egress_policy_slot_init(&sb->policy, NULL);
		egress_bindings_slot_init(&sb->bindings);
		pthread_mutex_init(&sb->lock, NULL);
		sb->tracks.next = sb->tracks.prev = &sb->tracks;
		egress_agg_init(&sb->ev_agg, EGRESS_EVENT_AGG_WINDOW_MS, EGRESS_EVENT_AGG_BURST);
		created = true;
	}
	sb->key = rt->next_key++;
	memcpy(sb->fds, fds, sizeof(sb->fds));
	if (created || strcmp(sb->tenant, tenant) != 0) {
		tenant_put(rt, sb->tenant_conns);
		sb->tenant_conns = tenant_get(rt, tenant);
	}
	strlcpy_al(sb->tenant, tenant, sizeof(sb->tenant));
	/* Policy and bindings: each swapped whole (a connection decided in
	 * between may see the new policy with the old bindings; both are
	 * complete, consistent objects). */
	egress_policy_slot_set(&sb->policy, TAKE_PTR(policy));
	egress_bindings_slot_set(&sb->bindings, TAKE_PTR(bindings));
	r = egress_loop_watch(rt, sb);
	if (r < 0) {
		egress_loop_unwatch(rt, sb);
		/* The fds go back to the caller, which closes them. */
		for (size_t i = 0; i < EGRESS_FD_COUNT; i++)
			sb->fds[i] = -1;
		r = al_error_set(err, AL_ERR_INTERNAL, -r, "epoll: %s", strerror(-r));
	} else {
		for (size_t i = 0; i < nfds; i++)
			fds[i] = -1; /* taken */
	}
	if (created && r == 0) {
		sb->next = rt->sandboxes;
		rt->sandboxes = sb;
		rt->n_sandboxes++;
	} else if (created) {
		egress_sandbox_unref(TAKE_PTR(sb));
	}
	pthread_mutex_unlock(&rt->loop_lock);
	if (r == 0)
		egress_log(EGRESS_LOG_INFO, "sandbox %s%s%s %s: %zu allow, %zu deny rules, %zu secret bindings", id,
		           tenant[0] ? " tenant " : "", tenant, created ? "added" : "re-added", na, nd, nb);
	return r;
}

static int handle_policy(struct egress_runtime *rt, const json_t *msg, struct al_error *err)
{
	static const char *const keys[] = {"op", "seq", "sandbox", "policy"};
	const char *id;
	int r = check_sandbox_request(msg, keys, ARRAY_SIZE(keys), &id, err);
	if (r < 0)
		return r;
	cleanup_egress_policy struct egress_policy *policy = NULL;
	cleanup_egress_sandbox struct egress_sandbox *sb = NULL;
	if ((r = egress_policy_parse(json_object_get(msg, "policy"), &policy, err)) < 0 ||
	    (r = sandbox_get(rt, id, &sb, err)) < 0)
		return r;
	size_t na = egress_policy_allow_count(policy), nd = egress_policy_deny_count(policy);
	/* SECURITY: one pointer swap: every decision from now on uses the
	 * new policy, every decision taken before used the old one whole. */
	egress_policy_slot_set(&sb->policy, TAKE_PTR(policy));
	egress_log(EGRESS_LOG_INFO, "sandbox %s: policy replaced: %zu allow, %zu deny rules", id, na, nd);
	return 0;
}

/* "secrets": the sandbox's bindings replaced whole. */
static int handle_secrets(struct egress_runtime *rt, const json_t *msg, struct al_error *err)
{
	static const char *const keys[] = {"op", "seq", "sandbox", "bindings"};
	const char *id;
	int r = check_sandbox_request(msg, keys, ARRAY_SIZE(keys), &id, err);
	if (r < 0)
		return r;
	const json_t *bj = json_object_get(msg, "bindings");
	if (!json_is_array(bj))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"secrets\" needs \"bindings\": [...]");
	cleanup_egress_bindings struct egress_bindings *bindings = NULL;
	cleanup_egress_sandbox struct egress_sandbox *sb = NULL;
	if ((r = egress_bindings_parse(bj, &bindings, err)) < 0 || (r = sandbox_get(rt, id, &sb, err)) < 0)
		return r;
	size_t nb = egress_bindings_count(bindings);
	/* SECURITY: one pointer swap: a rotated or deleted secret is used by
	 * no request decided after the ack (a request already being rewritten
	 * finishes with the set it took). */
	egress_bindings_slot_set(&sb->bindings, TAKE_PTR(bindings));
	egress_log(EGRESS_LOG_INFO, "sandbox %s: secret bindings replaced: %zu", id, nb);
	return 0;
}

struct egress_ca *egress_ca_current(struct egress_runtime *rt)
{
	pthread_mutex_lock(&rt->ca_lock);
	struct egress_ca *ca = egress_ca_ref(rt->ca);
	pthread_mutex_unlock(&rt->ca_lock);
	return ca;
}

/* "ca": the Airlock CA that signs interception leaves. A new CA replaces
 * the old one for connections decided after the ack (with an empty leaf
 * cache); connections that hold the old one finish with it. */
static int handle_ca(struct egress_runtime *rt, const json_t *msg, struct al_error *err)
{
	static const char *const keys[] = {"op", "seq", "cert_pem", "key_pem"};
	int r = check_keys(msg, keys, ARRAY_SIZE(keys), err);
	if (r < 0)
		return r;
	const json_t *cj = json_object_get(msg, "cert_pem"), *kj = json_object_get(msg, "key_pem");
	if (!json_is_string(cj) || !json_is_string(kj))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"ca\" needs \"cert_pem\" and \"key_pem\" (PEM text)");
	struct egress_ca *ca = NULL;
	r = egress_ca_new(json_string_value(cj), json_string_length(cj), json_string_value(kj), json_string_length(kj),
	                  EGRESS_LEAF_CACHE_MAX, &ca, err);
	if (r < 0)
		return r;
	char desc[512];
	egress_ca_describe(ca, desc, sizeof(desc));
	pthread_mutex_lock(&rt->ca_lock);
	struct egress_ca *old = rt->ca;
	rt->ca = ca;
	pthread_mutex_unlock(&rt->ca_lock);
	egress_ca_unref(old);
	egress_log(EGRESS_LOG_INFO, "Airlock CA %s: %s", old ? "replaced" : "loaded", desc);
	return 0;
}

/* SECURITY: the received text of secret values and of the CA key is wiped
 * in place before the message is released (jansson frees without
 * clearing). Other copies are beyond reach here: the receive buffer in
 * ctlmsg_recv() and jansson's parser. */
static void wipe_secrets(json_t *v)
{
	const char *key;
	json_t *e;
	size_t i;
	if (json_is_object(v)) {
		json_object_foreach (v, key, e) {
			if (json_is_string(e) &&
			    (strcmp(key, "value") == 0 || strcmp(key, "key_pem") == 0 || strcmp(key, "format") == 0))
				OPENSSL_cleanse((char *)json_string_value(e), json_string_length(e));
			else
				wipe_secrets(e);
		}
	} else if (json_is_array(v)) {
		json_array_foreach (v, i, e)
			wipe_secrets(e);
	}
}

static int handle_remove(struct egress_runtime *rt, const json_t *msg, struct al_error *err)
{
	static const char *const keys[] = {"op", "seq", "sandbox"};
	const char *id;
	int r = check_sandbox_request(msg, keys, ARRAY_SIZE(keys), &id, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&rt->loop_lock);
	struct egress_sandbox **p = &rt->sandboxes, *sb = NULL;
	for (; *p; p = &(*p)->next)
		if (strcmp((*p)->id, id) == 0) {
			sb = *p;
			*p = sb->next;
			rt->n_sandboxes--;
			break;
		}
	if (sb) {
		egress_loop_unwatch(rt, sb);
		close_fds(sb->fds, EGRESS_FD_COUNT);
	}
	pthread_mutex_unlock(&rt->loop_lock);
	if (!sb) {
		/* Idempotent: airlockd may remove what a restart never re-added. */
		egress_log(EGRESS_LOG_INFO, "sandbox %s: remove: not known (nothing to do)", id);
		return 0;
	}
	sandbox_shutdown(sb);
	egress_sandbox_unref(sb);
	egress_log(EGRESS_LOG_INFO, "sandbox %s removed", id);
	return 0;
}

static void reply(struct egress_runtime *rt, const json_t *seq, int r, const struct al_error *err)
{
	cleanup_json json_t *msg = json_pack("{sssO}", "op", r < 0 ? "nack" : "ack", "seq", seq ? seq : json_null());
	if (r < 0)
		json_object_set_new(msg, "error", json_string(err->message[0] ? err->message : strerror(-r)));
	int s = ctl_send(rt, msg);
	if (s < 0 && s != -EPIPE)
		egress_log(EGRESS_LOG_WARN, "sending a reply: %s", strerror(-s));
}

static void handle_message(struct egress_runtime *rt, json_t *msg, int *fds, size_t nfds)
{
	struct al_error err = {0};
	int r;
	const char *op = json_string_value(json_object_get(msg, "op"));
	const json_t *seq = json_object_get(msg, "seq");
	if (!json_is_integer(seq) || json_integer_value(seq) < 0) {
		r = al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"seq\" must be a non-negative integer");
		seq = NULL;
	} else if (!op) {
		r = al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"op\" must be a string");
	} else if (strcmp(op, "add") == 0) {
		r = handle_add(rt, msg, fds, nfds, &err);
	} else if (nfds > 0) {
		r = al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "fds are accepted only with \"add\"");
	} else if (strcmp(op, "policy") == 0) {
		r = handle_policy(rt, msg, &err);
	} else if (strcmp(op, "remove") == 0) {
		r = handle_remove(rt, msg, &err);
	} else if (strcmp(op, "secrets") == 0) {
		r = handle_secrets(rt, msg, &err);
	} else if (strcmp(op, "ca") == 0) {
		r = handle_ca(rt, msg, &err);
	} else if (strcmp(op, "ping") == 0) {
		static const char *const keys[] = {"op", "seq"};
		r = check_keys(msg, keys, ARRAY_SIZE(keys), &err);
	} else {
		char shown[64];
		egress_text_escape((const uint8_t *)op, strlen(op), shown, sizeof(shown));
		r = al_error_set(&err, AL_ERR_INVALID_ARGUMENT, EINVAL, "unknown op \"%s\"", shown);
	}
	/* fds not taken by a successful "add" are not ours to keep. */
	close_fds(fds, nfds);
	if (r < 0) {
		char shown[32] = "request";
		if (op)
			egress_text_escape((const uint8_t *)op, strlen(op), shown, sizeof(shown));
		egress_log(EGRESS_LOG_WARN, "control: %s refused: %s", shown, err.message);
	}
	reply(rt, seq, r, &err);
}

static void *ctl_main(void *arg)
{
	struct egress_runtime *rt = arg;
	for (;;) {
		json_t *msg = NULL;
		int fds[CTLMSG_FDS_MAX];
		size_t nfds = 0;
		int r = ctlmsg_recv(rt->ctl_fd, &msg, fds, CTLMSG_FDS_MAX, &nfds);
		if (r == -EBADMSG || r == -EPROTO) {
			struct al_error err = {0};
			al_error_set(&err, AL_ERR_INVALID_ARGUMENT, -r,
			             "malformed control message (not one JSON object)");
			egress_log(EGRESS_LOG_WARN, "control: %s", err.message);
			reply(rt, NULL, r, &err);
			continue;
		}
		if (r < 0) {
			if (r != -EPIPE)
				egress_log(EGRESS_LOG_ERROR, "control socket: %s", strerror(-r));
			break;
		}
		handle_message(rt, msg, fds, nfds);
		wipe_secrets(msg);
		json_decref(msg);
	}
	uint64_t one = 1;
	(void)!write(rt->stop_fd, &one, sizeof(one));
	return NULL;
}

int egress_ctl_start(struct egress_runtime *rt)
{
	/* "ready" goes first, before any thread could send anything. */
	cleanup_json json_t *ready = json_pack("{sssi}", "op", "ready", "version", CTL_PROTOCOL_VERSION);
	int r = ctl_send(rt, ready);
	if (r < 0)
		return r;
	r = egress_thread_start(event_sender_main, rt);
	if (r == 0)
		r = egress_thread_start(ctl_main, rt);
	return r;
}
