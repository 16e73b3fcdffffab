/* SPDX-License-Identifier: Apache-2.0 */
/* The cluster front's parser of a client's request head, its rewrite for a
 * node and the port proxy's host form (src/front/front-head.c), on any
 * bytes. Whatever the input: no crash; a refusal has a message and a code;
 * an accepted head has spans inside it, a Host where HTTP/1.1 needs one, and
 * a rewrite that is itself a head the parser accepts, with exactly one
 * X-Airlock-Principal and Authorization (the front's) and none of the
 * client's X-API-KEY. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "front-head.h"

static void check_span(const struct front_head *h, struct front_span s)
{
	if ((size_t)s.off + s.len > h->len)
		abort();
}

static void check_rewrite(const struct front_head *h)
{
	static char out[FRONT_OUT_MAX];
	static struct front_head again;
	struct front_rewrite rw = {
	    .principal = "tenant:t;exp=1", .authorization = "Bearer acl_x", .forwarded_for = "192.0.2.1"};
	size_t n = 0;
	if (front_head_rewrite(h, &rw, out, sizeof(out), &n) < 0)
		return;
	struct al_error err = {0};
	if (front_head_end(out, n) != n)
		abort();
	/* The client's head at its limits (bytes, fields) plus what the front
	 * adds may pass them: the node has its own. Anything else must parse. */
	int r = front_head_parse(out, n, &again, &err);
	if (r == -E2BIG)
		return;
	if (r < 0)
		abort();
	int p = front_head_find(&again, "X-Airlock-Principal", 0);
	int a = front_head_find(&again, "Authorization", 0);
	if (p < 0 || a < 0 || front_head_find(&again, "X-Airlock-Principal", (size_t)p + 1) >= 0 ||
	    front_head_find(&again, "Authorization", (size_t)a + 1) >= 0 ||
	    front_head_find(&again, "X-API-KEY", 0) >= 0)
		abort();
	if (again.upgrade != h->upgrade || again.has_length != h->has_length || again.chunked != h->chunked ||
	    again.content_length != h->content_length)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct front_head h;
	const char *buf = (const char *)data;
	size_t end = front_head_end(buf, size);
	if (end > size)
		abort();
	struct al_error err = {0};
	if (front_head_parse(buf, end ? end : size, &h, &err) < 0) {
		if (!err.code || !err.message[0])
			abort();
		return 0;
	}
	check_span(&h, h.method);
	check_span(&h, h.target);
	check_span(&h, h.path);
	check_span(&h, h.query);
	for (size_t i = 0; i < h.n_fields; i++) {
		check_span(&h, h.fields[i].name);
		check_span(&h, h.fields[i].value);
	}
	if (h.minor_version == 1 && h.host < 0)
		abort();
	char host[FRONT_HOST_MAX + 1], id[FRONT_SANDBOX_ID_LEN + 1];
	if (front_head_value(&h, "Host", host, sizeof(host)) == 1 && front_proxy_host(host, id) == 0 &&
	    !front_sandbox_id_valid(id, strlen(id)))
		abort();
	check_rewrite(&h);
	return 0;
}
