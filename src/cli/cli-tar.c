/* SPDX-License-Identifier: Apache-2.0 */
/* ustar/pax for 'airlock cp'. The writer streams a local tree (never the whole
 * tree in memory); the reader extracts a stream from the daemon (that is, from
 * the guest: untrusted) into a local directory. */
#include "cli-tar.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#include "util.h"

#define TAR_SIZE_MAX (1ull << 40) /* per entry: far beyond a sandbox's disk */

struct ustar {
	char name[100], mode[8], uid[8], gid[8], size[12], mtime[12], chksum[8], typeflag, linkname[100];
	char magic[6], version[2], uname[32], gname[32], devmajor[8], devminor[8], prefix[155], pad[12];
};
_Static_assert(sizeof(struct ustar) == TAR_BLOCK, "ustar header is one block");

/* ================================================================= writer */

static int archive_write_failed(int r, struct al_error *err)
{
	return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot write the archive: %s", strerror(-r));
}

static void put_octal(char *field, size_t width, uint64_t v)
{
	char tmp[32];
	snprintf(tmp, sizeof(tmp), "%0*llo", (int)(width - 1), (unsigned long long)v);
	memcpy(field, tmp, width - 1);
	field[width - 1] = '\0';
}

static void header_checksum(struct ustar *h)
{
	memset(h->chksum, ' ', sizeof(h->chksum));
	unsigned sum = 0;
	for (size_t i = 0; i < TAR_BLOCK; i++)
		sum += ((const unsigned char *)h)[i];
	snprintf(h->chksum, sizeof(h->chksum), "%06o", sum);
	h->chksum[7] = ' ';
}

/* Appends one "LEN key=value\n" record (LEN counts the whole record). */
static void pax_add(char **buf, size_t *len, const char *key, const char *value)
{
	size_t body = strlen(key) + strlen(value) + 3; /* ' ', '=', '\n' */
	size_t total = body + 1;
	while (snprintf(NULL, 0, "%zu", total) + body != total)
		total++;
	*buf = xrealloc(*buf, *len + total + 1);
	snprintf(*buf + *len, total + 1, "%zu %s=%s\n", total, key, value);
	*len += total;
}

