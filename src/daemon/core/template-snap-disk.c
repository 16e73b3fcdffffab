/* SPDX-License-Identifier: Apache-2.0 */
/* Template snapshots kept across restarts (template-snap-disk.h). */
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "accel.h"
#include "ca.h"
#include "digest.h"
#include "json-cleanup.h"
#include "sandbox.h"
#include "template-snap-disk.h"
#include "template-snap.h"
#include "util.h"
#include "version.h"
#include "vmm-backend.h"
#include "vmm.h"

#define CHUNK (1u << 20)
#define PAGE 4096u
#define DIGEST_CACHE 16

/* ---- digests, once per process while a file stays the same ---- */

static pthread_mutex_t digest_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char *path;
	struct stat st;
	char sha[65];
} digests[DIGEST_CACHE];
static size_t digest_next;

static bool same_stat(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static EVP_MD_CTX *sha_new(void)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		abort();
	return ctx;
}

static void sha_end(EVP_MD_CTX *ctx, char out[65])
{
	uint8_t md[32];
	unsigned len = 0;
	EVP_DigestFinal_ex(ctx, md, &len);
	EVP_MD_CTX_free(ctx);
	hex_encode(md, 32, out);
}

int tsnap_file_digest(const char *path, bool sync, uint64_t *ret_size, char ret_sha[65])
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || (sync && fsync(fd) < 0))
		return -errno;
	int r = fd_sha256(fd, ret_sha);
	if (r < 0)
		return r;
	*ret_size = (uint64_t)st.st_size;
	return 0;
}

/* path's digest (follow: path may be a symlink, as /proc/self/exe is),
 * from the cache while the file is the one digested. */
static int input_digest(const char *path, bool follow, struct stat *ret_st, char ret_sha[65])
{
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return -errno;
	pthread_mutex_lock(&digest_lock);
	for (size_t i = 0; i < DIGEST_CACHE; i++)
		if (digests[i].path && !strcmp(digests[i].path, path) && same_stat(&digests[i].st, &st)) {
			memcpy(ret_sha, digests[i].sha, 65);
			pthread_mutex_unlock(&digest_lock);
			*ret_st = st;
			return 0;
		}
	pthread_mutex_unlock(&digest_lock);
	char sha[65];
	int r = fd_sha256(fd, sha);
	if (r < 0)
		return r;
	pthread_mutex_lock(&digest_lock);
	size_t i = digest_next++ % DIGEST_CACHE;
	free(digests[i].path);
	digests[i].path = xstrdup(path);
	digests[i].st = st;
	memcpy(digests[i].sha, sha, 65);
	pthread_mutex_unlock(&digest_lock);
	memcpy(ret_sha, sha, 65);
	*ret_st = st;
	return 0;
}

