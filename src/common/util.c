/* SPDX-License-Identifier: Apache-2.0 */
#include "util.h"

#include "file-copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		abort();
	return p;
}

void *xcalloc(size_t n, size_t m)
{
	void *p = calloc(n ? n : 1, m ? m : 1);
	if (!p)
		abort();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		abort();
	return q;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);
	if (!p)
		abort();
	return p;
}

char *xstrndup(const char *s, size_t n)
{
	char *p = strndup(s, n);
	if (!p)
		abort();
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *p = NULL;
	va_start(ap, fmt);
	int r = vasprintf(&p, fmt, ap);
	va_end(ap);
	if (r < 0)
		abort();
	return p;
}

size_t strlcpy_al(char *dst, const char *src, size_t size)
{
	size_t n = strlen(src);
	if (size > 0) {
		size_t c = n < size - 1 ? n : size - 1;
		memcpy(dst, src, c);
		dst[c] = '\0';
	}
	return n;
}

int snprintf_ok(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	if (r < 0)
		return -EINVAL;
	if ((size_t)r >= size)
		return -ENAMETOOLONG;
	return 0;
}

/* One read(2) that an interrupting signal does not cut: bytes read, 0 at
 * the end, or a negative errno. */
static ssize_t read_once(int fd, void *buf, size_t n)
{
	for (;;) {
		ssize_t r = read(fd, buf, n);
		if (r >= 0 || errno != EINTR)
			return r < 0 ? -errno : r;
	}
}

ssize_t read_full(int fd, void *buf, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = read_once(fd, (char *)buf + done, n - done);
		if (r <= 0) {
			if (r < 0)
				return r;
			break;
		}
		done += (size_t)r;
	}
	return (ssize_t)done;
}

int write_full(int fd, const void *buf, size_t n)
{
	return write_full_timeout(fd, buf, n, -1);
}

int write_full_timeout(int fd, const void *buf, size_t n, int timeout_ms)
{
	size_t done = 0;
	uint64_t deadline = timeout_ms >= 0 ? now_ms_monotonic() + (uint64_t)timeout_ms : 0;
	while (done < n) {
		ssize_t r = write(fd, (const char *)buf + done, n - done);
		if (r >= 0) {
			done += (size_t)r;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		int wait_ms = -1;
		if (timeout_ms >= 0) {
			uint64_t now = now_ms_monotonic();
			if (now >= deadline)
				return -ETIMEDOUT;
			wait_ms = (int)(deadline - now);
		}
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		int pr = poll(&p, 1, wait_ms);
		if (pr < 0 && errno != EINTR)
			return -errno;
		if (pr == 0)
			return -ETIMEDOUT;
	}
	return 0;
}

int read_file_limited(const char *path, size_t max_bytes, char **ret_buf, size_t *ret_len)
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	size_t cap = 4096, len = 0;
	cleanup_free char *buf = xmalloc(cap + 1);
	for (;;) {
		if (len == cap) {
			if (cap > max_bytes)
				return -EFBIG;
			cap *= 2;
			buf = xrealloc(buf, cap + 1);
		}
		ssize_t r = read_once(fd, buf + len, cap - len);
		if (r < 0)
			return (int)r;
		if (r == 0)
			break;
		len += (size_t)r;
		if (len > max_bytes)
			return -EFBIG;
	}
	buf[len] = '\0';
	if (ret_len)
		*ret_len = len;
	*ret_buf = TAKE_PTR(buf);
	return 0;
}

int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
	cleanup_free char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
	cleanup_close int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -errno;
	int r = write_full(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
	return r;
}

int parse_u64(const char *s, uint64_t *ret)
{
	if (!s || !*s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	char *end = NULL;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || !end || *end)
		return -EINVAL;
	*ret = v;
	return 0;
}

int parse_int_range(const char *s, long min, long max, long *ret)
{
	if (!s || !*s)
		return -EINVAL;
	/* strtol would also take leading blanks and a '+'. */
	if (!(*s == '-' || (*s >= '0' && *s <= '9')))
		return -EINVAL;
	errno = 0;
	char *end = NULL;
	long v = strtol(s, &end, 10);
	if (errno || !end || *end || v < min || v > max)
		return -ERANGE;
	*ret = v;
	return 0;
}

