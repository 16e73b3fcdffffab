/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host canonicalisation and host:port splitting of the policy grammar. See
 * policy-host.h for the canonical forms.
 *
 * IDN: there is no IDNA/UTS 46 library among the kept dependencies, and a
 * partial implementation that guesses is worse than none, so U-labels are
 * accepted only from a small, explicit repertoire whose lower-case mapping is
 * simple and whose characters are already in NFC and PVALID under IDNA2008:
 * Latin (ASCII, Latin-1, Latin Extended-A), Greek, Cyrillic, Han, Hiragana,
 * Katakana and Hangul syllables. A label may not mix scripts except in the
 * combinations of UTS 39 "highly restrictive" (Latin with Han/Hiragana/
 * Katakana, or Latin with Han/Hangul). Everything else (combining marks,
 * compatibility characters, right-to-left scripts, symbols, other dots than
 * U+002E) is refused with -EILSEQ.
 */
#include "policy-host.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "util.h"

/* ------------------------------------------------------------ characters */

enum script {
	SC_COMMON = 0, /* digits, hyphen */
	SC_LATIN = 1u << 0,
	SC_GREEK = 1u << 1,
	SC_CYRILLIC = 1u << 2,
	SC_HAN = 1u << 3,
	SC_HIRAGANA = 1u << 4,
	SC_KATAKANA = 1u << 5,
	SC_HANGUL = 1u << 6,
};

/* The script combinations a single label may use (a subset of one of these). */
static const unsigned script_sets[] = {
    SC_LATIN, SC_GREEK, SC_CYRILLIC, SC_LATIN | SC_HAN | SC_HIRAGANA | SC_KATAKANA, SC_LATIN | SC_HAN | SC_HANGUL,
};

enum case_map {
	MAP_NONE,    /* already lower case (or caseless) */
	MAP_DELTA,   /* upper case: add delta */
	MAP_EVEN_UP, /* pairs: even code point upper, the next one its lower */
	MAP_ODD_UP,  /* pairs: odd code point upper, the next one its lower */
};

struct char_range {
	uint32_t lo, hi;
	unsigned script;
	enum case_map map;
	int32_t delta;
};

static const struct char_range char_table[] = {
    {'-', '-', SC_COMMON, MAP_NONE, 0},
    {'0', '9', SC_COMMON, MAP_NONE, 0},
    {'A', 'Z', SC_LATIN, MAP_DELTA, 0x20},
    {'a', 'z', SC_LATIN, MAP_NONE, 0},
    {0x00c0, 0x00d6, SC_LATIN, MAP_DELTA, 0x20},
    {0x00d8, 0x00de, SC_LATIN, MAP_DELTA, 0x20},
    {0x00df, 0x00f6, SC_LATIN, MAP_NONE, 0}, /* includes sharp s, kept as in IDNA2008 */
    {0x00f8, 0x00ff, SC_LATIN, MAP_NONE, 0},
    {0x0100, 0x012f, SC_LATIN, MAP_EVEN_UP, 0},
    {0x0131, 0x0131, SC_LATIN, MAP_NONE, 0},
    {0x0134, 0x0137, SC_LATIN, MAP_EVEN_UP, 0},
    {0x0138, 0x0138, SC_LATIN, MAP_NONE, 0},
    {0x0139, 0x013e, SC_LATIN, MAP_ODD_UP, 0},
    {0x0141, 0x0148, SC_LATIN, MAP_ODD_UP, 0},
    {0x014a, 0x0177, SC_LATIN, MAP_EVEN_UP, 0},
    {0x0178, 0x0178, SC_LATIN, MAP_DELTA, 0x00ff - 0x0178},
    {0x0179, 0x017e, SC_LATIN, MAP_ODD_UP, 0},
    {0x0386, 0x0386, SC_GREEK, MAP_DELTA, 0x03ac - 0x0386},
    {0x0388, 0x038a, SC_GREEK, MAP_DELTA, 0x03ad - 0x0388},
    {0x038c, 0x038c, SC_GREEK, MAP_DELTA, 0x03cc - 0x038c},
    {0x038e, 0x038f, SC_GREEK, MAP_DELTA, 0x03cd - 0x038e},
    {0x0390, 0x0390, SC_GREEK, MAP_NONE, 0},
    {0x0391, 0x03a1, SC_GREEK, MAP_DELTA, 0x20},
    {0x03a3, 0x03ab, SC_GREEK, MAP_DELTA, 0x20},
    {0x03ac, 0x03ce, SC_GREEK, MAP_NONE, 0},
    {0x0400, 0x040f, SC_CYRILLIC, MAP_DELTA, 0x50},
    {0x0410, 0x042f, SC_CYRILLIC, MAP_DELTA, 0x20},
    {0x0430, 0x045f, SC_CYRILLIC, MAP_NONE, 0},
    {0x0490, 0x04bf, SC_CYRILLIC, MAP_EVEN_UP, 0},
    {0x04c1, 0x04ce, SC_CYRILLIC, MAP_ODD_UP, 0},
    {0x04d0, 0x04ff, SC_CYRILLIC, MAP_EVEN_UP, 0},
    {0x3041, 0x3096, SC_HIRAGANA, MAP_NONE, 0},
    {0x30a1, 0x30fa, SC_KATAKANA, MAP_NONE, 0},
    {0x30fc, 0x30fc, SC_KATAKANA, MAP_NONE, 0}, /* prolonged sound mark */
    {0x3400, 0x4dbf, SC_HAN, MAP_NONE, 0},
    {0x4e00, 0x9fff, SC_HAN, MAP_NONE, 0},
    {0xac00, 0xd7a3, SC_HANGUL, MAP_NONE, 0},
};

