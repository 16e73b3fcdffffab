/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS interception (issue 6; docs/egress.md "TLS interception"): for an
 * allowed TLS connection (issue 17: every one by default; with
 * "tls":"passthrough" only to a host that one of the sandbox's secrets is
 * bound to; never to a pinned host), the gateway
 *   1. terminates the guest's TLS (1.2/1.3, ALPN http/1.1 only) with a leaf
 *      certificate for the SNI issued by the Airlock CA, feeding OpenSSL the
 *      ClientHello bytes that were already read to decide;
 *   2. opens TLS to the server it dialled (the same checked address as a
 *      spliced connection) with full verification: the system store plus
 *      --trust-ca, hostname = the SNI;
 *   3. reads every request of the guest with egress-http1's strict parser:
 *      Host must be the SNI (421), the host must still be allowed by the
 *      sandbox's current policy (403), paths a binding could apply to must
 *      not hide another path (400); then each binding that applies (host,
 *      path prefix, method) sets its header or replaces its placeholder in
 *      header values, and the rewritten head goes upstream, followed by the
 *      body as it arrives (never buffered whole);
 *   4. relays responses unchanged (redirects are the guest's business: the
 *      next host is another connection and another decision).
 * Every substitution, and every placeholder seen where no binding applies,
 * is a "network.secret" event (the secret's name, never its value).
 *
 * SECURITY: the bindings are taken from the sandbox's slot for each request,
 * so a rotated or deleted secret is used by no request read after the
 * change. Secret bytes exist only in the binding set, in the head buffer
 * between the rewrite and the write to the server (wiped right after), and
 * in OpenSSL's record buffers (freed with the connection; OpenSSL clears
 * them on free only for some buffers). None is ever logged or put in an
 * event or a reply.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "egress-http.h"
#include "egress-http1.h"
#include "egress-openssl.h"
#include "egress-redact.h"
#include "egress-runtime.h"
#include "util.h"

#define ICPT_CHUNK (16 * 1024)      /* guest plaintext read at once (fed to the parser) */
#define ICPT_DOWN_CHUNK (64 * 1024) /* server plaintext relayed at once: several records */
#define ICPT_READ_BUF (80 * 1024)   /* the server side's read-ahead: several records per recv */
#define ICPT_GUEST_WBUF (64 * 1024) /* records toward the guest, sent together */
#define ICPT_BUSY_ROUNDS 16         /* rounds with progress before the guest's readiness is polled */
#define ICPT_HANDSHAKE_MS 10000     /* each TLS handshake */
#define ICPT_REFUSE_QUIET_MS 1000   /* after a refusal: upstream silence that ends the wait */
#define ICPT_REFUSE_MAX_MS 10000    /* after a refusal: the longest wait for earlier responses */
#define ICPT_SECRET_EVENTS_MAX 32   /* network.secret events per request */

static const unsigned char alpn_http11[] = "\x08http/1.1";

static BIO_METHOD *prefix_method; /* built by egress_intercept_init() */
static int prefix_read(BIO *b, char *out, size_t outl, size_t *readbytes);
static long prefix_ctrl(BIO *b, int cmd, long num, void *ptr);

/* ------------------------------------------------------------ contexts */

/* ALPN toward the guest: http/1.1 or nothing. A guest that offers only h2
 * gets no ALPN answer; it may go on with HTTP/1.1 or give up (documented). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg)
{
	(void)ssl;
	(void)arg;
	unsigned char *sel = NULL;
	unsigned char sel_len = 0;
	if (SSL_select_next_proto(&sel, &sel_len, alpn_http11, sizeof(alpn_http11) - 1, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	*out = sel;
	*outlen = sel_len;
	return SSL_TLSEXT_ERR_OK;
}

static const char *openssl_reason(void)
{
	unsigned long e = ERR_peek_last_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;
	return r ? r : "unknown error";
}

int egress_intercept_init(struct egress_runtime *rt, struct al_error *err)
{
	cleanup_ssl_ctx SSL_CTX *g = SSL_CTX_new(TLS_server_method());
	cleanup_ssl_ctx SSL_CTX *u = SSL_CTX_new(TLS_client_method());
	if (!g || !u)
		return al_error_set(err, AL_ERR_INTERNAL, ENOMEM, "SSL_CTX_new: %s", openssl_reason());
	const uint64_t opts = SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF;
	SSL_CTX_set_min_proto_version(g, TLS1_2_VERSION);
	SSL_CTX_set_options(g, opts | SSL_OP_NO_TICKET | SSL_OP_CIPHER_SERVER_PREFERENCE);
	/* No resumption: every connection is decided and shown its leaf
	 * afresh, and no session outlives the CA or the policy it met. */
	SSL_CTX_set_session_cache_mode(g, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_num_tickets(g, 0);
	SSL_CTX_set_alpn_select_cb(g, alpn_select, NULL);
	SSL_CTX_set_mode(g, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
	                        SSL_MODE_RELEASE_BUFFERS);

	SSL_CTX_set_min_proto_version(u, TLS1_2_VERSION);
	SSL_CTX_set_options(u, opts | SSL_OP_NO_TICKET);
	SSL_CTX_set_mode(u, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
	                        SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_alpn_protos(u, alpn_http11, sizeof(alpn_http11) - 1);
	/* Several of the server's records per recv (a response's bulk), not
	 * a header and a body read per record. */
	SSL_CTX_set_read_ahead(u, 1);
	SSL_CTX_set_default_read_buffer_len(u, ICPT_READ_BUF);
	/* SECURITY: full verification of every server: chain to a trusted
	 * root, validity, and (per connection) the host name. */
	SSL_CTX_set_verify(u, SSL_VERIFY_PEER, NULL);
	if (SSL_CTX_set_default_verify_paths(u) != 1)
		egress_log(EGRESS_LOG_WARN, "the system's CA store could not be loaded: %s", openssl_reason());
	ERR_clear_error();
	if (rt->opt.trust_ca && SSL_CTX_load_verify_locations(u, rt->opt.trust_ca, NULL) != 1) {
		int r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                     "--trust-ca %s: no PEM certificate could be loaded (%s)", rt->opt.trust_ca,
		                     openssl_reason());
		ERR_clear_error();
		return r;
	}
	prefix_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "airlock-clienthello-prefix");
	if (!prefix_method || BIO_meth_set_read_ex(prefix_method, prefix_read) != 1 ||
	    BIO_meth_set_ctrl(prefix_method, prefix_ctrl) != 1)
		abort();
	rt->tls_guest = TAKE_PTR(g);
	rt->tls_upstream = TAKE_PTR(u);
	return 0;
}

