/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the egress gateway's TLS ClientHello reader
 * (src/egress/egress-tls.c): the first bytes a guest sends on port 443.
 *
 * Mode (first byte, low bit): 0 = the rest is the byte stream as is;
 * 1 = the rest is a handshake message, wrapped here into handshake records
 * of a size taken from the second byte (so the fuzzer spends its time in the
 * ClientHello parser instead of on record headers). Checks, beyond the
 * sanitizers:
 *  - more bytes never change a definite answer: following ret_need from an
 *    empty buffer, and any shorter prefix that gets a definite answer,
 *    agree with the whole input;
 *  - ret_need always grows and stays within EGRESS_TLS_PEEK_MAX;
 *  - on success the SNI is 1..255 bytes and consumed is within the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "egress-tls.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-egress-tls: check failed: %s (line %d)\n", #cond, __LINE__);             \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static uint8_t wrapped[2 * 20000 + 1024];

static size_t wrap(const uint8_t *msg, size_t len, size_t rec_size)
{
	size_t o = 0;
	for (size_t off = 0; off < len && o + 5 + rec_size <= sizeof(wrapped); off += rec_size) {
		size_t l = MIN(rec_size, len - off);
		wrapped[o++] = 22;
		wrapped[o++] = 3;
		wrapped[o++] = 1;
		wrapped[o++] = (uint8_t)(l >> 8);
		wrapped[o++] = (uint8_t)l;
		memcpy(wrapped + o, msg + off, l);
		o += l;
	}
	return o;
}

static void same_result(int r, const struct egress_tls_client_hello *h, int want,
                        const struct egress_tls_client_hello *want_h)
{
	CHECK(r == want);
	if (r == 0) {
		CHECK(h->sni_len == want_h->sni_len);
		CHECK(memcmp(h->sni, want_h->sni, h->sni_len) == 0);
		CHECK(h->consumed == want_h->consumed);
		CHECK(h->legacy_version == want_h->legacy_version);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	const uint8_t *in = data + 1;
	size_t len = size - 1;
	if (data[0] & 1) {
		size_t rec_size = 1 + (size_t)data[1] * 67u % EGRESS_TLS_RECORD_MAX;
		if (data[1] == 0xff)
			rec_size = EGRESS_TLS_RECORD_MAX;
		len = wrap(data + 2, size - 2, rec_size);
		in = wrapped;
	}

	struct egress_tls_client_hello full;
	size_t full_need = 0;
	struct al_error err = {0};
	int want = egress_tls_read_client_hello(in, len, &full, &full_need, &err);
	CHECK(want == 0 || want == -EAGAIN || want == -EPROTO || want == -EBADMSG || want == -E2BIG ||
	      want == -EACCES || want == -ENODATA);
	if (want == -EAGAIN) {
		CHECK(full_need > len && full_need <= EGRESS_TLS_PEEK_MAX);
	} else if (want < 0) {
		CHECK(err.message[0] != '\0');
	} else {
		CHECK(full.sni_len >= 1 && full.sni_len <= EGRESS_TLS_SNI_MAX);
		CHECK(full.consumed <= len);
	}

	/* Follow ret_need from nothing, as the gateway does. */
	size_t have = 0;
	for (unsigned steps = 0;; steps++) {
		CHECK(steps < 100000);
		struct egress_tls_client_hello h;
		size_t need = 0;
		int r = egress_tls_read_client_hello(in, have, &h, &need, NULL);
		if (r != -EAGAIN) {
			same_result(r, &h, want, &full);
			if (r == 0)
				CHECK(h.consumed <= have);
			break;
		}
		CHECK(need > have && need <= EGRESS_TLS_PEEK_MAX);
		/* Beyond the input: the whole input may still have been refused
		 * early, from the start of a record it has not got in full. */
		if (need > len)
			break;
		have = need;
	}

	/* An arbitrary prefix: either "more", or the same answer. */
	size_t cut = len ? (size_t)data[size - 1] * 131u % len : 0;
	struct egress_tls_client_hello h;
	size_t need;
	int r = egress_tls_read_client_hello(in, cut, &h, &need, NULL);
	if (r != -EAGAIN)
		same_result(r, &h, want, &full);
	return 0;
}
