/* SPDX-License-Identifier: Apache-2.0 */
/* Which config and which layers, from a docker save manifest.json or an OCI
 * index.json; the template's config.json from the image config.
 *
 * SECURITY: every JSON file is a tenant's: bounded in size (OCI_MAX_JSON),
 * typed field by field, and, where the format names a digest (OCI blobs,
 * docker's <hex>.json config and the diff_ids of plain layer tars), the
 * bytes are checked against it before they are used. Member names go through
 * oci_source_open_member, which takes only the names image formats use. */
#include <unistd.h>

#include "json-cleanup.h"
#include "json-field.h"
#include "oci.h"
#include "util.h"

#define INDEX_DEPTH_MAX 2

bool oci_digest_parse(const char *s, const char **ret_hex)
{
	if (!s || strncmp(s, "sha256:", 7) || strlen(s) != 71)
		return false;
	for (const char *p = s + 7; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	*ret_hex = s + 7;
	return true;
}

/* "blobs/sha256/<hex>" or "<hex>.json": the hex a docker save name carries. */
static char *docker_name_hex(const char *name)
{
	const char *hex;
	char digest[80];
	if (!strncmp(name, "blobs/sha256/", 13) && snprintf_ok(digest, sizeof(digest), "sha256:%s", name + 13) == 0 &&
	    oci_digest_parse(digest, &hex))
		return xstrdup(hex);
	if (strlen(name) == 69 && !strcmp(name + 64, ".json") &&
	    snprintf_ok(digest, sizeof(digest), "sha256:%.64s", name) == 0 && oci_digest_parse(digest, &hex))
		return xstrdup(hex);
	return NULL;
}

static int config_check_platform(const json_t *config, struct al_error *err)
{
	const char *arch = json_string_value(json_object_get(config, "architecture"));
	const char *os = json_string_value(json_object_get(config, "os"));
	if (!json_is_object(config))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "the image config is not an object");
	if (!arch || strcmp(arch, "amd64"))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "the image is for %.32s, not amd64: Airlock runs amd64 guests",
		                    arch ? arch : "an unnamed architecture");
	if (os && strcmp(os, "linux"))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "the image is for %.32s, not linux", os);
	return 0;
}

static int image_add_layer(struct oci_image *img, const char *name, const char *hex)
{
	img->layers = xrealloc(img->layers, (img->n_layers + 1) * sizeof(*img->layers));
	img->layers[img->n_layers].name = xstrdup(name);
	img->layers[img->n_layers].hex = hex ? xstrdup(hex) : NULL;
	img->n_layers++;
	return 0;
}

static int layers_count_check(size_t n, const struct oci_limits *lim, struct al_error *err)
{
	if (n > lim->max_layers)
		return al_error_set(err, AL_ERR_TOO_LARGE, EFBIG,
		                    "the image has %zu layers, more than %llu (--max-layers)", n,
		                    (unsigned long long)lim->max_layers);
	return 0;
}

/* ------------------------------------------------------------ docker save */

/* Plain layer.tar files are named by their diff_id in the config. */
static const char *docker_diff_id(const json_t *config, size_t i, size_t n)
{
	const json_t *ids = json_object_get(json_object_get(config, "rootfs"), "diff_ids");
	const char *hex;
	if (json_array_size(ids) != n || !oci_digest_parse(json_string_value(json_array_get(ids, i)), &hex))
		return NULL;
	return hex;
}

static int docker_layers(const json_t *layers, struct oci_image *img, struct al_error *err)
{
	size_t i, n = json_array_size(layers);
	const json_t *v;
	json_array_foreach (layers, i, v) {
		const char *name = json_string_value(v);
		if (!name)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "manifest.json: Layers[%zu] is not a string", i);
		cleanup_free char *hex = docker_name_hex(name);
		image_add_layer(img, name, hex ? hex : docker_diff_id(img->config, i, n));
	}
	return 0;
}

static int docker_load(const struct oci_source *s, const struct oci_limits *lim, struct oci_image *img,
                       struct al_error *err)
{
	cleanup_json json_t *m = NULL;
	int r = oci_source_json(s, "manifest.json", NULL, &m, err);
	if (r < 0)
		return r;
	if (!json_is_array(m) || json_array_size(m) != 1)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "manifest.json must list exactly one image (it lists %zu)", json_array_size(m));
	const json_t *entry = json_array_get(m, 0);
	const char *config = json_string_value(json_object_get(entry, "Config"));
	const json_t *layers = json_object_get(entry, "Layers");
	if (!config || !json_is_array(layers))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "manifest.json: no Config or no Layers");
	if ((r = layers_count_check(json_array_size(layers), lim, err)) < 0)
		return r;
	cleanup_free char *hex = docker_name_hex(config);
	if ((r = oci_source_json(s, config, hex, &img->config, err)) < 0)
		return r;
	if ((r = config_check_platform(img->config, err)) < 0)
		return r;
	return docker_layers(layers, img, err);
}

