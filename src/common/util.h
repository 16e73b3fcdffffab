/* SPDX-License-Identifier: Apache-2.0 */
/* Small helpers every component uses: ownership (cleanup attributes), checked
 * allocation, full reads and writes, string copies that always terminate. */
#ifndef AIRLOCK_UTIL_H
#define AIRLOCK_UTIL_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

#define TAKE_PTR(p)                                                                                                    \
	({                                                                                                             \
		__typeof__(p) _p = (p);                                                                                \
		(p) = NULL;                                                                                            \
		_p;                                                                                                    \
	})
#define TAKE_FD(fd)                                                                                                    \
	({                                                                                                             \
		int _fd = (fd);                                                                                        \
		(fd) = -1;                                                                                             \
		_fd;                                                                                                   \
	})

static inline void freep(void *p)
{
	free(*(void **)p);
}
static inline void closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}
static inline void fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}
#define cleanup_free __attribute__((cleanup(freep)))
#define cleanup_close __attribute__((cleanup(closep)))
#define cleanup_fclose __attribute__((cleanup(fclosep)))

/* Internal allocation failure is not recoverable: abort. Sizes that come from
 * outside are checked against a named limit before they get here. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Copies at most size-1 bytes and always terminates; returns strlen(src). */
size_t strlcpy_al(char *dst, const char *src, size_t size);
/* snprintf that reports truncation: -ENAMETOOLONG if it did not fit. */
int snprintf_ok(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Loops over short reads/writes and EINTR. read_full returns bytes read
 * (< n only at EOF) or -errno; write_full returns 0 or -errno. */
ssize_t read_full(int fd, void *buf, size_t n);
int write_full(int fd, const void *buf, size_t n);
/* write_full on a possibly non-blocking fd, waiting at most timeout_ms in
 * total (-ETIMEDOUT). */
int write_full_timeout(int fd, const void *buf, size_t n, int timeout_ms);

/* Reads a whole file of at most max_bytes (-EFBIG beyond) into a NUL-terminated buffer. */
int read_file_limited(const char *path, size_t max_bytes, char **ret_buf, size_t *ret_len);
/* Calls fn(pid, text, ctx) with the text of /proc/PID/<name> (at most
 * max_bytes) of every process there is, until fn returns true (that pid is
 * returned) or every process was seen (0). A process gone meanwhile is
 * skipped. */
long proc_each_file(const char *name, size_t max_bytes, bool (*fn)(long pid, const char *text, void *ctx), void *ctx);
/* Writes data to path atomically (tmp file + rename). */
int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode);

/* Strict decimal parsing: whole string, no sign surprises, range-checked. */
int parse_u64(const char *s, uint64_t *ret);
int parse_int_range(const char *s, long min, long max, long *ret);

uint64_t now_ms_monotonic(void);
/* CLOCK_MONOTONIC ms from now, as a deadline for pthread_cond_timedwait on a
 * condition variable set to that clock. */
struct timespec monotonic_in_ms(uint64_t ms);
uint64_t now_ms_realtime(void);
/* RFC 3339 UTC with milliseconds, e.g. 2026-11-29T18:01:02.123Z */
void format_time_rfc3339(uint64_t epoch_ms, char buf[32]);

/* Random bytes from getrandom(2); aborts if the kernel cannot give them. */
void random_bytes(void *buf, size_t n);
void hex_encode(const uint8_t *in, size_t n, char *out /* 2n+1 */);
/* The value of one hex digit (0-9, a-f, A-F), or -1 for any other byte. */
int hex_digit_value(unsigned char c);

/* Ethernet MAC addresses as text: six two-digit hex groups joined by ':',
 * e.g. "02:1a:2b:3c:4d:5e". */
#define MAC_TEXT_LEN 17
/* Exactly that form (hex digits of either case), nothing before or after;
 * -EINVAL otherwise. ret is written only on success. */
int mac_parse(const char *s, uint8_t ret[6]);
/* Lower-case hex. */
void mac_format(const uint8_t mac[6], char out[MAC_TEXT_LEN + 1]);
/* Whether the first octet says locally administered (bit 1) and unicast
 * (bit 0 clear): an address nobody's hardware has and no group's. */
bool mac_is_local_unicast(const uint8_t mac[6]);
/* A new random address: 02 then five bytes from random_bytes(). */
void mac_random_local(char out[MAC_TEXT_LEN + 1]);

/* Creates dir and parents with mode (existing dirs are fine). */
int mkdir_p(const char *path, mode_t mode);
/* bytes in MiB, rounded up (saturating at UINT_MAX). */
unsigned size_mib_up(uint64_t bytes);
/* A pidfd of pid (pidfd_open(2)); -1 with errno on failure. */
int pidfd_open_pid(pid_t pid);
/* Removes a tree without following symlinks; missing is fine. */
int rm_rf(const char *path);
/* The same for `name` in directory fd parent_fd (AT_FDCWD: a path); never
 * follows a symlink. */
int rm_rf_at(int parent_fd, const char *name);

/* A name that may become a path component or a label: [a-z0-9][a-z0-9_-]*,
 * 1 to max bytes (templates, tenants). */
bool name_valid(const char *name, size_t max);

bool utf8_valid(const uint8_t *s, size_t n);
/* Strict UTF-8 decoding of one code point (no overlongs, surrogates or values
 * above U+10FFFF); returns its length or -EILSEQ. */
int utf8_next(const uint8_t *s, size_t n, uint32_t *ret_cp);
/* text as UTF-8 (malloc'd): each byte that does not start a valid sequence
 * becomes U+FFFD. For messages that may quote a guest's or client's bytes
 * or be cut inside a character: a JSON string must be UTF-8. */
char *utf8_repair(const char *text);
/* base64 (RFC 4648, with padding). Decode returns -EINVAL on bad input. */
char *base64_encode(const uint8_t *in, size_t n, size_t *ret_len);
int base64_decode(const char *in, size_t n, uint8_t **ret_out, size_t *ret_len);

#include "banned.h"

#endif
