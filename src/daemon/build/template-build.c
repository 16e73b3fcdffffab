/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dockerfile builds (template-builds.h, docs/templates.md). The steps run in
 * order over a state (env, workdir, user, cmd, entrypoint, labels): ENV,
 * WORKDIR, USER, ARG, CMD, ENTRYPOINT, LABEL and EXPOSE change the state;
 * RUN, COPY and ADD change the disk, in a sandbox booted from the image so
 * far, and each leaves a layer in the cache (template-cache.h). A step whose
 * layer is cached is not run: the next one boots from that layer.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build-context.h"
#include "build-child.h"
#include "build-vm.h"
#include "dockerfile.h"
#include "auth.h"
#include "json-cleanup.h"
#include "log.h"
#include "sandbox.h"
#include "template-builds.h"
#include "template-cache.h"
#include "templates.h"
#include "util.h"

#define CONTEXT_DOCKERFILE ".airlock-Dockerfile" /* where the CLI puts a -f outside the context */

struct build {
	struct template_build_params *p;
	char *staging;
	struct template_job *job;
	struct build_context *ctx;
	struct dockerfile *df;
	struct build_vm vm;
	const char *network_json;
	json_t *state;       /* {env, workdir, user, uid, gid, cmd, entrypoint, labels, expose} */
	struct kv_list args; /* ARG values in effect (RUN sees them; not kept) */
	uint8_t key[32];
	char image[SANDBOX_TEMPLATE_NAME_MAX + 1]; /* what the next step boots from */
	bool vm_current;                           /* the VM's disk is image's, plus nothing unsaved */
	bool workdir_pending;                      /* WORKDIR named a directory not made yet */
	bool user_pending;                         /* USER named one not resolved to ids yet */
	unsigned disk_mib;
	json_t *steps; /* [{instruction, cached}] */
	bool published;
};

static const struct template_build_config *cfg(void)
{
	return template_builds_config();
}

static void key_chain(struct build *b, const void *data, size_t len)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned n = 0;
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	EVP_DigestUpdate(md, b->key, sizeof(b->key));
	EVP_DigestUpdate(md, data, len);
	EVP_DigestFinal_ex(md, b->key, &n);
	EVP_MD_CTX_free(md);
}

static const char *owner(const struct build *b)
{
	return b->p->tenant[0] ? b->p->tenant : TENANT_DEFAULT;
}

/* ---- the state ---------------------------------------------------------------------------- */

static json_t *state_initial(json_t *parent_config)
{
	json_t *s = json_is_object(parent_config) ? json_deep_copy(parent_config) : json_object();
	if (!json_is_array(json_object_get(s, "env")))
		json_object_set_new(s, "env", json_array());
	if (!json_is_string(json_object_get(s, "workdir")))
		json_object_set_new(s, "workdir", json_string("/"));
	if (!json_is_string(json_object_get(s, "user")))
		json_object_set_new(s, "user", json_string(""));
	if (!json_is_integer(json_object_get(s, "uid"))) {
		json_object_set_new(s, "uid", json_integer(0));
		json_object_set_new(s, "gid", json_integer(0));
	}
	return s;
}

static void env_set(json_t *env, const char *key, const char *value)
{
	size_t klen = strlen(key), i;
	json_t *v;
	json_array_foreach (env, i, v) {
		const char *s = json_string_value(v);
		if (s && !strncmp(s, key, klen) && s[klen] == '=') {
			json_array_remove(env, i);
			break;
		}
	}
	cleanup_free char *kv = xasprintf("%s=%s", key, value);
	json_array_append_new(env, json_string(kv));
}

static json_t *argv_json(const struct dockerfile_argv *a)
{
	json_t *arr = json_array();
	for (size_t i = 0; i < a->argc; i++)
		json_array_append_new(arr, json_string(a->argv[i]));
	return arr;
}