/* ------------------------------------------------------------ OCI layout */

static bool media_is(const json_t *desc, const char *a, const char *b)
{
	const char *t = json_string_value(json_object_get(desc, "mediaType"));
	return t && (!strcmp(t, a) || !strcmp(t, b));
}
#define MEDIA_INDEX                                                                                                    \
	"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"
#define MEDIA_MANIFEST                                                                                                 \
	"application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"

static bool desc_platform_is(const json_t *desc, const char *arch)
{
	const json_t *p = json_object_get(desc, "platform");
	const char *a = json_string_value(json_object_get(p, "architecture"));
	const char *os = json_string_value(json_object_get(p, "os"));
	return a && !strcmp(a, arch) && (!os || !strcmp(os, "linux"));
}

/* The manifest (or nested index) of an index: the only one, or linux/amd64.
 * Attestation manifests (platform unknown/unknown) do not count. */
static int index_choose(const json_t *index, const json_t **ret, struct al_error *err)
{
	const json_t *ms = json_object_get(index, "manifests"), *d, *only = NULL, *amd64 = NULL;
	size_t i, n = 0;
	char archs[256] = "";
	json_array_foreach (ms, i, d) {
		if (!media_is(d, MEDIA_MANIFEST) && !media_is(d, MEDIA_INDEX))
			continue;
		if (desc_platform_is(d, "unknown"))
			continue;
		n++;
		only = d;
		if (!amd64 && desc_platform_is(d, "amd64"))
			amd64 = d;
		const char *a = json_string_value(json_object_get(json_object_get(d, "platform"), "architecture"));
		size_t len = strlen(archs);
		snprintf(archs + len, sizeof(archs) - len, "%s%.32s", len ? ", " : "", a ? a : "?");
	}
	if (n == 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "the index lists no image manifest");
	*ret = n == 1 ? only : amd64;
	if (!*ret)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "the index has no linux/amd64 image (it has: %s): Airlock runs amd64 guests",
		                    archs);
	return 0;
}

static int blob_json(const struct oci_source *s, const json_t *desc, json_t **ret, struct al_error *err)
{
	const char *hex;
	char name[96];
	if (!oci_digest_parse(json_string_value(json_object_get(desc, "digest")), &hex))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "a descriptor has no sha256 digest");
	snprintf(name, sizeof(name), "blobs/sha256/%s", hex);
	return oci_source_json(s, name, hex, ret, err);
}

static bool layer_media_ok(const char *t)
{
	static const char *const ends[] = {".tar", "tar+gzip", "tar.gzip", "tar+zstd"};
	size_t n = t ? strlen(t) : 0;
	for (size_t i = 0; i < ARRAY_SIZE(ends); i++)
		if (n >= strlen(ends[i]) && !strcmp(t + n - strlen(ends[i]), ends[i]))
			return true;
	return false;
}

static int oci_manifest_layers(const json_t *manifest, struct oci_image *img, struct al_error *err)
{
	size_t i;
	const json_t *d;
	json_array_foreach (json_object_get(manifest, "layers"), i, d) {
		const char *type = json_string_value(json_object_get(d, "mediaType")), *hex;
		if (!layer_media_ok(type))
			return al_error_set(err, AL_ERR_UNSUPPORTED_MEDIA, EINVAL,
			                    "layer %zu has media type %.100s, not a tar, tar+gzip or tar+zstd", i + 1,
			                    type ? type : "(none)");
		if (!oci_digest_parse(json_string_value(json_object_get(d, "digest")), &hex))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "layer %zu has no sha256 digest",
			                    i + 1);
		char name[96];
		snprintf(name, sizeof(name), "blobs/sha256/%s", hex);
		image_add_layer(img, name, hex);
	}
	return 0;
}