/* ------------------------------------------------------------ deciding */

int egress_intercept_decide(struct egress_conn *c, char *reason, size_t reason_size)
{
	c->bindings = egress_bindings_slot_get(&c->sb->bindings);
	bool bound = egress_bindings_name_host(c->bindings, &c->host, NULL);
	enum egress_tls_mode mode = egress_policy_tls_mode(c->policy);
	c->tls = EGRESS_TLS_SPLICED;
	c->tls_reason = NULL;
	/* SECURITY (issue 17): inspection is the default, so that Host = SNI
	 * and the target's authority are checked on every request (a spliced
	 * connection checks the SNI only: domain fronting). Passthrough only
	 * where the policy asks for it ("tls":"passthrough", or pinned). */
	if (!bound && mode == EGRESS_TLS_PASSTHROUGH) {
		c->tls_reason = "passthrough";
		return 0;
	}
	/* SECURITY: a pinned host is never intercepted, not even for a
	 * secret: its placeholder then reaches it as the useless placeholder. */
	if (egress_policy_pinned(c->policy, &c->host, NULL)) {
		c->tls_reason = "pinned";
		return 0;
	}
	c->ca = egress_ca_current(c->rt);
	if (!c->ca && !bound && mode == EGRESS_TLS_DEFAULT) {
		/* Nothing can be intercepted without a CA (a gateway run
		 * alone; airlockd always sends one, and logs an error when it
		 * cannot): the default falls back to splicing, and says so. */
		c->tls_reason = "no-ca";
		return 0;
	}
	if (!c->ca) {
		/* Fail closed: splicing would skip the checks inspection or
		 * a secret binding asked for. */
		snprintf(reason, reason_size, "TLS interception needed (%s) but airlockd has sent no CA",
		         bound ? "a secret is bound to this host" : "\"tls\":\"inspect\"");
		return -ENOKEY;
	}
	c->tls = EGRESS_TLS_INTERCEPTED;
	c->tls_reason = bound ? "binding" : "inspect";
	return 0;
}

/* ------------------------------------------------------------ events */

/* "network.secret": never a value; the path escaped and cut. */
static void secret_event(struct egress_conn *c, const char *proto, const struct egress_binding *b, const char *verdict,
                         const char *reason, const char *method, const char *path)
{
	json_t *d = json_pack("{ssssssssssss?ss?ss?}", "proto", proto, "host", c->host.name, "secret", b->secret,
	                      "verdict", verdict, "mode", b->header ? "header" : "placeholder", "reason", reason,
	                      "method", method, "path", path);
	if (!d)
		abort();
	if (b->header)
		json_object_set_new(d, "header", json_string(b->header));
	egress_event(c->sb, "network.secret", d);
}

static bool contains(const uint8_t *buf, size_t len, const char *needle)
{
	return memmem(buf, len, needle, strlen(needle)) != NULL;
}

void egress_intercept_plain_http(struct egress_conn *c, const uint8_t *head, size_t len)
{
	if (!c->bindings)
		c->bindings = egress_bindings_slot_get(&c->sb->bindings);
	/* SECURITY: plain HTTP is readable on the way: never a secret, even
	 * to a bound host. The placeholder goes as it is. */
	for (size_t i = 0; i < egress_bindings_count(c->bindings); i++) {
		const struct egress_binding *b = egress_bindings_get(c->bindings, i);
		if (contains(head, len, b->placeholder))
			secret_event(c, "http", b, "not-substituted", "plain http", NULL, NULL);
	}
}

/* ------------------------------------------------------------ TLS plumbing */

/* The guest side's read BIO: first the ClientHello bytes already read to
 * decide, then the socket. Writes go to a plain socket BIO. */
struct prefix_bio {
	const uint8_t *buf;
	size_t len, off;
	int fd;
	bool eof;
};

static int prefix_read(BIO *b, char *out, size_t outl, size_t *readbytes)
{
	struct prefix_bio *p = BIO_get_data(b);
	BIO_clear_retry_flags(b);
	if (p->off < p->len) {
		size_t n = MIN(outl, p->len - p->off);
		memcpy(out, p->buf + p->off, n);
		p->off += n;
		*readbytes = n;
		return 1;
	}
	ssize_t n;
	do
		n = recv(p->fd, out, outl, 0);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		*readbytes = (size_t)n;
		return 1;
	}
	if (n == 0)
		p->eof = true;
	else if (errno == EAGAIN || errno == EWOULDBLOCK)
		BIO_set_retry_read(b);
	return 0;
}

static long prefix_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	(void)num;
	(void)ptr;
	struct prefix_bio *p = BIO_get_data(b);
	switch (cmd) {
	case BIO_CTRL_EOF:
		return p->eof; /* lets OpenSSL tell a TCP end of stream from an error */
	case BIO_CTRL_FLUSH:
		return 1;
	default:
		return 0;
	}
}

/* Drives a handshake on a non-blocking socket until it is done or the
 * deadline passes. */
static int handshake(SSL *s, int fd, uint64_t deadline_ms)
{
	for (;;) {
		ERR_clear_error();
		int r = SSL_do_handshake(s);
		if (r == 1)
			return 0;
		int e = SSL_get_error(s, r);
		short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
		if (!ev)
			return -EPROTO;
		int w = egress_wait_fd(fd, ev, deadline_ms);
		if (w == 0)
			return -ETIMEDOUT;
		if (w < 0)
			return w;
	}
}

