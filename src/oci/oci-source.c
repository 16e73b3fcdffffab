/* SPDX-License-Identifier: Apache-2.0 */
/* The input: an OCI layout directory, or a tar (plain, gzip or zstd) of a
 * docker save archive or an OCI layout, whose members are staged as files.
 *
 * SECURITY: the archive is a tenant's. Only the member names an image format
 * uses are staged (manifest.json, index.json, oci-layout, repositories,
 * blobs/sha256/<hex>, <hex>.json, <hex>/layer.tar|json|VERSION), each under
 * a flat name of its own (no '/': nothing to resolve) in a directory of ours,
 * bounded in count and bytes. A symlink member (docker's duplicate layers) is
 * staged as a symlink to the flat name of a wanted member, and members are
 * opened with RESOLVE_BENEATH, in the staging directory and in a layout
 * directory alike: nothing outside them can be read. */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "oci.h"
#include "util.h"

#define STAGE_MAX_MEMBERS(lim) ((lim)->max_layers * 4 + 64)

static bool is_hex64(const char *s, size_t n)
{
	if (n != 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

static bool member_wanted(const char *name)
{
	static const char *const top[] = {"manifest.json", "index.json", "oci-layout", "repositories"};
	for (size_t i = 0; i < ARRAY_SIZE(top); i++)
		if (!strcmp(name, top[i]))
			return true;
	if (!strncmp(name, "blobs/sha256/", 13))
		return is_hex64(name + 13, strlen(name + 13));
	if (strlen(name) == 69 && !strcmp(name + 64, ".json"))
		return is_hex64(name, 64);
	if (strlen(name) > 65 && name[64] == '/' && is_hex64(name, 64))
		return !strcmp(name + 65, "layer.tar") || !strcmp(name + 65, "json") || !strcmp(name + 65, "VERSION");
	return false;
}

static void flatten(const char *name, char out[OCI_MAX_PATH + 1])
{
	strlcpy_al(out, name, OCI_MAX_PATH + 1);
	for (char *p = out; *p; p++)
		if (*p == '/')
			*p = '_';
}

static int openat2_beneath(int dir_fd, const char *name)
{
	struct open_how how = {
	    .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
	};
	long fd = syscall(SYS_openat2, dir_fd, name, &how, sizeof(how));
	return fd < 0 ? -errno : (int)fd;
}

/* A symlink member's target as a member name ("../<hex>/layer.tar" from
 * "<hex2>/layer.tar"), or NULL when it leaves the archive or is unwanted. */
static char *stage_link_target(const char *member, const char *target)
{
	char joined[2 * OCI_MAX_PATH + 2];
	const char *slash = strrchr(member, '/');
	int dir_len = slash ? (int)(slash - member) : 0;
	if (target[0] == '/' ||
	    snprintf_ok(joined, sizeof(joined), "%.*s%s%s", dir_len, member, dir_len ? "/" : "", target) < 0)
		return NULL;
	char out[sizeof(joined)] = "";
	size_t len = 0;
	for (char *save = NULL, *c = strtok_r(joined, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (!strcmp(c, "."))
			continue;
		if (!strcmp(c, "..")) {
			if (len == 0)
				return NULL;
			char *up = strrchr(out, '/');
			len = up ? (size_t)(up - out) : 0;
			out[len] = '\0';
			continue;
		}
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s", len ? "/" : "", c);
	}
	return member_wanted(out) ? xstrdup(out) : NULL;
}

static int stage_data(struct archive *a, int fd, uint64_t *budget, struct al_error *err)
{
	for (;;) {
		const void *buf;
		size_t n;
		la_int64_t off;
		int r = archive_read_data_block(a, &buf, &n, &off);
		if (r == ARCHIVE_EOF)
			return 0;
		if (r < ARCHIVE_WARN)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EIO, "reading it: %s",
			                    archive_error_string(a) ? archive_error_string(a) : "corrupt");
		if (n > *budget)
			return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG,
			                    "the archive is larger than --max-bytes allows");
		*budget -= n;
		if (off < 0 || lseek(fd, off, SEEK_SET) < 0 || (r = write_full(fd, buf, n)) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot stage it");
	}
}

static int stage_member(struct archive *a, struct archive_entry *e, const char *name, int stage_fd, uint64_t *budget,
                        struct al_error *err)
{
	char flat[OCI_MAX_PATH + 1];
	flatten(name, flat);
	if (archive_entry_filetype(e) == AE_IFLNK && !archive_entry_hardlink(e)) {
		cleanup_free char *t = stage_link_target(name, archive_entry_symlink(e));
		char tflat[OCI_MAX_PATH + 1];
		if (!t)
			return 0; /* not an alias of a member we stage: ignored */
		flatten(t, tflat);
		return symlinkat(tflat, stage_fd, flat) < 0
		           ? al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "appears twice in the archive")
		           : 0;
	}
	if (archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e))
		return 0;
	cleanup_close int fd = openat(stage_fd, flat, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "appears twice in the archive");
	return stage_data(a, fd, budget, err);
}

