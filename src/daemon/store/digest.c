/* SPDX-License-Identifier: Apache-2.0 */
/* File digests (digest.h). */
#include "digest.h"

#include <fcntl.h>
#include <openssl/evp.h>

#include "util.h"

int fd_sha256(int fd, char out[65])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		abort();
	uint8_t *buf = xmalloc(1 << 20);
	int r = 0;
	for (;;) {
		ssize_t n = read(fd, buf, 1 << 20);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		if (n == 0)
			break;
		EVP_DigestUpdate(ctx, buf, (size_t)n);
	}
	uint8_t md[32];
	unsigned len = 0;
	EVP_DigestFinal_ex(ctx, md, &len);
	EVP_MD_CTX_free(ctx);
	free(buf);
	if (r == 0)
		hex_encode(md, 32, out);
	return r;
}

int file_sha256(const char *path, char out[65])
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	return fd_sha256(fd, out);
}