static void arg_set(struct kv_list *args, const char *key, const char *value)
{
	for (size_t i = 0; i < args->n; i++)
		if (!strcmp(args->keys[i], key)) {
			free(args->values[i]);
			args->values[i] = xstrdup(value);
			return;
		}
	kv_list_add(args, key, value);
}

/* A step that changes only the state. */
static void state_apply(struct build *b, const struct dockerfile_step *st)
{
	json_t *s = b->state;
	switch (st->kind) {
	case DOCKERFILE_ENV:
		for (size_t i = 0; i < st->pairs.n; i++)
			env_set(json_object_get(s, "env"), st->pairs.keys[i], st->pairs.values[i]);
		break;
	case DOCKERFILE_ARG:
		for (size_t i = 0; i < st->pairs.n; i++)
			if (st->pairs.values[i])
				arg_set(&b->args, st->pairs.keys[i], st->pairs.values[i]);
		break;
	case DOCKERFILE_WORKDIR:
		json_object_set_new(s, "workdir", json_string(st->value));
		b->workdir_pending = true;
		break;
	case DOCKERFILE_USER:
		json_object_set_new(s, "user", json_string(st->value));
		b->user_pending = true;
		break;
	case DOCKERFILE_CMD:
		json_object_set_new(s, "cmd", argv_json(&st->argv));
		break;
	case DOCKERFILE_ENTRYPOINT:
		json_object_set_new(s, "entrypoint", argv_json(&st->argv));
		break;
	case DOCKERFILE_LABEL: {
		json_t *labels = json_object_get(s, "labels");
		if (!json_is_object(labels))
			json_object_set_new(s, "labels", labels = json_object());
		for (size_t i = 0; i < st->pairs.n; i++)
			json_object_set_new(labels, st->pairs.keys[i], json_string(st->pairs.values[i]));
		break;
	}
	case DOCKERFILE_EXPOSE: {
		json_t *ports = json_object_get(s, "expose");
		if (!json_is_array(ports))
			json_object_set_new(s, "expose", ports = json_array());
		for (size_t i = 0; i < st->n_ports; i++)
			json_array_append_new(ports, json_string(st->ports[i]));
		break;
	}
	default:
		break;
	}
}

/* ---- the sandbox -------------------------------------------------------------------------- */

static int vm_ensure(struct build *b, struct al_error *err)
{
	if (b->vm.id[0] && b->vm_current)
		return 0;
	build_vm_stop(&b->vm);
	template_job_emit(b->job, json_pack("{s:s, s:s, s:s}", "type", "progress", "phase", "boot", "from", b->image));
	int r = build_vm_start(&b->vm, b->p->name, b->image, b->disk_mib, b->network_json, err);
	b->vm_current = r == 0;
	return r;
}

static bool numeric(const char *s)
{
	return s[0] && strlen(s) < 11 && strspn(s, "0123456789") == strlen(s);
}

/* "user[:group]" as ids, names looked up in the image's own account files
 * (in the build's sandbox); -EINVAL when one is not there. */
static int ids_lookup(struct build *b, const char *spec, unsigned long *uid, unsigned long *gid, struct al_error *err)
{
	cleanup_free char *name = xstrdup(spec);
	char *group = strchr(name, ':');
	if (group)
		*group++ = '\0';
	char out[256] = "";
	/* $1 the user, $2 the group: ids as they are, names through the image. */
	static const char script[] =
	    "case $1 in *[!0-9]*) id -u \"$1\" || exit 1;; *) echo \"$1\";; esac;"
	    "case $2 in '') id -g \"$1\" 2>/dev/null || echo \"$1\";; *[!0-9]*) "
	    "awk -F: -v g=\"$2\" '$1==g{print $3; f=1} END{exit !f}' /etc/group;; *) echo \"$2\";; esac";
	char *argv[] = {"/bin/sh", "-c", (char *)script, "user", name, group ? group : "", NULL};
	int r = vm_ensure(b, err);
	if (r == 0)
		r = build_vm_capture(&b->vm, argv, 6, out, sizeof(out), err);
	if (r < 0 || sscanf(out, "%lu %lu", uid, gid) != 2 || *uid > EXEC_ID_MAX || *gid > EXEC_ID_MAX)
		return -EINVAL;
	return 0;
}

