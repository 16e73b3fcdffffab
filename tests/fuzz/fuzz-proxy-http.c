/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the port proxy's pure parts (src/daemon/api/
 * proxy-http.c, proxy-route.c): a client's request head (or, with the first
 * byte odd, a guest's response head), then its routing, the credentials of
 * its query and cookies, and its rewrite.
 *
 * Checks, beyond the sanitizers:
 *  - an accepted head ends with CRLFCRLF, has no CR or LF but in its line
 *    ends, and its spans stay inside it;
 *  - the rewritten head ends with CRLFCRLF, is the same kind of head again
 *    (it parses), and carries no credential field and no airlock_token.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy-http.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                                    \
	do {                                                                                                           \
		if (!(cond)) {                                                                                         \
			fprintf(stderr, "fuzz-proxy-http: check failed: %s (line %d)\n", #cond, __LINE__);             \
			abort();                                                                                       \
		}                                                                                                      \
	} while (0)

static struct proxy_head head, again;
static char out[PROXY_OUT_MAX];

static void check_spans(const struct proxy_head *h)
{
	CHECK(h->len >= 4 && memcmp(h->raw + h->len - 4, "\r\n\r\n", 4) == 0);
	for (size_t i = 0; i < h->n_fields; i++) {
		CHECK(h->fields[i].name.off + h->fields[i].name.len <= h->len);
		CHECK(h->fields[i].value.off + h->fields[i].value.len <= h->len);
		CHECK(!memchr(h->raw + h->fields[i].value.off, '\r', h->fields[i].value.len));
		CHECK(!memchr(h->raw + h->fields[i].value.off, '\n', h->fields[i].value.len));
	}
}

static void request(const char *text, size_t len)
{
	struct al_error err = {0};
	if (proxy_head_parse(text, len, false, &head, &err) < 0)
		return;
	check_spans(&head);
	const char *host = head.host >= 0 ? head.raw + head.fields[head.host].value.off : NULL;
	size_t host_len = head.host >= 0 ? head.fields[head.host].value.len : 0;
	struct proxy_route r;
	char target[PROXY_HEAD_MAX + 2] = "/", token[PROXY_TOKEN_MAX + 1], cookies[PROXY_HEAD_MAX] = "";
	const char *t = head.raw + head.target.off;
	if (proxy_route_parse(host, host_len, t, head.target.len, "localhost:8080", &r) == 0) {
		CHECK(r.port >= 1 && r.port <= 65535 && strlen(r.id) == PROXY_SANDBOX_ID_MAX);
		CHECK(proxy_route_guest_target(&r, t, head.target.len, target, sizeof(target)) > 0);
		CHECK(target[0] == '/');
	}
	char stripped[PROXY_HEAD_MAX];
	if (proxy_query_take_token(t, head.target.len, token, sizeof(token), stripped, sizeof(stripped)) == 1)
		CHECK(strlen(stripped) < head.target.len);
	for (int i = proxy_head_find(&head, "cookie", 0); i >= 0; i = proxy_head_find(&head, "cookie", (size_t)i + 1))
		proxy_cookie_take(head.raw + head.fields[i].value.off, head.fields[i].value.len, token, sizeof(token),
		                  cookies, sizeof(cookies));
	CHECK(strncmp(cookies, PROXY_COOKIE_NAME "=", strlen(PROXY_COOKIE_NAME "=")) != 0);
	CHECK(!strstr(cookies, "; " PROXY_COOKIE_NAME "="));
	struct proxy_request_rewrite rw = {.target = target,
	                                   .drop_authorization = true,
	                                   .cookie = cookies,
	                                   .upgrade = true,
	                                   .forwarded_for = "127.0.0.1",
	                                   .forwarded_proto = "http"};
	size_t n;
	if (proxy_request_rewrite(&head, &rw, out, sizeof(out), &n) < 0)
		return;
	CHECK(n >= 4 && memcmp(out + n - 4, "\r\n\r\n", 4) == 0);
	if (proxy_head_parse(out, n, false, &again, &err) < 0)
		return; /* a head grown past a limit */
	CHECK(proxy_head_find(&again, "authorization", 0) < 0);
	CHECK(proxy_head_find(&again, "x-airlock-traffic-token", 0) < 0);
	CHECK(proxy_head_find(&again, "e2b-traffic-access-token", 0) < 0);
	CHECK(proxy_head_find(&again, "keep-alive", 0) < 0);
}

static void response(const char *text, size_t len)
{
	struct al_error err = {0};
	if (proxy_head_parse(text, len, true, &head, &err) < 0)
		return;
	check_spans(&head);
	CHECK(head.status >= 100 && head.status <= 999);
	size_t n;
	if (proxy_response_rewrite(&head, true, out, sizeof(out), &n) < 0)
		return;
	CHECK(n >= 4 && memcmp(out + n - 4, "\r\n\r\n", 4) == 0);
	/* The rewrite may add a Connection field to a head at the field or
	 * size limit: past a limit, but never malformed. */
	if (proxy_head_parse(out, n, true, &again, &err) < 0) {
		CHECK(err.code == AL_ERR_TOO_LARGE);
		return;
	}
	CHECK(proxy_head_find(&again, "keep-alive", 0) < 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *text = (const char *)data + 1;
	size_t len = proxy_head_end(text, size - 1);
	if (len == 0)
		return 0;
	if (data[0] & 1)
		response(text, len);
	else
		request(text, len);
	return 0;
}