static int write_padding(int fd, uint64_t size)
{
	static const char zeros[TAR_BLOCK];
	size_t pad = (size_t)((TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK);
	return pad ? write_full(fd, zeros, pad) : 0;
}

static int write_header(int fd, const char *name, const struct stat *st, char type, const char *link, uint64_t size)
{
	cleanup_free char *pax = NULL;
	size_t pax_len = 0;
	if (strlen(name) > 100)
		pax_add(&pax, &pax_len, "path", name);
	if (link && strlen(link) > 100)
		pax_add(&pax, &pax_len, "linkpath", link);
	if (size > 077777777777ull) {
		char n[32];
		snprintf(n, sizeof(n), "%llu", (unsigned long long)size);
		pax_add(&pax, &pax_len, "size", n);
	}
	struct ustar h;
	int r;
	if (pax) {
		memset(&h, 0, sizeof(h));
		snprintf(h.name, sizeof(h.name), "PaxHeaders/%.80s", name);
		put_octal(h.mode, sizeof(h.mode), 0644);
		put_octal(h.uid, sizeof(h.uid), 0);
		put_octal(h.gid, sizeof(h.gid), 0);
		put_octal(h.size, sizeof(h.size), pax_len);
		put_octal(h.mtime, sizeof(h.mtime), 0);
		h.typeflag = 'x';
		memcpy(h.magic, "ustar", 6);
		memcpy(h.version, "00", 2);
		header_checksum(&h);
		if ((r = write_full(fd, &h, sizeof(h))) < 0 || (r = write_full(fd, pax, pax_len)) < 0 ||
		    (r = write_padding(fd, pax_len)) < 0)
			return r;
	}
	memset(&h, 0, sizeof(h));
	memcpy(h.name, name, MIN(strlen(name), sizeof(h.name)));
	put_octal(h.mode, sizeof(h.mode), st->st_mode & 07777);
	/* Owned by root in the guest, as with docker cp. */
	put_octal(h.uid, sizeof(h.uid), 0);
	put_octal(h.gid, sizeof(h.gid), 0);
	put_octal(h.size, sizeof(h.size), size > 077777777777ull ? 0 : size);
	put_octal(h.mtime, sizeof(h.mtime), st->st_mtime > 0 ? (uint64_t)st->st_mtime : 0);
	h.typeflag = type;
	if (link)
		memcpy(h.linkname, link, MIN(strlen(link), sizeof(h.linkname)));
	memcpy(h.magic, "ustar", 6);
	memcpy(h.version, "00", 2);
	memcpy(h.uname, "root", 4);
	memcpy(h.gname, "root", 4);
	header_checksum(&h);
	return write_full(fd, &h, sizeof(h));
}

static int write_file_data(int out, int in, uint64_t size, const char *src, struct al_error *err)
{
	cleanup_free char *buf = xmalloc(64 * 1024);
	uint64_t left = size;
	while (left > 0) {
		ssize_t n = read(in, buf, MIN(left, (uint64_t)64 * 1024));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot read %s: %m", src);
		if (n == 0)
			return al_error_set(err, AL_ERR_INTERNAL, EIO, "%s shrank while it was copied; copy it again",
			                    src);
		int r = write_full(out, buf, (size_t)n);
		if (r < 0)
			return archive_write_failed(r, err);
		left -= (size_t)n;
	}
	int r = write_padding(out, size);
	return r < 0 ? archive_write_failed(r, err) : 0;
}

int cli_tar_write_entry(int out_fd, const char *src, const char *name, const struct stat *lst, struct al_error *err)
{
	if (strlen(name) >= TAR_NAME_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "%s: the name is longer than %d bytes",
		                    src, TAR_NAME_MAX);
	int r;
	if (S_ISREG(lst->st_mode)) {
		struct stat st;
		cleanup_close int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (in < 0 || fstat(in, &st) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m", src);
		if ((r = write_header(out_fd, name, &st, '0', NULL, (uint64_t)st.st_size)) < 0)
			return archive_write_failed(r, err);
		return write_file_data(out_fd, in, (uint64_t)st.st_size, src, err);
	}
	if (S_ISLNK(lst->st_mode)) {
		char target[TAR_NAME_MAX];
		ssize_t n = readlink(src, target, sizeof(target) - 1);
		if (n < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot read the link %s: %m", src);
		target[n] = '\0';
		if ((r = write_header(out_fd, name, lst, '2', target, 0)) < 0)
			return archive_write_failed(r, err);
		return 0;
	}
	if (!S_ISDIR(lst->st_mode))
		return 0;
	cleanup_free char *dname = xasprintf("%s/", name);
	if ((r = write_header(out_fd, dname, lst, '5', NULL, 0)) < 0)
		return archive_write_failed(r, err);
	return 0;
}

bool cli_tar_type_ok(const struct stat *st)
{
	return S_ISREG(st->st_mode) || S_ISLNK(st->st_mode) || S_ISDIR(st->st_mode);
}

int cli_tar_write_path(int out_fd, const char *src, const char *name, unsigned *skipped, struct al_error *err)
{
	struct stat st;
	if (lstat(src, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot read %s: %m", src);
	if (!cli_tar_type_ok(&st)) {
		(*skipped)++;
		return 0;
	}
	int r = cli_tar_write_entry(out_fd, src, name, &st, err);
	if (r < 0 || !S_ISDIR(st.st_mode))
		return r;
	DIR *d = opendir(src);
	if (!d)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot list %s: %m", src);
	struct dirent *de;
	r = 0;
	while (r == 0 && (errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		cleanup_free char *csrc = xasprintf("%s/%s", src, de->d_name);
		cleanup_free char *cname = xasprintf("%s/%s", name, de->d_name);
		r = cli_tar_write_path(out_fd, csrc, cname, skipped, err);
	}
	if (r == 0 && errno)
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "cannot list %s: %m", src);
	closedir(d);
	return r;
}

int cli_tar_write_end(int out_fd, struct al_error *err)
{
	static const char zeros[2 * TAR_BLOCK];
	int r = write_full(out_fd, zeros, sizeof(zeros));
	return r < 0 ? archive_write_failed(r, err) : 0;
}

/* ================================================================= reader */

enum tar_state { ST_HEADER, ST_DATA, ST_PAD, ST_DONE };
enum data_sink { SINK_SKIP, SINK_FILE, SINK_PAX, SINK_LONGNAME, SINK_LONGLINK };

struct tar_reader {
	int dest;
	char *rename_first;
	enum tar_state state;
	unsigned char block[TAR_BLOCK];
	size_t block_len;
	int zero_blocks;
	/* The current entry's data. */
	enum data_sink sink;
	uint64_t left, pad_left;
	int out_fd;
	struct timespec mtime;
	char *meta; /* pax data or a GNU long name */
	size_t meta_len;
	/* Overrides for the next entry (pax or GNU). */
	char *next_path, *next_link;
	bool next_size_set;
	uint64_t next_size;
	uint64_t entries;
	int skipped;
	/* What the archive brought so far, against its limits. */
	uint64_t data_bytes, headers, max_bytes, max_entries;
};

struct tar_reader *cli_tar_reader_new(int dest_dirfd, const char *rename_first)
{
	/* SECURITY: the new name replaces a component; one that is not a plain
	 * name would put the copy beside the destination (cp ID:/dir/.. DEST). The
	 * callers refuse such names with a message; this is the backstop. */
	if (rename_first &&
	    (!*rename_first || !strcmp(rename_first, ".") || !strcmp(rename_first, "..") || strchr(rename_first, '/')))
		abort();
	struct tar_reader *t = xcalloc(1, sizeof(*t));
	t->dest = dest_dirfd;
	t->rename_first = rename_first ? xstrdup(rename_first) : NULL;
	t->out_fd = -1;
	t->max_bytes = CP_MAX_BYTES_DEFAULT;
	t->max_entries = CP_MAX_ENTRIES_DEFAULT;
	return t;
}

void cli_tar_reader_set_limits(struct tar_reader *t, uint64_t max_bytes, uint64_t max_entries)
{
	t->max_bytes = max_bytes;
	t->max_entries = max_entries;
}

void cli_tar_reader_free(struct tar_reader *t)
{
	if (!t)
		return;
	if (t->out_fd >= 0)
		close(t->out_fd);
	free(t->rename_first);
	free(t->meta);
	free(t->next_path);
	free(t->next_link);
	free(t);
}

void cli_tar_reader_freep(struct tar_reader **t)
{
	cli_tar_reader_free(*t);
}

uint64_t cli_tar_reader_entries(const struct tar_reader *t)
{
	return t->entries;
}

/* A numeric field: octal (NUL/space terminated) or GNU base-256. */
static int parse_number(const char *f, size_t width, uint64_t *ret)
{
	uint64_t v = 0;
	if ((unsigned char)f[0] & 0x80) {
		if ((unsigned char)f[0] != 0x80)
			return -EINVAL; /* negative or too big */
		for (size_t i = 1; i < width; i++) {
			if (v >> 55)
				return -ERANGE;
			v = v << 8 | (unsigned char)f[i];
		}
		*ret = v;
		return 0;
	}
	size_t i = 0;
	while (i < width && f[i] == ' ')
		i++;
	for (; i < width && f[i] >= '0' && f[i] <= '7'; i++)
		v = v * 8 + (uint64_t)(f[i] - '0');
	for (; i < width; i++)
		if (f[i] != ' ' && f[i] != '\0')
			return -EINVAL;
	*ret = v;
	return 0;
}

static bool checksum_ok(const struct ustar *h)
{
	uint64_t want;
	if (parse_number(h->chksum, sizeof(h->chksum), &want) < 0)
		return false;
	unsigned usum = 0;
	int ssum = 0;
	for (size_t i = 0; i < TAR_BLOCK; i++) {
		bool in_sum = i >= offsetof(struct ustar, chksum) && i < offsetof(struct ustar, chksum) + 8;
		unsigned char c = in_sum ? ' ' : ((const unsigned char *)h)[i];
		usum += c;
		ssum += in_sum ? ' ' : ((const signed char *)h)[i];
	}
	return want == usum || (int64_t)want == ssum;
}

/* pax records: only path, linkpath and size matter; the rest is ignored. */
static int pax_parse(struct tar_reader *t, struct al_error *err)
{
	size_t off = 0;
	while (off < t->meta_len) {
		char *rec = t->meta + off, *sp;
		uint64_t len = 0;
		for (sp = rec; sp < t->meta + t->meta_len && *sp >= '0' && *sp <= '9'; sp++) {
			len = len * 10 + (uint64_t)(*sp - '0');
			if (len > t->meta_len)
				break;
		}
		if (sp == rec || sp >= t->meta + t->meta_len || *sp != ' ' || len > t->meta_len - off ||
		    len < (uint64_t)(sp - rec) + 3 || rec[len - 1] != '\n')
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
			                    "a pax header of the archive is malformed");
		rec[len - 1] = '\0';
		char *kv = sp + 1, *eq = strchr(kv, '=');
		if (!eq)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
			                    "a pax header of the archive is malformed");
		*eq = '\0';
		const char *value = eq + 1;
		size_t vlen = (size_t)(rec + len - 1 - value);
		if (!strcmp(kv, "path") || !strcmp(kv, "linkpath")) {
			if (vlen >= TAR_NAME_MAX || memchr(value, '\0', vlen))
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
				                    "a name in the archive is too long or has a NUL");
			char **dst = !strcmp(kv, "path") ? &t->next_path : &t->next_link;
			free(*dst);
			*dst = xstrndup(value, vlen);
		} else if (!strcmp(kv, "size")) {
			if (parse_u64(value, &t->next_size) < 0 || t->next_size > TAR_SIZE_MAX)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
				                    "a pax size in the archive is not valid");
			t->next_size_set = true;
		}
		off += len;
	}
	return 0;
}

/* SECURITY: names come from the guest. A name is split into components; an
 * absolute name, a ".." component, an empty result or an over-long component
 * is refused. Each directory on the way is opened relative to the destination
 * with O_NOFOLLOW, so no symlink (from the archive or already in the
 * destination) can lead outside it. Returns the parent dir fd and the leaf. */
static int resolve(struct tar_reader *t, const char *name, int *ret_parent, char **ret_leaf, struct al_error *err)
{
	if (name[0] == '/')
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                    "the archive has an absolute name \"%.200s\"; refusing to extract it", name);
	cleanup_free char *copy = xstrdup(name);
	char *comps[TAR_NAME_MAX / 2 + 1];
	size_t n = 0;
	bool first = true;
	for (char *save = NULL, *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		/* The first component names what was copied ("./x" for the root of
		 * a sandbox, "dir/x" else): that is the one a new name replaces. */
		if (first && t->rename_first && strcmp(c, "..")) {
			first = false;
			comps[n++] = t->rename_first;
			continue;
		}
		first = false;
		if (!strcmp(c, "."))
			continue;
		if (!strcmp(c, ".."))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
			                    "the archive has a name with \"..\" (\"%.200s\"); refusing to extract it",
			                    name);
		if (strlen(c) > NAME_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG,
			                    "a name in the archive has a component over %d bytes", NAME_MAX);
		comps[n++] = c;
	}
	if (n == 0) {
		*ret_parent = -1;
		*ret_leaf = NULL;
		return 0; /* the destination itself */
	}
	int fd = fcntl(t->dest, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "dup: %m");
	for (size_t i = 0; i + 1 < n; i++) {
		int next = openat(fd, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0 && errno == ENOENT && mkdirat(fd, comps[i], 0755) == 0)
			next = openat(fd, comps[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			int e = errno;
			close(fd);
			if (e == ELOOP || e == ENOTDIR)
				return al_error_set(
				    err, AL_ERR_INVALID_ARGUMENT, EPERM,
				    "\"%.200s\" would be written through a symlink or a non-directory (\"%s\"); "
				    "refusing to extract it",
				    name, comps[i]);
			return al_error_set(err, AL_ERR_INTERNAL, e, "cannot create the directory for \"%.200s\": %s",
			                    name, strerror(e));
		}
		close(fd);
		fd = next;
	}
	*ret_parent = fd;
	*ret_leaf = xstrdup(comps[n - 1]);
	return 0;
}

