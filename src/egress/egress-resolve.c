/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The egress gateway's upstream resolver: c-ares, pointed at one server, and
 * a small TTL cache in front of it.
 *
 * c-ares 1.18 channels are not thread-safe, so each egress_resolve() that
 * misses the cache opens its own channel (one UDP socket, a fresh random
 * source port), sends its queries (A and AAAA in parallel for AF_UNSPEC),
 * runs the channel with poll() until the answers are in or timeout_ms is
 * over, and destroys it. Nothing of c-ares is shared between threads but the
 * library initialisation; the cache is shared under one mutex.
 *
 * The channel is configured entirely from options (servers: none at init,
 * ours set right after) so that c-ares reads no /etc/resolv.conf, /etc/hosts
 * or /etc/nsswitch.conf: no search domains, no rotation, DNS lookups only
 * ("b"), EDNS with EGRESS_DNS_EDNS_UDP_SIZE. What it still opens per channel
 * is /dev/urandom, for its query ids (about 20 us per channel in all).
 */
#include "egress-dns.h"

#include <arpa/inet.h>
#include <ares.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>

#include "policy-addr.h"
#include "util.h"

#define RESOLVE_TRIES 2 /* c-ares waits t, then 2t: t = timeout_ms / 3 */
#define RESOLVE_TIMEOUT_MS_MAX 60000
#define CACHE_BUCKETS 8192 /* power of two, twice EGRESS_DNS_CACHE_MAX */
#define DNS_CLASS_IN 1

struct cache_entry {
	int32_t next;        /* next entry of the bucket's chain, -1 at its end */
	int family;          /* AF_INET (A) or AF_INET6 (AAAA) */
	int error;           /* 0, or -ENOENT for a negative entry */
	uint64_t expires_ms; /* monotonic */
	size_t n;
	struct policy_addr addrs[EGRESS_DNS_ADDRS_MAX];
	char name[EGRESS_DNS_NAME_MAX + 1];
};

struct egress_resolver {
	struct ares_addr_port_node server;
	char server_text[INET6_ADDRSTRLEN + 16]; /* "192.0.2.53:53", "[2001:db8::53]:53" */
	unsigned timeout_ms;

	pthread_mutex_t lock;        /* guards the cache */
	struct cache_entry *entries; /* EGRESS_DNS_CACHE_MAX; [0, used) are in the chains */
	size_t used;
	int32_t buckets[CACHE_BUCKETS];

	uint64_t upstream_queries; /* __atomic */
	uint64_t cache_hits;       /* __atomic */
};

/* The outcome of one (name, family) lookup. */
struct answer {
	int family;
	bool done;
	bool from_cache;
	int r; /* 0, -ENOENT, -ETIMEDOUT or -EIO */
	size_t n;
	struct policy_addr addrs[EGRESS_DNS_ADDRS_MAX];
	uint32_t ttl;
	char why[128]; /* when r < 0: what the upstream said */
};

static const char *type_name(int family)
{
	return family == AF_INET ? "A" : "AAAA";
}

static uint32_t ttl_clamp(int64_t ttl)
{
	if (ttl < EGRESS_DNS_TTL_MIN)
		return EGRESS_DNS_TTL_MIN;
	if (ttl > EGRESS_DNS_TTL_MAX)
		return EGRESS_DNS_TTL_MAX;
	return (uint32_t)ttl;
}

/* ------------------------------------------------------------ name check */

/* Would a resolver or inet_aton() read this as a number? (decimal, or
 * 0x-hex; the same rule as policy_host_canonicalize()'s) */
static bool label_is_numeric(const char *l, size_t n)
{
	bool hex = n >= 2 && l[0] == '0' && l[1] == 'x';
	for (size_t i = hex ? 2 : 0; i < n; i++) {
		bool digit = l[i] >= '0' && l[i] <= '9';
		bool hexdigit = l[i] >= 'a' && l[i] <= 'f';
		if (!digit && !(hex && hexdigit))
			return false;
	}
	return true;
}

