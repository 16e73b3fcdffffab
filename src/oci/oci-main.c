/* SPDX-License-Identifier: Apache-2.0 */
/* airlock-oci import [--max-bytes N] [--max-entries N] [--max-layers N]
 *                    [--label L] SRC OUTDIR
 *
 * SRC (a docker save archive or an OCI layout: a tar, plain, gzip or zstd,
 * or a layout directory) becomes OUTDIR/rootfs.ext4 and OUTDIR/config.json.
 * Progress goes to stdout as JSON lines; a failure is one line on stderr,
 * exit status 1, and OUTDIR as it was (empty) or gone; usage errors exit 2.
 *
 * SECURITY: airlockd runs this as root on a tenant's archive. The layers are
 * unpacked into a scratch tree inside OUTDIR, in a 0700 directory (setuid
 * files and capabilities of the image are on the host's disk meanwhile, out
 * of every other user's reach), and removed before exit whatever happened. */
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>

#include "json-cleanup.h"
#include "oci.h"
#include "util.h"

#define SCRATCH ".airlock-oci-scratch"
#define LABEL_MAX 63 /* a template name; ext4 keeps the first 16 bytes */
#define LABEL_EXT4_MAX 16

struct oci_opts {
	struct oci_limits lim;
	const char *label;
	const char *src;
	const char *outdir;
};

struct oci_run {
	const struct oci_opts *o;
	int out_fd;
	int scratch_fd;
	int tree_fd;
	size_t layer, layers;
	struct oci_counts counts;
};

static void usage(void)
{
	fprintf(stderr, "usage: airlock-oci import [--max-bytes N] [--max-entries N] [--max-layers N] [--label L] "
	                "SRC OUTDIR\n");
	exit(2);
}

static void progress_layer(const struct oci_counts *c, void *ctx)
{
	const struct oci_run *run = ctx;
	printf("{\"phase\":\"layer\",\"layer\":%zu,\"layers\":%zu,\"bytes\":%llu}\n", run->layer, run->layers,
	       (unsigned long long)c->bytes);
	fflush(stdout);
}

static bool label_valid(const char *l)
{
	size_t n = strlen(l);
	if (n == 0 || n > LABEL_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((l[i] >= 'a' && l[i] <= 'z') || (l[i] >= 'A' && l[i] <= 'Z') || (l[i] >= '0' && l[i] <= '9') ||
		      l[i] == '-' || l[i] == '_' || l[i] == '.'))
			return false;
	return true;
}

static uint64_t opt_u64(const char *s, const char *what)
{
	uint64_t v;
	if (parse_u64(s, &v) < 0 || v == 0) {
		fprintf(stderr, "airlock-oci: %s must be a positive integer, not \"%s\"\n", what, s);
		exit(2);
	}
	return v;
}

