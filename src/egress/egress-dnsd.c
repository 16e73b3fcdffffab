/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's DNS listener (docs/egress.md, "DNS"): each sandbox's UDP
 * socket and TCP listener on 10.0.2.2:53, to which the namespace's rules
 * redirect every DNS query of the guest, whatever server it asked.
 *
 * Per query: a malformed one gets FORMERR (or nothing if even the header is
 * unreadable); a type other than A/AAAA gets REFUSED; a name the policy does
 * not allow gets NXDOMAIN at once, WITHOUT any upstream query (so DNS cannot
 * carry data out); an allowed name is resolved by the gateway's own resolver,
 * its answers filtered like the addresses the gateway dials, and answered
 * with what is left. The answers are remembered per sandbox (address ->
 * name) for connections to ports on which no name can be read.
 *
 * The epoll loop reads UDP queries and answers those it can decide alone;
 * those that need the resolver go to a pool of worker threads through a fair
 * queue (egress-fair.h, issue 17): each sandbox's lookups wait in their own
 * line, the lines are served round-robin, a sandbox holds at most
 * EGRESS_DNS_RUNNING_PER_SANDBOX workers at once, and a sandbox with
 * EGRESS_DNS_PENDING_PER_SANDBOX lookups queued or running gets SERVFAIL at
 * once for more. So a sandbox that floods names whose servers never answer
 * waits behind itself only. DNS over TCP has a thread per connection (at
 * most EGRESS_DNS_TCP_PER_SANDBOX per sandbox).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "egress-runtime.h"
#include "util.h"

#define REASON_MAX 160
#define DNS_RESPONSE_MAX EGRESS_DNS_UDP_MAX

/* A query decided "allowed" and waiting for the resolver. */
struct dns_pending {
	struct egress_dns_query q;
	struct policy_host host;
	struct egress_policy *policy; /* the reference the decision used */
	const char *rule;             /* in policy */
	size_t out_max;               /* largest response the client takes */
};

struct egress_dns_job {
	struct egress_fairq_item item; /* in its sandbox's line of rt->dns_queue */
	struct egress_sandbox *sb;     /* a reference */
	int fd;                        /* a dup of the sandbox's UDP socket */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	uint64_t queued_ms; /* monotonic */
	struct dns_pending p;
};

enum dns_step {
	DNS_ANSWERED, /* the response is in out */
	DNS_RESOLVE,  /* allowed: needs the resolver (dns_pending filled) */
	DNS_DROP,     /* not even a header: no response */
};

/* ------------------------------------------------------------ addresses */

/* Is the address one of this host's own (in the gateway's namespace)? Only
 * a local address can be bound (net.ipv4.ip_nonlocal_bind is off by
 * default), which answers without enumerating interfaces and cannot go
 * stale. */
