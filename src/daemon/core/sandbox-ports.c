/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's ports reached from outside (docs/api.md, "Ports"): the list
 * of exposed ports in its record, the traffic token, and the dial the
 * proxy and port-forward use: a socket made in the sandbox's namespace
 * (netns_guest_socket) connected to the guest. The guest gets no route
 * out of it and its egress policy does not change: the connection is the
 * host's, begun from the namespace's side. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "events.h"
#include "log.h"
#include "airlock/proto.h"
#include "secrets.h"
#include "util.h"
#include "sandbox-internal.h"

#define TRAFFIC_TOKEN_PURPOSE "airlock sandbox traffic token v1"

int sandbox_traffic_token(const char *tenant, const char *id, char ret[TRAFFIC_TOKEN_LEN + 1])
{
	uint8_t mac[SECRET_MAC_BYTES];
	int r = secret_key_mac(TRAFFIC_TOKEN_PURPOSE, tenant, id, mac);
	if (r < 0)
		return r;
	size_t o = strlcpy_al(ret, TRAFFIC_TOKEN_PREFIX, TRAFFIC_TOKEN_LEN + 1);
	for (size_t i = 0; i < sizeof(mac) && o + 2 * i + 2 <= TRAFFIC_TOKEN_LEN; i++)
		snprintf(ret + o + 2 * i, 3, "%02x", mac[i]);
	explicit_bzero(mac, sizeof(mac));
	return 0;
}

/* SECURITY: token comes from any client of the proxy; it is compared
 * whole, in constant time, with the one made for (tenant, id). */
bool sandbox_traffic_token_check(const char *tenant, const char *id, const char *token)
{
	if (!token || strlen(token) != TRAFFIC_TOKEN_LEN)
		return false;
	char want[TRAFFIC_TOKEN_LEN + 1];
	if (sandbox_traffic_token(tenant, id, want) < 0)
		return false;
	bool ok = CRYPTO_memcmp(want, token, TRAFFIC_TOKEN_LEN) == 0;
	explicit_bzero(want, sizeof(want));
	return ok;
}

static int port_find(const struct sandbox_record *rec, unsigned port)
{
	for (unsigned i = 0; i < rec->n_ports && i < SANDBOX_RECORD_PORTS_MAX; i++)
		if (rec->ports[i].port == port)
			return (int)i;
	return -1;
}

int sandbox_port_target(const char *id, unsigned port, struct port_target *ret, struct al_error *err)
{
	struct sandbox *sb = sb_registry_find(id);
	struct sandbox_record rec;
	if (sb) {
		sb_record_copy_out(sb, &rec);
		sandbox_unref(sb);
	} else {
		int r = sb_store_get_visible(id, NULL, &rec, err);
		if (r < 0)
			return r;
	}
	if (rec.state == SANDBOX_DELETED) {
		sandbox_record_release(&rec);
		return sb_not_found(id, err);
	}
	struct port_target t = {.state = rec.state, .auto_resume = rec.auto_resume};
	strlcpy_al(t.tenant, rec.tenant, sizeof(t.tenant));
	int i = port_find(&rec, port);
	t.exposed = i >= 0;
	t.public_port = i >= 0 && rec.ports[i].public_port;
	sandbox_record_release(&rec);
	*ret = t;
	return 0;
}

/* A running sandbox for a dial: a paused one is resumed when its
 * auto_resume is on (an event says the traffic did it). */
static int running_for_dial(const char *id, struct sandbox **ret, struct al_error *err)
{
	static const char needs[] = "its ports answer only while it runs";
	struct sandbox *sb = NULL;
	int r = sb_find_live(id, NULL, needs, &sb, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sb->lock);
	enum sandbox_state st = sb->rec.state;
	bool auto_resume = sb->rec.auto_resume;
	pthread_mutex_unlock(&sb->lock);
	if (st == SANDBOX_PAUSED && auto_resume) {
		struct sandbox_record rec;
		uint64_t t0 = now_ms_monotonic();
		r = sandbox_resume(id, NULL, &rec, err);
		if (r < 0) {
			sandbox_unref(sb);
			al_error_prefix(err, "resuming %s for traffic to it", id);
			return r;
		}
		events_emit("sandbox.auto_resumed", rec.tenant, id,
		            json_pack("{s:I}", "resume_ms", (json_int_t)(now_ms_monotonic() - t0)));
		sandbox_record_release(&rec);
		pthread_mutex_lock(&sb->lock);
		st = sb->rec.state;
		pthread_mutex_unlock(&sb->lock);
	} else if (st == SANDBOX_PAUSED) {
		sandbox_unref(sb);
		return al_error_set(err, AL_ERR_CONFLICT, EBUSY,
		                    "sandbox %s is paused: resume it (POST /v1/sandboxes/%s/resume), or set its "
		                    "auto_resume so that traffic resumes it",
		                    id, id);
	}
	if (st != SANDBOX_RUNNING) {
		sandbox_unref(sb);
		return al_error_set(err, AL_ERR_CONFLICT, EBUSY, "sandbox %s is %s: %s", id, sandbox_state_name(st),
		                    needs);
	}
	*ret = sb;
	return 0;
}

