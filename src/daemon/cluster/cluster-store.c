/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The shared snapshot store (include/airlock/cluster.h): a directory every
 * node mounts. A snapshot's files go in by content (blobs/<sha256>), its
 * manifest by the hash of its bytes (snapshots/cs-<sha256>.json); each is
 * written to tmp/, fsynced and renamed into place, then its directory
 * fsynced, so a key once returned names a complete, durable snapshot.
 *
 * SECURITY: the store is shared by the nodes, not by tenants; still, a node
 * trusts nothing it reads back: a manifest must hash to its key, name only
 * the files a snapshot has, and the tenant its row says; the files are
 * checked against their digests (snapshot_verify) before anything restores
 * them.
 */
#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include "cluster-internal.h"
#include "file-copy.h"
#include "json-cleanup.h"
#include "sandbox-model.h"
#include "snapshot.h"
#include "util.h"

#define MANIFEST_MAX (64 * 1024)

static int dir_fsync(const char *path)
{
	cleanup_close int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		return -errno;
	return 0;
}

static int store_dirs(struct al_error *err)
{
	const char *subs[] = {"blobs", "snapshots", "tmp"};
	for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
		cleanup_free char *d = xasprintf("%s/%s", cl->cfg.shared_store, subs[i]);
		if (mkdir(d, 0700) < 0 && errno != EEXIST)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "shared store %s: cannot make %s: %m",
			                    cl->cfg.shared_store, subs[i]);
	}
	return 0;
}

static char *tmp_path(void)
{
	uint8_t rnd[8];
	char hex[17];
	random_bytes(rnd, sizeof(rnd));
	hex_encode(rnd, sizeof(rnd), hex);
	return xasprintf("%s/tmp/%s", cl->cfg.shared_store, hex);
}

/* Puts tmp at dst (durably); an existing dst is the same content: kept. */
static int place(const char *tmp, const char *dst, const char *what, struct al_error *err)
{
	if (rename(tmp, dst) < 0) {
		int e = errno;
		unlink(tmp);
		return al_error_set(err, AL_ERR_INTERNAL, e, "shared store: cannot put %s in place: %s", what,
		                    strerror(e));
	}
	cleanup_free char *dir = xstrdup(dst);
	*strrchr(dir, '/') = '\0';
	int r = dir_fsync(dir);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "shared store: cannot sync %s: %s", dir, strerror(-r));
	return 0;
}

static int blob_put(const char *src, const char *sha, struct al_error *err)
{
	cleanup_free char *dst = xasprintf("%s/blobs/%s", cl->cfg.shared_store, sha);
	if (access(dst, F_OK) == 0)
		return 0; /* the same content is there already */
	cleanup_free char *tmp = tmp_path();
	int r = file_copy_cow(src, tmp, 0600, NULL); /* fsyncs */
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "shared store: cannot copy %s: %s", src, strerror(-r));
	return place(tmp, dst, sha, err);
}

static json_t *info_to_json(const struct snapshot_info *s)
{
	return json_pack("{s:s, s:i, s:i, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I}", "template",
	                 s->template_name, "vcpus", (int)s->vcpus, "memory_mib", (int)s->memory_mib, "backend",
	                 s->backend, "accel", s->accel, "cpu", s->cpu, "kernel_sha", s->kernel_sha, "initrd_sha",
	                 s->initrd_sha, "memory_sha", s->memory_sha, "disk_sha", s->disk_sha, "state_sha", s->state_sha,
	                 "created_ms", (json_int_t)s->created_ms, "size_bytes", (json_int_t)s->size_bytes, "generation",
	                 (json_int_t)s->generation);
}

static void sha256_hex(const void *data, size_t n, char out[65])
{
	uint8_t md[32];
	unsigned len = 0;
	EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
	hex_encode(md, sizeof(md), out);
}

static bool sha_valid(const char *s);

/* The manifest m under the hash of its bytes; ret_key names it. */
static int manifest_put(json_t *m, char ret_key[72], struct al_error *err)
{
	cleanup_free char *text = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS);
	char sha[65];
	sha256_hex(text, strlen(text), sha);
	snprintf(ret_key, 72, CLUSTER_STORE_KEY_PREFIX "%s", sha);
	cleanup_free char *dst = xasprintf("%s/snapshots/%s.json", cl->cfg.shared_store, ret_key);
	cleanup_free char *tmp = tmp_path();
	cleanup_close int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || write_full(fd, text, strlen(text)) < 0 || fsync(fd) < 0) {
		int e = errno;
		unlink(tmp);
		return al_error_set(err, AL_ERR_INTERNAL, e, "shared store: cannot write a manifest: %s", strerror(e));
	}
	return place(tmp, dst, ret_key, err);
}

