/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the egress gateway's HTTP/1.x request head reader
 * (src/egress/egress-http.c): the first bytes a guest sends on port 80.
 *
 * Checks, beyond the sanitizers:
 *  - a prefix of the input that gets a definite answer gets the same kind of
 *    answer from the whole input (success: the same request; error: an
 *    error), so feeding the bytes in pieces cannot change the decision;
 *  - an accepted head ends with CRLFCRLF within EGRESS_HTTP_HEAD_MAX, and
 *    its Host is non-empty, bounded, and free of NUL, CR, LF, whitespace
 *    and other control characters.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "egress-http.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-egress-http: check failed: %s (line %d)\n", #cond, __LINE__);            \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static void check_request(const struct egress_http_request *req, const uint8_t *data, size_t size)
{
	CHECK(req->head_len >= 4 && req->head_len <= size && req->head_len <= EGRESS_HTTP_HEAD_MAX);
	CHECK(memcmp(data + req->head_len - 4, "\r\n\r\n", 4) == 0);
	CHECK(req->host_len >= 1 && req->host_len <= EGRESS_HTTP_HOST_MAX);
	CHECK(strlen(req->host) == req->host_len);
	for (size_t i = 0; i < req->host_len; i++) {
		uint8_t c = (uint8_t)req->host[i];
		CHECK(c > 0x20 && c != 0x7f);
	}
	CHECK(req->minor_version == 0 || req->minor_version == 1);
	CHECK(strlen(req->method) >= 1 && strlen(req->method) <= EGRESS_HTTP_METHOD_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct egress_http_request full;
	struct al_error err = {0};
	int want = egress_http_read_request_head(data, size, &full, &err);
	CHECK(want == 0 || want == -EAGAIN || want == -E2BIG || want == -EBADMSG || want == -ENODATA);
	if (want == 0)
		check_request(&full, data, size);
	else if (want != -EAGAIN)
		CHECK(err.message[0] != '\0');
	if (want == -EAGAIN)
		CHECK(size < EGRESS_HTTP_HEAD_MAX);

	/* A few prefixes, chosen by the input's last bytes. */
	for (int k = 0; k < 4 && size > 0; k++) {
		size_t cut = (size_t)(data[size - 1 - (size_t)k % size] * 257u + (unsigned)k * 7919u) % size;
		struct egress_http_request req;
		int r = egress_http_read_request_head(data, cut, &req, NULL);
		if (r == -EAGAIN)
			continue;
		if (r == 0) {
			CHECK(want == 0);
			check_request(&req, data, cut);
			CHECK(req.head_len == full.head_len);
			CHECK(strcmp(req.host, full.host) == 0);
			CHECK(strcmp(req.method, full.method) == 0);
		} else {
			CHECK(want < 0 && want != -EAGAIN);
		}
	}
	return 0;
}
