/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DNS message codec of the egress gateway's DNS listener: one strict parser
 * of a query (RFC 1035 4.1, EDNS per RFC 6891 6.1) and the builder of its
 * response. Parsing walks a cursor that refuses any read past the end of the
 * message; building never writes past out_size.
 */
#include "egress-dns.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "egress-cursor.h"
#include "util.h"

#define DNS_HEADER_SIZE 12
#define DNS_FLAG_QR 0x8000u
#define DNS_FLAG_TC 0x0200u
#define DNS_FLAG_RD 0x0100u
#define DNS_FLAG_RA 0x0080u
#define DNS_OPCODE_QUERY 0
#define DNS_LABEL_MAX 63
#define DNS_WIRE_NAME_MAX 255       /* RFC 1035 2.3.4, length octets and the root included */
#define DNS_EDNS_UDP_MIN 512        /* RFC 6891 6.2.3: smaller sizes are treated as 512 */
#define DNS_OPT_RR_SIZE 11          /* root owner, type, class, TTL, RDLENGTH 0 */
#define DNS_QUESTION_POINTER 0xc00c /* compression pointer to the question name at offset 12 */

/* ------------------------------------------------------------ parser */

static int malformed(struct al_error *err, const char *what)
{
	return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG, "malformed DNS query: %s", what);
}

static bool label_byte_ok(uint8_t b)
{
	return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '-' || b == '_';
}

/* The question name: uncompressed labels of [A-Za-z0-9_-], at most
 * DNS_WIRE_NAME_MAX bytes on the wire (so at most EGRESS_DNS_NAME_MAX in
 * presentation form), written to q->name. */
static int parse_name(struct egress_cursor *c, struct egress_dns_query *q, struct al_error *err)
{
	size_t wire = 0;
	q->name_len = 0;
	for (;;) {
		uint8_t len;
		if (!egress_cursor_u8(c, &len))
			return malformed(err, "truncated question name");
		wire++;
		if (len == 0)
			break;
		if ((len & 0xc0) == 0xc0)
			return malformed(err, "compression pointer in the question name");
		if (len > DNS_LABEL_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
			                    "malformed DNS query: label length byte 0x%02x (labels are 1-63 bytes)",
			                    len);
		/* this label and at least the root byte after it */
		if (wire + len + 1 > DNS_WIRE_NAME_MAX)
			return malformed(err, "question name longer than 253 characters");
		if (c->n < len)
			return malformed(err, "truncated question name");
		for (size_t i = 0; i < len; i++)
			if (!label_byte_ok(c->p[i]))
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EILSEQ,
				                    "DNS query name has byte 0x%02x (only letters, digits, '-' and "
				                    "'_' are accepted)",
				                    c->p[i]);
		if (q->name_len > 0)
			q->name[q->name_len++] = '.';
		memcpy(q->name + q->name_len, c->p, len);
		q->name_len += len;
		egress_cursor_skip(c, len, NULL);
		wire += len;
	}
	q->name[q->name_len] = '\0';
	return 0;
}

/* The one additional record a query may carry: OPT at the root. */
static int parse_opt(struct egress_cursor *c, struct egress_dns_query *q, struct al_error *err)
{
	uint8_t owner, ext_rcode, version;
	uint16_t type, udp_size, flags, rdlen;
	if (!egress_cursor_u8(c, &owner))
		return malformed(err, "truncated additional record");
	if (owner != 0)
		return malformed(err, "the additional record is not an OPT record owned by the root");
	if (!egress_cursor_u16(c, &type) || !egress_cursor_u16(c, &udp_size) || !egress_cursor_u8(c, &ext_rcode) ||
	    !egress_cursor_u8(c, &version) || !egress_cursor_u16(c, &flags) || !egress_cursor_u16(c, &rdlen))
		return malformed(err, "truncated additional record");
	if (type != EGRESS_DNS_TYPE_OPT)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
		                    "malformed DNS query: additional record of type %u (only OPT is accepted)", type);
	if (version != 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
		                    "malformed DNS query: EDNS version %u (only version 0 is supported)", version);
	if (c->n < rdlen)
		return malformed(err, "OPT record data runs past the end of the message");
	/* The options are not used (cookies, padding, client subnet ...), but
	 * they must tile the record data exactly. */
	struct egress_cursor rd;
	egress_cursor_skip(c, rdlen, &rd);
	while (rd.n > 0) {
		uint16_t code, olen;
		if (!egress_cursor_u16(&rd, &code) || !egress_cursor_u16(&rd, &olen) ||
		    !egress_cursor_skip(&rd, olen, NULL))
			return malformed(err, "EDNS option runs past the end of its OPT record");
	}
	(void)ext_rcode;
	(void)flags;
	q->edns = true;
	q->edns_udp_max = MAX(udp_size, DNS_EDNS_UDP_MIN);
	return 0;
}