/* Maps a code point to its canonical (lower-case) form and script; -EILSEQ
 * if it is outside the repertoire. */
static int char_canonical(uint32_t cp, uint32_t *ret_cp, unsigned *ret_script)
{
	for (size_t i = 0; i < ARRAY_SIZE(char_table); i++) {
		const struct char_range *r = &char_table[i];
		if (cp < r->lo || cp > r->hi)
			continue;
		uint32_t out = cp;
		switch (r->map) {
		case MAP_NONE:
			break;
		case MAP_DELTA:
			out = (uint32_t)((int32_t)cp + r->delta);
			break;
		case MAP_EVEN_UP:
			out = cp | 1u;
			break;
		case MAP_ODD_UP:
			out = (cp & 1u) ? cp + 1 : cp;
			break;
		}
		*ret_cp = out;
		*ret_script = r->script;
		return 0;
	}
	return -EILSEQ;
}

static bool scripts_ok(unsigned mask)
{
	for (size_t i = 0; i < ARRAY_SIZE(script_sets); i++) {
		if ((mask & ~script_sets[i]) == 0)
			return true;
	}
	return false;
}

/* ------------------------------------------------------------ punycode (RFC 3492) */

#define PUNY_BASE 36u
#define PUNY_TMIN 1u
#define PUNY_TMAX 26u
#define PUNY_SKEW 38u
#define PUNY_DAMP 700u
#define PUNY_INITIAL_BIAS 72u
#define PUNY_INITIAL_N 0x80u

static uint32_t puny_adapt(uint32_t delta, uint32_t numpoints, bool first)
{
	delta = first ? delta / PUNY_DAMP : delta / 2;
	delta += delta / numpoints;
	uint32_t k = 0;
	while (delta > ((PUNY_BASE - PUNY_TMIN) * PUNY_TMAX) / 2) {
		delta /= PUNY_BASE - PUNY_TMIN;
		k += PUNY_BASE;
	}
	return k + (PUNY_BASE - PUNY_TMIN + 1) * delta / (delta + PUNY_SKEW);
}

static char puny_digit(uint32_t d)
{
	return (char)(d < 26 ? 'a' + d : '0' + (d - 26));
}

static uint32_t puny_threshold(uint32_t k, uint32_t bias)
{
	if (k <= bias)
		return PUNY_TMIN;
	if (k >= bias + PUNY_TMAX)
		return PUNY_TMAX;
	return k - bias;
}