bool egress_addr_is_local(const struct policy_addr *a)
{
	struct sockaddr_storage ss;
	socklen_t len = egress_addr_sockaddr(a, 0, &ss);
	cleanup_close int fd = socket(a->family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return true; /* cannot tell: treat as local (refused) */
	return bind(fd, (struct sockaddr *)&ss, len) == 0 || errno == EADDRINUSE;
}

const char *egress_addr_refusal(const struct policy_addr *a)
{
	struct policy_addr_info info;
	policy_addr_classify(a, &info);
	if (!policy_addr_is_forbidden(a, true) && egress_addr_is_local(a))
		return "the gateway host's own address";
	return policy_addr_class_name(info.cls);
}

bool egress_addr_dialable(const struct egress_runtime *rt, const struct egress_policy *p,
                          const struct policy_addr *addr, uint16_t port)
{
	/* SECURITY: defense in depth (issue 17): airlockd refuses a policy
	 * outside the operator's ceiling; should one get here anyway, its rule
	 * still opens no address outside the ceiling. */
	bool explicit_ok =
	    egress_policy_addr_explicit(p, addr, port) && policy_ceiling_allows_addr(&rt->opt.ceiling, addr);
	for (size_t i = 0; !explicit_ok && i < rt->opt.n_public_cidrs; i++)
		explicit_ok = policy_rule_match_addr(&rt->opt.public_cidrs[i], addr, POLICY_PORT_HTTP);
	if (policy_addr_is_forbidden(addr, explicit_ok))
		return false;
	/* SECURITY: never the gateway host's own addresses, whatever a rule
	 * says: they reach the host's services (airlockd's TCP API, sshd ...),
	 * not the internet. */
	return !egress_addr_is_local(addr);
}

int egress_resolve_checked(struct egress_runtime *rt, const struct egress_policy *p, const struct policy_host *host,
                           uint16_t port, int family, struct policy_addr *out, size_t max, size_t *ret_n,
                           uint32_t *ret_ttl, char *reason, size_t reason_size)
{
	struct policy_addr found[EGRESS_DNS_ADDRS_MAX];
	size_t n = 0;
	uint32_t ttl = 0;
	struct al_error err = {0};
	int r = egress_resolve(rt->resolver, host->name, family, found, ARRAY_SIZE(found), &n, &ttl, &err);
	if (r < 0) {
		if (r == -ENOENT)
			snprintf(reason, reason_size, "%s has no %s address", host->name,
			         family == AF_INET6 ? "IPv6" : "IPv4");
		else
			snprintf(reason, reason_size, "resolving %s: %s", host->name,
			         err.message[0] ? err.message : strerror(-r));
		return r == -ENOENT || r == -ETIMEDOUT ? r : -EIO;
	}
	size_t kept = 0;
	const char *refused = NULL;
	for (size_t i = 0; i < n && i < ARRAY_SIZE(found); i++) {
		/* SECURITY: upstream answers are not trusted: each address is
		 * classified, and only those the gateway may dial are kept. */
		if (egress_addr_dialable(rt, p, &found[i], port)) {
			if (kept < max)
				out[kept++] = found[i];
		} else if (!refused) {
			refused = egress_addr_refusal(&found[i]);
		}
	}
	if (kept == 0) {
		snprintf(reason, reason_size, "%s resolves to a forbidden address (%s)", host->name,
		         refused ? refused : "none");
		return -EACCES;
	}
	*ret_n = kept;
	*ret_ttl = ttl;
	return 0;
}

/* ------------------------------------------------------------ name map */

void egress_namemap_add(struct egress_sandbox *sb, const struct policy_addr *addr, const char *name, uint32_t ttl_s)
{
	uint64_t now = now_ms_monotonic();
	uint64_t expires = now + (uint64_t)ttl_s * 1000 + EGRESS_NAMEMAP_GRACE_MS;
	pthread_mutex_lock(&sb->lock);
	if (!sb->names)
		sb->names = xcalloc(EGRESS_NAMEMAP_MAX, sizeof(*sb->names));
	struct egress_namemap_entry *slot = NULL, *oldest = &sb->names[0];
	for (size_t i = 0; i < EGRESS_NAMEMAP_MAX; i++) {
		struct egress_namemap_entry *e = &sb->names[i];
		if (e->expires_ms > now && policy_addr_equal(&e->addr, addr) && strcmp(e->name, name) == 0) {
			slot = e;
			break;
		}
		if (!slot && e->expires_ms <= now)
			slot = e; /* free or expired */
		if (e->expires_ms < oldest->expires_ms)
			oldest = e;
	}
	/* Full: the entry closest to expiry makes room. */
	if (!slot)
		slot = oldest;
	slot->addr = *addr;
	strlcpy_al(slot->name, name, sizeof(slot->name));
	slot->expires_ms = MAX(slot->expires_ms, expires);
	pthread_mutex_unlock(&sb->lock);
}

size_t egress_namemap_find(struct egress_sandbox *sb, const struct policy_addr *addr,
                           char (*names)[POLICY_HOST_NAME_MAX + 1], size_t max)
{
	uint64_t now = now_ms_monotonic();
	size_t n = 0;
	pthread_mutex_lock(&sb->lock);
	for (size_t i = 0; sb->names && i < EGRESS_NAMEMAP_MAX && n < max; i++) {
		const struct egress_namemap_entry *e = &sb->names[i];
		if (e->expires_ms > now && policy_addr_equal(&e->addr, addr))
			strlcpy_al(names[n++], e->name, POLICY_HOST_NAME_MAX + 1);
	}
	pthread_mutex_unlock(&sb->lock);
	return n;
}

/* ------------------------------------------------------------ queries */

static void dns_event(struct egress_sandbox *sb, const struct egress_dns_query *q, const struct policy_host *host,
                      const char *asked, const char *verdict, const char *rule, json_t *answers, const char *reason)
{
	json_t *qtype = NULL;
	if (!q)
		qtype = json_null();
	else if (q->qtype == EGRESS_DNS_TYPE_A)
		qtype = json_string("A");
	else if (q->qtype == EGRESS_DNS_TYPE_AAAA)
		qtype = json_string("AAAA");
	else
		qtype = json_integer(q->qtype);
	json_t *d =
	    json_pack("{ssss?sossss?soss?}", "proto", "dns", "host", host ? host->name : NULL, "qtype", qtype,
	              "verdict", verdict, "rule", rule, "answers", answers ? answers : json_array(), "reason", reason);
	if (!d)
		abort();
	/* The codec returns LDH text only; escaped all the same. */
	if (asked && asked[0] && (!host || strcmp(asked, host->name) != 0)) {
		char shown[EGRESS_ASKED_HOST_MAX + 1];
		egress_text_escape((const uint8_t *)asked, strlen(asked), shown, sizeof(shown));
		json_object_set_new(d, "asked_host", json_string(shown));
	}
	egress_event(sb, "network.dns", d);
}

static size_t respond(const struct egress_dns_query *q, int rcode, const struct policy_addr *addrs, size_t n,
                      uint32_t ttl, size_t out_max, uint8_t *out)
{
	size_t len = 0;
	if (egress_dns_build_response(q, rcode, addrs, n, ttl, out, out_max, &len) < 0) {
		egress_dns_build_error(q->id, EGRESS_DNS_RCODE_SERVFAIL, out);
		len = 12;
	}
	return len;
}

/*
 * Decides one query without the network. SECURITY: the message is guest
 * input (any bytes, any size up to the buffer): the codec checks it
 * strictly; the name is canonicalised before the policy sees it; a denied
 * name is answered here, so the resolver never hears of it.
 */
static enum dns_step dns_decide(struct egress_sandbox *sb, const uint8_t *msg, size_t len, bool tcp,
                                struct dns_pending *p, uint8_t *out, size_t *ret_len)
{
	struct al_error err = {0};
	uint16_t id = 0;
	*p = (struct dns_pending){0};
	int r = egress_dns_parse_query(msg, len, &p->q, &id, &err);
	if (r < 0) {
		if (len < 12)
			return DNS_DROP;
		egress_dns_build_error(id, EGRESS_DNS_RCODE_FORMERR, out);
		*ret_len = 12;
		char reason[REASON_MAX];
		egress_text_escape((const uint8_t *)err.message, strlen(err.message), reason, sizeof(reason));
		dns_event(sb, NULL, NULL, NULL, "deny", NULL, NULL, reason);
		return DNS_ANSWERED;
	}
	struct egress_dns_query *q = &p->q;
	/* Without EDNS a UDP client takes 512 bytes. */
	p->out_max = tcp ? DNS_RESPONSE_MAX
	                 : (q->edns ? MIN((size_t)MAX(q->edns_udp_max, 512), (size_t)EGRESS_DNS_UDP_MAX) : 512);
	bool canonical = policy_host_canonicalize((const uint8_t *)q->name, q->name_len, &p->host, &err) == 0 &&
	                 p->host.kind == POLICY_HOST_NAME;
	if (q->qclass != EGRESS_DNS_CLASS_IN || (q->qtype != EGRESS_DNS_TYPE_A && q->qtype != EGRESS_DNS_TYPE_AAAA)) {
		*ret_len = respond(q, EGRESS_DNS_RCODE_REFUSED, NULL, 0, 0, p->out_max, out);
		dns_event(sb, q, canonical ? &p->host : NULL, q->name, "deny", NULL, NULL,
		          "query type not served (only A and AAAA)");
		return DNS_ANSWERED;
	}
	if (!canonical) {
		*ret_len = respond(q, EGRESS_DNS_RCODE_NXDOMAIN, NULL, 0, 0, p->out_max, out);
		dns_event(sb, q, NULL, q->name, "deny", NULL, NULL, "not a valid host name");
		return DNS_ANSWERED;
	}
	p->policy = egress_policy_slot_get(&sb->policy);
	if (!egress_policy_name_allowed(p->policy, &p->host, &p->rule)) {
		*ret_len = respond(q, EGRESS_DNS_RCODE_NXDOMAIN, NULL, 0, 0, p->out_max, out);
		dns_event(sb, q, &p->host, q->name, "deny", p->rule, NULL,
		          p->rule ? "denied by rule" : "no rule allows this name");
		egress_policy_unref(TAKE_PTR(p->policy));
		return DNS_ANSWERED;
	}
	return DNS_RESOLVE;
}

/*
 * An allowed name: resolve, filter, answer, remember. Decisions (documented
 * in docs/egress.md): no address of the asked family -> NOERROR without
 * answers (the resolver does not tell NXDOMAIN from NODATA, and NXDOMAIN
 * for AAAA would hide the A records); every address forbidden -> NOERROR
 * without answers and a deny event; a resolver failure -> SERVFAIL.
 */
static size_t dns_resolve(struct egress_runtime *rt, struct egress_sandbox *sb, struct dns_pending *p, uint8_t *out)
{
	struct policy_addr addrs[EGRESS_DNS_ADDRS_MAX];
	size_t n = 0;
	uint32_t ttl = 0;
	char reason[REASON_MAX] = "";
	int family = p->q.qtype == EGRESS_DNS_TYPE_A ? AF_INET : AF_INET6;
	int r = egress_resolve_checked(rt, p->policy, &p->host, 0, family, addrs, ARRAY_SIZE(addrs), &n, &ttl, reason,
	                               sizeof(reason));
	size_t len;
	if (r == 0) {
		len = respond(&p->q, EGRESS_DNS_RCODE_NOERROR, addrs, n, ttl, p->out_max, out);
		json_t *answers = json_array();
		for (size_t i = 0; i < n; i++) {
			char text[64];
			policy_addr_format(&addrs[i], 0, text, sizeof(text));
			json_array_append_new(answers, json_string(text));
			egress_namemap_add(sb, &addrs[i], p->host.name, ttl);
		}
		dns_event(sb, &p->q, &p->host, p->q.name, "allow", p->rule, answers, NULL);
	} else if (r == -ENOENT || r == -EACCES) {
		len = respond(&p->q, EGRESS_DNS_RCODE_NOERROR, NULL, 0, 0, p->out_max, out);
		dns_event(sb, &p->q, &p->host, p->q.name, r == -EACCES ? "deny" : "allow", p->rule, NULL, reason);
	} else {
		len = respond(&p->q, EGRESS_DNS_RCODE_SERVFAIL, NULL, 0, 0, p->out_max, out);
		dns_event(sb, &p->q, &p->host, p->q.name, "allow", p->rule, NULL, reason);
	}
	return len;
}

/* ------------------------------------------------------------ UDP */

static void job_free(struct egress_dns_job *job)
{
	egress_policy_unref(job->p.policy);
	egress_sandbox_unref(job->sb);
	if (job->fd >= 0)
		close(job->fd);
	free(job);
}

/* A lookup the queue refused (or that waited too long): SERVFAIL now (the
 * guest's resolver may retry later), recorded as a denial (folded with the
 * others when they flood). */
static void dns_refuse_busy(struct egress_sandbox *sb, struct dns_pending *p, int fd,
                            const struct sockaddr_storage *peer, socklen_t peer_len, int why)
{
	uint8_t out[DNS_RESPONSE_MAX];
	size_t len = respond(&p->q, EGRESS_DNS_RCODE_SERVFAIL, NULL, 0, 0, p->out_max, out);
	sendto(fd, out, len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)peer, peer_len);
	dns_event(sb, &p->q, &p->host, p->q.name, "deny", NULL, NULL,
	          why == -EAGAIN  ? "DNS limit: too many lookups of this sandbox waiting"
	          : why == -ETIME ? "DNS limit: waited too long for a resolver worker"
	                          : "DNS limit: too many lookups waiting");
}

