/* SPDX-License-Identifier: Apache-2.0 */
#include "egress-supervisor.h"

#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ca.h"
#include "ctlmsg.h"
#include "events.h"
#include "json-cleanup.h"
#include "log.h"
#include "metrics.h"
#include "secrets.h"
#include "store.h"
#include "util.h"

#define READY_TIMEOUT_MS 5000
#define REQUEST_TIMEOUT_MS 5000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define HEALTHY_AFTER_MS 10000
#define CTL_SNDBUF (4 * 1024 * 1024)
#define EVENT_FIELDS_MAX 32
#define EVENT_STRING_MAX 1024

struct entry {
	struct entry *next;
	char id[SANDBOX_ID_MAX + 1];
	char tenant[64];
	char *policy;
	char *bindings; /* the sandbox's bindings (secrets.h), without values */
	int fds[NETNS_LISTEN_COUNT];
};

static struct egress_config conf;
/* conf.ceiling as the gateway's --ceiling-cidr/--ceiling-metadata arguments. */
static char *ceiling_nets[POLICY_CEILING_NETS_MAX];
static size_t n_ceiling_nets;
static bool ceiling_metadata;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *entries;

/* req_lock serialises requests and the hand-over after a restart; st_lock
 * guards the connection state below. Order: req_lock, then st_lock. */
static pthread_mutex_t req_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t st_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t st_cond;
static int ctl_fd = -1;
static pid_t child_pid;
static bool up, stopping, started;
/* The CA and every listener went over after "ready": requests may go now. */
static bool handed_over;
static uint64_t generation, next_seq, acked_seq, nack_seq;
static char nack_error[256];
static pthread_t sup_thread;

static struct entry *entry_find(const char *id)
{
	for (struct entry *e = entries; e; e = e->next)
		if (!strcmp(e->id, id))
			return e;
	return NULL;
}

static void entry_free(struct entry *e)
{
	for (size_t i = 0; i < NETNS_LISTEN_COUNT; i++)
		if (e->fds[i] >= 0)
			close(e->fds[i]);
	free(e->policy);
	free(e->bindings);
	free(e);
}

/* The "add" of an entry, with its bindings' values when it has any (and
 * with_bindings). Release it with secret_json_releasep(). */
static int add_message(const struct entry *e, bool with_bindings, json_t **ret, struct al_error *err)
{
	cleanup_json json_t *policy = json_loads(e->policy, 0, NULL);
	json_t *msg = json_pack("{s:s, s:s, s:s, s:O}", "op", "add", "sandbox", e->id, "tenant", e->tenant, "policy",
	                        policy ? policy : json_object());
	json_t *bindings = NULL;
	int r = secret_bindings_resolve(e->tenant, with_bindings ? e->bindings : "[]", &bindings, err);
	if (r < 0) {
		json_decref(msg);
		return r;
	}
	if (json_array_size(bindings) > 0)
		json_object_set_new(msg, "bindings", bindings);
	else
		json_decref(bindings);
	*ret = msg;
	return 0;
}

/* Sends one request and waits for its answer. Called with req_lock held.
 * -ENOTCONN: the gateway is down (or died meanwhile). */