int policy_punycode_encode(const uint32_t *cps, size_t n, char *out, size_t out_size, size_t *ret_len)
{
	size_t o = 0;
	uint32_t basic = 0;
	if (n > UINT32_MAX / 2)
		return -EOVERFLOW;
	for (size_t i = 0; i < n; i++) {
		if (cps[i] < 0x80) {
			if (o >= out_size)
				return -ENAMETOOLONG;
			out[o++] = (char)cps[i];
			basic++;
		}
	}
	if (basic > 0) {
		if (o >= out_size)
			return -ENAMETOOLONG;
		out[o++] = '-';
	}
	uint32_t cur = PUNY_INITIAL_N, delta = 0, bias = PUNY_INITIAL_BIAS, h = basic;
	while (h < n) {
		uint32_t m = UINT32_MAX;
		for (size_t i = 0; i < n; i++) {
			if (cps[i] >= cur && cps[i] < m)
				m = cps[i];
		}
		if (m - cur > (UINT32_MAX - delta) / (h + 1))
			return -EOVERFLOW;
		delta += (m - cur) * (h + 1);
		cur = m;
		for (size_t i = 0; i < n; i++) {
			if (cps[i] < cur) {
				if (delta == UINT32_MAX)
					return -EOVERFLOW;
				delta++;
			}
			if (cps[i] != cur)
				continue;
			uint32_t q = delta;
			for (uint32_t k = PUNY_BASE;; k += PUNY_BASE) {
				uint32_t t = puny_threshold(k, bias);
				if (q < t)
					break;
				if (o >= out_size)
					return -ENAMETOOLONG;
				out[o++] = puny_digit(t + (q - t) % (PUNY_BASE - t));
				q = (q - t) / (PUNY_BASE - t);
			}
			if (o >= out_size)
				return -ENAMETOOLONG;
			out[o++] = puny_digit(q);
			bias = puny_adapt(delta, h + 1, h == basic);
			delta = 0;
			h++;
		}
		delta++;
		cur++;
	}
	*ret_len = o;
	return 0;
}

static int puny_digit_value(char c)
{
	if (c >= 'a' && c <= 'z')
		return c - 'a';
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= '0' && c <= '9')
		return c - '0' + 26;
	return -1;
}

int policy_punycode_decode(const char *in, size_t len, uint32_t *out, size_t out_max, size_t *ret_n)
{
	size_t b = 0;
	for (size_t j = 0; j < len; j++) {
		if (in[j] == '-')
			b = j;
	}
	if (b > out_max)
		return -EINVAL;
	size_t n_out = 0;
	for (size_t j = 0; j < b; j++) {
		if ((unsigned char)in[j] >= 0x80)
			return -EINVAL;
		out[n_out++] = (unsigned char)in[j];
	}
	uint32_t cur = PUNY_INITIAL_N, i = 0, bias = PUNY_INITIAL_BIAS;
	for (size_t pos = b > 0 ? b + 1 : 0; pos < len;) {
		uint32_t oldi = i, w = 1;
		for (uint32_t k = PUNY_BASE;; k += PUNY_BASE) {
			if (pos >= len)
				return -EINVAL;
			int digit = puny_digit_value(in[pos++]);
			if (digit < 0)
				return -EINVAL;
			if ((uint32_t)digit > (UINT32_MAX - i) / w)
				return -EINVAL;
			i += (uint32_t)digit * w;
			uint32_t t = puny_threshold(k, bias);
			if ((uint32_t)digit < t)
				break;
			if (w > UINT32_MAX / (PUNY_BASE - t))
				return -EINVAL;
			w *= PUNY_BASE - t;
		}
		uint32_t count = (uint32_t)n_out + 1;
		bias = puny_adapt(i - oldi, count, oldi == 0);
		if (i / count > UINT32_MAX - cur)
			return -EINVAL;
		cur += i / count;
		i %= count;
		if (cur < 0x80 || cur > 0x10ffff || (cur >= 0xd800 && cur <= 0xdfff))
			return -EINVAL;
		if (n_out >= out_max)
			return -EINVAL;
		memmove(out + i + 1, out + i, (n_out - i) * sizeof(*out));
		out[i] = cur;
		n_out++;
		i++;
	}
	*ret_n = n_out;
	return 0;
}

/* ------------------------------------------------------------ labels */

