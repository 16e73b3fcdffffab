/* SPDX-License-Identifier: Apache-2.0 */
#include "api-connlimit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>

#include "util.h"

void conn_source_key(const struct sockaddr *sa, socklen_t len, bool prefix64, char out[CONN_SOURCE_MAX + 1])
{
	strlcpy_al(out, "?", CONN_SOURCE_MAX + 1);
	if (!sa || len < (socklen_t)sizeof(sa_family_t))
		return;
	if (sa->sa_family == AF_UNIX) {
		strlcpy_al(out, "unix", CONN_SOURCE_MAX + 1);
	} else if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
		inet_ntop(AF_INET, &s4->sin_addr, out, CONN_SOURCE_MAX + 1);
	} else if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		struct in6_addr a = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(&a)) {
			inet_ntop(AF_INET, &a.s6_addr[12], out, CONN_SOURCE_MAX + 1);
			return;
		}
		/* SECURITY: one host of an IPv6 network may use any address of its
		 * /64; per-address limits that must hold against it key by prefix. */
		if (prefix64)
			memset(&a.s6_addr[8], 0, 8);
		char text[INET6_ADDRSTRLEN];
		inet_ntop(AF_INET6, &a, text, sizeof(text));
		snprintf(out, CONN_SOURCE_MAX + 1, "%s%s", text, prefix64 ? "/64" : "");
	}
}

struct conn_slot {
	struct conn_slot *prev, *next;
	char source[CONN_SOURCE_MAX + 1];
	int fd;
	uint64_t idle_since_ms;
	bool busy, pinned, shed;
};

struct conn_table {
	pthread_mutex_t lock;
	unsigned max_total, max_per_source;
	struct conn_slot *head;
};

struct conn_table *conn_table_new(unsigned max_total, unsigned max_per_source)
{
	struct conn_table *t = xcalloc(1, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	t->max_total = max_total ? max_total : 1;
	t->max_per_source = max_per_source;
	return t;
}

void conn_table_free(struct conn_table *t)
{
	if (!t)
		return;
	while (t->head) {
		struct conn_slot *s = t->head;
		t->head = s->next;
		free(s);
	}
	pthread_mutex_destroy(&t->lock);
	free(t);
}

static bool slot_idle(const struct conn_slot *s)
{
	return !s->busy && !s->pinned && !s->shed;
}

/* The connection of source (NULL: of any) idle the longest; with t->lock held. */
static struct conn_slot *oldest_idle(struct conn_table *t, const char *source)
{
	struct conn_slot *best = NULL;
	for (struct conn_slot *s = t->head; s; s = s->next)
		if (slot_idle(s) && (!source || !strcmp(s->source, source)) &&
		    (!best || s->idle_since_ms < best->idle_since_ms))
			best = s;
	return best;
}

static unsigned count_locked(struct conn_table *t, const char *source)
{
	unsigned n = 0;
	for (struct conn_slot *s = t->head; s; s = s->next)
		n += !s->shed && (!source || !strcmp(s->source, source));
	return n;
}

/* Sheds the oldest idle connection of source (NULL: of any); false if there is none. */
static bool shed_oldest(struct conn_table *t, const char *source, void (*shed)(void *ctx, int fd), void *ctx)
{
	struct conn_slot *s = oldest_idle(t, source);
	if (!s)
		return false;
	s->shed = true;
	shed(ctx, s->fd);
	return true;
}

static enum conn_verdict admit_locked(struct conn_table *t, const char *source, void (*shed)(void *ctx, int fd),
                                      void *ctx)
{
	unsigned total = count_locked(t, NULL);
	if (t->max_per_source && count_locked(t, source) >= t->max_per_source) {
		if (!shed_oldest(t, source, shed, ctx))
			return CONN_REFUSE_SOURCE;
		total--;
	}
	if (total >= t->max_total && !shed_oldest(t, NULL, shed, ctx))
		return CONN_REFUSE_TOTAL;
	return CONN_ADMIT;
}

enum conn_verdict conn_table_admit(struct conn_table *t, const char *source, void (*shed)(void *ctx, int fd), void *ctx)
{
	pthread_mutex_lock(&t->lock);
	enum conn_verdict v = admit_locked(t, source, shed, ctx);
	pthread_mutex_unlock(&t->lock);
	return v;
}

struct conn_slot *conn_table_add(struct conn_table *t, const char *source, int fd, uint64_t now_ms)
{
	struct conn_slot *s = xcalloc(1, sizeof(*s));
	strlcpy_al(s->source, source ? source : "", sizeof(s->source));
	s->fd = fd;
	s->idle_since_ms = now_ms;
	pthread_mutex_lock(&t->lock);
	s->next = t->head;
	if (t->head)
		t->head->prev = s;
	t->head = s;
	pthread_mutex_unlock(&t->lock);
	return s;
}

void conn_table_remove(struct conn_table *t, struct conn_slot *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&t->lock);
	if (s->prev)
		s->prev->next = s->next;
	else
		t->head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	pthread_mutex_unlock(&t->lock);
	free(s);
}

void conn_table_busy(struct conn_table *t, struct conn_slot *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&t->lock);
	s->busy = true;
	pthread_mutex_unlock(&t->lock);
}

void conn_table_idle(struct conn_table *t, struct conn_slot *s, uint64_t now_ms)
{
	if (!s)
		return;
	pthread_mutex_lock(&t->lock);
	s->busy = false;
	s->idle_since_ms = now_ms;
	pthread_mutex_unlock(&t->lock);
}

void conn_table_pin(struct conn_table *t, struct conn_slot *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&t->lock);
	s->pinned = true;
	pthread_mutex_unlock(&t->lock);
}

unsigned conn_table_count(struct conn_table *t, const char *source)
{
	pthread_mutex_lock(&t->lock);
	unsigned n = count_locked(t, source);
	pthread_mutex_unlock(&t->lock);
	return n;
}
