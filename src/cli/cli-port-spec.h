/* SPDX-License-Identifier: Apache-2.0 */
/* port-forward's operand, [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT (or PORT for
 * PORT:PORT): a pure parser, unit-tested and fuzzed. */
#ifndef AIRLOCK_CLI_PORT_SPEC_H
#define AIRLOCK_CLI_PORT_SPEC_H

#include <stdbool.h>
#include <stddef.h>

#define PORT_SPEC_MAX 128     /* the operand's length */
#define PORT_SPEC_ADDR_MAX 63 /* LOCAL_ADDR: an IPv4 or [IPv6] address or a host name */
#define PORT_SPEC_DEFAULT_ADDR "127.0.0.1"

struct port_spec {
	char addr[PORT_SPEC_ADDR_MAX + 1]; /* without the brackets of [v6] */
	unsigned local_port;               /* 0: any free port */
	unsigned remote_port;              /* 1-65535 */
};

/* 0, or -EINVAL with a message for the user in why (why_size bytes). */
int port_spec_parse(const char *s, struct port_spec *ret, char *why, size_t why_size);

#endif