/* The output of policy_host_canonicalize() for a name: lower-case LDH
 * labels of 1-63 bytes, no hyphen at either end of a label, at most
 * EGRESS_DNS_NAME_MAX bytes, no trailing dot, and a last label that is not
 * a number (those are addresses, never looked up). */
static bool name_is_canonical(const char *name)
{
	size_t len = strnlen(name, EGRESS_DNS_NAME_MAX + 1);
	if (len == 0 || len > EGRESS_DNS_NAME_MAX)
		return false;
	size_t label = 0, last = 0;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (c == '.') {
			if (label == 0 || name[i - 1] == '-')
				return false;
			label = 0;
			last = i + 1;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
			return false;
		if (c == '-' && label == 0)
			return false;
		if (++label > 63)
			return false;
	}
	if (label == 0 || name[len - 1] == '-')
		return false;
	return !label_is_numeric(name + last, len - last);
}

/* ------------------------------------------------------------ cache */

static uint32_t cache_hash(const char *name, int family)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	h = (h ^ (uint8_t)family) * 16777619u;
	return h & (CACHE_BUCKETS - 1);
}

static struct cache_entry *cache_find(struct egress_resolver *r, const char *name, int family, uint32_t h)
{
	for (int32_t i = r->buckets[h]; i >= 0; i = r->entries[i].next) {
		struct cache_entry *e = &r->entries[i];
		if (e->family == family && strcmp(e->name, name) == 0)
			return e;
	}
	return NULL;
}

static void cache_unlink(struct egress_resolver *r, struct cache_entry *e)
{
	int32_t idx = (int32_t)(e - r->entries);
	int32_t *link = &r->buckets[cache_hash(e->name, e->family)];
	while (*link != idx)
		link = &r->entries[*link].next;
	*link = e->next;
}

/* A free entry: a new one while there are, else the one that expires first
 * (an expired one if any). */
static struct cache_entry *cache_slot(struct egress_resolver *r)
{
	if (r->used < EGRESS_DNS_CACHE_MAX)
		return &r->entries[r->used++];
	struct cache_entry *victim = &r->entries[0];
	for (size_t i = 1; i < r->used; i++)
		if (r->entries[i].expires_ms < victim->expires_ms)
			victim = &r->entries[i];
	cache_unlink(r, victim);
	return victim;
}

static bool cache_get(struct egress_resolver *r, const char *name, struct answer *a, uint64_t now_ms)
{
	bool hit = false;
	pthread_mutex_lock(&r->lock);
	struct cache_entry *e = cache_find(r, name, a->family, cache_hash(name, a->family));
	if (e && e->expires_ms > now_ms) {
		hit = true;
		a->done = a->from_cache = true;
		a->r = e->error;
		a->n = e->n;
		memcpy(a->addrs, e->addrs, e->n * sizeof(e->addrs[0]));
		a->ttl = ttl_clamp((int64_t)((e->expires_ms - now_ms + 999) / 1000));
		if (e->error == -ENOENT)
			snprintf(a->why, sizeof(a->why), "no %s record (cached)", type_name(a->family));
		else if (e->error == -ETIMEDOUT)
			snprintf(a->why, sizeof(a->why), "no %s answer in time (cached)", type_name(a->family));
	}
	pthread_mutex_unlock(&r->lock);
	if (hit)
		__atomic_fetch_add(&r->cache_hits, 1, __ATOMIC_RELAXED);
	return hit;
}

/* Positive answers for their TTL, "no such name / no record" for
 * EGRESS_DNS_TTL_NEGATIVE, a timeout for EGRESS_DNS_TTL_TIMEOUT (issue 17: a
 * name whose servers never answer costs one lookup, not one per query);
 * other failures (SERVFAIL) are not kept. */
