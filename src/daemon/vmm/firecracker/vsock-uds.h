/* SPDX-License-Identifier: Apache-2.0 */
/* The host end of a vsock connection through Firecracker's hybrid vsock: a
 * unix socket (the device's uds_path) on which the host writes
 * "CONNECT <port>\n" and Firecracker answers "OK <host-side port>\n" once the
 * guest accepted, or closes the connection when nothing listens there. After
 * the answer the connection is the guest's byte stream. */
#ifndef AIRLOCK_VSOCK_UDS_H
#define AIRLOCK_VSOCK_UDS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* The longest answer line taken ("OK 4294967295" is 13 bytes). */
#define VSOCK_UDS_ACK_MAX 32

/* SECURITY: the answer line without its '\n': exactly "OK " and a decimal
 * u32 without leading zeros or sign. 0 and *ret_port, else -EPROTO. */
int vsock_uds_parse_ack(const char *line, size_t len, uint32_t *ret_port);

/* On a connected socket: sends CONNECT and reads the answer one byte at a
 * time (never past its '\n': what follows is the guest's), until deadline_ms.
 * -ECONNREFUSED when the muxer closes the connection first (no listener on
 * that guest port yet), -EPROTO for another answer, -ETIMEDOUT. why[] says
 * what happened. */
int vsock_uds_handshake(int fd, uint32_t port, uint64_t deadline_ms, char *why, size_t why_size);

/* Connects to the unix socket `name` in dirfd without blocking, then the
 * handshake within timeout_ms: a non-blocking fd carrying the guest's stream.
 * -ENOENT/-ECONNREFUSED mean "not there yet" (the VMM or the guest is still
 * starting): callers retry those until their own deadline. */
int vsock_uds_connect(int dirfd, const char *name, uint32_t port, unsigned timeout_ms, int *ret_fd,
                      struct al_error *err);

#endif
