/* SPDX-License-Identifier: Apache-2.0 */
#include "file-copy.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "util.h"

/* One copy_file_range call at most this much (the kernel caps it anyway). */
#define COPY_CHUNK_BYTES (1u << 30)

/* [off, end) of in to the same offsets of out. copy_file_range first (in
 * the kernel, and itself a reflink on filesystems that can); read/write
 * where it is not supported between these two files. */
static int copy_range(int in, int out, off_t off, off_t end)
{
	bool fallback = false;
	char buf[65536];
	while (off < end) {
		size_t want = (size_t)MIN((off_t)COPY_CHUNK_BYTES, end - off);
		ssize_t n;
		if (!fallback) {
			off_t oi = off, oo = off;
			n = copy_file_range(in, &oi, out, &oo, want, 0);
			if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
				fallback = true;
				continue;
			}
		} else {
			n = pread(in, buf, MIN(want, sizeof(buf)), off);
			if (n > 0) {
				for (ssize_t done = 0; done < n;) {
					ssize_t w = pwrite(out, buf + done, (size_t)(n - done), off + done);
					if (w < 0 && errno == EINTR)
						continue;
					if (w < 0)
						return -errno;
					done += w;
				}
			}
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO; /* the file shrank under us */
		off += n;
	}
	return 0;
}

int file_copy_sparse_fd(int in, int out)
{
	struct stat st;
	if (fstat(in, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (ftruncate(out, 0) < 0)
		return -errno;
	off_t size = st.st_size, pos = 0;
	while (pos < size) {
		off_t data = lseek(in, pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break; /* nothing but a hole up to the end */
		off_t hole = data < 0 ? -1 : lseek(in, data, SEEK_HOLE);
		if (data < 0 || hole < 0) {
			/* No SEEK_DATA here: the rest is data as far as we know. */
			if (errno != EINVAL && errno != EOPNOTSUPP)
				return -errno;
			data = pos;
			hole = size;
		}
		if (hole > size)
			hole = size;
		int r = copy_range(in, out, data, hole);
		if (r < 0)
			return r;
		pos = hole;
	}
	/* The length, including a trailing hole. */
	if (ftruncate(out, size) < 0)
		return -errno;
	return 0;
}

int file_copy_cow(const char *src, const char *dst, mode_t mode, enum file_copy_method *ret_method)
{
	/* SECURITY: src may be in a directory a VMM can write: never a link,
	 * and never a FIFO or device (O_NONBLOCK: the open cannot hang). */
	cleanup_close int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (in < 0)
		return -errno;
	struct stat st;
	if (fstat(in, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	cleanup_close int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	if (out < 0)
		return -errno;
	enum file_copy_method how = FILE_COPY_REFLINK;
	int r = 0;
	/* Shares every extent at once, or fails without writing anything. */
	if (ioctl(out, FICLONE, in) < 0) {
		how = FILE_COPY_SPARSE;
		r = file_copy_sparse_fd(in, out);
	}
	if (r == 0 && fsync(out) < 0)
		r = -errno;
	if (r < 0) {
		unlink(dst);
		return r;
	}
	if (ret_method)
		*ret_method = how;
	return 0;
}

int file_grow(const char *path, uint64_t size_bytes)
{
	cleanup_close int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (size_bytes > (uint64_t)INT64_MAX)
		return -EFBIG;
	if ((uint64_t)st.st_size >= size_bytes)
		return 0;
	if (ftruncate(fd, (off_t)size_bytes) < 0 || fsync(fd) < 0)
		return -errno;
	return 0;
}

const char *file_copy_method_name(enum file_copy_method m)
{
	return m == FILE_COPY_REFLINK ? "reflink" : m == FILE_COPY_SPARSE ? "sparse copy" : "?";
}