/* Makes room for a new non-directory leaf: removes what is there unless it is a directory. */
static int clear_leaf(int parent, const char *leaf, const char *name, struct al_error *err)
{
	struct stat st;
	if (fstatat(parent, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : al_error_set(err, AL_ERR_INTERNAL, errno, "%s: %m", name);
	if (S_ISDIR(st.st_mode))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EISDIR,
		                    "cannot replace the directory \"%.200s\" with a file", name);
	if (unlinkat(parent, leaf, 0) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot replace \"%.200s\": %m", name);
	return 0;
}

static int entry_begin(struct tar_reader *t, const struct ustar *h, struct al_error *err)
{
	uint64_t size, mode, mtime;
	if (parse_number(h->size, sizeof(h->size), &size) < 0 || parse_number(h->mode, sizeof(h->mode), &mode) < 0 ||
	    parse_number(h->mtime, sizeof(h->mtime), &mtime) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
		                    "a header of the archive has a malformed number");
	if (t->next_size_set)
		size = t->next_size;
	if (size > TAR_SIZE_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EFBIG,
		                    "an entry of the archive is larger than %llu bytes",
		                    (unsigned long long)TAR_SIZE_MAX);
	/* SECURITY: the guest chooses the archive: every header and every byte of
	 * data counts against the copy's limits before anything is created. */
	if (++t->headers > t->max_entries)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EMSGSIZE,
		                    "the archive has more than %llu entries; stopped (raise the limit with "
		                    "--max-entries)",
		                    (unsigned long long)t->max_entries);
	if (size > t->max_bytes - MIN(t->data_bytes, t->max_bytes))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EFBIG,
		                    "the archive holds more than %llu bytes; stopped (raise the limit with "
		                    "--max-bytes)",
		                    (unsigned long long)t->max_bytes);
	t->data_bytes += size;
	t->left = size;
	t->pad_left = (TAR_BLOCK - size % TAR_BLOCK) % TAR_BLOCK;
	t->sink = SINK_SKIP;
	char type = h->typeflag;
	if (type == 'x' || type == 'L' || type == 'K') {
		if (size > (type == 'x' ? TAR_PAX_MAX : TAR_NAME_MAX))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EMSGSIZE,
			                    "an extended header of the archive is too large");
		t->sink = type == 'x' ? SINK_PAX : type == 'L' ? SINK_LONGNAME : SINK_LONGLINK;
		free(t->meta);
		t->meta = xmalloc(size + 1);
		t->meta_len = 0;
		return 0;
	}
	/* The entry's names: pax or GNU override, else prefix/name. */
	char name[TAR_NAME_MAX], link[TAR_NAME_MAX];
	bool is_ustar = !memcmp(h->magic, "ustar", 5);
	if (t->next_path)
		snprintf(name, sizeof(name), "%s", t->next_path);
	else if (is_ustar && h->prefix[0])
		snprintf(name, sizeof(name), "%.155s/%.100s", h->prefix, h->name);
	else
		snprintf(name, sizeof(name), "%.100s", h->name);
	if (t->next_link)
		snprintf(link, sizeof(link), "%s", t->next_link);
	else
		snprintf(link, sizeof(link), "%.100s", h->linkname);
	free(TAKE_PTR(t->next_path));
	free(TAKE_PTR(t->next_link));
	t->next_size_set = false;
	if (type == 'g')
		return 0; /* global pax header: nothing we use */
	if (type != '0' && type != '\0' && type != '7' && type != '5' && type != '2') {
		t->skipped++;
		return 0;
	}
	int parent = -1;
	cleanup_free char *leaf = NULL;
	int r = resolve(t, name, &parent, &leaf, err);
	if (r < 0)
		return r;
	cleanup_close int pfd = parent;
	mode_t perm = (mode_t)(mode & 0777); /* no setuid/setgid/sticky from an archive */
	if (!leaf) {
		if (type == '5')
			return 0;
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                    "the archive has a file entry with an empty name");
	}
	t->entries++;
	if (type == '5') {
		if (mkdirat(pfd, leaf, perm | 0700) < 0) {
			struct stat st;
			if (errno != EEXIST || fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
				return al_error_set(
				    err, AL_ERR_INTERNAL, errno == EEXIST ? EEXIST : errno,
				    "cannot create the directory \"%.200s\": it exists and is not a directory", name);
		}
		return 0;
	}
	if ((r = clear_leaf(pfd, leaf, name, err)) < 0)
		return r;
	if (type == '2') {
		if (!link[0])
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
			                    "the symlink \"%.200s\" in the archive has no target", name);
		/* The target is stored, never followed while extracting. */
		if (symlinkat(link, pfd, leaf) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create the symlink \"%.200s\": %m",
			                    name);
		return 0;
	}
	/* open() applies our umask to perm, as for any file we create. */
	t->out_fd = openat(pfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, perm);
	if (t->out_fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create \"%.200s\": %m", name);
	t->mtime = (struct timespec){.tv_sec = (time_t)mtime};
	t->sink = SINK_FILE;
	return 0;
}