static void *dns_worker_main(void *arg)
{
	struct egress_runtime *rt = arg;
	uint8_t out[DNS_RESPONSE_MAX];
	for (;;) {
		struct egress_fairq_flow *flow = NULL;
		struct egress_fairq_item *item;
		pthread_mutex_lock(&rt->dns_lock);
		while (!(item = egress_fairq_pop(&rt->dns_queue, &flow)))
			pthread_cond_wait(&rt->dns_cond, &rt->dns_lock);
		pthread_mutex_unlock(&rt->dns_lock);
		struct egress_dns_job *job = (struct egress_dns_job *)item;

		if (now_ms_monotonic() - job->queued_ms > EGRESS_DNS_QUEUE_WAIT_MS) {
			/* Its guest has given up on it by now: SERVFAIL, at once,
			 * so that a sandbox's own backlog drains fast. */
			dns_refuse_busy(job->sb, &job->p, job->fd, &job->peer, job->peer_len, -ETIME);
		} else if (!egress_sandbox_removed(job->sb)) {
			size_t len = dns_resolve(rt, job->sb, &job->p, out);
			sendto(job->fd, out, len, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&job->peer,
			       job->peer_len);
		}
		/* Its sandbox may run another lookup now: every waiting worker
		 * looks again (one may wait for exactly this sandbox). */
		pthread_mutex_lock(&rt->dns_lock);
		egress_fairq_done(&rt->dns_queue, flow);
		pthread_cond_broadcast(&rt->dns_cond);
		pthread_mutex_unlock(&rt->dns_lock);
		job_free(job);
	}
	return NULL;
}