/* Waits for a non-blocking connect to the guest to finish. */
static int connect_wait(int fd, unsigned port, const char *id, unsigned timeout_ms, struct al_error *err)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, AIRLOCK_NET_GUEST_ADDR, &sin.sin_addr);
	int e = 0;
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		if (errno != EINPROGRESS)
			e = errno;
		else {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int n;
			while ((n = poll(&p, 1, (int)timeout_ms)) < 0 && errno == EINTR)
				;
			if (n == 0)
				return al_error_set(err, AL_ERR_TIMEOUT, ETIMEDOUT,
				                    "port %u of sandbox %s did not answer within %u ms", port, id,
				                    timeout_ms);
			socklen_t len = sizeof(e);
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
				e = errno;
		}
	}
	if (e == ECONNREFUSED)
		return al_error_set(err, AL_ERR_GUEST, e,
		                    "nothing listens on port %u of sandbox %s (a server must listen on 0.0.0.0 or "
		                    "%s, not only on 127.0.0.1)",
		                    port, id, AIRLOCK_NET_GUEST_ADDR);
	if (e)
		return al_error_set(err, AL_ERR_GUEST, e, "port %u of sandbox %s: connect: %s", port, id, strerror(e));
	return 0;
}

/* Registers fd, a connection to sb's guest, so that stopping the sandbox
 * (or the daemon) hangs it up; refused once the sandbox is stopping. */
static int conn_register(struct sandbox *sb, int fd, const char *id, struct al_error *err)
{
	int r = 0;
	pthread_mutex_lock(&sb->lock);
	if (sb->stopping || sb->ports_hung_up)
		r = al_error_set(err, AL_ERR_CONFLICT, EBUSY, "sandbox %s is being stopped", id);
	else if (sb->n_port_fds >= SANDBOX_PORT_CONNS_MAX)
		r = al_error_set(err, AL_ERR_UNAVAILABLE, EMFILE,
		                 "sandbox %s has %u connections to its ports open, the most it may; try again when "
		                 "some have ended",
		                 id, SANDBOX_PORT_CONNS_MAX);
	else {
		if (sb->n_port_fds == sb->cap_port_fds) {
			sb->cap_port_fds = sb->cap_port_fds ? sb->cap_port_fds * 2 : 8;
			sb->port_fds = xrealloc(sb->port_fds, sb->cap_port_fds * sizeof(*sb->port_fds));
		}
		sb->port_fds[sb->n_port_fds++] = fd;
	}
	pthread_mutex_unlock(&sb->lock);
	return r;
}

int sandbox_port_dial(const char *id, unsigned port, unsigned timeout_ms, int *ret_fd, struct al_error *err)
{
	if (port < 1 || port > 65535)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "port %u: must be 1-65535", port);
	struct sandbox *sb = NULL;
	int r = running_for_dial(id, &sb, err);
	if (r < 0)
		return r;
	/* The namespace's fd is the sandbox's; a copy keeps it open while a
	 * delete tears the sandbox down. */
	pthread_mutex_lock(&sb->lock);
	cleanup_close int ns = sb->net.ns_fd >= 0 ? fcntl(sb->net.ns_fd, F_DUPFD_CLOEXEC, 0) : -1;
	sb->last_activity_ms = now_ms_monotonic();
	pthread_mutex_unlock(&sb->lock);
	cleanup_close int fd = -1;
	if (ns < 0)
		r = al_error_set(err, AL_ERR_CONFLICT, EBUSY, "sandbox %s has no network namespace now", id);
	if (r == 0)
		r = netns_guest_socket(ns, &fd, err);
	if (r == 0)
		r = connect_wait(fd, port, id, timeout_ms, err);
	int fl = r == 0 ? fcntl(fd, F_GETFL) : 0;
	if (r == 0 && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "port %u of sandbox %s: fcntl: %m", port, id);
	if (r == 0)
		r = conn_register(sb, fd, id, err);
	sandbox_unref(sb);
	if (r < 0)
		return r;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	*ret_fd = TAKE_FD(fd);
	return 0;
}

