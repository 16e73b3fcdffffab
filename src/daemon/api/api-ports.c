/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's ports (docs/api.md, "Ports"): the list of exposed ports
 * (GET, PUT and DELETE .../ports[/{port}]), their URLs on the proxy, and
 * the tunnel of `airlock port-forward` (GET .../ports/{port}/connect, an
 * HTTP upgrade to plain TCP). /metrics gets their series from
 * ports_metrics_text. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api-handlers.h"
#include "fd-relay.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "util.h"

#define PORT_CONNECT_TIMEOUT_MS 10000
#define PORT_FORWARD_PROTOCOL "airlock-tcp/1"
/* A tunnel nothing crosses for this long is closed (as the proxy's). */
#define PORT_FORWARD_IDLE_MS (3600u * 1000u)

void api_port_urls(const char *id, unsigned port, char *url, size_t url_size, char *path_url, size_t path_size)
{
	const char *domain = api_config()->proxy_domain;
	if (!domain) {
		url[0] = path_url[0] = 0;
		return;
	}
	snprintf(url, url_size, "http://%u-%s.%s/", port, id, domain);
	snprintf(path_url, path_size, "http://%s/sandbox/%s/%u/", domain, id, port);
}

/* The `port` path parameter: 1-65535, digits only. */
static int port_param(const char *s, unsigned *ret, struct api_response *resp)
{
	unsigned long v = 0;
	size_t n = strlen(s);
	bool ok = n >= 1 && n <= 5;
	for (size_t i = 0; ok && i < n; i++) {
		ok = s[i] >= '0' && s[i] <= '9';
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (!ok || v < 1 || v > 65535) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "port \"%.16s\": must be a number 1-65535", s);
		return -EINVAL;
	}
	*ret = (unsigned)v;
	return 0;
}

static json_t *port_json(const char *id, unsigned port, bool exposed, bool public_port, const struct port_stats *s)
{
	char url[512], path_url[512];
	api_port_urls(id, port, url, sizeof(url), path_url, sizeof(path_url));
	json_t *o = json_pack("{s:i, s:b, s:b, s:s?, s:s?}", "port", (int)port, "exposed", exposed, "public",
	                      public_port, "url", url[0] ? url : NULL, "path_url", path_url[0] ? path_url : NULL);
	if (!o)
		abort();
	struct port_traffic t = s ? s->t : (struct port_traffic){0};
	json_object_set_new(o, "requests", json_integer((json_int_t)t.requests));
	json_object_set_new(o, "bytes_in", json_integer((json_int_t)t.bytes_in));
	json_object_set_new(o, "bytes_out", json_integer((json_int_t)t.bytes_out));
	json_object_set_new(o, "errors", json_integer((json_int_t)t.errors));
	return o;
}

json_t *api_ports_json(const struct sandbox_record *r)
{
	json_t *arr = json_array();
	for (unsigned i = 0; i < r->n_ports && i < SANDBOX_RECORD_PORTS_MAX; i++) {
		char url[512], path_url[512];
		api_port_urls(r->id, r->ports[i].port, url, sizeof(url), path_url, sizeof(path_url));
		json_array_append_new(arr, json_pack("{s:i, s:b, s:s?}", "port", (int)r->ports[i].port, "public",
		                                     r->ports[i].public_port, "url", url[0] ? url : NULL));
	}
	return arr;
}

static const struct port_stats *stats_find(const struct port_stats *v, unsigned n, unsigned port)
{
	for (unsigned i = 0; i < n; i++)
		if (v[i].port == port)
			return &v[i];
	return NULL;
}

/* {"ports": [...], "traffic_token", "auto_resume", "proxy"}: the exposed
 * ports, then the others that had traffic. */