static void dns_enqueue(struct egress_runtime *rt, struct egress_sandbox *sb, struct dns_pending *p,
                        const struct sockaddr_storage *peer, socklen_t peer_len)
{
	/* Its own fd: "remove" may close the sandbox's meanwhile. */
	int fd = fcntl(sb->fds[EGRESS_FD_DNS_UDP], F_DUPFD_CLOEXEC, 3);
	if (fd < 0) {
		/* Out of fds: the guest's resolver retries. */
		uint64_t dropped = __atomic_add_fetch(&rt->dns_dropped, 1, __ATOMIC_RELAXED);
		if ((dropped & (dropped - 1)) == 0)
			egress_log(EGRESS_LOG_WARN, "DNS: %llu queries dropped so far: %s", (unsigned long long)dropped,
			           strerror(errno));
		egress_policy_unref(p->policy);
		return;
	}
	struct egress_dns_job *job = xcalloc(1, sizeof(*job));
	job->sb = egress_sandbox_ref(sb);
	job->fd = fd;
	job->peer = *peer;
	job->peer_len = peer_len;
	job->queued_ms = now_ms_monotonic();
	job->p = *p;
	pthread_mutex_lock(&rt->dns_lock);
	int r = egress_fairq_push(&rt->dns_queue, &sb->dns_flow, &job->item);
	if (r == 0)
		pthread_cond_signal(&rt->dns_cond);
	pthread_mutex_unlock(&rt->dns_lock);
	if (r < 0) {
		/* SECURITY: a sandbox over its share is answered at once, never
		 * queued in front of another sandbox's lookups. */
		dns_refuse_busy(sb, &job->p, job->fd, peer, peer_len, r);
		job_free(job);
	}
}