static void cache_put(struct egress_resolver *r, const char *name, const struct answer *a, uint64_t now_ms)
{
	if (a->r != 0 && a->r != -ENOENT && a->r != -ETIMEDOUT)
		return;
	uint32_t ttl = a->r == 0 ? a->ttl : a->r == -ENOENT ? EGRESS_DNS_TTL_NEGATIVE : EGRESS_DNS_TTL_TIMEOUT;
	uint32_t h = cache_hash(name, a->family);
	pthread_mutex_lock(&r->lock);
	struct cache_entry *e = cache_find(r, name, a->family, h);
	if (!e) {
		e = cache_slot(r);
		strlcpy_al(e->name, name, sizeof(e->name));
		e->family = a->family;
		e->next = r->buckets[h];
		r->buckets[h] = (int32_t)(e - r->entries);
	}
	e->error = a->r;
	e->n = a->r == 0 ? a->n : 0;
	memcpy(e->addrs, a->addrs, e->n * sizeof(e->addrs[0]));
	e->expires_ms = now_ms + (uint64_t)ttl * 1000;
	pthread_mutex_unlock(&r->lock);
}

/* ------------------------------------------------------------ c-ares */

static pthread_once_t ares_once = PTHREAD_ONCE_INIT;
static int ares_init_status = ARES_ENOTINITIALIZED;

static void ares_init_once(void)
{
	ares_init_status = ares_library_init(ARES_LIB_INIT_ALL);
}

/* SECURITY: the upstream's answer is parsed by c-ares, which checks that it
 * answers our question (id, name, type, class) and takes only A/AAAA
 * records of class IN owned by the asked name or by the CNAME chain that
 * starts at it; we keep at most EGRESS_DNS_ADDRS_MAX of them. Their TTLs are
 * clamped before anything is cached or handed out. */
static void answer_parse(struct answer *a, const unsigned char *abuf, int alen)
{
	int n = EGRESS_DNS_ADDRS_MAX, rc;
	struct ares_addrttl v4[EGRESS_DNS_ADDRS_MAX];
	struct ares_addr6ttl v6[EGRESS_DNS_ADDRS_MAX];
	if (a->family == AF_INET)
		rc = ares_parse_a_reply(abuf, alen, NULL, v4, &n);
	else
		rc = ares_parse_aaaa_reply(abuf, alen, NULL, v6, &n);
	if (rc == ARES_ENODATA || (rc == ARES_SUCCESS && n <= 0)) {
		a->r = -ENOENT;
		snprintf(a->why, sizeof(a->why), "no %s record", type_name(a->family));
		return;
	}
	if (rc != ARES_SUCCESS) {
		a->r = -EIO;
		snprintf(a->why, sizeof(a->why), "unusable %s answer from the upstream server (%s)",
		         type_name(a->family), ares_strerror(rc));
		return;
	}
	int64_t ttl = INT64_MAX;
	a->n = 0;
	for (int i = 0; i < n && i < EGRESS_DNS_ADDRS_MAX; i++) {
		struct policy_addr *o = &a->addrs[a->n++];
		memset(o, 0, sizeof(*o));
		o->family = a->family;
		if (a->family == AF_INET) {
			o->v4 = v4[i].ipaddr;
			ttl = MIN(ttl, (int64_t)v4[i].ttl);
		} else {
			memcpy(&o->v6, &v6[i].ip6addr, sizeof(o->v6));
			ttl = MIN(ttl, (int64_t)v6[i].ttl);
		}
	}
	a->r = 0;
	a->ttl = ttl_clamp(ttl);
}

static void on_answer(void *arg, int status, int timeouts, unsigned char *abuf, int alen)
{
	struct answer *a = arg;
	(void)timeouts;
	a->done = true;
	switch (status) {
	case ARES_SUCCESS:
		answer_parse(a, abuf, alen);
		return;
	case ARES_ENODATA:
		a->r = -ENOENT;
		snprintf(a->why, sizeof(a->why), "no %s record", type_name(a->family));
		return;
	case ARES_ENOTFOUND:
		a->r = -ENOENT;
		snprintf(a->why, sizeof(a->why), "no such name (NXDOMAIN)");
		return;
	case ARES_ETIMEOUT:
	case ARES_ECANCELLED:   /* our deadline: see resolve_upstream() */
	case ARES_EDESTRUCTION: /* idem */
		a->r = -ETIMEDOUT;
		snprintf(a->why, sizeof(a->why), "no %s answer in time", type_name(a->family));
		return;
	case ARES_ESERVFAIL:
		a->r = -EIO;
		snprintf(a->why, sizeof(a->why), "the upstream server answered SERVFAIL");
		return;
	case ARES_EREFUSED:
		a->r = -EIO;
		snprintf(a->why, sizeof(a->why), "the upstream server answered REFUSED");
		return;
	case ARES_ENOMEM:
		abort();
	default:
		a->r = -EIO;
		snprintf(a->why, sizeof(a->why), "%s query failed: %s", type_name(a->family), ares_strerror(status));
		return;
	}
}