/* Writes all of buf, waiting at most until the deadline. */
static int ssl_write_all(SSL *s, int fd, const void *buf, size_t len, uint64_t deadline_ms)
{
	size_t off = 0;
	while (off < len) {
		size_t n = 0;
		ERR_clear_error();
		int r = SSL_write_ex(s, (const uint8_t *)buf + off, len - off, &n);
		if (r == 1) {
			off += n;
			continue;
		}
		int e = SSL_get_error(s, r);
		short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
		if (!ev)
			return -EPIPE;
		int w = egress_wait_fd(fd, ev, deadline_ms);
		if (w <= 0)
			return w == 0 ? -ETIMEDOUT : w;
	}
	/* The guest side's records wait in a write buffer: out with them. */
	BIO *wb = SSL_get_wbio(s);
	for (;;) {
		if (BIO_flush(wb) > 0)
			return 0;
		if (!BIO_should_retry(wb))
			return -EPIPE;
		int w = egress_wait_fd(fd, POLLOUT, deadline_ms);
		if (w <= 0)
			return w == 0 ? -ETIMEDOUT : w;
	}
}

enum { IO_DONE = 0, IO_WAIT, IO_EOF };

/* The outcome of a non-blocking SSL_read_ex/SSL_write_ex that returned r:
 * IO_WAIT (with the poll events it waits for added to *ev), IO_EOF, or a
 * negative errno. */
static int io_result(SSL *s, int r, short *ev)
{
	switch (SSL_get_error(s, r)) {
	case SSL_ERROR_WANT_READ:
		*ev |= POLLIN;
		return IO_WAIT;
	case SSL_ERROR_WANT_WRITE:
		*ev |= POLLOUT;
		return IO_WAIT;
	case SSL_ERROR_ZERO_RETURN:
		return IO_EOF;
	case SSL_ERROR_SYSCALL:
		return errno == ECONNRESET || errno == EPIPE ? -errno : -EIO;
	default:
		return -EPROTO;
	}
}

static int io_read(SSL *s, uint8_t *buf, size_t len, size_t *ret_n, short *ev)
{
	ERR_clear_error();
	return SSL_read_ex(s, buf, len, ret_n) == 1 ? IO_DONE : io_result(s, 0, ev);
}

static int io_write(SSL *s, const uint8_t *buf, size_t len, size_t *ret_n, short *ev)
{
	ERR_clear_error();
	return SSL_write_ex(s, buf, len, ret_n) == 1 ? IO_DONE : io_result(s, 0, ev);
}

/* ------------------------------------------------------------ a connection */

/* An intercepted connection and the state of its relay (pump). */
struct icpt {
	SSL *g; /* toward the guest (we are the server) */
	SSL *u; /* toward the server (we are the client) */
	struct prefix_bio pb;

	/* guest -> server. rq.c: the connection; rq.in: guest plaintext;
	 * rq.out: a head, or body bytes in rq.in; rq.refusing: a request
	 * was refused (the relay ends with its answer). */
	struct egress_requests rq;
	bool g_eof;         /* the guest's end of stream was read */
	short g_wait;       /* the guest's last read would block: what it waits for (see pump) */
	uint8_t *head;      /* EGRESS_HTTP1_OUT_MAX: a rewritten head (may hold secrets) */
	bool out_secret;    /* rq.out is head: wipe it once written */
	unsigned forwarded; /* request heads sent to the server */
	bool u_shut;        /* our side toward the server is closed */

	/* server -> guest. */
	uint8_t *down; /* server plaintext (ICPT_DOWN_CHUNK), relayed unchanged */
	size_t down_len, down_off;
	bool u_eof;     /* the server's end of stream was read */
	bool u_drained; /* the last read stopped because the server had no more yet */
	int u_deferred; /* what ended a read after some records (IO_EOF or -errno), for the next read; 0 none */
	BIO *g_wbuf;    /* g's write buffer (owned by g) */
	uint64_t last_down_ms;

	struct egress_conn_timer timer;
	unsigned busy; /* rounds with progress since the guest's readiness was last polled */

	/* Issue 17: on a connection to a bound host, the server's bytes go
	 * through the redactor (values of the secrets sent on it replaced). */
	struct egress_redactor *redact;
	char *redact_secret[EGRESS_REDACT_VALUES_MAX]; /* the secret of each value, for events */
	bool redact_fail;                              /* the redactor refused the stream: redact_why */
	char redact_why[EGRESS_REQUEST_REASON_MAX];
};

/* One round of the relay: whether anything moved, and what it waits for
 * when nothing did. */
struct icpt_round {
	bool progress;
	bool u_idle; /* the server has nothing more for now: flush toward the guest */
	short gev;   /* poll events wanted on the guest's socket */
	short uev;   /* ... and on the server's */
};

/* Reads the server's plaintext into the empty down buffer, record after
 * record, until it is full or nothing more has arrived. IO_DONE (*ret_n >
 * 0), IO_WAIT (nothing; *ev says for what), IO_EOF or -errno. An end or
 * error after some records is kept for the next call: what came before it
 * goes to the guest first, as when each record was relayed alone. */
static int read_down(struct icpt *ic, size_t *ret_n, short *ev)
{
	size_t total = 0;
	ic->u_drained = false;
	if (ic->u_deferred) {
		int r = ic->u_deferred;
		ic->u_deferred = 0;
		return r;
	}
	while (total < ICPT_DOWN_CHUNK) {
		size_t n = 0;
		short want = 0;
		int r = io_read(ic->u, ic->down + total, ICPT_DOWN_CHUNK - total, &n, &want);
		if (r == IO_DONE) {
			total += n;
			continue;
		}
		if (total == 0) {
			*ev |= want;
			return r;
		}
		if (r == IO_WAIT)
			ic->u_drained = true;
		else
			ic->u_deferred = r;
		break;
	}
	*ret_n = total;
	return IO_DONE;
}

/* Sends what waits in g's write buffer: IO_DONE (empty), IO_WAIT (the
 * socket is full: POLLOUT added to *ev) or -errno. */
