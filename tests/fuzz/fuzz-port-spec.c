/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for port_spec_parse() (src/cli/cli-port-spec.c),
 * `airlock port-forward`'s operand [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT.
 * The input is a C string (up to its first NUL) in a buffer of exactly that
 * size. Beyond the sanitizers: what is accepted has a remote port 1-65535,
 * a local port 0-65535 and an address of at most PORT_SPEC_ADDR_MAX
 * characters, none of them a space, '/' or a control; what is rejected
 * says why.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-port-spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-port-spec: check failed: %s (line %d)\n", #cond, __LINE__);              \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t n = strnlen((const char *)data, size);
	char *s = malloc(n + 1);
	if (!s)
		abort();
	memcpy(s, data, n);
	s[n] = '\0';
	struct port_spec p;
	char why[256] = "";
	int r = port_spec_parse(s, &p, why, sizeof(why));
	if (r == 0) {
		CHECK(n <= PORT_SPEC_MAX);
		CHECK(p.remote_port >= 1 && p.remote_port <= 65535);
		CHECK(p.local_port <= 65535);
		size_t an = strnlen(p.addr, sizeof(p.addr));
		CHECK(an >= 1 && an <= PORT_SPEC_ADDR_MAX);
		for (size_t i = 0; i < an; i++)
			CHECK(p.addr[i] > 0x20 && p.addr[i] < 0x7f && p.addr[i] != '/' && p.addr[i] != ' ');
	} else {
		CHECK(r == -EINVAL);
		CHECK(why[0] != '\0');
	}
	free(s);
	return 0;
}