static int stage_entries(struct archive *a, int stage_fd, const struct oci_limits *lim, struct al_error *err)
{
	uint64_t budget = lim->max_bytes + lim->max_entries * 1024 + (64u << 20), members = 0, entries = 0;
	struct archive_entry *e;
	int r;
	while ((r = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
		if (r < ARCHIVE_WARN)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "not a tar (plain, gzip or zstd): %s",
			                    archive_error_string(a) ? archive_error_string(a) : "unreadable");
		if (oci_stop)
			return al_error_set(err, AL_ERR_UNAVAILABLE, EINTR, "stopped by a signal");
		if (++entries > lim->max_entries)
			return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG, "the archive has more than %llu members",
			                    (unsigned long long)lim->max_entries);
		cleanup_free char *name = NULL;
		struct al_error ignored = {0};
		if (oci_path_clean(archive_entry_pathname(e), &name, &ignored) < 0 || !member_wanted(name))
			continue;
		if (++members > STAGE_MAX_MEMBERS(lim))
			return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG, "the archive has too many image files");
		if ((r = stage_member(a, e, name, stage_fd, &budget, err)) < 0) {
			al_error_prefix(err, "archive member %s", name);
			return r;
		}
	}
	return 0;
}

static int source_stage(int fd, int stage_fd, const struct oci_limits *lim, struct al_error *err)
{
	struct archive *a = archive_read_new();
	if (!a)
		abort();
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_zstd(a);
	archive_read_support_format_tar(a);
	int r = archive_read_open_fd(a, fd, 64 * 1024);
	if (r != ARCHIVE_OK)
		r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "not a tar (plain, gzip or zstd): %s",
		                 archive_error_string(a) ? archive_error_string(a) : "unreadable");
	else
		r = stage_entries(a, stage_fd, lim, err);
	archive_read_free(a);
	return r;
}

int oci_source_open(const char *src, int stage_fd, const struct oci_limits *lim, struct oci_source *ret,
                    struct al_error *err)
{
	cleanup_close int fd = open(src, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return al_error_set(err, AL_ERR_NOT_FOUND, errno, "cannot open %s: %s", src, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		ret->dir_fd = TAKE_FD(fd);
		ret->staged = false;
		return 0;
	}
	if (!S_ISREG(st.st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s is neither a file nor a directory", src);
	int r = source_stage(fd, stage_fd, lim, err);
	if (r < 0)
		return r;
	ret->dir_fd = fcntl(stage_fd, F_DUPFD_CLOEXEC, 3);
	ret->staged = true;
	return ret->dir_fd < 0 ? -errno : 0;
}

int oci_source_open_member(const struct oci_source *s, const char *name, struct al_error *err)
{
	cleanup_free char *clean = NULL;
	int r = oci_path_clean(name, &clean, err);
	if (r < 0 || !member_wanted(clean))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%.200s is not a name an image file has",
		                    name);
	char flat[OCI_MAX_PATH + 1];
	if (s->staged)
		flatten(clean, flat);
	int fd = openat2_beneath(s->dir_fd, s->staged ? flat : clean);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
		close(fd);
		fd = -EINVAL;
	}
	if (fd < 0)
		return al_error_set(err, AL_ERR_NOT_FOUND, ENOENT, "%s is missing from the archive", clean);
	return fd;
}

bool oci_source_has(const struct oci_source *s, const char *name)
{
	struct al_error ignored = {0};
	int fd = oci_source_open_member(s, name, &ignored);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static void sha256_hex(EVP_MD_CTX *md, char hex[65])
{
	uint8_t sum[32];
	unsigned n = 0;
	if (EVP_DigestFinal_ex(md, sum, &n) != 1 || n != 32)
		abort();
	hex_encode(sum, 32, hex);
}

int oci_digest_check(int fd, const char *hex, struct al_error *err)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)
		abort();
	cleanup_free uint8_t *buf = xmalloc(1 << 16);
	ssize_t n;
	while ((n = read(fd, buf, 1 << 16)) > 0 || (n < 0 && errno == EINTR))
		if (n > 0)
			EVP_DigestUpdate(md, buf, (size_t)n);
	char got[65];
	sha256_hex(md, got);
	EVP_MD_CTX_free(md);
	if (n < 0 || lseek(fd, 0, SEEK_SET) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot read it: %s", strerror(errno));
	if (strcmp(got, hex))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
		                    "sha256 is %.12s..., not %.12s... (digest mismatch)", got, hex);
	return 0;
}

int oci_source_json(const struct oci_source *s, const char *name, const char *hex, json_t **ret, struct al_error *err)
{
	cleanup_close int fd = oci_source_open_member(s, name, err);
	if (fd < 0)
		return fd;
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_size > OCI_MAX_JSON)
		return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG, "%s is larger than %u bytes", name, OCI_MAX_JSON);
	int r = hex ? oci_digest_check(fd, hex, err) : 0;
	if (r < 0) {
		al_error_prefix(err, "%s", name);
		return r;
	}
	cleanup_free char *buf = xmalloc((size_t)st.st_size + 1);
	ssize_t n = read_full(fd, buf, (size_t)st.st_size);
	if (n != st.st_size)
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot read %s", name);
	json_error_t jerr;
	json_t *j = json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
	if (!j)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s is not valid JSON: %s (line %d)", name,
		                    jerr.text, jerr.line);
	*ret = j;
	return 0;
}
