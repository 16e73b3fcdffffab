/* SPDX-License-Identifier: Apache-2.0 */
#include "cli-port-spec.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* n digits of s, at most 5, as a number up to 65535; -1 if not. */
static long port_digits(const char *s, size_t n)
{
	long v = 0;
	if (n < 1 || n > 5)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v <= 65535 ? v : -1;
}

static bool addr_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
	       c == ':' || c == '%' || c == '_';
}

/* The address part (brackets already removed): 1-PORT_SPEC_ADDR_MAX of
 * host-name and address characters; ':' only inside brackets. */
static bool addr_ok(const char *s, size_t n, bool bracketed)
{
	if (n < 1 || n > PORT_SPEC_ADDR_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!addr_char_ok(s[i]) || (s[i] == ':' && !bracketed))
			return false;
	return true;
}

/* SECURITY: the user's operand; bounded (PORT_SPEC_MAX), the address goes
 * to getaddrinfo only after this check of its characters. */
int port_spec_parse(const char *s, struct port_spec *ret, char *why, size_t why_size)
{
	static const char form[] = "a port forward is [LOCAL_ADDR:]LOCAL_PORT:REMOTE_PORT or PORT (e.g. 8080:80, "
	                           "0:80 for any free local port, 0.0.0.0:8080:80, [::1]:8080:80)";
	size_t len = strnlen(s, PORT_SPEC_MAX + 1);
	struct port_spec p = {.addr = PORT_SPEC_DEFAULT_ADDR};
	if (len == 0 || len > PORT_SPEC_MAX) {
		snprintf(why, why_size, "%s", form);
		return -EINVAL;
	}
	const char *last = memrchr(s, ':', len);
	const char *remote = last ? last + 1 : s;
	long rport = port_digits(remote, len - (size_t)(remote - s));
	if (rport < 1) {
		snprintf(why, why_size, "REMOTE_PORT must be a number 1-65535; %s", form);
		return -EINVAL;
	}
	p.remote_port = (unsigned)rport;
	if (!last) {
		p.local_port = p.remote_port;
		*ret = p;
		return 0;
	}
	/* s[0..last): LOCAL_PORT, ADDR:LOCAL_PORT or [V6]:LOCAL_PORT. */
	size_t head = (size_t)(last - s);
	const char *lport = s;
	if (s[0] == '[') {
		const char *close = memchr(s, ']', head);
		if (!close || close + 1 >= last || close[1] != ':' || !addr_ok(s + 1, (size_t)(close - s - 1), true)) {
			snprintf(why, why_size, "bad [IPv6] address; %s", form);
			return -EINVAL;
		}
		memcpy(p.addr, s + 1, (size_t)(close - s - 1));
		p.addr[close - s - 1] = '\0';
		lport = close + 2;
	} else {
		const char *colon = memrchr(s, ':', head);
		if (colon) {
			if (!addr_ok(s, (size_t)(colon - s), false)) {
				snprintf(why, why_size, "bad LOCAL_ADDR; %s", form);
				return -EINVAL;
			}
			memcpy(p.addr, s, (size_t)(colon - s));
			p.addr[colon - s] = '\0';
			lport = colon + 1;
		}
	}
	long l = port_digits(lport, (size_t)(last - lport));
	if (l < 0) {
		snprintf(why, why_size, "LOCAL_PORT must be a number 0-65535 (0: any free port); %s", form);
		return -EINVAL;
	}
	p.local_port = (unsigned)l;
	*ret = p;
	return 0;
}