/* USER's name (and group) as ids, from the image's own account files. */
static int user_resolve(struct build *b, struct al_error *err)
{
	const char *user = json_string_value(json_object_get(b->state, "user"));
	cleanup_free char *name = xstrdup(user ? user : "");
	char *group = strchr(name, ':');
	if (group)
		*group++ = '\0';
	unsigned long uid = 0, gid = 0;
	if (!name[0]) {
		uid = gid = 0;
	} else if (numeric(name) && (!group || numeric(group))) {
		uid = strtoul(name, NULL, 10);
		gid = group ? strtoul(group, NULL, 10) : uid;
		if (uid > EXEC_ID_MAX || gid > EXEC_ID_MAX)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ERANGE, "USER %s: ids go up to %u", user,
			                    EXEC_ID_MAX);
	} else if (ids_lookup(b, user, &uid, &gid, err) < 0) {
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "USER %s: no such user or group in the image (or no /bin/sh and id to look it "
		                    "up): give numeric ids, USER 1000:1000",
		                    user);
	}
	json_object_set_new(b->state, "uid", json_integer((json_int_t)uid));
	json_object_set_new(b->state, "gid", json_integer((json_int_t)gid));
	b->user_pending = false;
	return 0;
}

/* WORKDIR's directory, made as Docker does (by root, then owned by nobody
 * in particular: root). */
static int workdir_make(struct build *b, struct al_error *err)
{
	const char *wd = json_string_value(json_object_get(b->state, "workdir"));
	char *argv[] = {"/bin/mkdir", "-p", (char *)wd, NULL};
	char *shv[] = {"/bin/sh", "-c", "mkdir -p \"$1\"", "mkdir", (char *)wd, NULL};
	char out[16];
	int r = vm_ensure(b, err);
	if (r == 0 && build_vm_capture(&b->vm, argv, 3, out, sizeof(out), err) < 0)
		r = build_vm_capture(&b->vm, shv, 5, out, sizeof(out), err);
	if (r < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EIO, "WORKDIR %s: cannot make it in the image", wd);
	b->workdir_pending = false;
	return 0;
}

/* What a step that changes the disk needs first. */
static int pending_settle(struct build *b, struct al_error *err)
{
	int r = 0;
	if (b->workdir_pending)
		r = workdir_make(b, err);
	if (r == 0 && b->user_pending)
		r = user_resolve(b, err);
	return r;
}

/* ENV, then the ARGs that no ENV of the same name hides. */
static json_t *run_env(struct build *b)
{
	json_t *env = json_deep_copy(json_object_get(b->state, "env"));
	cleanup_json json_t *names = json_object();
	size_t i;
	json_t *v;
	json_array_foreach (env, i, v) {
		const char *s = json_string_value(v), *eq = s ? strchr(s, '=') : NULL;
		if (eq) {
			cleanup_free char *k = xstrndup(s, (size_t)(eq - s));
			json_object_set_new(names, k, json_true());
		}
	}
	for (size_t k = 0; k < b->args.n; k++)
		if (!json_object_get(names, b->args.keys[k]))
			env_set(env, b->args.keys[k], b->args.values[k]);
	return env;
}

static int step_run(struct build *b, const struct dockerfile_step *st, struct al_error *err)
{
	cleanup_json json_t *env = run_env(b);
	int status = 0;
	int r = build_vm_run(&b->vm, st->argv.argv, st->argv.argc, env,
	                     json_string_value(json_object_get(b->state, "workdir")),
	                     (unsigned)json_integer_value(json_object_get(b->state, "uid")),
	                     (unsigned)json_integer_value(json_object_get(b->state, "gid")), &status, err);
	if (r < 0)
		return r;
	if (status != 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EIO, "the command returned a non-zero code: %d",
		                    status);
	return 0;
}