static int request(json_t *msg, const int *fds, size_t nfds, struct al_error *err)
{
	pthread_mutex_lock(&st_lock);
	if (!up || !handed_over) {
		pthread_mutex_unlock(&st_lock);
		return -ENOTCONN;
	}
	uint64_t gen = generation, seq = ++next_seq;
	int fd = ctl_fd;
	pthread_mutex_unlock(&st_lock);

	json_object_set_new(msg, "seq", json_integer((json_int_t)seq));
	int r = ctlmsg_send(fd, msg, fds, nfds);
	if (r == -EMSGSIZE)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EMSGSIZE,
		                    "the sandbox's network policy and secret bindings together are over the egress "
		                    "gateway's message limit of %d bytes",
		                    CTLMSG_MAX);
	if (r < 0) {
		log_error("egress gateway: sending a request: %s", strerror(-r));
		return -ENOTCONN;
	}

	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += REQUEST_TIMEOUT_MS / 1000;
	pthread_mutex_lock(&st_lock);
	r = 0;
	while (acked_seq < seq && generation == gen && r == 0)
		r = pthread_cond_timedwait(&st_cond, &st_lock, &deadline);
	if (generation != gen)
		r = -ENOTCONN;
	else if (acked_seq < seq)
		r = al_error_set(err, AL_ERR_UNAVAILABLE, ETIMEDOUT,
		                 "the egress gateway did not answer within %d ms (it is being restarted)",
		                 REQUEST_TIMEOUT_MS);
	else if (nack_seq == seq)
		r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "the egress gateway refused: %s", nack_error);
	else
		r = 0;
	bool hung = r == -ETIMEDOUT;
	pid_t pid = child_pid;
	pthread_mutex_unlock(&st_lock);
	/* A gateway that does not answer is restarted rather than trusted. */
	if (hung && pid > 0)
		kill(pid, SIGKILL);
	return r;
}

int egress_sandbox_add(const char *id, const char *tenant, const char *policy_json, const char *bindings_json,
                       struct netns *n, struct al_error *err)
{
	struct entry *e = xcalloc(1, sizeof(*e));
	strlcpy_al(e->id, id, sizeof(e->id));
	strlcpy_al(e->tenant, tenant ? tenant : "", sizeof(e->tenant));
	e->policy = xstrdup(policy_json);
	e->bindings = xstrdup(bindings_json ? bindings_json : "[]");
	for (size_t i = 0; i < NETNS_LISTEN_COUNT; i++)
		e->fds[i] = TAKE_FD(n->listen_fds[i]);

	pthread_mutex_lock(&req_lock);
	pthread_mutex_lock(&reg_lock);
	struct entry *old = entry_find(id);
	if (old) {
		pthread_mutex_unlock(&reg_lock);
		pthread_mutex_unlock(&req_lock);
		entry_free(e);
		return al_error_set(err, AL_ERR_CONFLICT, EEXIST, "sandbox %s already has a network", id);
	}
	cleanup_secret_json json_t *msg = NULL;
	int r = add_message(e, true, &msg, err);
	if (r < 0) {
		pthread_mutex_unlock(&reg_lock);
		pthread_mutex_unlock(&req_lock);
		entry_free(e);
		return r;
	}
	e->next = entries;
	entries = e;
	int fds[NETNS_LISTEN_COUNT];
	memcpy(fds, e->fds, sizeof(fds));
	pthread_mutex_unlock(&reg_lock);
	r = request(msg, fds, NETNS_LISTEN_COUNT, err);
	pthread_mutex_unlock(&req_lock);
	if (r == -ENOTCONN) {
		log_info("sandbox %s: the egress gateway is down; its network starts when the gateway is back", id);
		return 0;
	}
	if (r < 0)
		egress_sandbox_remove(id);
	return r;
}

int egress_sandbox_set_policy(const char *id, const char *policy_json, struct al_error *err)
{
	pthread_mutex_lock(&req_lock);
	pthread_mutex_lock(&reg_lock);
	struct entry *e = entry_find(id);
	if (!e) {
		pthread_mutex_unlock(&reg_lock);
		pthread_mutex_unlock(&req_lock);
		return al_error_set(err, AL_ERR_CONFLICT, ENOENT, "sandbox %s has no network (is it running?)", id);
	}
	char *old = e->policy;
	e->policy = xstrdup(policy_json);
	cleanup_json json_t *policy = json_loads(policy_json, 0, NULL);
	pthread_mutex_unlock(&reg_lock);
	cleanup_json json_t *msg = json_pack("{sssssO}", "op", "policy", "sandbox", id, "policy", policy);
	int r = request(msg, NULL, 0, err);
	if (r < 0 && r != -ENOTCONN) {
		/* Not applied: keep what the gateway enforces. */
		pthread_mutex_lock(&reg_lock);
		if ((e = entry_find(id))) {
			free(e->policy);
			e->policy = TAKE_PTR(old);
		}
		pthread_mutex_unlock(&reg_lock);
	}
	pthread_mutex_unlock(&req_lock);
	free(old);
	return r == -ENOTCONN ? 0 : r;
}

