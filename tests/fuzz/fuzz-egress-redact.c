/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the response parser and streaming redactor of
 * intercepted connections (src/egress/egress-redact.c, issue 17): the
 * server's plaintext toward the guest.
 *
 * The first byte picks how the stream is split and which of the four
 * requests were HEAD; the rest is the server's stream. Checks, beyond the
 * sanitizers:
 *  - what is released is the input with some bytes replaced by '*', in
 *    order, never longer than the input;
 *  - the value (it has characters a chunk size cannot hold) never appears
 *    whole in what is released, whatever the framing and the split.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress-redact.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-egress-redact: check failed: %s (line %d)\n", #cond, __LINE__);          \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

#define VALUE "SECRET-VAL"

static uint8_t out[1 << 20];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > sizeof(out))
		return 0;
	uint8_t sel = data[0];
	data++;
	size--;
	size_t step = (size_t)(sel & 7) * 3 + 1;
	cleanup_egress_redactor struct egress_redactor *r = egress_redactor_new();
	CHECK(egress_redactor_add_value(r, VALUE, strlen(VALUE)) == 0);
	for (int i = 0; i < 4; i++)
		CHECK(egress_redactor_request(r, (sel >> (3 + i)) & 1, true) == 0);
	size_t off = 0, o = 0;
	int e = 0;
	while (off < size && e == 0) {
		size_t k = MIN(step, size - off);
		k = MIN(k, egress_redactor_room(r));
		CHECK(k > 0);
		struct al_error err = {0};
		e = egress_redactor_feed(r, data + off, k, &err);
		CHECK(e == 0 || e == -EBADMSG || e == -E2BIG || e == -EPROTONOSUPPORT);
		CHECK(e == 0 || err.message[0] != '\0');
		off += k;
		const uint8_t *p;
		size_t m = egress_redactor_ready(r, &p);
		CHECK(o + m <= off);
		memcpy(out + o, p, m);
		o += m;
		egress_redactor_sent(r, m);
	}
	if (e == 0)
		egress_redactor_finish(r);
	const uint8_t *p;
	size_t m = egress_redactor_ready(r, &p);
	CHECK(o + m <= size);
	memcpy(out + o, p, m);
	o += m;
	for (size_t i = 0; i < o; i++)
		CHECK(out[i] == data[i] || out[i] == '*');
	CHECK(memmem(out, o, VALUE, strlen(VALUE)) == NULL);
	return 0;
}