/* COPY and ADD: the tar of the files is made before the cache is asked
 * (its digest is part of the key), extracted only on a miss. */
static int copy_prepare(struct build *b, const struct dockerfile_step *st, const char *tar_path, uint8_t digest[32],
                        struct al_error *err)
{
	long uid = -1, gid = -1;
	cleanup_free char *user = NULL, *group = NULL;
	if (st->chown) {
		user = xstrdup(st->chown);
		char *colon = strchr(user, ':');
		if (colon) {
			*colon = '\0';
			group = xstrdup(colon + 1);
		}
		char *end = NULL;
		uid = strtol(user, &end, 10);
		if (!user[0] || *end)
			uid = -1;
		if (group) {
			gid = strtol(group, &end, 10);
			if (!group[0] || *end)
				gid = -1;
		} else {
			gid = uid;
		}
	}
	static const char *const exclude[] = {CONTEXT_DOCKERFILE};
	struct build_copy c = {.sources = (const char *const *)st->sources,
	                       .n_sources = st->n_sources,
	                       .dest = st->dest,
	                       .workdir = json_string_value(json_object_get(b->state, "workdir")),
	                       .uid = uid,
	                       .gid = gid,
	                       .user = uid < 0 ? user : NULL,
	                       .group = gid < 0 && group ? group : NULL,
	                       .chmod_mode = st->chmod,
	                       .exclude = exclude,
	                       .n_exclude = ARRAY_SIZE(exclude)};
	cleanup_close int fd = open(tar_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "create %s: %m", tar_path);
	return build_context_copy(b->ctx, &c, fd, digest, err);
}

/* ---- layers ------------------------------------------------------------------------------- */

/* The disk as it is now becomes the layer of the current key. */
static int layer_save(struct build *b, struct al_error *err)
{
	char name[SANDBOX_TEMPLATE_NAME_MAX + 1];
	template_cache_name(b->key, name);
	cleanup_free char *img = xasprintf("%s/layer.img", b->staging);
	template_job_emit(b->job, json_pack("{s:s, s:s}", "type", "progress", "phase", "export"));
	int r = build_vm_export(&b->vm, cfg()->qemu_img, img, err);
	if (r == 0)
		r = template_cache_put(name, owner(b), img, b->state, err);
	unlink(img);
	if (r < 0)
		return r;
	strlcpy_al(b->image, name, sizeof(b->image));
	return 0;
}

/* A layer of this key from an earlier build: its state, and it is what
 * the next step boots from. */
static bool layer_reuse(struct build *b)
{
	if (b->p->no_cache)
		return false;
	char name[SANDBOX_TEMPLATE_NAME_MAX + 1];
	template_cache_name(b->key, name);
	json_t *state = template_cache_get(name);
	if (!state)
		return false;
	json_decref(b->state);
	b->state = state;
	strlcpy_al(b->image, name, sizeof(b->image));
	b->vm_current = false;
	b->workdir_pending = b->user_pending = false;
	return true;
}

/* COPY --chown by names: the guest's tar would give an unknown name's
 * files to root without a word; Docker refuses them, so do we. */
static int chown_check(struct build *b, const struct dockerfile_step *st, struct al_error *err)
{
	if (!st->chown || strspn(st->chown, "0123456789:") == strlen(st->chown))
		return 0;
	unsigned long uid, gid;
	if (ids_lookup(b, st->chown, &uid, &gid, err) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--chown=%s: no such user or group in the image: give one it has, or "
		                    "numeric ids (--chown=1000:1000)",
		                    st->chown);
	return 0;
}

static void step_line(struct build *b, size_t i, const struct dockerfile_step *st, bool cached)
{
	template_job_emit(b->job,
	                  json_pack("{s:s, s:I, s:I, s:s, s:b}", "type", "step", "step", (json_int_t)i + 2, "steps",
	                            (json_int_t)b->df->n_steps + 1, "instruction", st->text, "cached", cached));
	json_array_append_new(b->steps, json_pack("{s:s, s:b}", "instruction", st->text, "cached", cached));
}