static void opts_parse(int argc, char **argv, struct oci_opts *o)
{
	static const struct option longs[] = {
	    {"max-bytes", required_argument, NULL, 'b'},
	    {"max-entries", required_argument, NULL, 'e'},
	    {"max-layers", required_argument, NULL, 'l'},
	    {"label", required_argument, NULL, 'L'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	*o = (struct oci_opts){
	    .lim = {OCI_DEFAULT_MAX_BYTES, OCI_DEFAULT_MAX_ENTRIES, OCI_DEFAULT_MAX_LAYERS},
	    .label = "airlock",
	};
	if (argc < 2 || strcmp(argv[1], "import"))
		usage();
	int c;
	optind = 2;
	while ((c = getopt_long(argc, argv, "+h", longs, NULL)) != -1) {
		switch (c) {
		case 'b':
			o->lim.max_bytes = opt_u64(optarg, "--max-bytes");
			break;
		case 'e':
			o->lim.max_entries = opt_u64(optarg, "--max-entries");
			break;
		case 'l':
			o->lim.max_layers = opt_u64(optarg, "--max-layers");
			break;
		case 'L':
			o->label = optarg;
			break;
		default:
			usage();
		}
	}
	if (argc - optind != 2 || !label_valid(o->label))
		usage();
	static char label[LABEL_EXT4_MAX + 1];
	strlcpy_al(label, o->label, sizeof(label));
	o->label = label;
	o->src = argv[optind];
	o->outdir = argv[optind + 1];
}

/* OUTDIR: made, or an empty directory that is there (not a symlink). */
static int outdir_open(const char *outdir, bool *ret_made, struct al_error *err)
{
	*ret_made = mkdir(outdir, 0755) == 0;
	if (!*ret_made && errno != EEXIST)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "cannot make %s: %s", outdir, strerror(errno));
	int fd = open(outdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, errno, "%s is not a directory: %s", outdir,
		                    strerror(errno));
	DIR *d = fdopendir(fcntl(fd, F_DUPFD_CLOEXEC, 3));
	struct dirent *de;
	bool empty = d != NULL;
	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			empty = false;
	if (d)
		closedir(d);
	if (!empty) {
		close(fd);
		return al_error_set(err, AL_ERR_CONFLICT, EEXIST, "%s is not empty", outdir);
	}
	return fd;
}

/* Removes everything in OUTDIR (it was empty), and OUTDIR if this made it. */
static void outdir_clear(const struct oci_opts *o, int out_fd, bool made)
{
	DIR *d = fdopendir(fcntl(out_fd, F_DUPFD_CLOEXEC, 3));
	struct dirent *de;
	if (d)
		rewinddir(d); /* the dup shares outdir_open's offset, at the end */
	while (d && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			rm_rf_at(out_fd, de->d_name);
	if (d)
		closedir(d);
	if (made)
		rmdir(o->outdir);
}

static int dir_make(int parent, const char *name, mode_t mode, struct al_error *err)
{
	int fd = -1;
	if (mkdirat(parent, name, mode) < 0 || fchmodat(parent, name, mode, 0) < 0 ||
	    (fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot make %s: %s", name, strerror(errno));
	return fd;
}

static int layer_one(struct oci_run *run, const struct oci_source *s, const struct oci_layer_ref *ref,
                     struct al_error *err)
{
	cleanup_close int fd = oci_source_open_member(s, ref->name, err);
	int r = fd < 0 ? fd : ref->hex ? oci_digest_check(fd, ref->hex, err) : 0;
	if (r >= 0) {
		progress_layer(&run->counts, run);
		struct oci_layer_io io = {.fd = fd, .progress = progress_layer, .progress_ctx = run};
		r = oci_layer_apply(run->tree_fd, &io, &run->o->lim, &run->counts, err);
	}
	if (r < 0)
		al_error_prefix(err, "layer %zu of %zu (%.80s)", run->layer, run->layers, ref->name);
	return r;
}

static int output_write(struct oci_run *run, const json_t *config, struct al_error *err)
{
	char tree[OCI_MAX_PATH], out[OCI_MAX_PATH], cfg[OCI_MAX_PATH];
	if (snprintf_ok(tree, sizeof(tree), "%s/%s/tree", run->o->outdir, SCRATCH) < 0 ||
	    snprintf_ok(out, sizeof(out), "%s/rootfs.ext4", run->o->outdir) < 0 ||
	    snprintf_ok(cfg, sizeof(cfg), "%s/config.json", run->o->outdir) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "OUTDIR's path is too long");
	cleanup_json json_t *tc = NULL;
	int r = oci_config_template(config, run->layers, run->counts.bytes, &tc, err);
	if (r < 0)
		return r;
	unsigned long uid, gid;
	if (oci_user_ids(run->tree_fd, json_string_value(json_object_get(tc, "user")), &uid, &gid)) {
		json_object_set_new(tc, "uid", json_integer((json_int_t)uid));
		json_object_set_new(tc, "gid", json_integer((json_int_t)gid));
	}
	printf("{\"phase\":\"mkfs\"}\n");
	fflush(stdout);
	uint64_t mib;
	if ((r = oci_mkfs(tree, out, run->o->label, &mib, err)) < 0)
		return r;
	cleanup_free char *text = json_dumps(tc, JSON_COMPACT);
	if (!text || (r = write_file_atomic(cfg, text, strlen(text), 0644)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "cannot write config.json");
	rm_rf_at(run->out_fd, SCRATCH);
	printf("{\"phase\":\"done\",\"size_mib\":%llu}\n", (unsigned long long)mib);
	fflush(stdout);
	return 0;
}

static int import_run(struct oci_run *run, struct al_error *err)
{
	cleanup_close int stage_fd = -1;
	run->scratch_fd = dir_make(run->out_fd, SCRATCH, 0700, err);
	if (run->scratch_fd < 0 || (stage_fd = dir_make(run->scratch_fd, "src", 0700, err)) < 0 ||
	    (run->tree_fd = dir_make(run->scratch_fd, "tree", 0755, err)) < 0)
		return -EIO;
	struct oci_source s = {.dir_fd = -1};
	struct oci_image img = {0};
	int r = oci_source_open(run->o->src, stage_fd, &run->o->lim, &s, err);
	if (r >= 0)
		r = oci_image_load(&s, &run->o->lim, &img, err);
	run->layers = img.n_layers;
	for (size_t i = 0; r >= 0 && i < img.n_layers; i++) {
		run->layer = i + 1;
		r = layer_one(run, &s, &img.layers[i], err);
	}
	if (r >= 0 && oci_stop)
		r = al_error_set(err, AL_ERR_UNAVAILABLE, EINTR, "stopped by a signal");
	if (r >= 0)
		r = output_write(run, img.config, err);
	oci_image_release(&img);
	if (s.dir_fd >= 0)
		close(s.dir_fd);
	return r;
}

static void on_stop(int sig)
{
	(void)sig;
	oci_stop = 1;
}

/* A signal to stop (airlockd cancels an import) ends the run as a failure
 * would: OUTDIR emptied. SA_RESTART: mkfs.ext4 is waited for to its end. */
static void signals_init(void)
{
	struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

int main(int argc, char **argv)
{
	struct oci_opts o;
	opts_parse(argc, argv, &o);
	signals_init();
	umask(022);
	struct al_error err = {0};
	bool made = false;
	int out_fd = outdir_open(o.outdir, &made, &err);
	int r = out_fd;
	struct oci_run run = {.o = &o, .out_fd = out_fd, .scratch_fd = -1, .tree_fd = -1};
	if (out_fd >= 0)
		r = import_run(&run, &err);
	if (run.tree_fd >= 0)
		close(run.tree_fd);
	if (run.scratch_fd >= 0)
		close(run.scratch_fd);
	if (r < 0 && out_fd >= 0)
		outdir_clear(&o, out_fd, made);
	if (r < 0) {
		/* One line of text whatever the archive's names hold. */
		for (char *p = err.message; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				*p = '?';
		cleanup_free char *msg = utf8_repair(err.message);
		fprintf(stderr, "airlock-oci: %s\n", msg);
		return 1;
	}
	return 0;
}