static int guest_flush(struct icpt *ic, short *ev)
{
	if (BIO_wpending(ic->g_wbuf) == 0)
		return IO_DONE;
	errno = 0;
	if (BIO_flush(ic->g_wbuf) > 0)
		return IO_DONE;
	if (BIO_should_retry(ic->g_wbuf)) {
		*ev |= POLLOUT;
		return IO_WAIT;
	}
	return errno == ECONNRESET || errno == EPIPE ? -errno : -EIO;
}

static void icpt_release(struct icpt *ic)
{
	SSL_free(ic->g);
	SSL_free(ic->u);
	egress_http1_parser_free(ic->rq.parser);
	if (ic->head) {
		OPENSSL_cleanse(ic->head, EGRESS_HTTP1_OUT_MAX);
		free(ic->head);
	}
	free(ic->rq.in);
	free(ic->down);
	egress_redactor_free(ic->redact);
	for (size_t i = 0; i < EGRESS_REDACT_VALUES_MAX; i++)
		free(ic->redact_secret[i]);
	/* The thread serves other connections next: no error left queued. */
	ERR_clear_error();
}
#define cleanup_icpt __attribute__((cleanup(icpt_release)))

/* The answer to a refused request, over the guest's TLS, then the end. */
static void guest_reply(struct icpt *ic, int status, const char *status_text, const char *reason)
{
	char resp[1024];
	char body[512];
	snprintf(body, sizeof(body), "airlock egress gateway: %s\n", reason);
	size_t n = egress_http_reply_format(resp, sizeof(resp), status, status_text, body);
	if (n == 0)
		return;
	uint64_t deadline = now_ms_monotonic() + EGRESS_REPLY_TIMEOUT_MS;
	if (ssl_write_all(ic->g, ic->rq.c->fd, resp, n, deadline) == 0) {
		ERR_clear_error();
		SSL_shutdown(ic->g);
		shutdown(ic->rq.c->fd, SHUT_WR);
		egress_drain(ic->rq.c->fd);
	}
}

/* What one request does with the sandbox's secrets. */
struct plan {
	const char *remove[EGRESS_HTTP1_REWRITE_OPS_MAX];
	size_t n_remove;
	struct egress_http1_field_add add[EGRESS_HTTP1_REWRITE_OPS_MAX];
	char *add_value[EGRESS_HTTP1_REWRITE_OPS_MAX]; /* secrets: wiped */
	size_t n_add;
	struct egress_http1_subst subst[EGRESS_HTTP1_REWRITE_OPS_MAX];
	size_t n_subst;
	struct plan_event {
		const struct egress_binding *b;
		const char *verdict, *reason;
	} ev[ICPT_SECRET_EVENTS_MAX];
	size_t n_ev;
	const struct egress_binding *sent[EGRESS_HTTP1_REWRITE_OPS_MAX]; /* whose value goes in this request */
	size_t n_sent;
};

static void plan_release(struct plan *pl)
{
	for (size_t i = 0; i < pl->n_add; i++) {
		OPENSSL_cleanse(pl->add_value[i], pl->add[i].value_len);
		free(pl->add_value[i]);
	}
	pl->n_add = 0;
}

static void plan_event(struct plan *pl, const struct egress_binding *b, const char *verdict, const char *reason)
{
	if (pl->n_ev < ICPT_SECRET_EVENTS_MAX)
		pl->ev[pl->n_ev++] = (struct plan_event){.b = b, .verdict = verdict, .reason = reason};
}

/* format with "{value}" replaced by the value: a new buffer (a secret). */
static char *format_value(const struct egress_binding *b, size_t *ret_len)
{
	const size_t mark = sizeof(POLICY_FORMAT_VALUE) - 1;
	const char *at = strstr(b->format, POLICY_FORMAT_VALUE);
	size_t pre = (size_t)(at - b->format), post = strlen(at + mark);
	size_t len = pre + b->value_len + post;
	char *v = xmalloc(len + 1);
	memcpy(v, b->format, pre);
	memcpy(v + pre, b->value, b->value_len);
	memcpy(v + pre + b->value_len, at + mark, post + 1);
	*ret_len = len;
	return v;
}

/* Is f one of the fields binding b's placeholder is replaced in? (The
 * rewriter decides the same way: names compared without case, exactly.) */
static bool binding_names_field(const struct egress_binding *b, const struct egress_http1_head *h,
                                const struct egress_http1_field *f)
{
	for (size_t k = 0; k < b->n_headers; k++) {
		if (egress_http_case_equal(egress_http1_span_ptr(h, f->name), f->name.len, b->headers[k],
		                           strlen(b->headers[k])))
			return true;
	}
	return false;
}

/* Adds what binding b does to a request it applies to. -E2BIG: more
 * operations than one rewrite takes. */
static int plan_binding(struct plan *pl, const struct egress_binding *b, const struct egress_http1_head *h)
{
	if (b->header) {
		if (pl->n_remove == EGRESS_HTTP1_REWRITE_OPS_MAX || pl->n_add == EGRESS_HTTP1_REWRITE_OPS_MAX)
			return -E2BIG;
		/* SECURITY: every client-sent field of that name goes first:
		 * the guest cannot add its own next to the real one. */
		pl->remove[pl->n_remove++] = b->header;
		size_t len;
		pl->add_value[pl->n_add] = format_value(b, &len);
		pl->add[pl->n_add] = (struct egress_http1_field_add){
		    .name = b->header, .value = pl->add_value[pl->n_add], .value_len = len};
		pl->n_add++;
		pl->sent[pl->n_sent++] = b;
		plan_event(pl, b, "substituted", NULL);
		return 0;
	}
	bool in_line = contains(h->raw + h->request_line.off, h->request_line.len, b->placeholder);
	bool in_bound = false, in_other = false;
	for (size_t i = 0; i < h->n_fields; i++) {
		const struct egress_http1_field *f = &h->fields[i];
		if (!contains(h->raw + f->value.off, f->value.len, b->placeholder))
			continue;
		if (binding_names_field(b, h, f))
			in_bound = true;
		else
			in_other = true;
	}
	if (in_bound) {
		if (pl->n_subst == EGRESS_HTTP1_REWRITE_OPS_MAX)
			return -E2BIG;
		pl->subst[pl->n_subst++] = (struct egress_http1_subst){.placeholder = b->placeholder,
		                                                       .placeholder_len = strlen(b->placeholder),
		                                                       .value = b->value,
		                                                       .value_len = b->value_len,
		                                                       .fields = (const char *const *)b->headers,
		                                                       .n_fields = b->n_headers};
		pl->sent[pl->n_sent++] = b;
		plan_event(pl, b, "substituted", NULL);
	}
	/* SECURITY (issue 17): only the fields the binding names get the
	 * value; one a server echoes back (Origin, Referer, a custom header)
	 * keeps the placeholder. Never the request line (it reaches logs and
	 * other hosts through redirects). */
	if (in_other)
		plan_event(pl, b, "not-substituted", "header not bound");
	if (in_line)
		plan_event(pl, b, "not-substituted", "not in a header field");
	return 0;
}