static void answer_ports(const struct api_request *req, const struct sandbox_record *r, struct api_response *resp)
{
	struct port_stats stats[SANDBOX_PORT_STATS_MAX];
	unsigned n = 0;
	struct al_error err = {0};
	if (sandbox_ports_stats(r->id, req->tenant, stats, &n, &err) < 0)
		n = 0; /* not live: no counters */
	json_t *arr = json_array();
	for (unsigned i = 0; i < r->n_ports && i < SANDBOX_RECORD_PORTS_MAX; i++)
		json_array_append_new(arr, port_json(r->id, r->ports[i].port, true, r->ports[i].public_port,
		                                     stats_find(stats, n, r->ports[i].port)));
	for (unsigned i = 0; i < n; i++) {
		bool listed = false;
		for (unsigned k = 0; k < r->n_ports && !listed; k++)
			listed = r->ports[k].port == stats[i].port;
		if (!listed)
			json_array_append_new(arr, port_json(r->id, stats[i].port, false, false, &stats[i]));
	}
	char token[TRAFFIC_TOKEN_LEN + 1];
	if (sandbox_traffic_token(r->tenant, r->id, token) < 0) {
		json_decref(arr);
		api_response_errorf(resp, AL_ERR_INTERNAL, "the traffic token of %s could not be made", r->id);
		return;
	}
	resp->body = json_pack("{s:o, s:s, s:b, s:b}", "ports", arr, "traffic_token", token, "auto_resume",
	                       r->auto_resume, "proxy", api_config()->proxy_domain != NULL);
	explicit_bzero(token, sizeof(token));
	if (!resp->body)
		abort();
}

API_HANDLER(api_ports_list)
{
	struct al_error err = {0};
	struct sandbox_record r;
	if (sandbox_get(req->params[0], req->tenant, &r, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	answer_ports(req, &r, resp);
	sandbox_record_release(&r);
}

/* The body of PUT .../ports/{port}: empty, or {"public": bool}. */
static int public_parse(const struct api_request *req, bool *ret, struct api_response *resp)
{
	*ret = false;
	if (!req->body_len)
		return 0;
	json_error_t je;
	cleanup_json json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je);
	const char *key;
	json_t *v;
	if (!json_is_object(j)) {
		api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT, "the body must be a JSON object {\"public\": bool}");
		return -EINVAL;
	}
	json_object_foreach (j, key, v) {
		if (strcmp(key, "public") || !json_is_boolean(v)) {
			api_response_errorf(resp, AL_ERR_INVALID_ARGUMENT,
			                    "\"%.64s\": the body takes only \"public\": true or false", key);
			return -EINVAL;
		}
		*ret = json_is_true(v);
	}
	return 0;
}