static int channel_open(const struct egress_resolver *r, ares_channel *ret)
{
	char lookups[] = "b";
	struct ares_options o = {
	    /* NOCHECKRESP: hand SERVFAIL/REFUSED to us as such; with one
	     * server c-ares would only ask it again and then report "could
	     * not contact DNS servers". */
	    .flags = ARES_FLAG_NOSEARCH | ARES_FLAG_NOALIASES | ARES_FLAG_EDNS | ARES_FLAG_NOCHECKRESP,
	    .timeout = (int)MAX(r->timeout_ms / 3, 1u), /* ARES_OPT_TIMEOUTMS: t + 2t = timeout_ms */
	    .tries = RESOLVE_TRIES,
	    .ndots = 0,
	    .servers = NULL,
	    .nservers = 0,
	    .domains = NULL,
	    .ndomains = 0,
	    .lookups = lookups,
	    .sortlist = NULL,
	    .nsort = 0,
	    .ednspsz = EGRESS_DNS_EDNS_UDP_SIZE,
	};
	int mask = ARES_OPT_FLAGS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_NDOTS | ARES_OPT_SERVERS |
	           ARES_OPT_DOMAINS | ARES_OPT_LOOKUPS | ARES_OPT_SORTLIST | ARES_OPT_EDNSPSZ | ARES_OPT_NOROTATE;
	ares_channel ch;
	int rc = ares_init_options(&ch, &o, mask);
	if (rc != ARES_SUCCESS)
		return rc;
	struct ares_addr_port_node server = r->server;
	server.next = NULL;
	rc = ares_set_servers_ports(ch, &server);
	if (rc != ARES_SUCCESS) {
		ares_destroy(ch);
		return rc;
	}
	*ret = ch;
	return ARES_SUCCESS;
}

static bool all_done(struct answer **todo, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!todo[i]->done)
			return false;
	return true;
}

/* Runs the channel until every answer is in or deadline_ms has passed. */
static void channel_run(ares_channel ch, struct answer **todo, size_t n, uint64_t deadline_ms)
{
	while (!all_done(todo, n)) {
		uint64_t now = now_ms_monotonic();
		if (now >= deadline_ms)
			return;
		ares_socket_t socks[ARES_GETSOCK_MAXNUM];
		struct pollfd pfd[ARES_GETSOCK_MAXNUM];
		nfds_t nfds = 0;
		int bits = ares_getsock(ch, socks, ARES_GETSOCK_MAXNUM);
		for (int i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
			short ev = (short)((ARES_GETSOCK_READABLE(bits, i) ? POLLIN : 0) |
			                   (ARES_GETSOCK_WRITABLE(bits, i) ? POLLOUT : 0));
			if (ev == 0)
				break;
			pfd[nfds++] = (struct pollfd){.fd = socks[i], .events = ev};
		}
		uint64_t left = deadline_ms - now;
		struct timeval max_tv = {.tv_sec = (time_t)(left / 1000), .tv_usec = (suseconds_t)(left % 1000) * 1000};
		struct timeval tv;
		struct timeval *wait = ares_timeout(ch, &max_tv, &tv);
		int wait_ms = (int)(wait->tv_sec * 1000 + (wait->tv_usec + 999) / 1000);
		int pr = poll(pfd, nfds, wait_ms);
		if (pr < 0 && errno != EINTR)
			return; /* the callers see a timeout */
		if (pr <= 0) {
			ares_process_fd(ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD); /* timeouts, retries */
			continue;
		}
		for (nfds_t i = 0; i < nfds; i++) {
			short re = pfd[i].revents;
			if (re == 0)
				continue;
			ares_process_fd(ch, (re & (POLLIN | POLLERR | POLLHUP)) ? pfd[i].fd : ARES_SOCKET_BAD,
			                (re & (POLLOUT | POLLERR | POLLHUP)) ? pfd[i].fd : ARES_SOCKET_BAD);
		}
	}
}