/* Issue 17: a request to a bound host. SECURITY: the server may reflect
 * what it receives; every value sent on the connection is redacted from
 * what comes back, and a request that carries one asks for an identity
 * encoding (a compressed body would hide a value from the matcher). The
 * redactor frames responses by the requests it was told of, so it must
 * exist from the first request on. -1: refused. */
static int redact_prepare(struct icpt *ic, struct plan *pl, bool bound_host, bool is_head,
                          const struct egress_request_shown *shown, const char *method)
{
	static const char *const accept_encoding = "Accept-Encoding";
	const char *why = NULL;
	if (bound_host && !ic->redact) {
		if (ic->forwarded > 0) {
			egress_requests_refuse(&ic->rq, 421, "Misdirected Request", shown, method, NULL,
			                       "a secret was bound to this host after the connection opened: retry "
			                       "on a new connection");
			return -1;
		}
		ic->redact = egress_redactor_new();
	}
	if (!ic->redact)
		return 0;
	for (size_t i = 0; !why && i < pl->n_sent; i++) {
		const struct egress_binding *b = pl->sent[i];
		int idx = egress_redactor_add_value(ic->redact, b->value, b->value_len);
		if (idx < 0)
			why = "more secrets on one connection than responses can be redacted for: retry on a new "
			      "connection";
		else if (!ic->redact_secret[idx])
			ic->redact_secret[idx] = xstrdup(b->secret);
	}
	if (!why && pl->n_sent > 0) {
		if (pl->n_remove + 3 > EGRESS_HTTP1_REWRITE_OPS_MAX || pl->n_add == EGRESS_HTTP1_REWRITE_OPS_MAX)
			why = "too many secrets apply";
		else {
			/* SECURITY: nor a range of it: the reflected value in
			 * pieces shorter than the matcher can tell, one per
			 * response, is the value. */
			pl->remove[pl->n_remove++] = "Range";
			pl->remove[pl->n_remove++] = "If-Range";
			pl->remove[pl->n_remove++] = accept_encoding;
			pl->add_value[pl->n_add] = xstrdup("identity");
			pl->add[pl->n_add++] = (struct egress_http1_field_add){
			    .name = accept_encoding, .value = pl->add_value[pl->n_add - 1], .value_len = 8};
		}
	}
	if (!why && egress_redactor_request(ic->redact, is_head, pl->n_sent > 0) < 0)
		why = "too many requests waiting for their responses";
	if (why) {
		egress_requests_refuse(&ic->rq, 503, "Service Unavailable", shown, method, NULL, why);
		return -1;
	}
	return 0;
}

/* EGRESS_HTTP1_EV_HEAD: check the request, rewrite it into ic->head. On
 * refusal ic->rq.refusing is set. */
static void on_head(struct icpt *ic)
{
	struct egress_conn *c = ic->rq.c;
	const struct egress_http1_head *h = egress_http1_parser_head(ic->rq.parser);
	const char *method = h->method;
	struct egress_request_shown shown;
	struct policy_host host;
	if (egress_requests_check_head(&ic->rq, h, &shown, &host) < 0)
		return;

	cleanup_egress_bindings struct egress_bindings *bs = egress_bindings_slot_get(&c->sb->bindings);
	const char *path = egress_http1_span_ptr(h, h->path);
	size_t path_len = h->path.len;
	if (path_len == 0 && h->form != EGRESS_HTTP1_ASTERISK_FORM) {
		path = "/";
		path_len = 1;
	}
	/* SECURITY: a prefix "/v1/" must not let "/v1/../admin" through. */
	bool bound_host = egress_bindings_name_host(bs, &host, NULL);
	if (bound_host && egress_path_safe(path, path_len) < 0) {
		egress_requests_refuse(&ic->rq, 400, "Bad Request", &shown, method, NULL,
		                       "a path with a \"..\" segment or an encoded '/', '.' or '\\' is refused");
		return;
	}
	struct plan pl = {0};
	int r = 0;
	for (size_t i = 0; r == 0 && i < egress_bindings_count(bs); i++) {
		const struct egress_binding *b = egress_bindings_get(bs, i);
		enum egress_binding_verdict v = egress_binding_check(b, &host, method, strlen(method), path, path_len);
		if (v == EGRESS_BINDING_APPLIES)
			r = plan_binding(&pl, b, h);
		else if (contains(h->raw, h->len, b->placeholder))
			plan_event(&pl, b, "not-substituted", egress_binding_verdict_reason(v));
	}
	bool is_head = egress_http_case_equal(method, strlen(method), "HEAD", 4);
	if (r == 0 && redact_prepare(ic, &pl, bound_host, is_head, &shown, method) < 0) {
		plan_release(&pl);
		return;
	}
	size_t len = 0;
	struct al_error err = {0};
	if (r == 0) {
		struct egress_http1_rewrite rw = {.remove = pl.remove,
		                                  .n_remove = pl.n_remove,
		                                  .add = pl.add,
		                                  .n_add = pl.n_add,
		                                  .subst = pl.subst,
		                                  .n_subst = pl.n_subst};
		r = egress_http1_head_rewrite(h, &rw, ic->head, EGRESS_HTTP1_OUT_MAX, &len, &err);
	}
	plan_release(&pl);
	if (r < 0) {
		/* SECURITY: the rewriter's messages never quote values. */
		char why[EGRESS_REQUEST_REASON_MAX];
		snprintf(why, sizeof(why), "the request cannot be given its secrets: %.100s",
		         err.message[0] ? err.message : "too many secrets apply");
		if (r == -E2BIG)
			egress_requests_refuse(&ic->rq, 431, "Request Header Fields Too Large", &shown, method, NULL,
			                       why);
		else
			egress_requests_refuse(&ic->rq, 502, "Bad Gateway", &shown, method, NULL, why);
		return;
	}
	for (size_t i = 0; i < pl.n_ev; i++)
		secret_event(c, "https", pl.ev[i].b, pl.ev[i].verdict, pl.ev[i].reason, method, shown.path);
	ic->rq.out = ic->head;
	ic->rq.out_len = len;
	ic->rq.out_off = 0;
	ic->out_secret = true;
	ic->forwarded++;
}