static bool is_ldh(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

/* Checks the code points of a U-label (after mapping) and appends its
 * A-label to out. */
static int ulabel_to_alabel(const uint32_t *cps, size_t n, char *out, size_t out_size, size_t *ret_len,
                            struct al_error *err)
{
	unsigned mask = 0;
	bool non_ascii = false;
	for (size_t i = 0; i < n; i++) {
		uint32_t mapped;
		unsigned sc;
		if (char_canonical(cps[i], &mapped, &sc) < 0 || mapped != cps[i])
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EILSEQ,
			                    "character U+%04X cannot be used in a host name", (unsigned)cps[i]);
		mask |= sc;
		non_ascii |= cps[i] >= 0x80;
	}
	if (!non_ascii)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "an IDN label has no non-ASCII character");
	if (!scripts_ok(mask))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EILSEQ, "a label mixes scripts");
	if (cps[0] == '-' || cps[n - 1] == '-')
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "a label starts or ends with a hyphen");
	if (n >= 4 && cps[2] == '-' && cps[3] == '-')
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "an IDN label has hyphens in positions 3 and 4");
	if (out_size < 4)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "a label is longer than 63 bytes");
	memcpy(out, "xn--", 4);
	size_t plen;
	int r = policy_punycode_encode(cps, n, out + 4, out_size - 4, &plen);
	if (r < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "a label is longer than 63 bytes");
	*ret_len = 4 + plen;
	return 0;
}

/* One label (no dots) into out (at most POLICY_HOST_LABEL_MAX bytes). */
static int label_canonical(const uint8_t *in, size_t len, char *out, size_t *ret_len, struct al_error *err)
{
	if (len == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "empty label");
	bool ascii = true;
	for (size_t i = 0; i < len; i++)
		ascii &= in[i] < 0x80;

	if (!ascii) {
		uint32_t cps[POLICY_HOST_LABEL_MAX];
		size_t n = 0;
		for (size_t i = 0; i < len;) {
			uint32_t cp;
			int l = utf8_next(in + i, len - i, &cp);
			if (l < 0)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EILSEQ, "invalid UTF-8");
			i += (size_t)l;
			unsigned sc;
			if (char_canonical(cp, &cp, &sc) < 0)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EILSEQ,
				                    "character U+%04X cannot be used in a host name", (unsigned)cp);
			/* Every code point takes at least one byte of the A-label. */
			if (n >= ARRAY_SIZE(cps))
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
				                    "a label is longer than 63 bytes");
			cps[n++] = cp;
		}
		return ulabel_to_alabel(cps, n, out, POLICY_HOST_LABEL_MAX, ret_len, err);
	}

	if (len > POLICY_HOST_LABEL_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "a label is longer than 63 bytes");
	for (size_t i = 0; i < len; i++) {
		char c = (char)in[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c + 0x20);
		if (!is_ldh(c))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "byte 0x%02x is not a letter, digit or hyphen", in[i]);
		out[i] = c;
	}
	if (out[0] == '-' || out[len - 1] == '-')
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "a label starts or ends with a hyphen");
	if (len >= 4 && memcmp(out, "xn--", 4) == 0) {
		/* SECURITY: an A-label is kept only if it is exactly what we would
		 * have produced from its U-label: decodes, passes the U-label
		 * checks, and encodes back to the same bytes. */
		uint32_t cps[POLICY_HOST_LABEL_MAX];
		size_t n;
		char again[POLICY_HOST_LABEL_MAX];
		size_t again_len;
		if (len == 4 || policy_punycode_decode(out + 4, len - 4, cps, ARRAY_SIZE(cps), &n) < 0 || n == 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "invalid punycode in \"xn--\" label");
		int r = ulabel_to_alabel(cps, n, again, sizeof(again), &again_len, err);
		if (r < 0) {
			al_error_prefix(err, "\"xn--\" label");
			return r;
		}
		if (again_len != len || memcmp(again, out, len) != 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "\"xn--\" label is not in canonical form");
	}
	*ret_len = len;
	return 0;
}

/* ------------------------------------------------------------ IP literals */

/* Strict dotted quad: four parts, 1-3 decimal digits, no leading zero, <= 255. */
int policy_ipv4_parse(const uint8_t *in, size_t len, struct in_addr *ret)
{
	uint32_t v = 0;
	size_t i = 0;
	for (int part = 0; part < 4; part++) {
		if (part > 0) {
			if (i >= len || in[i] != '.')
				return -EINVAL;
			i++;
		}
		size_t start = i;
		uint32_t x = 0;
		while (i < len && in[i] >= '0' && in[i] <= '9' && i - start < 3)
			x = x * 10 + (uint32_t)(in[i++] - '0');
		if (i == start || x > 255 || (i - start > 1 && in[start] == '0'))
			return -EINVAL;
		v = (v << 8) | x;
	}
	if (i != len)
		return -EINVAL;
	ret->s_addr = htonl(v);
	return 0;
}

