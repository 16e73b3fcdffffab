/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the egress gateway's DNS codec
 * (src/egress/egress-dns.c): the input is one DNS message as a guest sends
 * it to the gateway's listener (UDP payload, or a TCP message without its
 * length). Checks, beyond the sanitizers:
 *  - parsing is deterministic: the same bytes give the same result and the
 *    same query twice;
 *  - errors are -EBADMSG or -EILSEQ with a message, and the id is reported
 *    whenever the header was there;
 *  - a parsed name has only [A-Za-z0-9_-] labels of 1-63 bytes joined by
 *    dots, at most EGRESS_DNS_NAME_MAX bytes, and encodes back to exactly
 *    the question's name bytes (case kept);
 *  - the response built for it (several sizes, rcodes, address mixes) stays
 *    within its buffer, echoes id, RD and the question, never fails when
 *    the header and question fit, and counts only the records it holds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "egress-dns.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-egress-dns: check failed: %s (line %d)\n", #cond, __LINE__);             \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static bool name_byte_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void check_name(const struct egress_dns_query *q)
{
	CHECK(q->name_len <= EGRESS_DNS_NAME_MAX);
	CHECK(strlen(q->name) == q->name_len);
	/* encode it again: it must be the question's name, byte for byte */
	uint8_t wire[EGRESS_DNS_NAME_MAX + 2];
	size_t w = 0, label = 0, start = 0;
	for (size_t i = 0; i <= q->name_len && q->name_len > 0; i++) {
		if (i == q->name_len || q->name[i] == '.') {
			CHECK(label >= 1 && label <= 63);
			wire[w++] = (uint8_t)label;
			memcpy(wire + w, q->name + start, label);
			w += label;
			label = 0;
			start = i + 1;
			continue;
		}
		CHECK(name_byte_ok(q->name[i]));
		label++;
	}
	wire[w++] = 0;
	CHECK(w <= 255);
	CHECK(q->question_len == w + 4);
	CHECK(memcmp(q->question, wire, w) == 0);
	CHECK(((q->question[w] << 8) | q->question[w + 1]) == q->qtype);
	CHECK(((q->question[w + 2] << 8) | q->question[w + 3]) == q->qclass);
}

static unsigned get16(const uint8_t *p)
{
	return (unsigned)((p[0] << 8) | p[1]);
}

static void check_response(const struct egress_dns_query *q, const uint8_t *out, size_t len, size_t out_size, int rcode,
                           size_t n_match)
{
	CHECK(len <= out_size);
	CHECK(len >= 12 + q->question_len);
	CHECK(get16(out) == q->id);
	unsigned flags = get16(out + 2);
	CHECK(flags & 0x8000);
	CHECK(((flags >> 11) & 0xf) == 0);
	CHECK(!!(flags & 0x0100) == q->rd);
	CHECK((int)(flags & 0xf) == ((rcode >= 0 && rcode <= 15) ? rcode : EGRESS_DNS_RCODE_SERVFAIL));
	CHECK(get16(out + 4) == 1);
	CHECK(get16(out + 8) == 0);
	CHECK(memcmp(out + 12, q->question, q->question_len) == 0);
	unsigned an = get16(out + 6), ar = get16(out + 10);
	if (rcode != EGRESS_DNS_RCODE_NOERROR)
		CHECK(an == 0);
	CHECK(an <= n_match);
	CHECK(ar <= (q->edns ? 1u : 0u));
	/* TC exactly when something was left out */
	bool tc = (flags & 0x0200) != 0;
	bool complete = (rcode != EGRESS_DNS_RCODE_NOERROR || an == n_match) && ar == (q->edns ? 1u : 0u);
	CHECK(tc == !complete);
	size_t rdlen = q->qtype == EGRESS_DNS_TYPE_A ? 4 : 16;
	CHECK(len == 12 + q->question_len + an * (12 + rdlen) + ar * 11);
}

static const uint8_t v4s[][4] = {{192, 0, 2, 1}, {10, 0, 0, 1}, {198, 51, 100, 7}};
static const uint8_t v6s[][16] = {{0x20, 0x01, 0x0d, 0xb8, [15] = 1}, {[15] = 1}, {0xfe, 0x80, [15] = 9}};