static bool changes_disk(const struct dockerfile_step *st)
{
	return st->kind == DOCKERFILE_RUN || st->kind == DOCKERFILE_COPY || st->kind == DOCKERFILE_ADD;
}

static int step_disk(struct build *b, size_t i, const struct dockerfile_step *st, struct al_error *err)
{
	const char *k = dockerfile_step_key(st);
	key_chain(b, k, strlen(k) + 1);
	cleanup_free char *tar = xasprintf("%s/copy.tar", b->staging);
	if (st->kind != DOCKERFILE_RUN) {
		uint8_t digest[32];
		int r = copy_prepare(b, st, tar, digest, err);
		if (r < 0)
			return r;
		key_chain(b, digest, sizeof(digest));
	}
	if (layer_reuse(b)) {
		step_line(b, i, st, true);
		unlink(tar);
		return 0;
	}
	step_line(b, i, st, false);
	int r = pending_settle(b, err);
	if (r == 0)
		r = vm_ensure(b, err);
	if (r == 0 && st->kind != DOCKERFILE_RUN)
		r = chown_check(b, st, err);
	if (r == 0)
		r = st->kind == DOCKERFILE_RUN ? step_run(b, st, err) : build_vm_untar(&b->vm, tar, err);
	unlink(tar);
	if (r == 0)
		r = layer_save(b, err);
	return r;
}

static int steps_run(struct build *b, struct al_error *err)
{
	for (size_t i = 0; i < b->df->n_steps; i++) {
		const struct dockerfile_step *st = &b->df->steps[i];
		if (template_job_cancelled(b->job))
			return al_error_set(err, AL_ERR_UNAVAILABLE, ECANCELED,
			                    "cancelled (its client went away, or airlockd is stopping)");
		int r;
		if (changes_disk(st)) {
			r = step_disk(b, i, st, err);
		} else {
			const char *k = dockerfile_step_key(st);
			key_chain(b, k, strlen(k) + 1);
			state_apply(b, st);
			step_line(b, i, st, false);
			r = 0;
		}
		if (r < 0) {
			al_error_prefix(err, "step %zu/%zu (Dockerfile line %u, %s)", i + 2, b->df->n_steps + 1,
			                st->line, dockerfile_kind_name(st->kind));
			return r;
		}
	}
	/* A WORKDIR after the last RUN still makes its directory (a layer of
	 * its own); a USER after it still gets its ids. */
	if (!b->workdir_pending && !b->user_pending)
		return 0;
	key_chain(b, "settle", 7);
	if (layer_reuse(b))
		return 0;
	bool disk = b->workdir_pending;
	int r = pending_settle(b, err);
	if (r == 0 && disk)
		r = layer_save(b, err);
	return r;
}

/* ---- start, end --------------------------------------------------------------------------- */

static int context_load(struct build *b, struct al_error *err)
{
	cleanup_free char *upload = xasprintf("%s/" TEMPLATE_UPLOAD_FILE, b->staging);
	cleanup_close int fd = open(upload, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "open the context: %m");
	int r = build_context_open(fd, &b->ctx, err); /* its messages begin "build context: " */
	unlink(upload);
	if (r < 0)
		return r;
	cleanup_free char *text = NULL;
	size_t len = 0;
	r = build_context_read_file(b->ctx, b->p->dockerfile, DOCKERFILE_MAX_BYTES, &text, &len, err);
	if (r == -ENOENT)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOENT,
		                    "the context has no Dockerfile at \"%s\" (dockerfile=, or -f)", b->p->dockerfile);
	if (r < 0)
		return r;
	return dockerfile_parse(text, len, &b->p->build_args, &b->df, err);
}