void egress_sandbox_remove(const char *id)
{
	pthread_mutex_lock(&req_lock);
	pthread_mutex_lock(&reg_lock);
	struct entry **p = &entries, *e = NULL;
	for (; *p; p = &(*p)->next)
		if (!strcmp((*p)->id, id)) {
			e = *p;
			*p = e->next;
			break;
		}
	pthread_mutex_unlock(&reg_lock);
	if (e) {
		cleanup_json json_t *msg = json_pack("{ssss}", "op", "remove", "sandbox", id);
		struct al_error err;
		int r = request(msg, NULL, 0, &err);
		if (r < 0 && r != -ENOTCONN)
			log_error("sandbox %s: egress gateway: %s", id, err.message);
		entry_free(e);
		metrics_forget_egress_sandbox(id);
	}
	pthread_mutex_unlock(&req_lock);
}

/* A sandbox whose bindings name a changed secret: its id and bindings. */
struct changed {
	char id[SANDBOX_ID_MAX + 1];
	char *bindings;
};

void egress_secret_changed(const char *tenant, const char *name)
{
	pthread_mutex_lock(&req_lock);
	/* req_lock: no entry comes or goes meanwhile (add and remove take it). */
	pthread_mutex_lock(&reg_lock);
	size_t n = 0, cap = 0;
	struct changed *v = NULL;
	for (struct entry *e = entries; e; e = e->next) {
		if (strcmp(e->tenant, tenant) || !secret_bindings_use(e->bindings, name))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			v = xrealloc(v, cap * sizeof(*v));
		}
		strlcpy_al(v[n].id, e->id, sizeof(v[n].id));
		v[n++].bindings = xstrdup(e->bindings);
	}
	pthread_mutex_unlock(&reg_lock);
	bool restart = false;
	for (size_t i = 0; i < n; i++) {
		struct al_error err = {0};
		json_t *arr = NULL;
		int r = secret_bindings_resolve(tenant, v[i].bindings, &arr, &err);
		if (r == 0) {
			cleanup_secret_json json_t *msg =
			    json_pack("{s:s, s:s, s:o}", "op", "secrets", "sandbox", v[i].id, "bindings", arr);
			r = request(msg, NULL, 0, &err);
		}
		if (r < 0 && r != -ENOTCONN) {
			log_error("sandbox %s: the egress gateway did not take the new bindings of secret %s: %s; "
			          "restarting it",
			          v[i].id, name, err.message);
			restart = true;
		}
		free(v[i].bindings);
	}
	free(v);
	pthread_mutex_lock(&st_lock);
	pid_t pid = up ? child_pid : 0;
	pthread_mutex_unlock(&st_lock);
	/* SECURITY: a gateway that may still hold an old value is replaced; the
	 * hand-over after its restart sends what the store holds now. */
	if (restart && pid > 0)
		kill(pid, SIGKILL);
	pthread_mutex_unlock(&req_lock);
}

pid_t egress_pid(void)
{
	pthread_mutex_lock(&st_lock);
	pid_t pid = up ? child_pid : 0;
	pthread_mutex_unlock(&st_lock);
	return pid;
}

/* ------------------------------------------------------------ messages */

static bool event_data_ok(json_t *data)
{
	if (!json_is_object(data) || json_object_size(data) > EVENT_FIELDS_MAX)
		return false;
	const char *k;
	json_t *v;
	json_object_foreach (data, k, v) {
		if (json_is_string(v) && json_string_length(v) > EVENT_STRING_MAX)
			return false;
		if (json_is_object(v))
			return false;
		if (json_is_array(v) && json_array_size(v) > EVENT_FIELDS_MAX)
			return false;
	}
	return true;
}