/* {"path", "size", "mtime_ns", "inode", "sha256"} of an input file. */
static json_t *input_file(const char *path, bool follow, struct al_error *err)
{
	struct stat st = {0};
	char sha[65];
	int r = input_digest(path, follow, &st, sha);
	if (r < 0) {
		al_error_set(err, AL_ERR_INTERNAL, -r, "cannot digest %s: %s", path, strerror(-r));
		return NULL;
	}
	json_int_t mtime_ns = (json_int_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	return json_pack("{s:s, s:I, s:I, s:I, s:s}", "path", path, "size", (json_int_t)st.st_size, "mtime_ns",
	                 mtime_ns, "inode", (json_int_t)st.st_ino, "sha256", sha);
}

json_t *tsnap_inputs_new(const struct daemon_config *cfg, const struct tsnap_request *req, struct al_error *err)
{
	struct accel_info accel;
	if (accel_wait(now_ms_monotonic() + (uint64_t)cfg->accel_wait_s * 1000u, &accel) < 0) {
		al_error_set(err, AL_ERR_UNAVAILABLE, ETIMEDOUT, "the accelerator is not decided yet");
		return NULL;
	}
	char vmm_path[4096];
	if (vmm_binary_path(cfg->vmm->binary, vmm_path, sizeof(vmm_path)) < 0) {
		al_error_set(err, AL_ERR_INTERNAL, ENOENT, "%s is not on PATH", cfg->vmm->binary);
		return NULL;
	}
	char ca_sha[65] = "";
	const char *pem = ca_cert_pem();
	if (pem) {
		EVP_MD_CTX *ctx = sha_new();
		EVP_DigestUpdate(ctx, pem, strlen(pem));
		sha_end(ctx, ca_sha);
	}
	cleanup_json json_t *o =
	    json_pack("{s:s, s:s, s:s, s:s, s:s}", "backend", cfg->vmm->name, "accel", cfg->vmm->accel(), "cpu",
	              accel.cpu, "ca_sha256", ca_sha, "airlockd_version", AIRLOCK_VERSION);
	const struct {
		const char *name, *path;
		bool follow;
	} files[] = {
	    {"kernel", req->kernel, false}, {"initrd", req->initrd, false},       {"rootfs", req->rootfs, false},
	    {"vmm", vmm_path, false},       {"airlockd", "/proc/self/exe", true},
	};
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		json_t *f = input_file(files[i].path, files[i].follow, err);
		if (!f)
			return NULL;
		json_object_set_new(o, files[i].name, f);
	}
	/* /proc/self/exe is a different inode path-wise each run: its digest
	 * alone says which airlockd it is. */
	json_t *self = json_object_get(o, "airlockd");
	json_object_del(self, "path");
	json_object_del(self, "inode");
	json_object_del(self, "mtime_ns");
	return TAKE_PTR(o);
}

/* The first field of object got that want has not the same ("" if none). */
static const char *field_differs(const json_t *want, const json_t *got)
{
	if (!json_is_object(want) || !json_is_object(got))
		return "";
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)got, k, v) {
		if (!json_equal(json_object_get(want, k), v))
			return k;
	}
	return "";
}

bool tsnap_inputs_differ(const json_t *want, const json_t *got, char *buf, size_t size)
{
	if (!json_is_object(want) || !json_is_object(got) || json_object_size(want) != json_object_size(got)) {
		strlcpy_al(buf, "the set of inputs", size);
		return true;
	}
	const char *k;
	json_t *v;
	json_object_foreach ((json_t *)got, k, v) {
		json_t *w = json_object_get(want, k);
		if (!w || !json_equal(w, v)) {
			const char *field = field_differs(w, v);
			snprintf(buf, size, "%s%s%s", k, *field ? "'s " : "", field);
			return true;
		}
	}
	return false;
}

/* ---- the RAM ---- */

static bool page_zero(const uint8_t *p)
{
	static const uint8_t zero[PAGE];
	return !memcmp(p, zero, PAGE);
}

/* Writes the non-zero pages of buf (n bytes, a multiple of PAGE) at off. */
static int pages_write(int fd, const uint8_t *buf, size_t n, uint64_t off)
{
	for (size_t i = 0; i < n;) {
		if (page_zero(buf + i)) {
			i += PAGE;
			continue;
		}
		size_t j = i + PAGE;
		while (j < n && !page_zero(buf + j))
			j += PAGE;
		for (size_t done = i; done < j;) {
			ssize_t w = pwrite(fd, buf + done, j - done, (off_t)(off + done));
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				return w < 0 ? -errno : -EIO;
			done += (size_t)w;
		}
		i = j;
	}
	return 0;
}

static void sha_u64(EVP_MD_CTX *ctx, uint64_t v)
{
	uint8_t le[8];
	for (size_t i = 0; i < 8; i++)
		le[i] = (uint8_t)(v >> (8 * i));
	EVP_DigestUpdate(ctx, le, sizeof(le));
}