/* Feeds the parser once and acts on its event. */
static void parse_step(struct icpt *ic)
{
	size_t used = 0;
	int ev = egress_requests_feed(&ic->rq, &used);
	if (ev == EGRESS_HTTP1_EV_HEAD)
		on_head(ic);
	else if (ev == EGRESS_HTTP1_EV_BODY)
		ic->out_secret = false;
}

/* Our side toward the server is done: close_notify, then the TCP FIN (a
 * server answers what it has and closes). Best effort. */
static void upstream_half_close(struct icpt *ic)
{
	ERR_clear_error();
	SSL_shutdown(ic->u);
	shutdown(ic->rq.c->up, SHUT_WR);
	ic->u_shut = true;
}

/* ------------------------------------------------------------ the relay */

/* The refused request's answer, then the end; returns why (its reason). */
static const char *refusal_reply(struct icpt *ic)
{
	guest_reply(ic, ic->rq.status, ic->rq.status_text, ic->rq.reason);
	return ic->rq.reason;
}

/* guest -> server: writes what the parser let through (a head is wiped
 * once written). */
static const char *server_write(struct icpt *ic, struct icpt_round *rd)
{
	struct egress_requests *rq = &ic->rq;
	size_t n = 0;
	int r = io_write(ic->u, rq->out + rq->out_off, rq->out_len - rq->out_off, &n, &rd->uev);
	if (r < 0 || r == IO_EOF)
		return egress_io_failure(r, "writing to the server failed");
	if (r != IO_DONE)
		return NULL;
	rq->out_off += n;
	rq->c->bytes_up += n;
	rd->progress = true;
	if (rq->out_off == rq->out_len) {
		if (ic->out_secret)
			OPENSSL_cleanse(ic->head, rq->out_len);
		rq->out_len = rq->out_off = 0;
	}
	return NULL;
}

/* The guest's next plaintext into the (drained) input buffer. A read that
 * would block sets g_wait: the guest is not read again until poll says it
 * is ready. */
static const char *guest_read(struct icpt *ic, struct icpt_round *rd)
{
	size_t n = 0;
	short ev = 0;
	int r = io_read(ic->g, ic->rq.in, ICPT_CHUNK, &n, &ev);
	if (r < 0)
		return egress_io_failure(r, "reading from the guest failed");
	if (r == IO_DONE) {
		ic->rq.in_len = n;
		ic->rq.in_off = 0;
		rd->progress = true;
	} else if (r == IO_EOF) {
		ic->g_eof = true;
		rd->progress = true;
	} else if (ic->pb.off >= ic->pb.len) {
		ic->g_wait = ev; /* (bytes of the prefix are not in the socket) */
	} else {
		rd->gev |= ev;
	}
	return NULL;
}

/* Our side toward the server ends once the guest's has (between requests),
 * or once a request is refused: the server answers the requests before it,
 * then sees the end; with none before it, the refusal is answered now. */
static const char *server_end(struct icpt *ic, struct icpt_round *rd, bool drained)
{
	if (ic->u_shut)
		return NULL;
	if (ic->g_eof && drained) {
		if (!egress_http1_parser_idle(ic->rq.parser))
			return "the guest closed in the middle of a request";
		upstream_half_close(ic);
		rd->progress = true;
	}
	if (ic->rq.refusing && !ic->u_shut) {
		if (ic->forwarded == 0)
			return refusal_reply(ic);
		upstream_half_close(ic);
		rd->progress = true;
	}
	return NULL;
}

/* guest -> server: the pending output first; then the guest's bytes go
 * through the parser, one event at a time, while nothing waits to be
 * written; then the guest is read. */
static const char *to_server(struct icpt *ic, struct icpt_round *rd)
{
	struct egress_requests *rq = &ic->rq;
	const char *why = NULL;
	if (rq->out_off < rq->out_len && (why = server_write(ic, rd)))
		return why;
	while (!rq->refusing && rq->out_len == 0 && (rq->in_off < rq->in_len || rq->parse_pending)) {
		parse_step(ic);
		rd->progress = true;
	}
	bool drained = !rq->refusing && rq->out_len == 0 && rq->in_off == rq->in_len;
	if (drained && !ic->g_eof && !ic->g_wait && (why = guest_read(ic, rd)))
		return why;
	drained = !rq->refusing && rq->out_len == 0 && rq->in_off == rq->in_len;
	return server_end(ic, rd, drained);
}

/* server -> guest through the redactor (issue 17): its ready bytes first;
 * then the server's next plaintext goes in. A refused response (malformed,
 * compressed, over a limit) ends the connection once what was ready before
 * it reached the guest. */
static const char redact_failed[] = "the server's response was refused"; /* see redact_why */