static int entry_end(struct tar_reader *t, struct al_error *err)
{
	int r = 0;
	switch (t->sink) {
	case SINK_FILE: {
		struct timespec times[2] = {t->mtime, t->mtime};
		futimens(t->out_fd, times);
		if (close(t->out_fd) < 0)
			r = al_error_set(err, AL_ERR_INTERNAL, errno, "cannot write a file: %m");
		t->out_fd = -1;
		break;
	}
	case SINK_PAX:
		r = pax_parse(t, err);
		break;
	case SINK_LONGNAME:
	case SINK_LONGLINK: {
		t->meta[t->meta_len] = '\0';
		char **dst = t->sink == SINK_LONGNAME ? &t->next_path : &t->next_link;
		free(*dst);
		*dst = xstrdup(t->meta);
		break;
	}
	case SINK_SKIP:
		break;
	}
	t->sink = SINK_SKIP;
	return r;
}

static int on_header(struct tar_reader *t, struct al_error *err)
{
	static const unsigned char zero[TAR_BLOCK];
	if (!memcmp(t->block, zero, TAR_BLOCK)) {
		if (++t->zero_blocks == 2)
			t->state = ST_DONE;
		return 0;
	}
	t->zero_blocks = 0;
	const struct ustar *h = (const struct ustar *)t->block;
	if (!checksum_ok(h))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EBADMSG,
		                    "the archive is corrupt (a header checksum does not match)");
	int r = entry_begin(t, h, err);
	if (r < 0)
		return r;
	if (t->left == 0) {
		t->state = ST_HEADER;
		return entry_end(t, err);
	}
	t->state = ST_DATA;
	return 0;
}