/* Sends one query per answer in todo over a channel of its own and waits
 * at most timeout_ms for all of them. */
static void resolve_upstream(struct egress_resolver *r, const char *name, struct answer **todo, size_t n)
{
	uint64_t deadline_ms = now_ms_monotonic() + r->timeout_ms;
	ares_channel ch;
	int rc = channel_open(r, &ch);
	if (rc != ARES_SUCCESS) {
		if (rc == ARES_ENOMEM)
			abort();
		for (size_t i = 0; i < n; i++) {
			todo[i]->done = true;
			todo[i]->r = -EIO;
			snprintf(todo[i]->why, sizeof(todo[i]->why), "cannot set up a c-ares channel: %s",
			         ares_strerror(rc));
		}
		return;
	}
	for (size_t i = 0; i < n; i++) {
		__atomic_fetch_add(&r->upstream_queries, 1, __ATOMIC_RELAXED);
		ares_query(ch, name, DNS_CLASS_IN,
		           todo[i]->family == AF_INET ? EGRESS_DNS_TYPE_A : EGRESS_DNS_TYPE_AAAA, on_answer, todo[i]);
	}
	channel_run(ch, todo, n, deadline_ms);
	/* Whatever is still pending is answered now with ARES_ECANCELLED:
	 * a timeout. After ares_destroy() no callback can run any more, so
	 * the answers (on the caller's stack) are safe to go. */
	ares_cancel(ch);
	ares_destroy(ch);
}

/* ------------------------------------------------------------ API */

int egress_resolver_new(const struct sockaddr *server, socklen_t server_len, unsigned timeout_ms,
                        struct egress_resolver **ret, struct al_error *err)
{
	pthread_once(&ares_once, ares_init_once);
	if (ares_init_status != ARES_SUCCESS)
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot initialise c-ares: %s",
		                    ares_strerror(ares_init_status));
	if (timeout_ms == 0 || timeout_ms > RESOLVE_TIMEOUT_MS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "DNS timeout of %u ms is out of range (1-%d ms)", timeout_ms,
		                    RESOLVE_TIMEOUT_MS_MAX);

	struct ares_addr_port_node node = {.next = NULL};
	struct policy_addr addr = {0};
	unsigned port;
	if (server && server->sa_family == AF_INET && server_len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)server;
		node.family = AF_INET;
		node.addr.addr4 = sin->sin_addr;
		port = ntohs(sin->sin_port);
		addr = (struct policy_addr){.family = AF_INET, .v4 = sin->sin_addr};
	} else if (server && server->sa_family == AF_INET6 && server_len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)server;
		if (sin6->sin6_scope_id != 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "upstream DNS server: an IPv6 address with a zone (scope id) is not "
			                    "supported; use a global or unique-local address");
		node.family = AF_INET6;
		memcpy(&node.addr.addr6, &sin6->sin6_addr, sizeof(node.addr.addr6));
		port = ntohs(sin6->sin6_port);
		addr = (struct policy_addr){.family = AF_INET6, .v6 = sin6->sin6_addr};
	} else {
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "upstream DNS server must be an IPv4 or IPv6 socket address");
	}
	if (port == 0) {
		char text[INET6_ADDRSTRLEN];
		policy_addr_format(&addr, 0, text, sizeof(text));
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "upstream DNS server %s has port 0", text);
	}
	node.udp_port = node.tcp_port = (int)port;

	cleanup_egress_resolver struct egress_resolver *r = xcalloc(1, sizeof(*r));
	r->server = node;
	policy_addr_format(&addr, (uint16_t)port, r->server_text, sizeof(r->server_text));
	r->timeout_ms = timeout_ms;
	pthread_mutex_init(&r->lock, NULL);
	r->entries = xcalloc(EGRESS_DNS_CACHE_MAX, sizeof(r->entries[0]));
	for (size_t i = 0; i < CACHE_BUCKETS; i++)
		r->buckets[i] = -1;

	/* Fail now, not on the first lookup, if c-ares refuses this setup. */
	ares_channel ch;
	int rc = channel_open(r, &ch);
	if (rc != ARES_SUCCESS)
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot set up a c-ares channel for %s: %s",
		                    r->server_text, ares_strerror(rc));
	ares_destroy(ch);
	*ret = TAKE_PTR(r);
	return 0;
}