/* FROM: a template the owner may use; a shared template only from a shared one. */
static int parent_load(struct build *b, struct al_error *err)
{
	struct template_info t;
	const char *from = b->df->from;
	if (template_name_reserved(from) || template_find(from, b->p->tenant[0] ? b->p->tenant : NULL, &t, err) < 0)
		return al_error_set(
		    err, AL_ERR_INVALID_ARGUMENT, ENOENT,
		    "FROM %s (Dockerfile line %u): no such template; FROM names an Airlock template (built "
		    "in, built or imported: 'airlock template ls')",
		    from, b->df->from_line);
	int r = 0;
	if (!b->p->tenant[0] && t.tenant[0])
		r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
		                 "FROM %s: a shared template cannot be built from tenant %s's template", from,
		                 t.tenant);
	unsigned parent_mib = (unsigned)((t.size_bytes + (1u << 20) - 1) >> 20);
	b->disk_mib = b->p->disk_mib ? b->p->disk_mib : parent_mib + TEMPLATE_BUILD_HEADROOM_MIB;
	if (r == 0 && b->disk_mib < parent_mib)
		r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "disk_mib: %u is smaller than FROM %s (%u MiB)",
		                 b->disk_mib, from, parent_mib);
	if (r == 0 && cfg()->max_disk_mib && b->disk_mib > cfg()->max_disk_mib)
		r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                 "disk_mib: the build's disk (%u MiB) is above --max-disk-mib (%u)", b->disk_mib,
		                 cfg()->max_disk_mib);
	if (r == 0) {
		b->state = state_initial(json_object_get(t.meta, "config"));
		strlcpy_al(b->image, from, sizeof(b->image));
		/* The layers of a build from this parent: the owner's, this parent's
		 * image as it is now (a rebuilt parent is another), this disk size. */
		cleanup_free char *rootfs = xasprintf("%s/" TEMPLATE_ROOTFS, t.dir);
		struct stat st = {0};
		stat(rootfs, &st);
		/* SECURITY: the owner ("" the operator, never a tenant's name) and
		 * the network policy RUN steps had are part of every key: no layer
		 * is shared across tenants, nor across policies. */
		cleanup_free char *id =
		    xasprintf("airlock-template-build/1\n%s%s\n%s\n%lu %lld %lld.%09ld\n%u\n%s",
		              b->p->tenant[0] ? "tenant " : "operator", b->p->tenant, from, (unsigned long)st.st_ino,
		              (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, b->disk_mib,
		              b->network_json ? b->network_json : "");
		key_chain(b, id, strlen(id) + 1);
	}
	template_info_release(&t);
	return r;
}

/* The template's image: the last layer's (a hard link: layers never
 * change), or a copy of the parent's when no step changed the disk. A
 * layer is of the build's disk size already; the parent's copy is grown
 * to an asked disk_mib (the guest grows its filesystem at boot). */
static int image_place(struct build *b, struct al_error *err)
{
	char dir[PATH_MAX];
	if (template_dir(b->image, dir, sizeof(dir)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "no image %s", b->image);
	cleanup_free char *src = xasprintf("%s/" TEMPLATE_ROOTFS, dir);
	cleanup_free char *dst = xasprintf("%s/" TEMPLATE_ROOTFS, b->staging);
	bool grow = b->p->disk_mib && !strcmp(b->image, b->df->from);
	if (!grow && link(src, dst) == 0)
		return 0;
	char *argv[] = {"/bin/cp", "--sparse=always", src, dst, NULL};
	struct build_child_io io = {0};
	int r = build_child_run(argv, &io, "copy the image", err);
	struct stat st;
	if (r == 0 && grow && stat(dst, &st) == 0 && (uint64_t)st.st_size < (uint64_t)b->disk_mib << 20 &&
	    truncate(dst, (off_t)((uint64_t)b->disk_mib << 20)) < 0)
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "grow the image to disk_mib %u: %m", b->disk_mib);
	return r;
}