int egress_dns_parse_query(const uint8_t *buf, size_t len, struct egress_dns_query *ret_query, uint16_t *ret_id,
                           struct al_error *err)
{
	/* SECURITY: buf is a guest's datagram or TCP message, any bytes. Every
	 * read goes through the cursor (bounded by len); the name is copied
	 * only after its length was checked against EGRESS_DNS_NAME_MAX and its
	 * bytes against [A-Za-z0-9_-]; nothing outside the one question and
	 * one OPT record is accepted, so no later code meets a second name, a
	 * compression pointer, or bytes this parser did not look at. */
	struct egress_cursor c = {buf, len};
	uint16_t id, flags, qdcount, ancount, nscount, arcount;
	if (!egress_cursor_u16(&c, &id) || !egress_cursor_u16(&c, &flags) || !egress_cursor_u16(&c, &qdcount) ||
	    !egress_cursor_u16(&c, &ancount) || !egress_cursor_u16(&c, &nscount) || !egress_cursor_u16(&c, &arcount))
		return malformed(err, "shorter than the 12-byte header");
	if (ret_id)
		*ret_id = id;
	if (flags & DNS_FLAG_QR)
		return malformed(err, "QR is set (a response, not a query)");
	if (((flags >> 11) & 0xf) != DNS_OPCODE_QUERY)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
		                    "malformed DNS query: opcode %u (only QUERY is accepted)", (flags >> 11) & 0xfu);
	if (qdcount != 1)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
		                    "malformed DNS query: %u questions (exactly one is accepted)", qdcount);
	if (ancount != 0 || nscount != 0)
		return malformed(err, "answer or authority records in a query");
	if (arcount > 1)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
		                    "malformed DNS query: %u additional records (at most one OPT is accepted)",
		                    arcount);

	struct egress_dns_query q = {.id = id, .rd = (flags & DNS_FLAG_RD) != 0};
	const uint8_t *question = c.p;
	int r = parse_name(&c, &q, err);
	if (r < 0)
		return r;
	if (!egress_cursor_u16(&c, &q.qtype) || !egress_cursor_u16(&c, &q.qclass))
		return malformed(err, "truncated question (type and class missing)");
	q.question_len = (size_t)(c.p - question);
	memcpy(q.question, question, q.question_len);

	if (arcount == 1) {
		r = parse_opt(&c, &q, err);
		if (r < 0)
			return r;
	}
	if (c.n != 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
		                    "malformed DNS query: %zu bytes after the last record", c.n);
	*ret_query = q;
	return 0;
}

/* ------------------------------------------------------------ builder */

static void put16(uint8_t *p, unsigned v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, v >> 16);
	put16(p + 2, v & 0xffff);
}

static void put_header(uint8_t *out, uint16_t id, unsigned flags, unsigned qd, unsigned an, unsigned ar)
{
	put16(out, id);
	put16(out + 2, flags);
	put16(out + 4, qd);
	put16(out + 6, an);
	put16(out + 8, 0);
	put16(out + 10, ar);
}

static unsigned rcode_bits(int rcode)
{
	/* Only the 4-bit header rcodes; anything else is a caller bug that
	 * must not turn into a success. */
	return rcode >= 0 && rcode <= 15 ? (unsigned)rcode : EGRESS_DNS_RCODE_SERVFAIL;
}

int egress_dns_build_response(const struct egress_dns_query *q, int rcode, const struct policy_addr *addrs, size_t n,
                              uint32_t ttl, uint8_t *out, size_t out_size, size_t *ret_len)
{
	if (q->question_len < 5 || q->question_len > sizeof(q->question))
		return -EINVAL;
	size_t pos = DNS_HEADER_SIZE + q->question_len;
	if (out_size < pos)
		return -ENOBUFS;
	bool truncated = false;
	size_t opt = q->edns ? DNS_OPT_RR_SIZE : 0;
	if (pos + opt > out_size) {
		opt = 0;
		truncated = true;
	}
	memcpy(out + DNS_HEADER_SIZE, q->question, q->question_len);

	int family = 0;
	size_t rdlen = 0;
	if (q->qtype == EGRESS_DNS_TYPE_A) {
		family = AF_INET;
		rdlen = sizeof(struct in_addr);
	} else if (q->qtype == EGRESS_DNS_TYPE_AAAA) {
		family = AF_INET6;
		rdlen = sizeof(struct in6_addr);
	}
	unsigned answers = 0;
	for (size_t i = 0; family != 0 && rcode == EGRESS_DNS_RCODE_NOERROR && i < n; i++) {
		if (addrs[i].family != family)
			continue;
		size_t rr = 2 + 2 + 2 + 4 + 2 + rdlen;
		if (pos + rr + opt > out_size) {
			truncated = true;
			break;
		}
		put16(out + pos, DNS_QUESTION_POINTER);
		put16(out + pos + 2, q->qtype);
		put16(out + pos + 4, EGRESS_DNS_CLASS_IN);
		put32(out + pos + 6, ttl);
		put16(out + pos + 10, (unsigned)rdlen);
		memcpy(out + pos + 12, family == AF_INET ? (const void *)&addrs[i].v4 : (const void *)&addrs[i].v6,
		       rdlen);
		pos += rr;
		answers++;
	}
	if (opt) {
		/* RFC 6891 6.1.2: root owner, our UDP payload size, extended
		 * rcode 0, version 0, no DO bit, no options. */
		out[pos] = 0;
		put16(out + pos + 1, EGRESS_DNS_TYPE_OPT);
		put16(out + pos + 3, EGRESS_DNS_EDNS_UDP_SIZE);
		put32(out + pos + 5, 0);
		put16(out + pos + 9, 0);
		pos += DNS_OPT_RR_SIZE;
	}
	unsigned flags = DNS_FLAG_QR | DNS_FLAG_RA | rcode_bits(rcode);
	if (q->rd)
		flags |= DNS_FLAG_RD;
	if (truncated)
		flags |= DNS_FLAG_TC;
	put_header(out, q->id, flags, 1, answers, opt ? 1 : 0);
	*ret_len = pos;
	return 0;
}

void egress_dns_build_error(uint16_t id, int rcode, uint8_t out[12])
{
	put_header(out, id, DNS_FLAG_QR | DNS_FLAG_RA | rcode_bits(rcode), 0, 0, 0);
}