static void build_all(const struct egress_dns_query *q, const uint8_t *data, size_t size)
{
	struct policy_addr addrs[24];
	size_t n = 0, n4 = 0, n6 = 0;
	unsigned mix = size ? data[size - 1] : 0;
	for (size_t i = 0; i < ARRAY_SIZE(addrs) && i < 8 + mix % 17; i++) {
		struct policy_addr *a = &addrs[n++];
		memset(a, 0, sizeof(*a));
		if ((mix >> (i % 8)) & 1) {
			a->family = AF_INET6;
			memcpy(&a->v6, v6s[i % 3], 16);
			n6++;
		} else {
			a->family = AF_INET;
			memcpy(&a->v4, v4s[i % 3], 4);
			n4++;
		}
	}
	size_t n_match = q->qtype == EGRESS_DNS_TYPE_A ? n4 : q->qtype == EGRESS_DNS_TYPE_AAAA ? n6 : 0;
	static const int rcodes[] = {EGRESS_DNS_RCODE_NOERROR, EGRESS_DNS_RCODE_NXDOMAIN, EGRESS_DNS_RCODE_REFUSED, 99};
	size_t head = 12 + q->question_len;
	size_t sizes[] = {
	    512, q->edns ? MIN(q->edns_udp_max, EGRESS_DNS_UDP_MAX) : 512, head + (size_t)(mix % 97), head, head - 1,
	    12};
	uint8_t out[EGRESS_DNS_UDP_MAX];
	for (size_t s = 0; s < ARRAY_SIZE(sizes); s++) {
		for (size_t k = 0; k < ARRAY_SIZE(rcodes); k++) {
			size_t len = SIZE_MAX;
			int r = egress_dns_build_response(q, rcodes[k], addrs, n, 60, out, sizes[s], &len);
			if (sizes[s] < head) {
				CHECK(r == -ENOBUFS);
				CHECK(len == SIZE_MAX);
				continue;
			}
			CHECK(r == 0);
			check_response(q, out, len, sizes[s], rcodes[k], rcodes[k] == 0 ? n_match : 0);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egress_dns_query q1, q2;
	uint16_t id1 = 0x5a5a, id2 = 0x5a5a;
	struct al_error err = {0};
	memset(&q1, 0, sizeof(q1));
	memset(&q2, 0, sizeof(q2));
	int r1 = egress_dns_parse_query(data, size, &q1, &id1, &err);
	int r2 = egress_dns_parse_query(data, size, &q2, &id2, NULL);
	CHECK(r1 == r2);
	CHECK(id1 == id2);
	if (size >= 12)
		CHECK(id1 == get16(data));
	else
		CHECK(id1 == 0x5a5a);
	if (r1 < 0) {
		CHECK(r1 == -EBADMSG || r1 == -EILSEQ);
		CHECK(err.message[0] != '\0');
		if (size >= 12) {
			uint8_t hdr[12];
			egress_dns_build_error(id1, EGRESS_DNS_RCODE_FORMERR, hdr);
			CHECK(get16(hdr) == id1 && get16(hdr + 2) == 0x8081);
		}
		return 0;
	}
	CHECK(q1.id == q2.id && q1.rd == q2.rd && q1.qtype == q2.qtype && q1.qclass == q2.qclass);
	CHECK(q1.name_len == q2.name_len && strcmp(q1.name, q2.name) == 0);
	CHECK(q1.question_len == q2.question_len && memcmp(q1.question, q2.question, q1.question_len) == 0);
	CHECK(q1.edns == q2.edns && q1.edns_udp_max == q2.edns_udp_max);
	CHECK(q1.id == id1);
	CHECK(q1.question_len <= sizeof(q1.question));
	CHECK(size >= 12 + q1.question_len);
	CHECK(memcmp(q1.question, data + 12, q1.question_len) == 0);
	CHECK(!q1.edns || q1.edns_udp_max >= 512);
	check_name(&q1);
	build_all(&q1, data, size);
	return 0;
}