static const char *to_guest_redacted(struct icpt *ic, struct icpt_round *rd)
{
	size_t n = 0;
	int r;
	const uint8_t *out;
	size_t ready = egress_redactor_ready(ic->redact, &out);
	rd->u_idle = ic->u_drained;
	if (ready > 0) {
		r = io_write(ic->g, out, ready, &n, &rd->gev);
		if (r < 0 || r == IO_EOF)
			return egress_io_failure(r, "writing to the guest failed");
		if (r == IO_DONE) {
			egress_redactor_sent(ic->redact, n);
			ic->rq.c->bytes_down += n;
			rd->progress = true;
		}
	} else if (!ic->u_eof && !ic->redact_fail && egress_redactor_room(ic->redact) >= ICPT_DOWN_CHUNK) {
		r = read_down(ic, &n, &rd->uev);
		if (r < 0)
			return egress_io_failure(r, "reading from the server failed");
		if (r == IO_DONE) {
			struct al_error err = {0};
			if (egress_redactor_feed(ic->redact, ic->down, n, &err) < 0) {
				snprintf(ic->redact_why, sizeof(ic->redact_why), "%.300s", err.message);
				ic->redact_fail = true;
			}
			ic->last_down_ms = now_ms_monotonic();
			rd->progress = true;
		} else if (r == IO_EOF) {
			egress_redactor_finish(ic->redact);
			ic->u_eof = true;
			rd->progress = true;
		} else {
			rd->u_idle = true;
		}
	}
	ready = egress_redactor_ready(ic->redact, &out);
	if (ready == 0 && (rd->u_idle || ic->u_eof || ic->redact_fail)) {
		r = guest_flush(ic, &rd->gev);
		if (r < 0)
			return egress_io_failure(r, "writing to the guest failed");
		if (r == IO_DONE && ic->redact_fail)
			return redact_failed;
	}
	return NULL;
}

/* server -> guest: unchanged. The records go through g's write buffer,
 * sent when it is full and whenever the server has nothing more for now
 * (never held while we wait). */
static const char *to_guest(struct icpt *ic, struct icpt_round *rd)
{
	size_t n = 0;
	int r;
	if (ic->redact)
		return to_guest_redacted(ic, rd);
	rd->u_idle = ic->u_drained;
	if (ic->down_off < ic->down_len) {
		r = io_write(ic->g, ic->down + ic->down_off, ic->down_len - ic->down_off, &n, &rd->gev);
		if (r < 0 || r == IO_EOF)
			return egress_io_failure(r, "writing to the guest failed");
		if (r == IO_DONE) {
			ic->down_off += n;
			ic->rq.c->bytes_down += n;
			rd->progress = true;
			if (ic->down_off == ic->down_len)
				ic->down_len = ic->down_off = 0;
		}
	} else if (!ic->u_eof) {
		r = read_down(ic, &n, &rd->uev);
		if (r < 0)
			return egress_io_failure(r, "reading from the server failed");
		if (r == IO_DONE) {
			ic->down_len = n;
			ic->down_off = 0;
			ic->last_down_ms = now_ms_monotonic();
			rd->progress = true;
		} else if (r == IO_EOF) {
			ic->u_eof = true;
			rd->progress = true;
		} else {
			rd->u_idle = true;
		}
	}
	if (ic->down_off == ic->down_len && (rd->u_idle || ic->u_eof)) {
		r = guest_flush(ic, &rd->gev);
		if (r < 0)
			return egress_io_failure(r, "writing to the guest failed");
	}
	return NULL;
}

/* Does the relay end at now? The server is done and all of it reached the
 * guest; or, after a refusal, the earlier requests' answers had their
 * chance (the server went quiet, or took too long). */
static const char *relay_end(struct icpt *ic, uint64_t now)
{
	const uint8_t *out;
	bool held = ic->redact && egress_redactor_ready(ic->redact, &out) > 0;
	if (ic->u_eof && ic->down_len == 0 && !held && BIO_wpending(ic->g_wbuf) == 0) {
		if (ic->rq.refusing)
			return refusal_reply(ic);
		ERR_clear_error();
		SSL_shutdown(ic->g);
		return "closed";
	}
	if (ic->rq.refusing) {
		uint64_t quiet_since = MAX(ic->last_down_ms, ic->rq.refuse_ms);
		if (now >= quiet_since + ICPT_REFUSE_QUIET_MS || now >= ic->rq.refuse_ms + ICPT_REFUSE_MAX_MS)
			return refusal_reply(ic);
	}
	return NULL;
}

/* After a round: the time limits, then either the next round at once
 * (something moved; a guest we stopped reading is polled every
 * ICPT_BUSY_ROUNDS such rounds) or a wait until a socket is ready or a
 * deadline passes. */
static const char *relay_wait(struct icpt *ic, struct icpt_round *rd, uint64_t now)
{
	const char *expired = egress_conn_timer_check(&ic->timer, now, rd->progress);
	if (expired)
		return expired;
	struct egress_conn *c = ic->rq.c;
	if (rd->progress) {
		if (ic->g_wait && ++ic->busy >= ICPT_BUSY_ROUNDS) {
			struct pollfd gp = {.fd = c->fd, .events = ic->g_wait};
			if (poll(&gp, 1, 0) > 0)
				ic->g_wait = 0;
			ic->busy = 0;
		}
		return NULL;
	}
	ic->busy = 0;
	short gev = rd->gev | ic->g_wait, uev = rd->uev;
	uint64_t wake = egress_conn_timer_wake(&ic->timer);
	if (ic->rq.refusing)
		wake = MIN(wake, MAX(ic->last_down_ms, ic->rq.refuse_ms) + ICPT_REFUSE_QUIET_MS);
	struct pollfd p[2] = {
	    {.fd = gev ? c->fd : -1, .events = gev},
	    {.fd = uev ? c->up : -1, .events = uev},
	};
	if (!gev && !uev)
		return "relay stalled"; /* cannot happen: something always waits */
	uint64_t left = wake > now ? wake - now : 0;
	if (poll(p, 2, (int)MIN(left, (uint64_t)INT32_MAX)) < 0 && errno != EINTR)
		return "relay error";
	if (p[0].revents)
		ic->g_wait = 0;
	return NULL;
}