/* SECURITY: the gateway is unprivileged and parses guest bytes; what it
 * says is bounded and checked before it becomes an event: known types,
 * known sandboxes, flat small data. */
static void handle_event(json_t *msg)
{
	static const char *const types[] = {"network.allow", "network.deny",   "network.close",
	                                    "network.dns",   "network.secret", "network.dropped"};
	const char *type = json_string_value(json_object_get(msg, "type"));
	const char *id = json_string_value(json_object_get(msg, "sandbox"));
	json_t *data = json_object_get(msg, "data");
	bool known = false;
	for (size_t i = 0; type && i < ARRAY_SIZE(types); i++)
		known |= !strcmp(type, types[i]);
	if (!known || !id || !event_data_ok(data))
		return;
	char tenant[64];
	pthread_mutex_lock(&reg_lock);
	struct entry *e = entry_find(id);
	if (e)
		strlcpy_al(tenant, e->tenant, sizeof(tenant));
	pthread_mutex_unlock(&reg_lock);
	if (!e)
		return;
	const char *proto = json_string_value(json_object_get(data, "proto"));
	const char *verdict = json_string_value(json_object_get(data, "verdict"));
	/* Issue 17: a counted record stands for "count" decisions; what the
	 * gateway folded into one or dropped shows per sandbox in /metrics too
	 * (the event says it as well). */
	json_int_t folded = json_integer_value(json_object_get(data, "count"));
	json_int_t dropped = json_integer_value(json_object_get(data, "dropped"));
	if (strcmp(type, "network.close") && proto && verdict)
		metrics_add_egress_decisions(proto, verdict, folded > 0 ? (uint64_t)folded : 1);
	if (folded > 0 || (!strcmp(type, "network.dropped") && dropped > 0))
		metrics_add_egress_suppressed(id, tenant, folded > 0 ? (uint64_t)folded : 0,
		                              !strcmp(type, "network.dropped") && dropped > 0 ? (uint64_t)dropped : 0);
	if (!strcmp(type, "network.close")) {
		json_int_t bu = json_integer_value(json_object_get(data, "bytes_up"));
		json_int_t bd = json_integer_value(json_object_get(data, "bytes_down"));
		metrics_add_egress_bytes(bu > 0 ? (uint64_t)bu : 0, bd > 0 ? (uint64_t)bd : 0);
	}
	events_emit(type, tenant[0] ? tenant : NULL, id, json_incref(data));
}

static void handle_message(json_t *msg)
{
	const char *op = json_string_value(json_object_get(msg, "op"));
	if (!op)
		return;
	if (!strcmp(op, "event")) {
		handle_event(msg);
		return;
	}
	pthread_mutex_lock(&st_lock);
	if (!strcmp(op, "ready")) {
		up = true;
	} else if (!strcmp(op, "ack") || !strcmp(op, "nack")) {
		json_int_t seq = json_integer_value(json_object_get(msg, "seq"));
		if (seq > 0 && (uint64_t)seq > acked_seq && (uint64_t)seq <= next_seq)
			acked_seq = (uint64_t)seq;
		if (!strcmp(op, "nack")) {
			nack_seq = (uint64_t)seq;
			const char *e = json_string_value(json_object_get(msg, "error"));
			snprintf(nack_error, sizeof(nack_error), "%.200s", e ? e : "no reason given");
		}
	}
	pthread_cond_broadcast(&st_cond);
	pthread_mutex_unlock(&st_lock);
}

static void *reader_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	for (;;) {
		json_t *msg = NULL;
		size_t nfds = 0;
		int r = ctlmsg_recv(fd, &msg, NULL, 0, &nfds);
		if (r == -EBADMSG || r == -EPROTO)
			continue; /* dropped: a bad message is not a reason to stop */
		if (r < 0)
			break;
		handle_message(msg);
		json_decref(msg);
	}
	return NULL;
}

/* ------------------------------------------------------------ process */

