/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-egress's runtime, shared by its modules (internal to the binary):
 *
 *   egress-main.c   options, logging, start-up, the exit path
 *   egress-ctl.c    the control channel from airlockd (a thread), the
 *                   sandbox table, audit events (a sender thread)
 *   egress-conn.c   the epoll loop over every sandbox's listeners (one
 *                   thread) and a thread per guest TCP connection: sniff,
 *                   decide, resolve, dial, splice
 *   egress-plain.c  plain HTTP after the dial: every request of the
 *                   connection checked (Host, policy, framing) before it is
 *                   forwarded; responses spliced
 *   egress-intercept.c  TLS interception (issue 6): the TLS contexts, the
 *                   decision to intercept, and for an intercepted
 *                   connection TLS toward the guest (Airlock CA leaf) and
 *                   toward the server (verified), every request checked
 *                   and its secrets put in
 *   egress-request.c    what those two share: the guest's requests read
 *                   with egress-http1's parser, each head's Host and the
 *                   current policy checked, a request refused
 *   egress-dnsd.c   the DNS listener (UDP in the loop + worker threads, TCP a
 *                   thread per connection), checked resolution, and each
 *                   sandbox's map of the addresses its DNS answers named
 *   egress-fair.c   fair sharing between sandboxes (issue 17): the DNS
 *                   workers' round-robin queue, the folding of repeated
 *                   denials into counted records (used by egress-ctl.c)
 *
 * Locking, outermost first: rt->loop_lock (the sandbox table, every
 * listener fd, the epoll set; held by the loop while it handles a batch of
 * events and by the control thread while it changes a sandbox's listeners),
 * then sandbox->lock (its connections, counters, name map), then the policy
 * and bindings slots' locks, then rt->tenant_lock (per-tenant connection
 * counts). rt->ca_lock is a leaf. The event queue (with each sandbox's event
 * budget and aggregator), the DNS job queue (with each sandbox's share of it)
 * and the send lock are leaves.
 * Nothing is sent on the control socket with any other lock held.
 */
#ifndef AIRLOCK_EGRESS_RUNTIME_H
#define AIRLOCK_EGRESS_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

#include <openssl/ssl.h>

#include "egress-bindings.h"
#include "policy-ceiling.h"
#include "egress-ca.h"
#include "egress-dns.h"
#include "egress-fair.h"
#include "egress-policy.h"
#include "policy-rule.h"

/* ------------------------------------------------------------ limits */

#define EGRESS_SANDBOX_ID_MAX 64       /* [A-Za-z0-9._-], airlockd's ids are "sb-" + hex */
#define EGRESS_TENANT_MAX 64           /* same alphabet, "" or absent for none */
#define EGRESS_SANDBOXES_MAX 4096      /* "add" beyond this is refused */
#define EGRESS_PUBLIC_CIDRS_MAX 16     /* --public-cidr */
#define EGRESS_SNIFF_TIMEOUT_MS 3000   /* default --sniff-timeout-ms: the request head / ClientHello */
#define EGRESS_RESOLVE_TIMEOUT_MS 2500 /* per upstream query (the resolver retries once) */
#define EGRESS_DIAL_ATTEMPTS_MAX 3     /* addresses tried, each with --connect-timeout-ms */
#define EGRESS_NAMEMAP_MAX 1024        /* address -> name entries per sandbox */
#define EGRESS_NAMEMAP_GRACE_MS 60000  /* an entry outlives its TTL by this */
#define EGRESS_NAMEMAP_NAMES_MAX 8     /* names looked at for one address */
#define EGRESS_DNS_TCP_PER_SANDBOX 16  /* concurrent DNS-over-TCP connections */
#define EGRESS_DNS_TCP_IDLE_MS 10000
#define EGRESS_DNS_WORKERS 16               /* threads resolving UDP queries */
#define EGRESS_DNS_QUEUE_MAX 1024           /* UDP queries waiting for a worker, all sandboxes */
#define EGRESS_DNS_PENDING_PER_SANDBOX 32   /* one sandbox's queued + running UDP lookups; more: SERVFAIL */
#define EGRESS_DNS_RUNNING_PER_SANDBOX 4    /* workers one sandbox may hold at once */
#define EGRESS_DNS_QUEUE_WAIT_MS 3000       /* a lookup queued longer is answered SERVFAIL unasked */
#define EGRESS_EVENT_QUEUE_MAX 8192         /* events waiting for the control socket; more are dropped (counted) */
#define EGRESS_EVENT_QUEUE_PER_SANDBOX 1024 /* one sandbox's share of them */
#define EGRESS_EVENT_AGG_WINDOW_MS 5000     /* repeated denials are counted per window ... */
#define EGRESS_EVENT_AGG_BURST 32           /* ... past this many records of a sandbox in it */
#define EGRESS_ASKED_HOST_MAX 256           /* "asked_host": escaped raw Host/SNI, bytes */
#define EGRESS_LOOP_BATCH 64                /* accepts / datagrams per listener per wake-up */
#define EGRESS_THREAD_STACK (256 * 1024)
#define EGRESS_REPLY_TIMEOUT_MS 2000 /* writing a 403/502 to a guest */

enum egress_log_level {
	EGRESS_LOG_ERROR = 0,
	EGRESS_LOG_WARN,
	EGRESS_LOG_INFO,
	EGRESS_LOG_DEBUG,
};

/* The command line (egress-main.c), read-only after start-up. */
struct egress_options {
	int control_fd;
	struct sockaddr_storage resolver;
	socklen_t resolver_len;
	char resolver_text[64];
	char *trust_ca; /* extra CAs for verifying servers of intercepted connections */
	unsigned connect_timeout_ms;
	unsigned idle_timeout_s;
	unsigned max_connection_s;
	unsigned max_connections;
	unsigned max_connections_per_sandbox;
	unsigned max_connections_per_tenant; /* guest TCP connections of one tenant's sandboxes */
	unsigned sniff_timeout_ms;           /* the request head / ClientHello must arrive within */
	enum egress_log_level log_level;
	/* --public-cidr: networks dialled as if public (test networks built
	 * from the documentation ranges); CIDR rules without a port. */
	struct policy_rule public_cidrs[EGRESS_PUBLIC_CIDRS_MAX];
	size_t n_public_cidrs;
	/* --ceiling-cidr/--ceiling-metadata (and the --public-cidr networks):
	 * the operator's ceiling, which bounds what an explicit rule opens. */
	struct policy_ceiling ceiling;
};

/* ------------------------------------------------------------ sandboxes */

enum {
	EGRESS_FD_TCP = 0, /* the redirected TCP listener (10.0.2.2:15001) */
	EGRESS_FD_DNS_UDP, /* 10.0.2.2:53 datagram */
	EGRESS_FD_DNS_TCP, /* 10.0.2.2:53 stream listener */
	EGRESS_FD_COUNT,
};

/* A connection (guest TCP or DNS over TCP) as its sandbox knows it, so that
 * "remove" can shut it down. Fields under sandbox->lock; the fds stay owned
 * (and are closed) by the connection's thread after it untracks itself. */
struct egress_track {
	struct egress_track *prev, *next;
	int client_fd;
	int upstream_fd;               /* -1: none */
	struct egress_tenant *counted; /* the tenant it counts against (a reference), or NULL */
};

struct egress_namemap_entry {
	struct policy_addr addr;
	uint64_t expires_ms; /* monotonic; 0: free */
	char name[POLICY_HOST_NAME_MAX + 1];
};

struct egress_runtime;

/* A tenant's open guest TCP connections (rt->tenants, under rt->tenant_lock). */
struct egress_tenant {
	struct egress_tenant *next;
	unsigned refs; /* sandboxes and connections counted against it */
	unsigned n_conns;
	char name[EGRESS_TENANT_MAX + 1];
};

struct egress_sandbox {
	atomic_uint refs;
	struct egress_runtime *rt;
	char id[EGRESS_SANDBOX_ID_MAX + 1];
	struct egress_policy_slot policy;
	struct egress_bindings_slot bindings; /* its secrets (issue 6) */

	/* Under rt->loop_lock. */
	struct egress_sandbox *next;
	uint64_t key; /* epoll tag: a stale event never finds a new sandbox */
	int fds[EGRESS_FD_COUNT];
	char tenant[EGRESS_TENANT_MAX + 1];
	struct egress_tenant *tenant_conns; /* a reference; NULL: no tenant (own limit only) */

	/* Under rt->dns_lock: its share of the DNS workers. */
	struct egress_fairq_flow dns_flow;

	/* Under rt->ev_lock: its share of the event queue. */
	unsigned ev_queued;
	uint64_t ev_dropped;           /* not yet reported in a "network.dropped" record */
	uint64_t ev_dropped_report_ms; /* the last such record (monotonic) */
	bool ev_pending;               /* on rt->ev_pending (holding a reference) */
	struct egress_sandbox *ev_pending_next;
	struct egress_agg ev_agg;

	/* Under lock. */
	pthread_mutex_t lock;
	bool removed;
	unsigned n_conns;
	unsigned n_dns_tcp;
	struct egress_track tracks;         /* circular list head */
	struct egress_namemap_entry *names; /* EGRESS_NAMEMAP_MAX, allocated on first use */
};

/* ------------------------------------------------------------ the runtime */

struct egress_event_node;
struct egress_dns_job;
struct egress_http1_parser;
struct egress_http1_head;

struct egress_runtime {
	struct egress_options opt;
	struct egress_resolver *resolver;
	int ctl_fd;
	int epoll_fd;
	int stop_fd;    /* eventfd: the control channel is gone, exit */
	int reserve_fd; /* released to shed a connection when out of fds */

	pthread_mutex_t loop_lock;
	struct egress_sandbox *sandboxes;
	size_t n_sandboxes;
	uint64_t next_key;

	atomic_uint n_conns; /* guest TCP + DNS-over-TCP connections, all sandboxes */

	pthread_mutex_t tenant_lock;
	struct egress_tenant *tenants;

	/* TLS interception (egress-intercept.c): the contexts are built at
	 * start-up and read-only after; the CA arrives by "ca". */
	SSL_CTX *tls_guest;    /* we are the server toward the guest */
	SSL_CTX *tls_upstream; /* we are the verifying client toward servers */
	pthread_mutex_t ca_lock;
	struct egress_ca *ca; /* NULL until airlockd sends "ca" */

	pthread_mutex_t send_lock; /* one ctlmsg_send at a time */

	pthread_mutex_t ev_lock;
	pthread_cond_t ev_cond;
	struct egress_event_node *ev_head, *ev_tail;
	size_t ev_len;
	uint64_t ev_dropped;
	struct egress_sandbox *ev_pending; /* with folded denials or unreported drops */

	pthread_mutex_t dns_lock;
	pthread_cond_t dns_cond;
	struct egress_fairq dns_queue; /* of struct egress_dns_job, per sandbox */
	uint64_t dns_dropped;
};

/* ------------------------------------------------------------ connections */

enum egress_conn_proto { EGRESS_PROTO_HTTP, EGRESS_PROTO_TLS, EGRESS_PROTO_TCP };

/* How an allowed TLS connection is carried. */
enum egress_tls_handling {
	EGRESS_TLS_SPLICED = 0, /* bytes spliced, TLS not terminated */
	EGRESS_TLS_INTERCEPTED, /* terminated: every request checked (egress-intercept.c) */
};

/* A guest TCP connection, owned by its thread (egress-conn.c; an
 * intercepted one is carried on by egress-intercept.c). */
struct egress_conn {
	struct egress_runtime *rt;
	struct egress_conn *next_idle; /* handed to an idle thread (egress-conn.c) */
	struct egress_sandbox *sb;     /* a reference */
	struct egress_track track;
	int fd; /* the guest's connection (owned) */
	int up; /* the dialled server (owned), -1 */
	uint64_t start_ms;

	struct policy_addr dst; /* as the guest asked (IPv4) */
	uint16_t port;
	bool have_dst;
	enum egress_conn_proto proto;

	uint8_t *buf; /* what was read before deciding, forwarded first */
	size_t len;

	struct policy_host host; /* canonical */
	bool have_host;
	char asked[EGRESS_ASKED_HOST_MAX + 1]; /* escaped raw Host / SNI, "" */

	/* Plain HTTP: egress-http1's parser, which checked the first request
	 * head (egress_plain_first) and reads every later one. */
	struct egress_http1_parser *http1;
	int http_status;              /* a refused plain HTTP request: the answer (0: 403) */
	const char *http_status_text; /* static */

	struct egress_policy *policy; /* the reference every decision used */
	const char *rule;             /* in policy */
	char addr[64];                /* dialled "IP:PORT", "" */
	uint64_t bytes_up, bytes_down;

	/* TLS (issue 6): decided by egress_intercept_decide(). */
	enum egress_tls_handling tls;
	const char *tls_reason;           /* "binding", "inspect", "pinned" or NULL (static) */
	struct egress_ca *ca;             /* a reference, when intercepted */
	struct egress_bindings *bindings; /* a reference taken at the decision (plain HTTP: for events) */
};

/* The data of a connection event (egress-conn.c): proto, dst, port, host,
 * asked_host, addr, verdict, rule, reason, and tls for TLS. */
json_t *egress_conn_event_data(const struct egress_conn *c, const char *verdict, const char *reason);
/* Waits until fd is ready for events or the deadline (monotonic ms)
 * passes: 1 ready, 0 deadline, -errno. */
int egress_wait_fd(int fd, short events, uint64_t deadline_ms);
/* After a refusal: reads and drops what the guest still sends (bounded in
 * bytes and time), so that closing does not reset a reply in flight. */
void egress_drain(int fd);
/* The text of the gateway's own answer to an HTTP request: status,
 * "Connection: close", a text body. Returns its length, or 0 when it does
 * not fit in size. */
size_t egress_http_reply_format(char *buf, size_t size, int status, const char *status_text, const char *body);
/* Answers a plain HTTP request (egress_http_reply_format); then our side's
 * end and egress_drain(). Bounded in time. */
void egress_http_reply(int fd, int status, const char *status_text, const char *body);
/* Why a relay ended on a failed read or write r: "reset" (-ECONNRESET),
 * "peer closed" (-EPIPE), else what (which side failed). */
const char *egress_io_failure(int r, const char *what);

/* A connection's time limits while it relays: --max-connection-s from its
 * start, --idle-timeout-s without progress. */
struct egress_conn_timer {
	uint64_t end_ms; /* monotonic */
	uint64_t idle_ms;
	uint64_t last_ms; /* the last progress (monotonic) */
};
void egress_conn_timer_start(struct egress_conn_timer *t, const struct egress_conn *c);
/* After a round of relaying that ended at now (progress: something moved):
 * why the connection ends ("max duration", "idle timeout"), or NULL. */
const char *egress_conn_timer_check(struct egress_conn_timer *t, uint64_t now, bool progress);
/* The latest time (monotonic ms) to wake up at. */
uint64_t egress_conn_timer_wake(const struct egress_conn_timer *t);

/* One direction of a spliced relay: from -> a pipe -> to, zero-copy. */
struct egress_splice {
	int from, to;
	int pipe[2];
	size_t inpipe, pipe_size;
	bool eof;          /* from reached its end */
	bool shut;         /* to was shut down for writing (the end passed on) */
	bool hold_shut;    /* keep to open for writing after the end (a reply follows) */
	uint64_t limit;    /* bytes that may still be read from from (UINT64_MAX: no limit) */
	uint64_t bytes_in; /* read from from */
	uint64_t *bytes;   /* written to to: added here */
	size_t big_bytes;  /* counted in the budget of enlarged pipes (0: default size) */
	bool grown;        /* filled up once: enlarged if the budget allowed */
};
bool egress_splice_open(struct egress_splice *d, int from, int to, uint64_t *bytes);
/* Idempotent; also fine for EGRESS_SPLICE_CLOSED and after a failed open. */
void egress_splice_close(struct egress_splice *d);
#define EGRESS_SPLICE_CLOSED ((struct egress_splice){.pipe = {-1, -1}})
#define cleanup_egress_splice __attribute__((cleanup(egress_splice_close)))
/* Moves what can be moved without blocking (sets *progress if anything
 * moved); passes the end on unless hold_shut. Returns 0 or -errno. */
int egress_splice_pump(struct egress_splice *d, bool *progress);
/* Whether to wait for POLLIN on from (else, with bytes in the pipe, for
 * POLLOUT on to). */
bool egress_splice_wants_in(const struct egress_splice *d);

/* ------------------------------------------------------------ egress-main.c */

void egress_log(enum egress_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Starts a detached thread with the runtime's stack size. */
int egress_thread_start(void *(*fn)(void *), void *arg);

/* ------------------------------------------------------------ egress-ctl.c */

/* Sends "ready", then starts the control reader and the event sender. */
int egress_ctl_start(struct egress_runtime *rt);

/* Queues an audit event {"op":"event","sandbox":ID,"type":type,"data":data}
 * (data is stolen) and logs it; never blocks on the control socket. */
void egress_event(struct egress_sandbox *sb, const char *type, json_t *data);

struct egress_sandbox *egress_sandbox_ref(struct egress_sandbox *sb);
void egress_sandbox_unref(struct egress_sandbox *sb);
static inline void egress_sandbox_unrefp(struct egress_sandbox **sb)
{
	egress_sandbox_unref(*sb);
}
#define cleanup_egress_sandbox __attribute__((cleanup(egress_sandbox_unrefp)))
/* The sandbox with this epoll key, or NULL. Called with rt->loop_lock held;
 * the pointer is valid while it is. */
struct egress_sandbox *egress_sandbox_by_key(struct egress_runtime *rt, uint64_t key);
bool egress_sandbox_removed(struct egress_sandbox *sb);

/* Links a connection into its sandbox, if the sandbox's limit (dns: the
 * DNS-over-TCP one) and its tenant's allow and it is not removed. */
bool egress_sandbox_track(struct egress_sandbox *sb, struct egress_track *t, bool dns);
void egress_sandbox_untrack(struct egress_sandbox *sb, struct egress_track *t, bool dns);
/* Records the upstream socket so that "remove" shuts it down too;
 * -ECANCELED when the sandbox is being removed. fd -1 forgets it. */
int egress_sandbox_set_upstream(struct egress_sandbox *sb, struct egress_track *t, int fd);

/* ------------------------------------------------------------ egress-conn.c */

/* The epoll loop; returns when stop_fd is signalled. */
int egress_loop_run(struct egress_runtime *rt);
/* Adds / removes a sandbox's listeners to / from the epoll set (loop_lock held). */
int egress_loop_watch(struct egress_runtime *rt, struct egress_sandbox *sb);
void egress_loop_unwatch(struct egress_runtime *rt, struct egress_sandbox *sb);
/* Accepts the connections waiting on the sandbox's listener sb->fds[which]
 * (at most EGRESS_LOOP_BATCH; O_CLOEXEC|O_NONBLOCK) and hands each fd to
 * start. Out of fds, one connection is shed (reset) instead of spinning;
 * other failures are logged as what ("accept"). */
void egress_accept_batch(struct egress_runtime *rt, struct egress_sandbox *sb, int which, const char *what,
                         void (*start)(struct egress_runtime *rt, struct egress_sandbox *sb, int fd));
/* Closes with a TCP reset (SO_LINGER 0). */
void egress_close_reset(int fd);
/* Handles readiness of a sandbox's TCP listener (loop thread). */
void egress_conn_accept(struct egress_runtime *rt, struct egress_sandbox *sb);

/* The Airlock CA airlockd sent ("ca"), a new reference, or NULL. */
struct egress_ca *egress_ca_current(struct egress_runtime *rt);

/* ------------------------------------------------------------ egress-intercept.c */

/* Builds the two TLS contexts (--trust-ca is loaded here). */
int egress_intercept_init(struct egress_runtime *rt, struct al_error *err);

/*
 * For an allowed TLS connection (c->host the canonical SNI, c->policy the
 * decision's policy): sets c->tls and c->tls_reason, and takes c->ca and
 * c->bindings. Intercepted when a binding of the sandbox names the host or
 * the policy says "tls":"inspect", unless a "pinned" pattern matches.
 * Returns 0, or -ENOKEY (interception is needed but airlockd has sent no
 * CA: the connection must be denied; reason says so).
 */
int egress_intercept_decide(struct egress_conn *c, char *reason, size_t reason_size);

/* Carries an intercepted connection after the dial (c->up connected,
 * c->buf holding the ClientHello) to its end; returns the reason for the
 * close event. */
const char *egress_intercept_run(struct egress_conn *c, char *reason, size_t reason_size);

/* Plain HTTP (port 80) is never given a secret: a placeholder of the
 * sandbox's bindings in the forwarded request head raises a
 * "network.secret" event with verdict "not-substituted", reason "plain
 * http". */
void egress_intercept_plain_http(struct egress_conn *c, const uint8_t *head, size_t len);

/* ------------------------------------------------------------ egress-plain.c */

/*
 * The first request head of a plain HTTP connection, c->buf[0, head_len)
 * (egress-http.c accepted it; c->host is its canonical Host), must pass
 * egress-http1's parser too: c->http1 is created and keeps reading the
 * connection's requests after the dial. Returns 0, or -errno with reason and
 * c->http_status / c->http_status_text (400, 403, 405, 431) set.
 */
int egress_plain_first(struct egress_conn *c, size_t head_len, char *reason, size_t reason_size);

/* Carries an allowed plain HTTP connection after the dial (c->up connected,
 * c->buf holding what was read to decide) to its end, checking every request
 * after the first; returns the reason for the close event. */
const char *egress_plain_run(struct egress_conn *c, char *reason, size_t reason_size);

/* ------------------------------------------------------------ egress-request.c */

#define EGRESS_REQUEST_REASON_MAX 384 /* a refused request's reason, bytes */
#define EGRESS_REQUEST_PATH_SHOWN 200 /* bytes of an escaped path in events */

/*
 * The guest's side of a connection whose every request is read by
 * egress-http1's parser and checked before a byte of it goes to the server
 * (egress-plain.c, egress-intercept.c).
 */
struct egress_requests {
	struct egress_conn *c;
	struct egress_http1_parser *parser;

	uint8_t *in; /* guest bytes (plaintext), fed to the parser */
	size_t in_len, in_off;
	bool parse_pending; /* the parser may have an event without more bytes */
	bool in_body;       /* between a head and the end of its request */

	/* What goes to the server next: a head (set by the caller) or body
	 * bytes in in. Nothing more is parsed or read until it is written. */
	const uint8_t *out;
	size_t out_len, out_off;

	/* A refused request: its answer waits until the server is done with
	 * the requests before it (pipelining), then the connection ends. */
	bool refusing;
	int status;
	const char *status_text;
	char reason[EGRESS_REQUEST_REASON_MAX];
	uint64_t refuse_ms;
};

/* What events show of a request head: escaped guest text. */
struct egress_request_shown {
	char asked[EGRESS_ASKED_HOST_MAX + 1]; /* the Host as sent */
	char path[EGRESS_REQUEST_PATH_SHOWN + 1];
};

/* The answer to a request egress-http1 refused (r and err from
 * egress_http1_feed; in_body: in its body): returns its status (400, 403,
 * 405, 413, 417, 431) with *ret_text, and says why (no guest bytes) in why. */
int egress_request_refusal(const struct egress_conn *c, int r, const struct al_error *err, bool in_body,
                           const char **ret_text, char *why, size_t why_size);

/* Refuses the request being read: its "network.deny" event now (shown and
 * method NULL when its head was not read; rule: the policy's rule that
 * denied it, or NULL), its answer (status, reason) once the caller's relay
 * is ready for it. */
void egress_requests_refuse(struct egress_requests *rq, int status, const char *status_text,
                            const struct egress_request_shown *shown, const char *method, const char *rule,
                            const char *reason);

/* Feeds the parser once from in: moves in_off, parse_pending and in_body
 * on, and for EGRESS_HTTP1_EV_BODY points out at the body's bytes
 * (*ret_used of them). Returns the event, or -errno when the parser refused
 * the request (it is refused: egress_requests_refuse). */
int egress_requests_feed(struct egress_requests *rq, size_t *ret_used);

/* A request head (EGRESS_HTTP1_EV_HEAD): its Host must name the host the
 * connection was decided for (and its port, if it has one), and that host
 * must still be allowed by the sandbox's current policy. Fills shown.
 * Returns 0 with *ret_host the canonical host, or -errno: refused (400,
 * 421, 403). */
int egress_requests_check_head(struct egress_requests *rq, const struct egress_http1_head *h,
                               struct egress_request_shown *shown, struct policy_host *ret_host);

/* ------------------------------------------------------------ egress-dnsd.c */

int egress_dnsd_start(struct egress_runtime *rt);
void egress_dnsd_udp_ready(struct egress_runtime *rt, struct egress_sandbox *sb);
void egress_dnsd_tcp_accept(struct egress_runtime *rt, struct egress_sandbox *sb);

/* May the gateway dial this address for this policy and port (0: any)? Not
 * forbidden, or named by an allow rule within the operator's ceiling, or in a
 * --public-cidr network. */
/* Is the address one of the gateway host's own? (Never dialled.) */
bool egress_addr_is_local(const struct policy_addr *a);
/* Why an address is not dialable, for events: its class, or "the gateway
 * host's own address". */
const char *egress_addr_refusal(const struct policy_addr *a);
bool egress_addr_dialable(const struct egress_runtime *rt, const struct egress_policy *p,
                          const struct policy_addr *addr, uint16_t port);

/*
 * Resolves a canonical name (never an IP literal) and keeps the addresses
 * egress_addr_dialable() accepts. Returns 0 (n >= 1), -ENOENT (no address),
 * -EACCES (every address refused: reason says which class), -ETIMEDOUT or
 * -EIO (resolver failure). reason (always set on error) is short, for
 * events.
 */
int egress_resolve_checked(struct egress_runtime *rt, const struct egress_policy *p, const struct policy_host *host,
                           uint16_t port, int family, struct policy_addr *out, size_t max, size_t *ret_n,
                           uint32_t *ret_ttl, char *reason, size_t reason_size);

/* The sandbox's map of addresses its DNS answers named. */
void egress_namemap_add(struct egress_sandbox *sb, const struct policy_addr *addr, const char *name, uint32_t ttl_s);
size_t egress_namemap_find(struct egress_sandbox *sb, const struct policy_addr *addr,
                           char (*names)[POLICY_HOST_NAME_MAX + 1], size_t max);

/* The socket address of a and port in *ret; returns its length. */
socklen_t egress_addr_sockaddr(const struct policy_addr *a, uint16_t port, struct sockaddr_storage *ret);

#endif
