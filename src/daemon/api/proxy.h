/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The port-exposure proxy (issue 22; docs/api.md, "Ports"): an HTTP/1.1
 * reverse proxy on its own listener (airlockd --proxy-listen) that takes
 * http://<port>-<id>.<domain>/... and http://HOST/sandbox/<id>/<port>/...
 * to the guest's port, through a socket made in the sandbox's network
 * namespace (sandbox_port_dial): client -> airlockd -> 10.0.2.15:PORT. The
 * guest gets no route out; its egress policy is untouched.
 */
#ifndef AIRLOCK_PROXY_H
#define AIRLOCK_PROXY_H

#include <stdint.h>

#include "error.h"

#define PROXY_HEADER_TIMEOUT_S_DEFAULT 10 /* a request head must be in within (408) */
#define PROXY_IDLE_TIMEOUT_S_DEFAULT 300  /* a body or response without a byte either way is cut */
#define PROXY_KEEPALIVE_S 60              /* a connection idle between requests is closed */
#define PROXY_MAX_BODY_MIB_DEFAULT 100    /* a request body (413) */
#define PROXY_TIMEOUT_S_MAX 3600
#define PROXY_MAX_BODY_MIB_MAX (1024 * 1024)
#define PROXY_DIAL_TIMEOUT_MS 60000  /* dial (with an auto-resume) before 504 */
#define PROXY_TRAFFIC_REPORT_MS 5000 /* an upgraded stream's counters and activity */
#define PROXY_THREAD_STACK (256 * 1024)

struct proxy_config {
	const char *listen; /* ADDR:PORT ([ADDR]:PORT for IPv6) */
	const char *domain; /* NULL: localhost:<the listener's port> */
	unsigned header_timeout_s, idle_timeout_s, max_body_mib;
	unsigned max_connections, max_per_client; /* per_client 0: no cap */
};

struct proxy_server;
int proxy_server_start(const struct proxy_config *cfg, struct proxy_server **ret, struct al_error *err);
/* The domain the host form uses (for the log). */
const char *proxy_server_domain(const struct proxy_server *s);
/* Stops accepting, cuts every connection and waits for their threads. NULL is fine. */
void proxy_server_stop(struct proxy_server *s);

#endif