uint64_t now_ms_monotonic(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

struct timespec monotonic_in_ms(uint64_t ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

uint64_t now_ms_realtime(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void format_time_rfc3339(uint64_t epoch_ms, char buf[32])
{
	time_t t = (time_t)(epoch_ms / 1000u);
	struct tm tm;
	gmtime_r(&t, &tm);
	char base[24];
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, 32, "%s.%03uZ", base, (unsigned)(epoch_ms % 1000u));
}

void random_bytes(void *buf, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t r = getrandom((char *)buf + done, n - done, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			abort();
		}
		done += (size_t)r;
	}
}

void hex_encode(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

int hex_digit_value(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int mac_parse(const char *s, uint8_t ret[6])
{
	uint8_t mac[6];
	for (size_t i = 0; i < 6; i++) {
		const char *g = s + 3 * i;
		int hi = hex_digit_value((unsigned char)g[0]);
		int lo = hi < 0 ? -1 : hex_digit_value((unsigned char)g[1]);
		if (lo < 0 || g[2] != (i < 5 ? ':' : '\0'))
			return -EINVAL;
		mac[i] = (uint8_t)(hi << 4 | lo);
	}
	memcpy(ret, mac, sizeof(mac));
	return 0;
}

void mac_format(const uint8_t mac[6], char out[MAC_TEXT_LEN + 1])
{
	snprintf(out, MAC_TEXT_LEN + 1, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3], mac[4],
	         mac[5]);
}

bool mac_is_local_unicast(const uint8_t mac[6])
{
	return (mac[0] & 0x03) == 0x02;
}

void mac_random_local(char out[MAC_TEXT_LEN + 1])
{
	uint8_t mac[6] = {0x02};
	random_bytes(mac + 1, 5);
	mac_format(mac, out);
}

unsigned size_mib_up(uint64_t bytes)
{
	uint64_t mib = (bytes + (1u << 20) - 1) >> 20;
	return mib > UINT_MAX ? UINT_MAX : (unsigned)mib;
}

int pidfd_open_pid(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

int mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	if (strlcpy_al(buf, path, sizeof(buf)) >= sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int rm_rf_at(int parent_fd, const char *name)
{
	if (unlinkat(parent_fd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		int q = rm_rf_at(dirfd(d), de->d_name);
		if (q < 0 && r == 0)
			r = q;
	}
	closedir(d);
	if (unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
		r = -errno;
	return r;
}

int rm_rf(const char *path)
{
	return rm_rf_at(AT_FDCWD, path);
}

int utf8_next(const uint8_t *s, size_t n, uint32_t *ret_cp)
{
	if (n == 0)
		return -EILSEQ;
	uint8_t c = s[0];
	size_t len;
	uint32_t cp;
	if (c < 0x80) {
		*ret_cp = c;
		return 1;
	} else if ((c & 0xe0) == 0xc0) {
		len = 2;
		cp = c & 0x1f;
	} else if ((c & 0xf0) == 0xe0) {
		len = 3;
		cp = c & 0x0f;
	} else if ((c & 0xf8) == 0xf0) {
		len = 4;
		cp = c & 0x07;
	} else {
		return -EILSEQ;
	}
	if (len > n)
		return -EILSEQ;
	for (size_t k = 1; k < len; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return -EILSEQ;
		cp = (cp << 6) | (s[k] & 0x3f);
	}
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return -EILSEQ;
	*ret_cp = cp;
	return (int)len;
}

/* text as UTF-8: each byte that does not start a valid sequence becomes
 * U+FFFD. An error message may quote a guest's bytes or be cut inside a
 * character, and a JSON string must be UTF-8 (json_pack refuses it). */
char *utf8_repair(const char *text)
{
	static const char replacement[] = "\xef\xbf\xbd";
	size_t n = strlen(text), o = 0;
	char *out = xmalloc(3 * n + 1);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		int k = utf8_next((const uint8_t *)text + i, n - i, &cp);
		if (k > 0) {
			memcpy(out + o, text + i, (size_t)k);
			o += (size_t)k;
			i += (size_t)k;
		} else {
			memcpy(out + o, replacement, 3);
			o += 3;
			i++;
		}
	}
	out[o] = '\0';
	return out;
}

bool name_valid(const char *name, size_t max)
{
	size_t n = strnlen(name, max + 1);
	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (i > 0 && (c == '-' || c == '_'));
		if (!ok)
			return false;
	}
	return true;
}

bool utf8_valid(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		int len = utf8_next(s + i, n - i, &cp);
		if (len < 0)
			return false;
		i += (size_t)len;
	}
	return true;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *base64_encode(const uint8_t *in, size_t n, size_t *ret_len)
{
	size_t out_len = 4 * ((n + 2) / 3);
	char *out = xmalloc(out_len + 1);
	size_t o = 0;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		out[o++] = b64[(v >> 18) & 63];
		out[o++] = b64[(v >> 12) & 63];
		out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	out[o] = '\0';
	if (ret_len)
		*ret_len = o;
	return out;
}

static int b64_value(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int base64_decode(const char *in, size_t n, uint8_t **ret_out, size_t *ret_len)
{
	if (n % 4 != 0)
		return -EINVAL;
	cleanup_free uint8_t *out = xmalloc(n / 4 * 3 + 1);
	size_t o = 0;
	for (size_t i = 0; i < n; i += 4) {
		int v[4];
		int pad = 0;
		for (int k = 0; k < 4; k++) {
			if (in[i + k] == '=' && i + 4 == n && k >= 2) {
				v[k] = 0;
				pad++;
				continue;
			}
			if (pad)
				return -EINVAL;
			v[k] = b64_value(in[i + k]);
			if (v[k] < 0)
				return -EINVAL;
		}
		uint32_t w = ((uint32_t)v[0] << 18) | ((uint32_t)v[1] << 12) | ((uint32_t)v[2] << 6) | (uint32_t)v[3];
		out[o++] = (uint8_t)(w >> 16);
		if (pad < 2)
			out[o++] = (uint8_t)(w >> 8);
		if (pad < 1)
			out[o++] = (uint8_t)w;
	}
	*ret_len = o;
	*ret_out = TAKE_PTR(out);
	return 0;
}

long proc_each_file(const char *name, size_t max_bytes, bool (*fn)(long pid, const char *text, void *ctx), void *ctx)
{
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	long found = 0;
	for (struct dirent *e; !found && (e = readdir(d));) {
		long pid;
		if (parse_int_range(e->d_name, 1, INT32_MAX, &pid) < 0)
			continue;
		char path[64];
		snprintf(path, sizeof(path), "/proc/%ld/%s", pid, name);
		cleanup_free char *text = NULL;
		if (read_file_limited(path, max_bytes, &text, NULL) == 0 && fn(pid, text, ctx))
			found = pid;
	}
	closedir(d);
	return found;
}