static json_t *template_meta(struct build *b)
{
	json_t *config = json_deep_copy(b->state);
	json_t *meta =
	    json_pack("{s:s, s:s, s:s, s:I, s:o, s:O, s:{s:s, s:I}}", "name", b->p->name, "source", "dockerfile",
	              "parent", b->df->from, "created_ms", (json_int_t)now_ms_realtime(), "config", config, "steps",
	              b->steps, "build", "dockerfile", b->p->dockerfile, "disk_mib", (json_int_t)b->disk_mib);
	if (b->p->tenant[0])
		json_object_set_new(meta, "tenant", json_string(b->p->tenant));
	return meta;
}

/* --snapshot: the template's snapshot made now (by a create of the usual
 * shape) rather than by its first sandbox. */
static void snapshot_make(struct build *b)
{
	template_job_emit(b->job, json_pack("{s:s, s:s}", "type", "progress", "phase", "snapshot"));
	struct create_request req = {.vcpus = 1, .memory_mib = 256};
	strlcpy_al(req.template_name, b->p->name, sizeof(req.template_name));
	strlcpy_al(req.tenant, owner(b), sizeof(req.tenant));
	struct sandbox_record rec;
	struct al_error err = {0};
	if (sandbox_create(&req, NULL, NULL, NULL, &rec, &err) < 0) {
		log_error("template %s: its snapshot: %s", b->p->name, err.message);
		template_job_output(b->job, "stderr", err.message, strlen(err.message));
		return;
	}
	struct sandbox_record gone;
	if (sandbox_delete(rec.id, NULL, &gone, &err) == 0)
		sandbox_record_release(&gone);
	sandbox_record_release(&rec);
}

static int build_run(struct template_job *job, void *arg, json_t **ret_done, struct al_error *err)
{
	struct build *b = arg;
	b->job = job;
	b->vm.job = job;
	b->vm.step_timeout_s = cfg()->step_timeout_s;
	strlcpy_al(b->vm.tenant, b->p->tenant, sizeof(b->vm.tenant));
	b->network_json = b->p->network_json ? b->p->network_json : cfg()->build_network_json;
	b->steps = json_array();
	int r = context_load(b, err);
	if (r == 0)
		r = parent_load(b, err);
	if (r < 0)
		return r;
	cleanup_free char *from = xasprintf("FROM %s", b->df->from);
	template_job_emit(job, json_pack("{s:s, s:i, s:I, s:s, s:b}", "type", "step", "step", 1, "steps",
	                                 (json_int_t)b->df->n_steps + 1, "instruction", from, "cached", true));
	r = steps_run(b, err);
	build_vm_stop(&b->vm);
	if (r == 0)
		r = image_place(b, err);
	cleanup_json json_t *meta = r == 0 ? template_meta(b) : NULL;
	if (r == 0 && (r = template_publish(b->p->name, b->staging, meta, err)) == 0)
		b->published = true;
	template_cache_prune(cfg()->cache_max_bytes);
	if (r < 0)
		return r;
	log_info("template %s: built from %s%s%s", b->p->name, b->df->from, b->p->tenant[0] ? " for tenant " : "",
	         b->p->tenant);
	if (b->p->snapshot)
		snapshot_make(b);
	struct template_info t;
	if (template_find(b->p->name, NULL, &t, err) < 0)
		return -EIO;
	*ret_done = template_to_json(&t, &(struct template_usage){0});
	template_info_release(&t);
	return 0;
}

static void build_free(void *arg)
{
	struct build *b = arg;
	build_vm_stop(&b->vm);
	if (!b->published)
		template_discard(b->staging);
	template_release_name(b->p->name);
	free(b->staging);
	build_context_free(b->ctx);
	dockerfile_free(b->df);
	json_decref(b->state);
	json_decref(b->steps);
	kv_list_release(&b->args);
	kv_list_release(&b->p->build_args);
	free(b->p->network_json);
	free(b->p);
	free(b);
}

int template_build_start(struct template_build_params *p, char *staging, struct template_job **ret,
                         struct al_error *err)
{
	struct build *b = xcalloc(1, sizeof(*b));
	b->p = p;
	b->staging = staging;
	return template_job_start(build_run, b, build_free, ret, err);
}