/* Relays until the connection ends; returns why (for the close event).
 * Each round moves what can move without blocking, guest -> server first,
 * and waits only when nothing moved. The guest is not read again after a
 * read that would block (a recv per round of a download) until poll says
 * it is ready: when we wait, or every ICPT_BUSY_ROUNDS busy rounds. */
static const char *pump(struct icpt *ic)
{
	egress_conn_timer_start(&ic->timer, ic->rq.c);
	for (;;) {
		struct icpt_round rd = {0};
		const char *why;
		if ((why = to_server(ic, &rd)) || (why = to_guest(ic, &rd)))
			return why;
		uint64_t now = now_ms_monotonic();
		if ((why = relay_end(ic, now)) || (why = relay_wait(ic, &rd, now)))
			return why;
	}
}

/* "network.secret" "redacted": how often each value sent on the connection
 * came back from the server and was masked (issue 17). */
static void redact_events(struct icpt *ic)
{
	struct egress_conn *c = ic->rq.c;
	for (int i = 0; ic->redact && i < EGRESS_REDACT_VALUES_MAX && ic->redact_secret[i]; i++) {
		uint64_t n = egress_redactor_count(ic->redact, i);
		if (n == 0)
			continue;
		json_t *d = json_pack("{sssssssssIsn}", "proto", "https", "host", c->host.name, "secret",
		                      ic->redact_secret[i], "verdict", "redacted", "count", (json_int_t)n, "reason");
		if (!d)
			abort();
		egress_event(c->sb, "network.secret", d);
	}
}

/* TLS toward the guest with a leaf for the SNI, the ClientHello bytes
 * already read going first. */
static int guest_accept(struct icpt *ic, char *reason, size_t reason_size)
{
	struct egress_conn *c = ic->rq.c;
	cleanup_x509 X509 *leaf = NULL;
	cleanup_evp_pkey EVP_PKEY *key = NULL;
	if (egress_ca_leaf(c->ca, c->host.name, time(NULL), &leaf, &key, NULL) < 0) {
		snprintf(reason, reason_size, "issuing a certificate for %s failed", c->host.name);
		return -EIO;
	}
	ic->g = SSL_new(c->rt->tls_guest);
	cleanup_bio BIO *rb = BIO_new(prefix_method);
	cleanup_bio BIO *wb = BIO_new_socket(c->fd, BIO_NOCLOSE);
	cleanup_bio BIO *fb = BIO_new(BIO_f_buffer());
	if (!ic->g || !rb || !wb || !fb || BIO_set_write_buffer_size(fb, ICPT_GUEST_WBUF) != 1 ||
	    SSL_use_certificate(ic->g, leaf) != 1 || SSL_use_PrivateKey(ic->g, key) != 1) {
		snprintf(reason, reason_size, "TLS toward the guest: %s", openssl_reason());
		return -EIO;
	}
	ic->pb = (struct prefix_bio){.buf = c->buf, .len = c->len, .fd = c->fd};
	BIO_set_data(rb, &ic->pb);
	BIO_set_init(rb, 1);
	/* ic->g owns the BIOs from here: rb, and fb with wb under it. */
	ic->g_wbuf = BIO_push(TAKE_PTR(fb), TAKE_PTR(wb));
	SSL_set_bio(ic->g, TAKE_PTR(rb), ic->g_wbuf);
	SSL_set_accept_state(ic->g);
	int r = handshake(ic->g, c->fd, now_ms_monotonic() + ICPT_HANDSHAKE_MS);
	if (r < 0)
		snprintf(reason, reason_size, "TLS handshake with the guest: %s",
		         r == -ETIMEDOUT ? "timed out" : openssl_reason());
	return r;
}

/* TLS toward the server, verified against the trust store, name = SNI. */
static int upstream_connect(struct icpt *ic, char *reason, size_t reason_size)
{
	struct egress_conn *c = ic->rq.c;
	ic->u = SSL_new(c->rt->tls_upstream);
	if (!ic->u || SSL_set_fd(ic->u, c->up) != 1 || SSL_set_tlsext_host_name(ic->u, c->host.name) != 1) {
		snprintf(reason, reason_size, "TLS toward the server: %s", openssl_reason());
		return -EIO;
	}
	/* SECURITY: the certificate must name the host the guest asked for
	 * (no partial wildcards such as "f*.example.com"). */
	SSL_set_hostflags(ic->u, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	if (SSL_set1_host(ic->u, c->host.name) != 1) {
		snprintf(reason, reason_size, "TLS toward the server: %s", openssl_reason());
		return -EIO;
	}
	SSL_set_connect_state(ic->u);
	int r = handshake(ic->u, c->up, now_ms_monotonic() + ICPT_HANDSHAKE_MS);
	if (r < 0) {
		long v = SSL_get_verify_result(ic->u);
		if (v != X509_V_OK)
			snprintf(reason, reason_size, "upstream certificate: %s", X509_verify_cert_error_string(v));
		else
			snprintf(reason, reason_size, "upstream TLS handshake: %s",
			         r == -ETIMEDOUT ? "timed out" : openssl_reason());
	}
	return r;
}

const char *egress_intercept_run(struct egress_conn *c, char *reason, size_t reason_size)
{
	cleanup_icpt struct icpt ic = {.rq = {.c = c}};
	if (guest_accept(&ic, reason, reason_size) < 0)
		return reason;
	if (upstream_connect(&ic, reason, reason_size) < 0) {
		char body[EGRESS_REQUEST_REASON_MAX + 128];
		snprintf(body, sizeof(body), "cannot open a verified TLS connection to %s (%.100s)", c->host.name,
		         reason);
		guest_reply(&ic, 502, "Bad Gateway", body);
		return reason;
	}
	ic.rq.parser = egress_http1_parser_new();
	ic.rq.in = xmalloc(ICPT_CHUNK);
	ic.down = xmalloc(ICPT_DOWN_CHUNK);
	ic.head = xmalloc(EGRESS_HTTP1_OUT_MAX);
	const char *why = pump(&ic);
	redact_events(&ic);
	/* It may live in ic: the caller gets a copy. */
	snprintf(reason, reason_size, "%s", why == redact_failed ? ic.redact_why : why);
	return reason;
}