void sandbox_port_close(const char *id, int fd)
{
	struct sandbox *sb = sb_registry_find(id);
	if (sb) {
		pthread_mutex_lock(&sb->lock);
		for (unsigned i = 0; i < sb->n_port_fds; i++)
			if (sb->port_fds[i] == fd) {
				sb->port_fds[i] = sb->port_fds[--sb->n_port_fds];
				break;
			}
		pthread_mutex_unlock(&sb->lock);
		sandbox_unref(sb);
	}
	close(fd);
}

/* SECURITY: a connection to a guest must not outlive its sandbox (a
 * deleted VM's port would otherwise hold a tunnel, and the daemon's stop,
 * for as long as its client likes). shutdown() wakes whoever relays it;
 * the fd stays theirs to close (sandbox_port_close). */
void sb_ports_hang_up(struct sandbox *sb, bool for_good)
{
	pthread_mutex_lock(&sb->lock);
	for (unsigned i = 0; i < sb->n_port_fds; i++)
		shutdown(sb->port_fds[i], SHUT_RDWR);
	sb->n_port_fds = 0;
	sb->ports_hung_up |= for_good;
	pthread_mutex_unlock(&sb->lock);
}

void sandbox_ports_hang_up_all(void)
{
	pthread_mutex_lock(&sb_registry_lock);
	for (struct sandbox *sb = sb_registry; sb; sb = sb->next)
		sb_ports_hang_up(sb, true);
	pthread_mutex_unlock(&sb_registry_lock);
}

/* The counters of port in sb (a new entry while there is room; under
 * sb->lock). */
static struct port_stats *stats_of(struct sandbox *sb, unsigned port)
{
	for (unsigned i = 0; i < sb->n_port_stats; i++)
		if (sb->port_stats[i].port == port)
			return &sb->port_stats[i];
	if (sb->n_port_stats >= SANDBOX_PORT_STATS_MAX)
		return NULL;
	unsigned i = sb->n_port_stats++;
	sb->port_stats[i] = (struct port_stats){.port = (uint16_t)port};
	sb->port_reported[i] = (struct port_traffic){0};
	sb->port_reported_ms[i] = 0;
	return &sb->port_stats[i];
}

/* A `port.traffic` event per port that had traffic since its last one, at
 * most every PORT_EVENT_PERIOD_MS (the reaper's thread; under the
 * registry's lock): the counts since then, so that the event log tells a
 * port's use over time without an event per request. */
#define PORT_EVENT_PERIOD_MS 10000
size_t sb_port_events_due(struct sandbox *sb, struct port_event *out, size_t max)
{
	size_t n = 0;
	uint64_t now = now_ms_monotonic();
	pthread_mutex_lock(&sb->lock);
	for (unsigned i = 0; i < sb->n_port_stats && n < max; i++) {
		struct port_stats *s = &sb->port_stats[i];
		struct port_traffic *r = &sb->port_reported[i];
		bool moved = memcmp(&s->t, r, sizeof(*r)) != 0;
		if (!moved || now - sb->port_reported_ms[i] < PORT_EVENT_PERIOD_MS)
			continue;
		out[n].port = s->port;
		out[n].t = (struct port_traffic){.requests = s->t.requests - r->requests,
		                                 .bytes_in = s->t.bytes_in - r->bytes_in,
		                                 .bytes_out = s->t.bytes_out - r->bytes_out,
		                                 .errors = s->t.errors - r->errors};
		strlcpy_al(out[n].id, sb->rec.id, sizeof(out[n].id));
		strlcpy_al(out[n].tenant, sb->rec.tenant, sizeof(out[n].tenant));
		n++;
		*r = s->t;
		sb->port_reported_ms[i] = now;
	}
	pthread_mutex_unlock(&sb->lock);
	return n;
}

void sb_port_events_emit(const struct port_event *e, size_t n)
{
	for (size_t i = 0; i < n; i++)
		events_emit("port.traffic", e[i].tenant, e[i].id,
		            json_pack("{s:i, s:I, s:I, s:I, s:I}", "port", (int)e[i].port, "requests",
		                      (json_int_t)e[i].t.requests, "bytes_in", (json_int_t)e[i].t.bytes_in, "bytes_out",
		                      (json_int_t)e[i].t.bytes_out, "errors", (json_int_t)e[i].t.errors));
}

