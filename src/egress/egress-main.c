/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlock-egress: the egress gateway.
 *
 * PLACEHOLDER MAIN: only --version and --help for now, so the binary links
 * and the parsers it is built from (egress-tls.c, egress-http.c,
 * egress-host.c, egress-addr.c) are compiled with it. The runtime (sockets
 * from airlockd, policy, resolver, dialler, audit) is written separately and
 * replaces this file's body.
 */
#include <stdio.h>
#include <string.h>

#include "util.h"
#include "version.h"

static void usage(FILE *out)
{
	fprintf(out, "Usage: airlock-egress [--help | --version]\n"
	             "\n"
	             "The egress gateway of Airlock: the only way out of a sandbox.\n"
	             "\n"
	             "airlockd hands it listening sockets created inside each sandbox's network\n"
	             "namespace; TCP from the guest is redirected to them. Per connection it\n"
	             "  - reads the HTTP Host header (port 80) or the TLS SNI from the ClientHello\n"
	             "    (port 443; no SNI or Encrypted ClientHello: denied), other ports only\n"
	             "    by an explicit host/CIDR:port rule;\n"
	             "  - canonicalises the name and matches it against the sandbox's policy;\n"
	             "  - resolves the name itself, refuses loopback, private, link-local,\n"
	             "    metadata and IPv4-in-IPv6 addresses unless a rule names them, and\n"
	             "    dials exactly the address it checked;\n"
	             "  - records every decision as an audit event.\n"
	             "Nothing is resolved or dialled for a denied connection.\n"
	             "\n"
	             "This build contains the parsers only; the runtime is not implemented yet.\n");
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("airlock-egress %s\n", AIRLOCK_VERSION);
		return 0;
	}
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage(stdout);
		return 0;
	}
	usage(stderr);
	return 2;
}