/* One extent of in that may hold data: [start, end), page-aligned. */
static int extent_copy(int in, int out, EVP_MD_CTX *ctx, uint8_t *buf, uint64_t start, uint64_t end)
{
	for (uint64_t off = start; off < end;) {
		size_t want = (size_t)MIN((uint64_t)CHUNK, end - off);
		ssize_t n = pread(in, buf, want, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if ((size_t)n != want)
			return -EIO;
		for (size_t i = 0; i < want; i += PAGE)
			if (!page_zero(buf + i)) {
				sha_u64(ctx, off + i);
				EVP_DigestUpdate(ctx, buf + i, PAGE);
			}
		int r = pages_write(out, buf, want, off);
		if (r < 0)
			return r;
		off += want;
	}
	return 0;
}

/* Copies the non-zero pages of in's first size bytes to the same offsets
 * of out (a new file or memfd of that size: the rest stays zero), and
 * digests them (TSNAP_RAM_DIGEST): what a guest's RAM holds is mostly zero
 * pages, which are holes in the file and in the memfd until written, never
 * read. */
static int ram_copy(int in, int out, uint64_t size, char ret_sha[65])
{
	if (size % PAGE)
		return -EINVAL;
	EVP_MD_CTX *ctx = sha_new();
	sha_u64(ctx, size);
	cleanup_free uint8_t *buf = xmalloc(CHUNK);
	int r = 0;
	for (uint64_t off = 0; off < size && r == 0;) {
		off_t data = lseek(in, (off_t)off, SEEK_DATA);
		off_t hole = data < 0 ? -1 : lseek(in, data, SEEK_HOLE);
		if (data < 0 && errno == ENXIO)
			break; /* no data after off */
		if (data < 0 || hole < 0) {
			r = -errno;
			break;
		}
		uint64_t start = (uint64_t)data & ~(uint64_t)(PAGE - 1);
		uint64_t end = MIN(((uint64_t)hole + PAGE - 1) & ~(uint64_t)(PAGE - 1), size);
		if (start >= end)
			break;
		r = extent_copy(in, out, ctx, buf, start, end);
		off = end;
	}
	if (r < 0) {
		EVP_MD_CTX_free(ctx);
		return r;
	}
	sha_end(ctx, ret_sha);
	return 0;
}

int tsnap_ram_save(int mem_fd, uint64_t size, const char *path, char ret_sha[65], struct al_error *err)
{
	cleanup_close int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	int r = fd < 0 ? -errno : 0;
	if (r == 0 && ftruncate(fd, (off_t)size) < 0)
		r = -errno;
	if (r == 0)
		r = ram_copy(mem_fd, fd, size, ret_sha);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot write the template's memory to %s: %s", path,
		                    strerror(-r));
	return 0;
}

int tsnap_ram_load(const char *path, uint64_t size, int *ret_fd, char ret_sha[65], struct al_error *err)
{
	cleanup_close int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (in < 0 || fstat(in, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m", path);
	if ((uint64_t)st.st_size != size)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "%s has %jd bytes, not %" PRIu64, path,
		                    (intmax_t)st.st_size, size);
	cleanup_close int fd = memfd_create("airlock-template", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot make the template's memory: %m");
	int r = ram_copy(in, fd, size, ret_sha);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read %s: %s", path, strerror(-r));
	*ret_fd = TAKE_FD(fd);
	return 0;
}

/* ---- the manifest ---- */

int tsnap_manifest_write(const char *dir, const json_t *manifest, struct al_error *err)
{
	cleanup_free char *text = json_dumps(manifest, JSON_SORT_KEYS | JSON_INDENT(1));
	cleanup_free char *path = xasprintf("%s/%s", dir, TSNAP_MANIFEST);
	if (!text)
		abort();
	int r = write_file_atomic(path, text, strlen(text), 0600);
	cleanup_close int dfd = r < 0 ? -1 : open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r == 0 && (dfd < 0 || fsync(dfd) < 0))
		r = -errno;
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot write %s: %s", path, strerror(-r));
	return 0;
}

json_t *tsnap_manifest_read(const char *dir)
{
	cleanup_free char *path = xasprintf("%s/%s", dir, TSNAP_MANIFEST);
	cleanup_free char *text = NULL;
	size_t len = 0;
	if (read_file_limited(path, TSNAP_MANIFEST_MAX, &text, &len) < 0)
		return NULL;
	cleanup_json json_t *m = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	json_t *format = json_object_get(m, "format");
	if (!json_is_integer(format) || json_integer_value(format) != TSNAP_FORMAT ||
	    !json_is_string(json_object_get(m, "key")))
		return NULL;
	return TAKE_PTR(m);
}