static int spawn(int *ret_fd, pid_t *ret_pid)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	int size = CTL_SNDBUF;
	for (int i = 0; i < 2; i++) {
		setsockopt(sv[i], SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size));
		setsockopt(sv[i], SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size));
	}
	int logfd = open(conf.log_path ? conf.log_path : "/dev/null", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	char *argv[12 + 2 * EGRESS_PUBLIC_CIDRS_MAX + 2 * POLICY_CEILING_NETS_MAX] = {(char *)conf.bin, "--control-fd",
	                                                                              "3"};
	size_t n = 3;
	if (conf.resolver) {
		argv[n++] = "--resolver";
		argv[n++] = (char *)conf.resolver;
	}
	if (conf.trust_ca) {
		argv[n++] = "--trust-ca";
		argv[n++] = (char *)conf.trust_ca;
	}
	for (size_t i = 0; i < conf.n_public_cidrs; i++) {
		argv[n++] = "--public-cidr";
		argv[n++] = (char *)conf.public_cidrs[i];
	}
	for (size_t i = 0; i < n_ceiling_nets; i++) {
		argv[n++] = "--ceiling-cidr";
		argv[n++] = ceiling_nets[i];
	}
	if (ceiling_metadata)
		argv[n++] = "--ceiling-metadata";
	if (conf.no_seccomp)
		argv[n++] = "--no-seccomp";
	argv[n] = NULL;
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(sv[0]), close(sv[1]);
		if (logfd >= 0)
			close(logfd);
		return -e;
	}
	if (pid == 0) {
		/* Dies with the thread that forked it: the supervisor, which
		 * lives as long as the daemon. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		int nullfd = open("/dev/null", O_RDWR);
		dup2(nullfd, 0);
		if (logfd >= 0) {
			dup2(logfd, 1);
			dup2(logfd, 2);
		}
		dup2(sv[1], 3);
		close_range(4, ~0u, 0);
		/* SECURITY: the gateway parses guest bytes and holds every
		 * tenant's secrets; it runs with no privilege at all: a uid and
		 * gid of its own (not nobody: no other process may signal,
		 * ptrace or read it), no groups, no capabilities (a non-root
		 * uid after setresuid has none), no_new_privs. */
		if (setgroups(0, NULL) < 0 || setresgid(conf.uid, conf.uid, conf.uid) < 0 ||
		    setresuid(conf.uid, conf.uid, conf.uid) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
			dprintf(2, "airlockd: cannot drop privileges for airlock-egress: %m\n");
			_exit(126);
		}
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		char *envp[] = {"PATH=/usr/bin:/bin", "LC_ALL=C", NULL};
		execve(argv[0], argv, envp);
		dprintf(2, "airlockd: cannot run %s: %m\n", argv[0]);
		_exit(127);
	}
	close(sv[1]);
	if (logfd >= 0)
		close(logfd);
	*ret_fd = sv[0];
	*ret_pid = pid;
	return 0;
}

/* Sends one message of the hand-over (no answer awaited: the acks come in
 * order and the first real request waits behind them). */
static int handover_send(json_t *msg, const int *fds, size_t nfds)
{
	pthread_mutex_lock(&st_lock);
	uint64_t seq = ++next_seq;
	int fd = ctl_fd;
	pthread_mutex_unlock(&st_lock);
	json_object_set_new(msg, "seq", json_integer((json_int_t)seq));
	return ctlmsg_send(fd, msg, fds, nfds);
}

/* The Airlock CA, before any "add": the key is read, sent and wiped. */
static int handover_ca(void)
{
	const char *cert = ca_cert_pem();
	if (!cert)
		return 0;
	struct al_error err = {0};
	char *key = NULL;
	size_t klen = 0;
	if (ca_key_pem(&key, &klen, &err) < 0) {
		log_error("egress gateway: cannot hand over the Airlock CA: %s (TLS to hosts with secrets will fail)",
		          err.message);
		return 0;
	}
	cleanup_secret_json json_t *msg = json_pack("{s:s, s:s}", "op", "ca", "cert_pem", cert);
	json_object_set_new(msg, "key_pem", json_stringn_nocheck(key, klen));
	secret_wipe_free(key, klen);
	return handover_send(msg, NULL, 0);
}