/* Would a resolver or inet_aton() read this as a number? (the last label is
 * decimal, or 0x-hex) -- then it must be a strict dotted quad. */
static bool looks_numeric(const uint8_t *in, size_t len)
{
	if (len > 0 && in[len - 1] == '.')
		len--;
	size_t start = len;
	while (start > 0 && in[start - 1] != '.')
		start--;
	if (start == len)
		return false;
	const uint8_t *l = in + start;
	size_t n = len - start;
	size_t i = 0;
	bool hex = n >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X');
	if (hex)
		i = 2;
	for (; i < n; i++) {
		bool digit = l[i] >= '0' && l[i] <= '9';
		bool hexdigit = (l[i] >= 'a' && l[i] <= 'f') || (l[i] >= 'A' && l[i] <= 'F');
		if (!digit && !(hex && hexdigit))
			return false;
	}
	return true;
}

static void ipv6_format(const struct in6_addr *a, char *out, size_t size)
{
	const uint8_t *b = a->s6_addr;
	uint16_t w[8];
	for (int i = 0; i < 8; i++)
		w[i] = (uint16_t)((b[2 * i] << 8) | b[2 * i + 1]);
	static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};
	if (memcmp(b, mapped, sizeof(mapped)) == 0) {
		snprintf(out, size, "::ffff:%u.%u.%u.%u", b[12], b[13], b[14], b[15]);
		return;
	}
	/* RFC 5952 4.2: the longest run of two or more zero fields, the first
	 * one on a tie, becomes "::". */
	int best = -1, best_len = 0;
	for (int i = 0; i < 8;) {
		if (w[i] != 0) {
			i++;
			continue;
		}
		int j = i;
		while (j < 8 && w[j] == 0)
			j++;
		if (j - i > best_len && j - i >= 2) {
			best = i;
			best_len = j - i;
		}
		i = j;
	}
	size_t o = 0;
	out[0] = '\0';
	for (int i = 0; i < 8; i++) {
		if (i == best) {
			o += (size_t)snprintf(out + o, size - o, "::");
			i += best_len - 1;
			continue;
		}
		bool after_gap = best >= 0 && i == best + best_len;
		o += (size_t)snprintf(out + o, size - o, "%s%x", (i == 0 || after_gap) ? "" : ":", w[i]);
	}
}

int policy_ipv6_parse(const uint8_t *in, size_t len, struct in6_addr *ret)
{
	char buf[INET6_ADDRSTRLEN + 1];
	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		uint8_t c = in[i];
		bool ok =
		    (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == ':' || c == '.';
		if (!ok)
			return -EINVAL; /* includes '%' zone ids */
	}
	memcpy(buf, in, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET6, buf, ret) != 1)
		return -EINVAL;
	return 0;
}

/* ------------------------------------------------------------ canonicalise */

static int host_from_ipv6(const uint8_t *in, size_t len, struct policy_host *ret_host, struct al_error *err)
{
	struct policy_host h = {.kind = POLICY_HOST_IPV6, .addr.family = AF_INET6};
	if (len < 2 || in[len - 1] != ']' || policy_ipv6_parse(in + 1, len - 2, &h.addr.v6) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "not a valid bracketed IPv6 address (zone ids are not accepted)");
	ipv6_format(&h.addr.v6, h.name, sizeof(h.name));
	h.len = strlen(h.name);
	*ret_host = h;
	return 0;
}