int cluster_store_put(const char *path, const char *sha, json_t *manifest, char ret_key[72], struct al_error *err)
{
	int r = store_dirs(err);
	if (r < 0 || (r = blob_put(path, sha, err)) < 0)
		return r;
	return manifest_put(manifest, ret_key, err);
}

int cluster_store_get(const char *sha, const char *dst, struct al_error *err)
{
	if (!sha_valid(sha))
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG, "shared store: a manifest names a bad file");
	cleanup_free char *src = xasprintf("%s/blobs/%s", cl->cfg.shared_store, sha);
	int r = file_copy_cow(src, dst, 0600, NULL);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "shared store: cannot fetch %s: %s", sha, strerror(-r));
	return 0;
}

int cluster_store_publish(const struct snapshot_info *snap, const char *sandbox_id, char ret_key[72],
                          uint64_t *ret_bytes, json_t **ret_manifest, struct al_error *err)
{
	int r = store_dirs(err);
	if (r < 0)
		return r;
	cleanup_free char *dir = snapshot_dir(snap->id);
	cleanup_free char *overlay = xasprintf("%s/%s", dir, SNAPSHOT_DISK);
	const char *disk = access(overlay, F_OK) == 0 ? SNAPSHOT_DISK : SNAPSHOT_DISK_RAW;
	cleanup_json json_t *files = json_object();
	struct {
		const char *name, *sha;
	} parts[] = {{SNAPSHOT_MEMORY, snap->memory_sha}, {disk, snap->disk_sha}, {SNAPSHOT_STATE, snap->state_sha}};
	for (size_t i = 0; i < ARRAY_SIZE(parts); i++) {
		if (!parts[i].sha[0])
			continue;
		cleanup_free char *src = xasprintf("%s/%s", dir, parts[i].name);
		if ((r = blob_put(src, parts[i].sha, err)) < 0)
			return r;
		json_object_set_new(files, parts[i].name, json_string(parts[i].sha));
	}
	cleanup_json json_t *m = json_pack("{s:i, s:s, s:s, s:O, s:o}", "version", 1, "sandbox", sandbox_id, "tenant",
	                                   snap->tenant, "files", files, "snapshot", info_to_json(snap));
	if ((r = manifest_put(m, ret_key, err)) < 0)
		return r;
	*ret_bytes = snap->size_bytes;
	*ret_manifest = json_incref(m);
	return 0;
}

static bool key_valid(const char *key)
{
	size_t lp = sizeof(CLUSTER_STORE_KEY_PREFIX) - 1;
	if (strncmp(key, CLUSTER_STORE_KEY_PREFIX, lp) || strlen(key) != lp + 64)
		return false;
	for (const char *c = key + lp; *c; c++)
		if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
			return false;
	return true;
}

static bool sha_valid(const char *s)
{
	if (!s || strlen(s) != 64)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

/* The manifest of key, read back whole and checked against its key. */
int cluster_store_manifest(const char *key, json_t **ret, struct al_error *err)
{
	if (!key_valid(key))
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "shared store: malformed snapshot key");
	cleanup_free char *path = xasprintf("%s/snapshots/%s.json", cl->cfg.shared_store, key);
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return al_error_set(err, AL_ERR_CONFLICT, errno, "shared store: snapshot %s: %m", key);
	cleanup_free char *text = xmalloc(MANIFEST_MAX + 1);
	ssize_t n = read_full(fd, text, MANIFEST_MAX + 1);
	if (n < 0 || n > MANIFEST_MAX)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "shared store: snapshot %s: unreadable manifest",
		                    key);
	char sha[65];
	sha256_hex(text, (size_t)n, sha);
	if (strcmp(sha, key + sizeof(CLUSTER_STORE_KEY_PREFIX) - 1))
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG,
		                    "shared store: snapshot %s: its manifest does not match its key", key);
	json_error_t jerr;
	json_t *m = json_loadb(text, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(m)) {
		json_decref(m);
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG, "shared store: snapshot %s: bad manifest", key);
	}
	*ret = m;
	return 0;
}