static void handover_all(void)
{
	pthread_mutex_lock(&req_lock);
	pthread_mutex_lock(&reg_lock);
	unsigned n = 0;
	bool ok = handover_ca() == 0;
	for (struct entry *e = entries; ok && e; e = e->next) {
		struct al_error err = {0};
		cleanup_secret_json json_t *msg = NULL;
		if (add_message(e, true, &msg, &err) < 0) {
			/* Without its bindings the sandbox's placeholders stay
			 * placeholders: nothing leaks, nothing is injected. */
			log_error("sandbox %s: cannot read its secrets for the egress gateway: %s", e->id, err.message);
			if (add_message(e, false, &msg, &err) < 0)
				continue;
		}
		if (handover_send(msg, e->fds, NETNS_LISTEN_COUNT) < 0)
			ok = false;
		else
			n++;
	}
	pthread_mutex_unlock(&reg_lock);
	pthread_mutex_lock(&st_lock);
	handed_over = ok;
	pthread_cond_broadcast(&st_cond);
	pthread_mutex_unlock(&st_lock);
	pthread_mutex_unlock(&req_lock);
	if (n)
		log_info("egress gateway: handed the listeners of %u sandboxes back", n);
}

static bool wait_ready(pthread_t reader, uint64_t gen)
{
	(void)reader;
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += READY_TIMEOUT_MS / 1000;
	pthread_mutex_lock(&st_lock);
	int r = 0;
	while (!up && !stopping && generation == gen && r == 0)
		r = pthread_cond_timedwait(&st_cond, &st_lock, &deadline);
	bool ok = up;
	pthread_mutex_unlock(&st_lock);
	return ok;
}

static void sleep_interruptible(unsigned ms)
{
	struct timespec deadline = monotonic_in_ms(ms);
	pthread_mutex_lock(&st_lock);
	while (!stopping && pthread_cond_timedwait(&st_cond, &st_lock, &deadline) == 0)
		;
	pthread_mutex_unlock(&st_lock);
}

static void *supervisor_main(void *arg)
{
	(void)arg;
	unsigned backoff = BACKOFF_MIN_MS;
	bool first = true;
	for (;;) {
		int fd;
		pid_t pid;
		int r = spawn(&fd, &pid);
		if (r < 0) {
			log_error("egress gateway: cannot start %s: %s", conf.bin, strerror(-r));
		} else {
			pthread_mutex_lock(&st_lock);
			ctl_fd = fd;
			child_pid = pid;
			uint64_t gen = generation;
			pthread_mutex_unlock(&st_lock);
			uint64_t t0 = now_ms_monotonic();
			pthread_t reader;
			pthread_create(&reader, NULL, reader_main, (void *)(intptr_t)fd);
			if (wait_ready(reader, gen)) {
				log_info("egress gateway: %s running as pid %d%s", conf.bin, (int)pid,
				         first ? "" : " (restarted)");
				metrics_set_egress_up(true);
				handover_all();
			} else {
				log_error("egress gateway: %s did not become ready; killing it", conf.bin);
				kill(pid, SIGKILL);
			}
			first = false;
			pthread_join(reader, NULL);
			pthread_mutex_lock(&st_lock);
			up = false;
			handed_over = false;
			generation++;
			pthread_cond_broadcast(&st_cond);
			pthread_mutex_unlock(&st_lock);
			metrics_set_egress_up(false);
			pthread_mutex_lock(&req_lock);
			close(fd);
			pthread_mutex_lock(&st_lock);
			ctl_fd = -1;
			child_pid = 0;
			pthread_mutex_unlock(&st_lock);
			pthread_mutex_unlock(&req_lock);
			kill(pid, SIGKILL);
			int status = 0;
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			if (now_ms_monotonic() - t0 > HEALTHY_AFTER_MS)
				backoff = BACKOFF_MIN_MS;
			pthread_mutex_lock(&st_lock);
			bool stop = stopping;
			pthread_mutex_unlock(&st_lock);
			if (stop)
				break;
			if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS)
				log_error("egress gateway: pid %d was killed by its seccomp filter: it made a syscall "
				          "outside its allow-list (src/egress/egress-seccomp.c; the kernel's audit log "
				          "names it: type=SECCOMP ... syscall=N); restarting in %u ms",
				          (int)pid, backoff);
			else if (WIFSIGNALED(status))
				log_error("egress gateway: pid %d killed by signal %d; restarting in %u ms", (int)pid,
				          WTERMSIG(status), backoff);
			else
				log_error("egress gateway: pid %d exited with status %d; restarting in %u ms", (int)pid,
				          WEXITSTATUS(status), backoff);
			metrics_count_egress_restart();
		}
		sleep_interruptible(backoff);
		backoff = MIN(backoff * 2, BACKOFF_MAX_MS);
		pthread_mutex_lock(&st_lock);
		bool stop = stopping;
		pthread_mutex_unlock(&st_lock);
		if (stop)
			break;
	}
	return NULL;
}

