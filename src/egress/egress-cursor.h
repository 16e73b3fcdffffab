/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A read cursor over a wire message (big-endian, as DNS and TLS write
 * numbers), shared by the gateway's parsers of guest input (egress-dns.c,
 * egress-tls.c).
 *
 * SECURITY: every read is checked against the bytes left: a read past the
 * end fails (false) and moves nothing, so a parser that goes only through
 * the cursor cannot read outside its message, whatever lengths it claims.
 */
#ifndef AIRLOCK_EGRESS_CURSOR_H
#define AIRLOCK_EGRESS_CURSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct egress_cursor {
	const uint8_t *p;
	size_t n; /* bytes left at p */
};

static inline bool egress_cursor_u8(struct egress_cursor *c, uint8_t *ret)
{
	if (c->n < 1)
		return false;
	*ret = c->p[0];
	c->p++;
	c->n--;
	return true;
}

static inline bool egress_cursor_u16(struct egress_cursor *c, uint16_t *ret)
{
	if (c->n < 2)
		return false;
	*ret = (uint16_t)((c->p[0] << 8) | c->p[1]);
	c->p += 2;
	c->n -= 2;
	return true;
}

/* Skips len bytes; ret_sub (may be NULL) becomes a cursor over them. */
static inline bool egress_cursor_skip(struct egress_cursor *c, size_t len, struct egress_cursor *ret_sub)
{
	if (c->n < len)
		return false;
	if (ret_sub)
		*ret_sub = (struct egress_cursor){c->p, len};
	c->p += len;
	c->n -= len;
	return true;
}

#endif