void egress_dnsd_udp_ready(struct egress_runtime *rt, struct egress_sandbox *sb)
{
	int fd = sb->fds[EGRESS_FD_DNS_UDP];
	uint8_t msg[EGRESS_DNS_UDP_MAX];
	uint8_t out[DNS_RESPONSE_MAX];
	for (int i = 0; i < EGRESS_LOOP_BATCH; i++) {
		struct sockaddr_storage peer;
		socklen_t peer_len = sizeof(peer);
		ssize_t n =
		    recvfrom(fd, msg, sizeof(msg), MSG_DONTWAIT | MSG_TRUNC, (struct sockaddr *)&peer, &peer_len);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				egress_log(EGRESS_LOG_WARN, "%s: DNS recvfrom: %s", sb->id, strerror(errno));
			return;
		}
		/* Over the limit (MSG_TRUNC tells): no query is that big; dropped. */
		if ((size_t)n > sizeof(msg))
			continue;
		struct dns_pending p;
		size_t out_len = 0;
		enum dns_step step = dns_decide(sb, msg, (size_t)n, false, &p, out, &out_len);
		if (step == DNS_ANSWERED)
			sendto(fd, out, out_len, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&peer, peer_len);
		else if (step == DNS_RESOLVE)
			dns_enqueue(rt, sb, &p, &peer, peer_len);
	}
}

/* ------------------------------------------------------------ TCP */

struct dns_tcp {
	struct egress_runtime *rt;
	struct egress_sandbox *sb; /* a reference */
	struct egress_track track;
	int fd;
};

