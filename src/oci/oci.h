/* SPDX-License-Identifier: Apache-2.0 */
/* airlock-oci: a container image archive (docker save, OCI layout) into an
 * Airlock template image (rootfs.ext4 + config.json). Run by airlockd as root
 * on archives a tenant uploaded: every byte of the input is hostile. */
#ifndef AIRLOCK_OCI_H
#define AIRLOCK_OCI_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include <jansson.h>
#include <signal.h>

#include "error.h"

#define OCI_DEFAULT_MAX_BYTES (8ULL << 30)
#define OCI_DEFAULT_MAX_ENTRIES 500000ULL
#define OCI_DEFAULT_MAX_LAYERS 128ULL
#define OCI_MAX_PATH 4096         /* an entry's path, after ./ and / are stripped */
#define OCI_MAX_DEPTH 256         /* components of an entry's path */
#define OCI_MAX_LINK 4096         /* a symlink's or hard link's target */
#define OCI_MAX_XATTRS 64         /* per entry */
#define OCI_MAX_XATTR_VALUE 65536 /* bytes of one value (the kernel's XATTR_SIZE_MAX) */
#define OCI_MAX_JSON (4u << 20)   /* manifest.json, index.json, manifests, configs */
#define OCI_PROGRESS_STEP (16u << 20)

struct oci_limits {
	uint64_t max_bytes;   /* uncompressed file data across all layers */
	uint64_t max_entries; /* tar entries across all layers */
	uint64_t max_layers;
};

/* Totals across layers: checked against oci_limits as entries arrive. */
struct oci_counts {
	uint64_t entries;  /* entries seen (whiteouts included) */
	uint64_t declared; /* file sizes the headers announced */
	uint64_t bytes;    /* file data written */
};

/* Called after a layer's data grew by at least OCI_PROGRESS_STEP. */
typedef void (*oci_progress_fn)(const struct oci_counts *c, void *ctx);

struct oci_layer_io {
	int fd;           /* a layer file (read from its start), or -1 */
	const void *data; /* or a layer in memory (the fuzz target) */
	size_t size;
	oci_progress_fn progress; /* may be NULL */
	void *progress_ctx;
};

/* Set by SIGTERM, SIGINT, SIGHUP: the loops over entries and data blocks
 * stop, so that main can remove what was written. */
extern volatile sig_atomic_t oci_stop;

/* oci-layer.c: applies one layer tar (plain, gzip or zstd) to the tree at
 * root_fd: whiteouts first (they hide lower layers only), then the entries. */
int oci_layer_apply(int root_fd, const struct oci_layer_io *io, const struct oci_limits *lim, struct oci_counts *c,
                    struct al_error *err);

/* oci-path.c: an entry's path made relative (no leading ./ or /, no empty or
 * . components); -EINVAL for a .. component, too long, too deep. ret is a
 * malloc'd string, "" for the root. */
int oci_path_clean(const char *raw, char **ret, struct al_error *err);
/* The directory of root-relative path `dir` ("" = the root) resolved inside
 * root_fd (symlinks resolved as if root_fd were /, never out of it), as an
 * O_PATH fd; create: missing directories are made (0755, root-owned). */
int oci_path_open_dir(int root_fd, const char *dir, bool create, struct al_error *err);
/* A file of the tree for reading, resolved inside it (symlinks too): an fd or -errno. */
int oci_path_open_read(int root_fd, const char *path);
/* The image's User ("name[:group]", ids or names) as ids, names looked up in
 * the tree's etc/passwd and etc/group: false when it names none or one the
 * tree does not have. */
bool oci_user_ids(int root_fd, const char *user, unsigned long *ret_uid, unsigned long *ret_gid);
/* Splits a clean path into its parent ("" for the root) and last component. */
void oci_path_split(char *path, const char **ret_dir, const char **ret_base);

/* oci-source.c: the input archive as a directory of files to look up by the
 * names manifests use. A tar is first staged (only the names an image
 * format uses) into stage_fd. */
struct oci_source {
	int dir_fd;
	bool staged; /* names flattened ('/' -> '_') in a staging directory */
};
int oci_source_open(const char *src, int stage_fd, const struct oci_limits *lim, struct oci_source *ret,
                    struct al_error *err);
/* Opens a member for reading; -ENOENT when it is not there. */
int oci_source_open_member(const struct oci_source *s, const char *name, struct al_error *err);
bool oci_source_has(const struct oci_source *s, const char *name);
/* Checks that the file fd holds sha256 `hex` (64 lower-case hex digits);
 * leaves the offset at 0. */
int oci_digest_check(int fd, const char *hex, struct al_error *err);
/* A member parsed as JSON (at most OCI_MAX_JSON bytes); hex, when not NULL,
 * is its sha256. */
int oci_source_json(const struct oci_source *s, const char *name, const char *hex, json_t **ret, struct al_error *err);

/* oci-image.c: which layers and which config, in order. */
struct oci_layer_ref {
	char *name; /* member name in the source */
	char *hex;  /* sha256 of the member's bytes, or NULL when the format names none */
};
struct oci_image {
	struct oci_layer_ref *layers;
	size_t n_layers;
	json_t *config; /* the image config (verified) */
};
int oci_image_load(const struct oci_source *s, const struct oci_limits *lim, struct oci_image *ret,
                   struct al_error *err);
void oci_image_release(struct oci_image *img);
/* Whether s is "sha256:" and 64 lower-case hex digits; ret_hex points into s. */
bool oci_digest_parse(const char *s, const char **ret_hex);
/* The template's config.json from the image config. */
int oci_config_template(const json_t *config, uint64_t layers, uint64_t bytes, json_t **ret, struct al_error *err);

/* oci-mkfs.c: the tree's ext4 image at out_path (a new file). */
int oci_mkfs(const char *tree, const char *out_path, const char *label, uint64_t *ret_size_mib, struct al_error *err);

#endif