void egress_resolver_free(struct egress_resolver *r)
{
	if (!r)
		return;
	pthread_mutex_destroy(&r->lock);
	free(r->entries);
	free(r);
}

static int answer_error(const struct egress_resolver *r, const char *name, const struct answer *a, struct al_error *err)
{
	switch (a->r) {
	case -ENOENT:
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "resolving %s: %s", name, a->why);
	case -ETIMEDOUT:
		return al_error_set(err, AL_ERR_TIMEOUT, ETIMEDOUT,
		                    "resolving %s: the DNS server %s did not answer within %u ms", name, r->server_text,
		                    r->timeout_ms);
	default:
		return al_error_set(err, AL_ERR_UNAVAILABLE, EIO, "resolving %s with the DNS server %s: %s", name,
		                    r->server_text, a->why);
	}
}

int egress_resolve(struct egress_resolver *r, const char *name, int family, struct policy_addr *out, size_t max,
                   size_t *ret_n, uint32_t *ret_ttl, struct al_error *err)
{
	/* SECURITY: only canonical names reach c-ares (no escapes, dots or
	 * bytes it would interpret), and only as the question of a query: no
	 * search list, no hosts file, no address parsing. */
	if (!name || !name_is_canonical(name))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "cannot resolve a name that is not canonical (lower-case letters, digits and "
		                    "hyphens in dot-separated labels, not a number)");
	if (family != AF_INET && family != AF_INET6 && family != AF_UNSPEC)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "cannot resolve %s: address family %d", name,
		                    family);
	if (max == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "cannot resolve %s into 0 addresses", name);

	struct answer ans[2] = {{.family = family == AF_INET6 ? AF_INET6 : AF_INET}, {.family = AF_INET6}};
	size_t nans = family == AF_UNSPEC ? 2 : 1;
	struct answer *todo[2];
	size_t ntodo = 0;
	uint64_t now = now_ms_monotonic();
	for (size_t i = 0; i < nans; i++)
		if (!cache_get(r, name, &ans[i], now))
			todo[ntodo++] = &ans[i];
	if (ntodo > 0) {
		resolve_upstream(r, name, todo, ntodo);
		now = now_ms_monotonic();
		for (size_t i = 0; i < ntodo; i++)
			cache_put(r, name, todo[i], now);
	}

	size_t n = 0;
	uint32_t ttl = EGRESS_DNS_TTL_MAX;
	for (size_t i = 0; i < nans; i++) {
		if (ans[i].r != 0 || n == max)
			continue;
		for (size_t k = 0; k < ans[i].n && n < max; k++)
			out[n++] = ans[i].addrs[k];
		ttl = MIN(ttl, ans[i].ttl);
	}
	if (n > 0) {
		*ret_n = n;
		*ret_ttl = ttl;
		return 0;
	}
	/* Nothing usable: a definite "no" only if every lookup said so. */
	for (size_t i = 0; i < nans; i++)
		if (ans[i].r != -ENOENT)
			return answer_error(r, name, &ans[i], err);
	return answer_error(r, name, &ans[0], err);
}

void egress_resolver_stats(struct egress_resolver *r, uint64_t *ret_upstream_queries, uint64_t *ret_cache_hits)
{
	if (ret_upstream_queries)
		*ret_upstream_queries = __atomic_load_n(&r->upstream_queries, __ATOMIC_RELAXED);
	if (ret_cache_hits)
		*ret_cache_hits = __atomic_load_n(&r->cache_hits, __ATOMIC_RELAXED);
}