static void text_field(json_t *o, const char *name, char *out, size_t size)
{
	const char *v = json_string_value(json_object_get(o, name));
	strlcpy_al(out, v && strlen(v) < size ? v : "", size);
}

static int info_from_json(json_t *s, struct snapshot_info *info)
{
	text_field(s, "template", info->template_name, sizeof(info->template_name));
	text_field(s, "backend", info->backend, sizeof(info->backend));
	text_field(s, "accel", info->accel, sizeof(info->accel));
	text_field(s, "cpu", info->cpu, sizeof(info->cpu));
	text_field(s, "kernel_sha", info->kernel_sha, sizeof(info->kernel_sha));
	text_field(s, "initrd_sha", info->initrd_sha, sizeof(info->initrd_sha));
	text_field(s, "memory_sha", info->memory_sha, sizeof(info->memory_sha));
	text_field(s, "disk_sha", info->disk_sha, sizeof(info->disk_sha));
	text_field(s, "state_sha", info->state_sha, sizeof(info->state_sha));
	json_int_t v = json_integer_value(json_object_get(s, "vcpus")),
	           m = json_integer_value(json_object_get(s, "memory_mib"));
	if (v < 1 || v > 1024 || m < 1 || m > (1 << 24) || !sha_valid(info->memory_sha) || !sha_valid(info->disk_sha) ||
	    !template_name_valid(info->template_name))
		return -EINVAL;
	info->vcpus = (unsigned)v;
	info->memory_mib = (unsigned)m;
	info->created_ms = (uint64_t)json_integer_value(json_object_get(s, "created_ms"));
	info->size_bytes = (uint64_t)json_integer_value(json_object_get(s, "size_bytes"));
	info->generation = (uint64_t)json_integer_value(json_object_get(s, "generation"));
	return 0;
}

/* Copies the manifest's files into the new snapshot's directory (made here,
 * removed again on failure). Only the names a snapshot has are taken. */
static int files_fetch(json_t *files, const char *dir, struct al_error *err)
{
	static const char *const names[] = {SNAPSHOT_MEMORY, SNAPSHOT_DISK, SNAPSHOT_DISK_RAW, SNAPSHOT_STATE};
	const char *name;
	json_t *v;
	json_object_foreach (files, name, v) {
		bool known = false;
		for (size_t i = 0; i < ARRAY_SIZE(names); i++)
			known |= !strcmp(name, names[i]);
		const char *sha = json_string_value(v);
		if (!known || !sha_valid(sha))
			return al_error_set(err, AL_ERR_INTERNAL, EBADMSG, "shared store: a manifest names a bad file");
		cleanup_free char *src = xasprintf("%s/blobs/%s", cl->cfg.shared_store, sha);
		cleanup_free char *dst = xasprintf("%s/%s", dir, name);
		int r = file_copy_cow(src, dst, 0600, NULL);
		if (r < 0)
			return al_error_set(err, AL_ERR_INTERNAL, -r, "shared store: cannot fetch %s: %s", name,
			                    strerror(-r));
	}
	return 0;
}

int cluster_store_fetch(const char *key, const char *tenant, struct snapshot_info *ret, struct al_error *err)
{
	cleanup_json json_t *m = NULL;
	int r = cluster_store_manifest(key, &m, err);
	if (r < 0)
		return r;
	struct snapshot_info info = {0};
	const char *owner = json_string_value(json_object_get(m, "tenant"));
	json_t *files = json_object_get(m, "files");
	if (!owner || strcmp(owner, tenant) || !json_is_object(files) ||
	    info_from_json(json_object_get(m, "snapshot"), &info) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, EBADMSG,
		                    "shared store: snapshot %s is not one of tenant %s's, or malformed", key, tenant);
	strlcpy_al(info.tenant, tenant, sizeof(info.tenant));
	text_field(m, "sandbox", info.sandbox_id, sizeof(info.sandbox_id));
	snapshot_new_id(info.id);
	info.internal = false; /* removed once restored (an internal one would make its restore a fork) */
	cleanup_free char *dir = snapshot_dir(info.id);
	if (mkdir(dir, 0700) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot make %s: %m", dir);
	if ((r = files_fetch(files, dir, err)) < 0 || (r = snapshot_insert(&info, err)) < 0) {
		rm_rf(dir);
		return r;
	}
	*ret = info;
	return 0;
}