void sandbox_port_traffic(const char *id, unsigned port, const struct port_traffic *t)
{
	struct sandbox *sb = sb_registry_find(id);
	if (!sb)
		return;
	pthread_mutex_lock(&sb->lock);
	struct port_stats *s = stats_of(sb, port);
	if (s) {
		s->t.requests += t->requests;
		s->t.bytes_in += t->bytes_in;
		s->t.bytes_out += t->bytes_out;
		s->t.errors += t->errors;
	}
	sb->last_activity_ms = now_ms_monotonic();
	pthread_mutex_unlock(&sb->lock);
	sandbox_unref(sb);
}

/* Adds (expose) or takes out port of the record's list; under sb->lock.
 * 0 when the list changed, else an error naming why. */
static int ports_edit_locked(struct sandbox *sb, unsigned port, bool expose, bool public_port, struct al_error *err)
{
	struct sandbox_record *rec = &sb->rec;
	int i = port_find(rec, port);
	if (!expose && i < 0)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "sandbox %s does not expose port %u", rec->id, port);
	if (expose && i < 0 && rec->n_ports >= SANDBOX_RECORD_PORTS_MAX)
		return al_error_set(err, AL_ERR_CONFLICT, ENOSPC,
		                    "sandbox %s exposes %u ports already, the most it may: remove one first "
		                    "(DELETE /v1/sandboxes/%s/ports/PORT)",
		                    rec->id, SANDBOX_RECORD_PORTS_MAX, rec->id);
	if (expose) {
		if (i < 0)
			i = (int)rec->n_ports++;
		rec->ports[i] = (struct sandbox_port){.port = (uint16_t)port, .public_port = public_port};
	} else {
		memmove(&rec->ports[i], &rec->ports[i + 1], (rec->n_ports - (unsigned)i - 1) * sizeof(rec->ports[0]));
		rec->n_ports--;
	}
	return 0;
}

/* An expose or unexpose: the list changed and persisted (or left as it
 * was), an event, the record for the answer. */
static int ports_change(const char *id, const char *tenant, unsigned port, bool expose, bool public_port,
                        struct sandbox_record *ret, struct al_error *err)
{
	if (port < 1 || port > 65535)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "port %u: must be 1-65535", port);
	struct sandbox *sb = NULL;
	int r = sb_find_live(id, tenant, "", &sb, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sb->lock);
	struct sandbox_port saved[SANDBOX_RECORD_PORTS_MAX];
	unsigned saved_n = sb->rec.n_ports;
	memcpy(saved, sb->rec.ports, sizeof(saved));
	if ((r = ports_edit_locked(sb, port, expose, public_port, err)) == 0 && (r = sb_persist_locked(sb, err)) < 0) {
		sb->rec.n_ports = saved_n;
		memcpy(sb->rec.ports, saved, sizeof(saved));
	}
	if (r == 0) {
		json_t *data = expose ? json_pack("{s:i, s:b}", "port", (int)port, "public", public_port)
		                      : json_pack("{s:i}", "port", (int)port);
		events_emit(expose ? "port.exposed" : "port.unexposed", sb->rec.tenant, id, data);
		sandbox_record_copy(ret, &sb->rec);
	}
	pthread_mutex_unlock(&sb->lock);
	sandbox_unref(sb);
	return r;
}

int sandbox_port_expose(const char *id, const char *tenant, unsigned port, bool public_port, struct sandbox_record *ret,
                        struct al_error *err)
{
	return ports_change(id, tenant, port, true, public_port, ret, err);
}

int sandbox_port_unexpose(const char *id, const char *tenant, unsigned port, struct sandbox_record *ret,
                          struct al_error *err)
{
	return ports_change(id, tenant, port, false, false, ret, err);
}

int sandbox_ports_stats(const char *id, const char *tenant, struct port_stats ret[SANDBOX_PORT_STATS_MAX],
                        unsigned *ret_n, struct al_error *err)
{
	struct sandbox *sb = NULL;
	int r = sb_find_live(id, tenant, "", &sb, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sb->lock);
	memcpy(ret, sb->port_stats, sb->n_port_stats * sizeof(*ret));
	*ret_n = sb->n_port_stats;
	pthread_mutex_unlock(&sb->lock);
	sandbox_unref(sb);
	return 0;
}

void sandbox_ports_stats_each(void (*fn)(const char *id, const char *tenant, const struct port_stats *s, void *arg),
                              void *arg)
{
	pthread_mutex_lock(&sb_registry_lock);
	for (struct sandbox *sb = sb_registry; sb; sb = sb->next) {
		pthread_mutex_lock(&sb->lock);
		for (unsigned i = 0; i < sb->n_port_stats; i++)
			fn(sb->rec.id, sb->rec.tenant, &sb->port_stats[i], arg);
		pthread_mutex_unlock(&sb->lock);
	}
	pthread_mutex_unlock(&sb_registry_lock);
}
