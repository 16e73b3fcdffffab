/* SPDX-License-Identifier: Apache-2.0 */
/* Which sandbox port a proxied request is for, and the credentials it may
 * carry in its query or cookies (proxy-http.h). */
#include "proxy-http.h"

#include <errno.h>
#include <string.h>

#include "util.h"

static unsigned char lower(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* A port in decimal without a sign or leading zero, 1..65535. */
static bool port_parse(const char *s, size_t len, unsigned *ret)
{
	if (len == 0 || len > 5 || s[0] == '0')
		return false;
	unsigned v = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > 65535)
		return false;
	*ret = v;
	return true;
}

static bool id_take(const char *s, size_t len, char out[PROXY_SANDBOX_ID_MAX + 1])
{
	if (len != PROXY_SANDBOX_ID_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		out[i] = (char)lower((unsigned char)s[i]);
	out[len] = '\0';
	return sandbox_id_valid(out);
}

/* host:port split of a Host value or the domain; an IPv6 literal keeps its
 * brackets. */
static void split_port(const char *s, size_t len, size_t *ret_host_len, const char **ret_port, size_t *ret_port_len)
{
	size_t colon = len;
	for (size_t i = len; i > 0; i--) {
		if (s[i - 1] == ':') {
			colon = i - 1;
			break;
		}
		if (s[i - 1] == ']')
			break;
	}
	*ret_host_len = colon;
	*ret_port = colon < len ? s + colon + 1 : NULL;
	*ret_port_len = colon < len ? len - colon - 1 : 0;
}

static bool case_equal_n(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
			return false;
	return true;
}

/* SECURITY: the Host decides the sandbox; only "<port>-<id>." followed by
 * exactly the domain (and its port, when it names one) matches. */
static int route_host(const char *host, size_t host_len, const char *domain, struct proxy_route *ret)
{
	size_t dlen = strlen(domain), dhost_len, hhost_len, dport_len, hport_len;
	const char *dport, *hport;
	split_port(domain, dlen, &dhost_len, &dport, &dport_len);
	split_port(host, host_len, &hhost_len, &hport, &hport_len);
	if (dport && (!hport || hport_len != dport_len || memcmp(hport, dport, dport_len) != 0))
		return -ENOENT;
	if (hhost_len <= dhost_len + 1 || host[hhost_len - dhost_len - 1] != '.' ||
	    !case_equal_n(host + hhost_len - dhost_len, domain, dhost_len))
		return -ENOENT;
	size_t label_len = hhost_len - dhost_len - 1;
	const char *dash = memchr(host, '-', label_len);
	if (!dash)
		return -ENOENT;
	struct proxy_route r = {0};
	if (!port_parse(host, (size_t)(dash - host), &r.port) ||
	    !id_take(dash + 1, label_len - (size_t)(dash + 1 - host), r.id))
		return -ENOENT;
	*ret = r;
	return 0;
}

static int route_path(const char *target, size_t len, struct proxy_route *ret)
{
	size_t plen = strlen(PROXY_PATH_PREFIX);
	if (len < plen || memcmp(target, PROXY_PATH_PREFIX, plen) != 0)
		return -ENOENT;
	const char *id = target + plen;
	const char *end = target + len;
	const char *slash = memchr(id, '/', (size_t)(end - id));
	if (!slash)
		return -ENOENT;
	struct proxy_route r = {.path_form = true};
	/* Ids are lowercase in paths: the path is case-sensitive. */
	if ((size_t)(slash - id) != PROXY_SANDBOX_ID_MAX)
		return -ENOENT;
	memcpy(r.id, id, PROXY_SANDBOX_ID_MAX);
	r.id[PROXY_SANDBOX_ID_MAX] = '\0';
	if (!sandbox_id_valid(r.id))
		return -ENOENT;
	const char *port = slash + 1, *p = port;
	while (p < end && *p != '/' && *p != '?')
		p++;
	if (!port_parse(port, (size_t)(p - port), &r.port))
		return -ENOENT;
	r.prefix_len = (size_t)(p - target);
	*ret = r;
	return 0;
}

int proxy_route_parse(const char *host, size_t host_len, const char *target, size_t target_len, const char *domain,
                      struct proxy_route *ret)
{
	if (host && route_host(host, host_len, domain, ret) == 0)
		return 0;
	return route_path(target, target_len, ret);
}

size_t proxy_route_guest_target(const struct proxy_route *r, const char *target, size_t target_len, char *out,
                                size_t out_size)
{
	const char *rest = target + r->prefix_len;
	size_t rest_len = target_len - r->prefix_len;
	bool slash = rest_len == 0 || rest[0] == '?';
	size_t n = rest_len + (slash ? 1 : 0);
	if (n + 1 > out_size)
		return 0;
	size_t o = 0;
	if (slash)
		out[o++] = '/';
	memcpy(out + o, rest, rest_len);
	out[n] = '\0';
	return n;
}

int proxy_query_take_token(const char *target, size_t target_len, char *ret_token, size_t token_size, char *ret_target,
                           size_t target_size)
{
	const char *q = memchr(target, '?', target_len);
	if (!q)
		return 0;
	size_t nlen = strlen(PROXY_QUERY_NAME);
	const char *end = target + target_len;
	const char *p = q + 1;
	while (p <= end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *pe = amp ? amp : end;
		if ((size_t)(pe - p) > nlen && memcmp(p, PROXY_QUERY_NAME, nlen) == 0 && p[nlen] == '=') {
			size_t vlen = (size_t)(pe - p) - nlen - 1;
			if (vlen + 1 > token_size || target_len + 1 > target_size)
				return -E2BIG;
			memcpy(ret_token, p + nlen + 1, vlen);
			ret_token[vlen] = '\0';
			/* The target without this parameter and its '&'. */
			size_t o = 0, before = (size_t)(p - target);
			memcpy(ret_target, target, before);
			o = before;
			if (amp) {
				size_t after = (size_t)(end - (amp + 1));
				memcpy(ret_target + o, amp + 1, after);
				o += after;
			} else if (o > 0 && (ret_target[o - 1] == '&' || ret_target[o - 1] == '?')) {
				o--;
			}
			ret_target[o] = '\0';
			return 1;
		}
		if (!amp)
			break;
		p = amp + 1;
	}
	return 0;
}

int proxy_cookie_take(const char *value, size_t len, char *ret_token, size_t token_size, char *ret_rest,
                      size_t rest_size)
{
	int found = 0;
	size_t rest_len = strlen(ret_rest), nlen = strlen(PROXY_COOKIE_NAME);
	size_t i = 0;
	while (i < len) {
		while (i < len && (value[i] == ' ' || value[i] == '\t' || value[i] == ';'))
			i++;
		size_t s = i;
		while (i < len && value[i] != ';')
			i++;
		size_t e = i;
		while (e > s && (value[e - 1] == ' ' || value[e - 1] == '\t'))
			e--;
		if (e == s)
			continue;
		const char *pair = value + s;
		size_t plen = e - s;
		if (plen > nlen && memcmp(pair, PROXY_COOKIE_NAME, nlen) == 0 && pair[nlen] == '=') {
			size_t vlen = plen - nlen - 1;
			if (vlen + 1 > token_size)
				return -E2BIG;
			memcpy(ret_token, pair + nlen + 1, vlen);
			ret_token[vlen] = '\0';
			found = 1;
			continue;
		}
		size_t need = plen + (rest_len ? 2 : 0);
		if (rest_len + need + 1 > rest_size)
			return -E2BIG;
		if (rest_len) {
			memcpy(ret_rest + rest_len, "; ", 2);
			rest_len += 2;
		}
		memcpy(ret_rest + rest_len, pair, plen);
		rest_len += plen;
		ret_rest[rest_len] = '\0';
	}
	return found;
}
