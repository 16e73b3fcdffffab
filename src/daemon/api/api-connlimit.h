/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The connection slots of one API listener (docs/api.md, "Limits").
 *
 * A listener holds at most `max_total` connections, and at most
 * `max_per_source` from one client address (0: no such cap; the unix
 * socket). A connection is idle from its accept until the head of its first
 * request is in, and again between the requests of a kept-alive connection;
 * it is busy while a request is answered (a handler that waits, a streamed
 * answer), and for good once it was upgraded.
 *
 * A new connection that would pass a cap is not refused while an idle
 * connection can make room: the one idle the longest (of the same address
 * when that address is at its cap, of any address when the listener is
 * full) is shed — closed — and the new one admitted. Only when every
 * connection in the way is busy is the new one refused. So a client that
 * parks idle connections, or dribbles a request head (it stays idle until
 * the head is complete), can never keep another client out, not even one
 * behind the same address, and a request being answered is never cut to
 * make room.
 */
#ifndef AIRLOCK_API_CONNLIMIT_H
#define AIRLOCK_API_CONNLIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define CONN_SOURCE_MAX 63 /* an IPv6 address in text, or a /64 prefix */

/* The key of a client address: IPv4 dotted (also for an IPv4-mapped IPv6
 * address), IPv6 in full or, with prefix64, its /64 ("2001:db8:1:2::/64"),
 * "unix" for AF_UNIX, "?" for anything else (or a short sockaddr). */
void conn_source_key(const struct sockaddr *sa, socklen_t len, bool prefix64, char out[CONN_SOURCE_MAX + 1]);

enum conn_verdict {
	CONN_ADMIT,
	CONN_REFUSE_SOURCE, /* the address has max_per_source connections, all busy */
	CONN_REFUSE_TOTAL,  /* the listener has max_total connections, all busy */
};

struct conn_table;
struct conn_slot;

/* max_total >= 1; max_per_source 0: no per-address cap. */
struct conn_table *conn_table_new(unsigned max_total, unsigned max_per_source);
void conn_table_free(struct conn_table *t);

/* Thread-safe. Whether a new connection from source may be accepted. To make room it may shed idle connections (at most
 * two: one of source, one of any address): shed(ctx, fd) is called for each, with the table's lock held, so
 * conn_table_remove() of that connection waits and its fd is still its own as long as the server closes a connection's
 * fd only after removing it. A shed connection no longer counts. The caller adds the admitted connection with
 * conn_table_add(). */
enum conn_verdict conn_table_admit(struct conn_table *t, const char *source, void (*shed)(void *ctx, int fd),
                                   void *ctx);

/* Registers an accepted connection (idle since now_ms). Thread-safe, never
 * fails (allocation failure aborts). */
struct conn_slot *conn_table_add(struct conn_table *t, const char *source, int fd, uint64_t now_ms);
/* Forgets a connection; NULL is ignored. */
void conn_table_remove(struct conn_table *t, struct conn_slot *s);
/* A request is being answered; NULL is ignored. */
void conn_table_busy(struct conn_table *t, struct conn_slot *s);
/* The request was answered: idle since now_ms (unless pinned); NULL is ignored. */
void conn_table_idle(struct conn_table *t, struct conn_slot *s, uint64_t now_ms);
/* Busy for good (the connection was upgraded); NULL is ignored. */
void conn_table_pin(struct conn_table *t, struct conn_slot *s);

/* Connections that count (not shed): all of them with source NULL, else of source. */
unsigned conn_table_count(struct conn_table *t, const char *source);

#endif