static int on_data(struct tar_reader *t, const unsigned char *p, size_t n, struct al_error *err)
{
	int r;
	switch (t->sink) {
	case SINK_FILE:
		if ((r = write_full(t->out_fd, p, n)) < 0)
			return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot write a file: %s", strerror(-r));
		break;
	case SINK_PAX:
	case SINK_LONGNAME:
	case SINK_LONGLINK:
		memcpy(t->meta + t->meta_len, p, n);
		t->meta_len += n;
		break;
	case SINK_SKIP:
		break;
	}
	return 0;
}

int cli_tar_reader_feed(struct tar_reader *t, const void *buf, size_t len, struct al_error *err)
{
	const unsigned char *p = buf;
	int r;
	while (len > 0) {
		switch (t->state) {
		case ST_DONE:
			return 0; /* trailing zeros of the last record */
		case ST_HEADER: {
			size_t take = MIN(len, TAR_BLOCK - t->block_len);
			memcpy(t->block + t->block_len, p, take);
			t->block_len += take;
			p += take;
			len -= take;
			if (t->block_len == TAR_BLOCK) {
				t->block_len = 0;
				if ((r = on_header(t, err)) < 0)
					return r;
			}
			break;
		}
		case ST_DATA: {
			size_t take = (size_t)MIN((uint64_t)len, t->left);
			if ((r = on_data(t, p, take, err)) < 0)
				return r;
			p += take;
			len -= take;
			t->left -= take;
			if (t->left == 0) {
				if ((r = entry_end(t, err)) < 0)
					return r;
				t->state = t->pad_left ? ST_PAD : ST_HEADER;
			}
			break;
		}
		case ST_PAD: {
			size_t take = (size_t)MIN((uint64_t)len, t->pad_left);
			p += take;
			len -= take;
			t->pad_left -= take;
			if (t->pad_left == 0)
				t->state = ST_HEADER;
			break;
		}
		}
	}
	return 0;
}

int cli_tar_reader_finish(struct tar_reader *t, struct al_error *err)
{
	/* Some writers end with a single zero block, or none at EOF: accept an
	 * end between entries, refuse one in the middle of an entry. */
	if (t->state == ST_DATA || t->state == ST_PAD || t->block_len != 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPIPE, "the archive ended in the middle of an entry");
	return t->skipped;
}