static int oci_load_manifest(const struct oci_source *s, const json_t *desc, const struct oci_limits *lim,
                             struct oci_image *img, struct al_error *err)
{
	cleanup_json json_t *m = NULL;
	int r = blob_json(s, desc, &m, err);
	if (r < 0)
		return r;
	const json_t *layers = json_object_get(m, "layers");
	if (!json_is_array(layers))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "the image manifest has no layers");
	if ((r = layers_count_check(json_array_size(layers), lim, err)) < 0)
		return r;
	if ((r = blob_json(s, json_object_get(m, "config"), &img->config, err)) < 0) {
		al_error_prefix(err, "image config");
		return r;
	}
	if ((r = config_check_platform(img->config, err)) < 0)
		return r;
	return oci_manifest_layers(m, img, err);
}

static int oci_load(const struct oci_source *s, const struct oci_limits *lim, struct oci_image *img,
                    struct al_error *err)
{
	cleanup_json json_t *index = NULL;
	int r = oci_source_json(s, "index.json", NULL, &index, err);
	for (int depth = 0; r >= 0; depth++) {
		const json_t *desc;
		if ((r = index_choose(index, &desc, err)) < 0)
			return r;
		if (media_is(desc, MEDIA_MANIFEST))
			return oci_load_manifest(s, desc, lim, img, err);
		if (depth == INDEX_DEPTH_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "indexes nested too deep");
		json_t *next = NULL;
		r = blob_json(s, desc, &next, err);
		json_decref(index);
		index = next;
	}
	return r;
}

int oci_image_load(const struct oci_source *s, const struct oci_limits *lim, struct oci_image *ret,
                   struct al_error *err)
{
	struct oci_image img = {0};
	int r;
	if (oci_source_has(s, "manifest.json"))
		r = docker_load(s, lim, &img, err);
	else if (oci_source_has(s, "index.json"))
		r = oci_load(s, lim, &img, err);
	else
		r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                 "neither a docker save archive (manifest.json) nor an OCI layout (index.json)");
	if (r < 0) {
		oci_image_release(&img);
		return r;
	}
	*ret = img;
	return 0;
}

void oci_image_release(struct oci_image *img)
{
	for (size_t i = 0; i < img->n_layers; i++) {
		free(img->layers[i].name);
		free(img->layers[i].hex);
	}
	free(img->layers);
	json_decref(img->config);
	*img = (struct oci_image){0};
}

/* ------------------------------------------------------------ config.json */

static int strings_or_null(const json_t *v, const char *what, json_t **ret, struct al_error *err)
{
	if (!v || json_is_null(v)) {
		*ret = json_null();
		return 0;
	}
	size_t i;
	const json_t *s;
	if (!json_is_array(v))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "image config: %s is not a list", what);
	json_array_foreach (v, i, s) {
		if (!json_is_string(s) || json_string_has_nul(s))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "image config: %s[%zu] is not a string", what, i);
	}
	*ret = json_deep_copy(v);
	return 0;
}

static int string_or_empty(const json_t *v, const char *what, json_t **ret, struct al_error *err)
{
	if (!v || json_is_null(v)) {
		*ret = json_string("");
		return 0;
	}
	if (!json_is_string(v) || json_string_has_nul(v))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "image config: %s is not a string", what);
	*ret = json_deep_copy(v);
	return 0;
}

int oci_config_template(const json_t *config, uint64_t layers, uint64_t bytes, json_t **ret, struct al_error *err)
{
	const json_t *c = json_object_get(config, "config");
	json_t *env = NULL, *wd = NULL, *user = NULL, *cmd = NULL, *ep = NULL;
	int r;
	if ((r = strings_or_null(json_object_get(c, "Env"), "Env", &env, err)) < 0 ||
	    (r = string_or_empty(json_object_get(c, "WorkingDir"), "WorkingDir", &wd, err)) < 0 ||
	    (r = string_or_empty(json_object_get(c, "User"), "User", &user, err)) < 0 ||
	    (r = strings_or_null(json_object_get(c, "Cmd"), "Cmd", &cmd, err)) < 0 ||
	    (r = strings_or_null(json_object_get(c, "Entrypoint"), "Entrypoint", &ep, err)) < 0) {
		json_decref(env), json_decref(wd), json_decref(user), json_decref(cmd);
		return r;
	}
	if (json_is_null(env)) {
		json_decref(env);
		env = json_array();
	}
	*ret = json_pack("{s:o,s:o,s:o,s:o,s:o,s:s,s:I,s:I}", "env", env, "workdir", wd, "user", user, "cmd", cmd,
	                 "entrypoint", ep, "architecture", "amd64", "layers", (json_int_t)layers, "bytes",
	                 (json_int_t)bytes);
	if (!*ret)
		abort();
	return 0;
}
