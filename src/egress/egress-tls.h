/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS ClientHello reader of the egress gateway: peeks at the first bytes a
 * guest sends on a TLS connection and returns the server name (SNI) it asks
 * for. It does not terminate TLS; the bytes are forwarded unchanged once the
 * policy allows the name.
 *
 * SECURITY: the input is fully guest-controlled. Every length is checked
 * against its container and the limits below before it is used; the
 * ClientHello may arrive in many records and TCP segments and is reassembled
 * into a bounded buffer. A hello that hides its destination (no SNI,
 * Encrypted ClientHello / ESNI) is reported as such so that the gateway
 * denies it. The SNI is returned as raw bytes: it is not trusted to be
 * printable and must go through policy_host_canonicalize().
 */
#ifndef AIRLOCK_EGRESS_TLS_H
#define AIRLOCK_EGRESS_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define EGRESS_TLS_RECORD_HEADER_SIZE 5
#define EGRESS_TLS_HANDSHAKE_HEADER_SIZE 4
/* A plaintext record carries at most 2^14 bytes (RFC 8446 5.1). */
#define EGRESS_TLS_RECORD_MAX 16384
/* The whole ClientHello handshake message, its 4-byte header included. */
#define EGRESS_TLS_CLIENT_HELLO_MAX 16384
/* Records the ClientHello may be split into. */
#define EGRESS_TLS_RECORDS_MAX 64
/* The most input the reader ever needs: ret_need never exceeds this. */
#define EGRESS_TLS_PEEK_MAX (EGRESS_TLS_CLIENT_HELLO_MAX + EGRESS_TLS_RECORDS_MAX * EGRESS_TLS_RECORD_HEADER_SIZE)
/* A DNS name is at most 253 bytes (254 with the root dot). */
#define EGRESS_TLS_SNI_MAX 255

struct egress_tls_client_hello {
	uint8_t sni[EGRESS_TLS_SNI_MAX]; /* raw bytes, not terminated */
	size_t sni_len;
	size_t consumed;         /* bytes of input the ClientHello's records took */
	uint16_t legacy_version; /* ClientHello.legacy_version, e.g. 0x0303 */
};

/*
 * Reads the ClientHello from the first len bytes of the connection.
 *
 * Returns
 *   0          the whole ClientHello was there; *ret_hello is filled;
 *   -EAGAIN    not enough bytes yet: *ret_need (written only in this case) is
 *              the total input length needed at least (> len,
 *              <= EGRESS_TLS_PEEK_MAX); call again with more;
 *   -EPROTO    not TLS: the first record is not a TLS handshake record;
 *   -EBADMSG   malformed: a length overruns its container, a wrong handshake
 *              type, other records interleaved, trailing bytes, a duplicate
 *              extension, a server_name list that is not exactly one
 *              host_name entry, ...;
 *   -E2BIG     the ClientHello is over EGRESS_TLS_CLIENT_HELLO_MAX or split
 *              into more than EGRESS_TLS_RECORDS_MAX records;
 *   -EACCES    Encrypted ClientHello (0xfe0d and its drafts 0xfe08-0xfe0c,
 *              ech_outer_extensions 0xfd00) or ESNI (0xffce): the real name
 *              is hidden, deny;
 *   -ENODATA   well-formed, but without a server_name extension: deny.
 * On errors other than -EAGAIN, err (may be NULL) says what was wrong.
 * Malformed wins over ECH, ECH over "no SNI".
 */
int egress_tls_read_client_hello(const uint8_t *buf, size_t len, struct egress_tls_client_hello *ret_hello,
                                 size_t *ret_need, struct al_error *err);

#endif
