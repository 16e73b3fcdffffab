/* SPDX-License-Identifier: Apache-2.0 */
/* Copies bytes both ways between two connected sockets until both
 * directions ended (each side's EOF is passed on as a shutdown of the
 * other's write side), one fails, or nothing moved either way for idle_ms.
 * Used by the daemon for tunnels it only carries (port-forward, an HTTP
 * upgrade through the ports proxy): it never looks at the bytes. */
#ifndef AIRLOCK_FD_RELAY_H
#define AIRLOCK_FD_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FD_RELAY_BUF 65536

struct fd_relay {
	int a, b;         /* blocking or not: the relay polls */
	unsigned idle_ms; /* 0: no idle limit */
	/* End once b's EOF was passed on to a (what a still sends is dropped):
	 * an HTTP exchange whose answer is complete. */
	bool end_on_b_eof;
	unsigned progress_ms; /* how often progress is called while bytes move (0: at the end only) */
	/* Called with the bytes moved since its last call (a→b, b→a); may be NULL. */
	void (*progress)(void *arg, uint64_t a_to_b, uint64_t b_to_a);
	void *arg;
};

/* 0 when both directions ended by EOF (or b's, with end_on_b_eof), -ETIMEDOUT when idle, else -errno. */
int fd_relay_run(const struct fd_relay *r);

#endif
