/* SPDX-License-Identifier: Apache-2.0 */
/* Text from a guest or from another tenant's data, made safe to print on a
 * person's terminal. */
#include "cli.h"

#define ESC_RING 16 /* results alive at once: enough for the widest printf */

/* Bytes of the UTF-8 sequence starting at p (1..4), or 0 if it is not valid
 * (overlong, a surrogate, past U+10FFFF, truncated); *ret_cp the code point. */
static size_t utf8_decode(const unsigned char *p, uint32_t *ret_cp)
{
	unsigned char c = p[0];
	size_t n;
	uint32_t cp, min;
	if (c < 0x80) {
		*ret_cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf)
		n = 2, cp = c & 0x1f, min = 0x80;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, cp = c & 0x0f, min = 0x800;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, cp = c & 0x07, min = 0x10000;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0; /* also stops at the NUL of a truncated sequence */
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	*ret_cp = cp;
	return n;
}

/* Code points a terminal acts on or that reorder what is shown: C0, DEL, C1,
 * and the bidirectional overrides and isolates ("Trojan Source"). */
static bool cp_unsafe(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
	       (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e || cp == 0x200f || cp == 0x061c;
}

const char *cli_esc(const char *s)
{
	static char *ring[ESC_RING];
	static size_t next;
	if (!s)
		return "(null)";
	const unsigned char *p = (const unsigned char *)s;
	size_t len = strlen(s);
	/* The common case, nothing to escape, costs no copy. */
	bool clean = true;
	for (size_t i = 0; i < len && clean; i++)
		clean = p[i] >= 0x20 && p[i] < 0x7f;
	if (clean)
		return s;
	char *out = xmalloc(len * 6 + 1); /* "\u202e" (6) is the widest for one byte or more */
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t n = utf8_decode(p + i, &cp);
		if (n == 0) {
			o += (size_t)snprintf(out + o, 5, "\\x%02x", p[i]);
			i++;
		} else if (cp_unsafe(cp)) {
			o += (size_t)(cp < 0x80 ? snprintf(out + o, 5, "\\x%02x", cp)
			                        : snprintf(out + o, 7, "\\u%04x", cp));
			i += n;
		} else {
			memcpy(out + o, p + i, n);
			o += n;
			i += n;
		}
	}
	out[o] = '\0';
	free(ring[next]);
	ring[next] = out;
	next = (next + 1) % ESC_RING;
	return out;
}

const char *cli_esc_json(json_t *obj, const char *key)
{
	return cli_esc(json_string_value(json_object_get(obj, key)));
}