/* Reads exactly n bytes before deadline: 0, -EPIPE at EOF, -ETIMEDOUT, -errno. */
static int read_exact(int fd, uint8_t *buf, size_t n, uint64_t deadline_ms)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = recv(fd, buf + got, n - got, MSG_DONTWAIT);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0)
			return -EPIPE;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		uint64_t now = now_ms_monotonic();
		if (now >= deadline_ms)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, (int)(deadline_ms - now)) < 0 && errno != EINTR)
			return -errno;
	}
	return 0;
}

static void dns_tcp_serve(struct dns_tcp *t)
{
	uint8_t msg[EGRESS_DNS_TCP_MAX];
	uint8_t out[2 + DNS_RESPONSE_MAX];
	for (;;) {
		/* SECURITY: the length prefix is guest input: bounded before
		 * anything is read into the fixed buffer. */
		uint8_t hdr[2];
		uint64_t deadline = now_ms_monotonic() + EGRESS_DNS_TCP_IDLE_MS;
		if (read_exact(t->fd, hdr, 2, deadline) < 0)
			return;
		size_t len = (size_t)hdr[0] << 8 | hdr[1];
		if (len == 0 || len > sizeof(msg))
			return;
		if (read_exact(t->fd, msg, len, deadline) < 0)
			return;
		struct dns_pending p;
		size_t out_len = 0;
		enum dns_step step = dns_decide(t->sb, msg, len, true, &p, out + 2, &out_len);
		if (step == DNS_DROP)
			return;
		if (step == DNS_RESOLVE) {
			out_len = dns_resolve(t->rt, t->sb, &p, out + 2);
			egress_policy_unref(p.policy);
		}
		out[0] = (uint8_t)(out_len >> 8);
		out[1] = (uint8_t)out_len;
		if (write_full_timeout(t->fd, out, 2 + out_len, EGRESS_DNS_TCP_IDLE_MS) < 0)
			return;
	}
}

static void *dns_tcp_main(void *arg)
{
	struct dns_tcp *t = arg;
	dns_tcp_serve(t);
	egress_sandbox_untrack(t->sb, &t->track, true);
	close(t->fd);
	atomic_fetch_sub(&t->rt->n_conns, 1);
	egress_sandbox_unref(t->sb);
	free(t);
	return NULL;
}

/* A DNS-over-TCP connection gets a thread of its own, or a reset. */
static void dns_tcp_start(struct egress_runtime *rt, struct egress_sandbox *sb, int fd)
{
	if (atomic_fetch_add(&rt->n_conns, 1) >= rt->opt.max_connections) {
		atomic_fetch_sub(&rt->n_conns, 1);
		egress_close_reset(fd);
		return;
	}
	cleanup_free struct dns_tcp *t = xcalloc(1, sizeof(*t));
	*t = (struct dns_tcp){.rt = rt, .fd = fd};
	t->track = (struct egress_track){.client_fd = fd, .upstream_fd = -1};
	if (!egress_sandbox_track(sb, &t->track, true)) {
		/* Over the per-sandbox DNS-over-TCP limit. */
		atomic_fetch_sub(&rt->n_conns, 1);
		egress_close_reset(fd);
		return;
	}
	t->sb = egress_sandbox_ref(sb);
	if (egress_thread_start(dns_tcp_main, t) == 0) {
		TAKE_PTR(t); /* the thread's now */
		return;
	}
	egress_sandbox_untrack(sb, &t->track, true);
	egress_sandbox_unref(sb);
	atomic_fetch_sub(&rt->n_conns, 1);
	egress_close_reset(fd);
}

void egress_dnsd_tcp_accept(struct egress_runtime *rt, struct egress_sandbox *sb)
{
	egress_accept_batch(rt, sb, EGRESS_FD_DNS_TCP, "DNS accept", dns_tcp_start);
}

int egress_dnsd_start(struct egress_runtime *rt)
{
	egress_fairq_init(&rt->dns_queue, EGRESS_DNS_QUEUE_MAX, EGRESS_DNS_PENDING_PER_SANDBOX,
	                  EGRESS_DNS_RUNNING_PER_SANDBOX);
	for (int i = 0; i < EGRESS_DNS_WORKERS; i++) {
		int r = egress_thread_start(dns_worker_main, rt);
		if (r < 0)
			return r;
	}
	return 0;
}