static int host_from_ipv4(const uint8_t *in, size_t len, struct policy_host *ret_host, struct al_error *err)
{
	struct policy_host h = {.kind = POLICY_HOST_IPV4, .addr.family = AF_INET};
	/* SECURITY: getaddrinfo()/inet_aton() would read 0177.0.0.1, 0x7f.1,
	 * 127.1 and 2130706433 as 127.0.0.1; a name check must never see a
	 * different address than the dialler. Only one spelling is accepted. */
	if (policy_ipv4_parse(in, len, &h.addr.v4) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"%.*s\" is not a canonical IPv4 address: only four decimal parts without "
		                    "leading zeros are accepted (no octal, hex, shortened or integer forms, no "
		                    "trailing dot)",
		                    (int)MIN(len, (size_t)64), (const char *)in);
	inet_ntop(AF_INET, &h.addr.v4, h.name, sizeof(h.name));
	h.len = strlen(h.name);
	*ret_host = h;
	return 0;
}

int policy_host_canonicalize(const uint8_t *in, size_t len, struct policy_host *ret_host, struct al_error *err)
{
	if (len == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "empty host name");
	if (len > POLICY_HOST_INPUT_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "host name longer than %d bytes",
		                    POLICY_HOST_INPUT_MAX);
	if (in[0] == '[')
		return host_from_ipv6(in, len, ret_host, err);
	if (memchr(in, ':', len))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "host contains ':' (a port, or an IPv6 address without brackets)");
	if (looks_numeric(in, len))
		return host_from_ipv4(in, len, ret_host, err);
	if (!utf8_valid(in, len))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EILSEQ, "host name is not valid UTF-8");

	/* One trailing dot (the root) is dropped; a second would be an empty label. */
	if (len > 1 && in[len - 1] == '.')
		len--;
	struct policy_host h = {.kind = POLICY_HOST_NAME};
	size_t o = 0;
	for (size_t start = 0; start <= len;) {
		const uint8_t *dot = memchr(in + start, '.', len - start);
		size_t end = dot ? (size_t)(dot - in) : len;
		char label[POLICY_HOST_LABEL_MAX];
		size_t llen;
		int r = label_canonical(in + start, end - start, label, &llen, err);
		if (r < 0)
			return r;
		if (o + (o ? 1 : 0) + llen > POLICY_HOST_NAME_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
			                    "host name longer than %d bytes", POLICY_HOST_NAME_MAX);
		if (o)
			h.name[o++] = '.';
		memcpy(h.name + o, label, llen);
		o += llen;
		start = end + 1;
	}
	h.name[o] = '\0';
	h.len = o;
	*ret_host = h;
	return 0;
}

/* ------------------------------------------------------------ host:port */

int policy_port_parse(const uint8_t *in, size_t len, uint16_t *ret)
{
	if (len == 0 || len > 5 || in[0] == '0')
		return -EINVAL;
	uint32_t v = 0;
	for (size_t i = 0; i < len; i++) {
		if (in[i] < '0' || in[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint32_t)(in[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -EINVAL;
	*ret = (uint16_t)v;
	return 0;
}

int policy_host_split_port(const uint8_t *in, size_t len, const uint8_t **ret_host, size_t *ret_host_len,
                           uint16_t *ret_port, struct al_error *err)
{
	size_t host_len;
	const uint8_t *rest;
	if (len > 0 && in[0] == '[') {
		const uint8_t *close = memchr(in, ']', len);
		if (!close)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "'[' without ']'");
		host_len = (size_t)(close - in) + 1;
		rest = in + host_len;
		if (host_len < len && *rest != ':')
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "bytes after ']' that are not a port");
	} else {
		const uint8_t *colon = memchr(in, ':', len);
		host_len = colon ? (size_t)(colon - in) : len;
		rest = in + host_len;
		if (colon && memchr(colon + 1, ':', len - host_len - 1))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "more than one ':' (an IPv6 address must be in brackets)");
	}
	if (host_len == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "empty host");
	uint16_t port = 0;
	if (host_len < len && policy_port_parse(rest + 1, len - host_len - 1, &port) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "invalid port: 1-65535 in decimal digits without leading zeros");
	*ret_host = in;
	*ret_host_len = host_len;
	*ret_port = port;
	return 0;
}

int policy_host_format(const struct policy_host *host, uint16_t port, char *buf, size_t size)
{
	bool v6 = host->kind == POLICY_HOST_IPV6;
	if (port)
		return snprintf_ok(buf, size, "%s%s%s:%u", v6 ? "[" : "", host->name, v6 ? "]" : "", port);
	return snprintf_ok(buf, size, "%s%s%s", v6 ? "[" : "", host->name, v6 ? "]" : "");
}