API_HANDLER(api_port_put)
{
	unsigned port;
	bool pub;
	if (port_param(req->params[1], &port, resp) < 0 || public_parse(req, &pub, resp) < 0)
		return;
	struct al_error err = {0};
	struct sandbox_record r;
	if (sandbox_port_expose(req->params[0], req->tenant, port, pub, &r, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	answer_ports(req, &r, resp);
	sandbox_record_release(&r);
}

API_HANDLER(api_port_delete)
{
	unsigned port;
	if (port_param(req->params[1], &port, resp) < 0)
		return;
	struct al_error err = {0};
	struct sandbox_record r;
	if (sandbox_port_unexpose(req->params[0], req->tenant, port, &r, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	answer_ports(req, &r, resp);
	sandbox_record_release(&r);
}

/* ---- port-forward: plain TCP over an upgraded connection ---------------------------------------- */

struct tunnel {
	char id[SANDBOX_ID_MAX + 1];
	unsigned port;
	int guest_fd;
};

static void tunnel_progress(void *arg, uint64_t to_guest, uint64_t from_guest)
{
	struct tunnel *t = arg;
	struct port_traffic tr = {.bytes_in = to_guest, .bytes_out = from_guest};
	sandbox_port_traffic(t->id, t->port, &tr);
}

static void tunnel_run(void *ctx, int fd, const uint8_t *extra, size_t extra_len)
{
	struct tunnel *t = ctx;
	/* Bytes the client sent right after its request are the tunnel's. */
	if (extra_len && write_full(t->guest_fd, extra, extra_len) < 0)
		return;
	struct fd_relay r = {.a = fd,
	                     .b = t->guest_fd,
	                     .idle_ms = PORT_FORWARD_IDLE_MS,
	                     .progress_ms = 5000,
	                     .progress = tunnel_progress,
	                     .arg = t};
	tunnel_progress(t, extra_len, 0);
	fd_relay_run(&r);
	struct port_traffic done = {.requests = 1};
	sandbox_port_traffic(t->id, t->port, &done);
}

static void tunnel_free(void *ctx)
{
	struct tunnel *t = ctx;
	if (t->guest_fd >= 0)
		sandbox_port_close(t->id, t->guest_fd);
	free(t);
}

/* SECURITY: the caller's token must see the sandbox (sandbox_get with its
 * tenant); the connection is made from the sandbox's namespace to the
 * guest only (sandbox_port_dial), never anywhere else. */
API_HANDLER(api_port_connect)
{
	const char *upgrade = api_header(req, "Upgrade");
	if (!upgrade || strcasecmp(upgrade, PORT_FORWARD_PROTOCOL)) {
		api_response_errorf(
		    resp, AL_ERR_INVALID_ARGUMENT,
		    "connect needs the headers \"Connection: Upgrade\" and \"Upgrade: " PORT_FORWARD_PROTOCOL
		    "\" (see docs/api.md, \"Ports\"; `airlock port-forward` speaks it)");
		return;
	}
	unsigned port;
	if (port_param(req->params[1], &port, resp) < 0)
		return;
	struct al_error err = {0};
	struct sandbox_record r;
	if (sandbox_get(req->params[0], req->tenant, &r, &err) < 0) {
		api_response_error(resp, &err);
		return;
	}
	sandbox_record_release(&r);
	int fd = -1;
	if (sandbox_port_dial(req->params[0], port, PORT_CONNECT_TIMEOUT_MS, &fd, &err) < 0) {
		struct port_traffic failed = {.errors = 1};
		sandbox_port_traffic(req->params[0], port, &failed);
		api_response_error(resp, &err);
		return;
	}
	struct tunnel *t = xcalloc(1, sizeof(*t));
	strlcpy_al(t->id, req->params[0], sizeof(t->id));
	t->port = port;
	t->guest_fd = fd;
	resp->status = 101;
	resp->upgrade = tunnel_run;
	resp->upgrade_free = tunnel_free;
	resp->upgrade_ctx = t;
	resp->upgrade_protocol = PORT_FORWARD_PROTOCOL;
}

/* ---- /metrics ------------------------------------------------------------------------------------ */

struct metrics_text {
	FILE *f[4];
};

static void put_series(FILE *f, const char *id, const char *tenant, unsigned port, uint64_t v)
{
	/* Ids and tenant names are checked at create: no quote or backslash. */
	fprintf(f, "{sandbox=\"%s\",tenant=\"%s\",port=\"%u\"} %llu\n", id, tenant, port, (unsigned long long)v);
}

static void metrics_port(const char *id, const char *tenant, const struct port_stats *s, void *arg)
{
	struct metrics_text *m = arg;
	static const char *const names[] = {"airlock_port_requests_total", "airlock_port_bytes_in_total",
	                                    "airlock_port_bytes_out_total", "airlock_port_errors_total"};
	const uint64_t v[] = {s->t.requests, s->t.bytes_in, s->t.bytes_out, s->t.errors};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		fputs(names[i], m->f[i]);
		put_series(m->f[i], id, tenant, s->port, v[i]);
	}
}

char *ports_metrics_text(void)
{
	static const char *const heads[] = {
	    "# HELP airlock_port_requests_total Requests (or port-forward connections) to a sandbox's port.\n"
	    "# TYPE airlock_port_requests_total counter\n",
	    "# HELP airlock_port_bytes_in_total Bytes sent to a sandbox's port from outside.\n"
	    "# TYPE airlock_port_bytes_in_total counter\n",
	    "# HELP airlock_port_bytes_out_total Bytes a sandbox's port answered.\n"
	    "# TYPE airlock_port_bytes_out_total counter\n",
	    "# HELP airlock_port_errors_total Requests to a sandbox's port that failed (nothing listened, a "
	    "timeout, a paused sandbox).\n"
	    "# TYPE airlock_port_errors_total counter\n"};
	char *bufs[4] = {0};
	size_t lens[4] = {0};
	struct metrics_text m;
	for (size_t i = 0; i < 4; i++) {
		m.f[i] = open_memstream(&bufs[i], &lens[i]);
		if (!m.f[i])
			abort();
		fputs(heads[i], m.f[i]);
	}
	sandbox_ports_stats_each(metrics_port, &m);
	for (size_t i = 0; i < 4; i++)
		fclose(m.f[i]);
	char *out = xasprintf("%s%s%s%s", bufs[0], bufs[1], bufs[2], bufs[3]);
	for (size_t i = 0; i < 4; i++)
		free(bufs[i]);
	return out;
}