int egress_start(const struct egress_config *c, struct al_error *err)
{
	if (c->uid == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM, "egress gateway: refusing to run it as root");
	if (access(c->bin, X_OK) < 0)
		return al_error_set(err, AL_ERR_UNAVAILABLE, errno,
		                    "egress gateway %s: %m (build it, or pass --egress-bin)", c->bin);
	conf.bin = xstrdup(c->bin);
	conf.resolver = c->resolver ? xstrdup(c->resolver) : NULL;
	conf.trust_ca = c->trust_ca ? xstrdup(c->trust_ca) : NULL;
	conf.log_path = c->log_path ? xstrdup(c->log_path) : NULL;
	conf.uid = c->uid;
	conf.no_seccomp = c->no_seccomp;
	for (size_t i = 0; i < c->n_public_cidrs && i < EGRESS_PUBLIC_CIDRS_MAX; i++)
		conf.public_cidrs[conf.n_public_cidrs++] = xstrdup(c->public_cidrs[i]);
	for (size_t i = 0; c->ceiling && i < c->ceiling->n_nets; i++) {
		char text[POLICY_RULE_TEXT_MAX + 1];
		if (policy_rule_format(&c->ceiling->nets[i], text, sizeof(text)) == 0)
			ceiling_nets[n_ceiling_nets++] = xstrdup(text);
	}
	ceiling_metadata = c->ceiling && c->ceiling->metadata;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&st_cond, &ca);
	pthread_condattr_destroy(&ca);
	stopping = false;
	int e = pthread_create(&sup_thread, NULL, supervisor_main, NULL);
	if (e)
		return al_error_set(err, AL_ERR_INTERNAL, e, "egress gateway: thread: %s", strerror(e));
	started = true;
	/* Wait for the first start, so that the first sandboxes get a network
	 * at once; a gateway that cannot start is retried in the background. */
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += READY_TIMEOUT_MS / 1000;
	pthread_mutex_lock(&st_lock);
	int r = 0;
	while (!handed_over && r == 0)
		r = pthread_cond_timedwait(&st_cond, &st_lock, &deadline);
	bool ok = handed_over;
	pthread_mutex_unlock(&st_lock);
	if (!ok)
		log_error("egress gateway: not ready after %d ms; sandboxes have no network until it is",
		          READY_TIMEOUT_MS);
	return 0;
}

void egress_stop(void)
{
	if (!started)
		return;
	pthread_mutex_lock(&st_lock);
	stopping = true;
	pid_t pid = child_pid;
	pthread_cond_broadcast(&st_cond);
	pthread_mutex_unlock(&st_lock);
	if (pid > 0)
		kill(pid, SIGKILL);
	pthread_join(sup_thread, NULL);
	started = false;
	pthread_mutex_lock(&reg_lock);
	while (entries) {
		struct entry *e = entries;
		entries = e->next;
		entry_free(e);
	}
	pthread_mutex_unlock(&reg_lock);
}
