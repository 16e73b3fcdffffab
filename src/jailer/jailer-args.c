/* SPDX-License-Identifier: Apache-2.0 */
/* The jailer's command line: syntax and ranges. Nothing here opens a file;
 * jail_validate (jailer-path.c) checks what the arguments name. */
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>

#include "jailer.h"
#include "util.h"

/* SECURITY: the only device nodes a jail can hold. Each is created in the
 * jail's own /dev with the host node's major/minor, owned by the jail's uid. */
const char *const jail_dev_allow_list[] = {
    "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/kvm", "/dev/net/tun", "/dev/vhost-vsock", NULL,
};

bool jail_dev_allowed(const char *path)
{
	for (size_t i = 0; jail_dev_allow_list[i]; i++)
		if (!strcmp(path, jail_dev_allow_list[i]))
			return true;
	return false;
}

bool jail_id_valid(const char *id)
{
	size_t n = strnlen(id, JAIL_ID_MAX + 1);
	if (n == 0 || n > JAIL_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
			return false;
	}
	return true;
}

int jail_path_syntax_check(const char *path, struct al_error *err)
{
	size_t n = strnlen(path, PATH_MAX);
	if (n >= PATH_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "a path is longer than %d bytes",
		                    PATH_MAX - 1);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "a path contains a control character (byte %zu)", i);
	if (path[0] != '/')
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "%s: not an absolute path", path);
	if (n == 1)
		return 0;
	/* Every component between slashes must be a real name. */
	const char *p = path + 1;
	for (;;) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "%s: not canonical (empty, \".\" or \"..\" component, or a trailing "
			                    "slash)",
			                    path);
		if (!slash)
			return 0;
		p = slash + 1;
	}
}

enum {
	OPT_ID = 256,
	OPT_ROOT,
	OPT_UID,
	OPT_GID,
	OPT_NETNS_FD,
	OPT_CGROUP_PARENT,
	OPT_CPU_QUOTA_PCT,
	OPT_CPU_WEIGHT,
	OPT_MEMORY_MIB,
	OPT_PIDS_MAX,
	OPT_RLIMIT_FSIZE,
	OPT_RLIMIT_NOFILE,
	OPT_RLIMIT_NPROC,
	OPT_BIND_RO,
	OPT_DEV,
	OPT_KEEP_FD,
	OPT_SECCOMP,
	OPT_NEW_PID_NS,
	OPT_LEASE,
	OPT_ORPHAN_TIMEOUT_S,
	OPT_EXIT_FILE,
	OPT_CHECK,
	OPT_CLEANUP,
	OPT_HELP,
};

static const struct option jail_options[] = {
    {"id", required_argument, NULL, OPT_ID},
    {"root", required_argument, NULL, OPT_ROOT},
    {"uid", required_argument, NULL, OPT_UID},
    {"gid", required_argument, NULL, OPT_GID},
    {"netns-fd", required_argument, NULL, OPT_NETNS_FD},
    {"cgroup-parent", required_argument, NULL, OPT_CGROUP_PARENT},
    {"cpu-quota-pct", required_argument, NULL, OPT_CPU_QUOTA_PCT},
    {"cpu-weight", required_argument, NULL, OPT_CPU_WEIGHT},
    {"memory-mib", required_argument, NULL, OPT_MEMORY_MIB},
    {"pids-max", required_argument, NULL, OPT_PIDS_MAX},
    {"rlimit-fsize", required_argument, NULL, OPT_RLIMIT_FSIZE},
    {"rlimit-nofile", required_argument, NULL, OPT_RLIMIT_NOFILE},
    {"rlimit-nproc", required_argument, NULL, OPT_RLIMIT_NPROC},
    {"bind-ro", required_argument, NULL, OPT_BIND_RO},
    {"dev", required_argument, NULL, OPT_DEV},
    {"keep-fd", required_argument, NULL, OPT_KEEP_FD},
    {"seccomp", required_argument, NULL, OPT_SECCOMP},
    {"new-pid-ns", no_argument, NULL, OPT_NEW_PID_NS},
    {"lease", required_argument, NULL, OPT_LEASE},
    {"orphan-timeout-s", required_argument, NULL, OPT_ORPHAN_TIMEOUT_S},
    {"exit-file", required_argument, NULL, OPT_EXIT_FILE},
    {"check", no_argument, NULL, OPT_CHECK},
    {"cleanup", no_argument, NULL, OPT_CLEANUP},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

void jail_usage(FILE *out)
{
	fputs("usage: airlock-jailer --id SANDBOX_ID --root DIR --uid UID --gid GID\n"
	      "         [--netns-fd FD] [--cgroup-parent NAME] [--cpu-quota-pct N] [--cpu-weight N]\n"
	      "         [--memory-mib N] [--pids-max N]\n"
	      "         [--rlimit-fsize BYTES] [--rlimit-nofile N] [--rlimit-nproc N]\n"
	      "         [--bind-ro PATH]... [--dev PATH]... [--keep-fd FD]...\n"
	      "         [--seccomp FILE] [--new-pid-ns [--lease FILE --orphan-timeout-s N] [--exit-file FILE]]\n"
	      "         -- /absolute/path/to/vmm ARGS...\n"
	      "       airlock-jailer --cleanup --id SANDBOX_ID [--cgroup-parent NAME]\n"
	      "       airlock-jailer --check\n"
	      "See docs/jailer.md.\n",
	      out);
}

void jail_config_init(struct jail_config *cfg)
{
	*cfg = (struct jail_config){
	    .mode = JAIL_MODE_RUN,
	    .uid = (uid_t)-1,
	    .gid = (gid_t)-1,
	    .netns_fd = -1,
	    .cgroup_parent = JAIL_CGROUP_PARENT_DEFAULT,
	    .rlimit_fsize = JAIL_RLIMIT_UNSET,
	    .rlimit_nofile = JAIL_RLIMIT_UNSET,
	    .rlimit_nproc = JAIL_RLIMIT_UNSET,
	};
}

static int parse_u64_range(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *ret,
                           struct al_error *err)
{
	uint64_t v;
	if (parse_u64(s, &v) < 0 || v < min || v > max)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--%s %s: expected a whole number from %llu to %llu", opt, s,
		                    (unsigned long long)min, (unsigned long long)max);
	*ret = v;
	return 0;
}

/* SECURITY: the jail's identity must be unprivileged and unique to the
 * sandbox: never root, never a system account, never the shared "nobody". */
static int parse_jail_id(const char *opt, const char *s, uint32_t *ret, struct al_error *err)
{
	uint64_t v;
	if (parse_u64(s, &v) < 0 || v < JAIL_ID_MIN || v >= UINT32_MAX || v == JAIL_ID_NOBODY)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--%s %s: must be a number >= %d, not %d (nobody) and not -1: a uid/gid "
		                    "unique to this sandbox",
		                    opt, s, JAIL_ID_MIN, JAIL_ID_NOBODY);
	*ret = (uint32_t)v;
	return 0;
}

static int parse_fd(const char *opt, const char *s, int *ret, struct al_error *err)
{
	long v;
	if (parse_int_range(s, 3, INT_MAX, &v) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--%s %s: expected a file descriptor number >= 3", opt, s);
	*ret = (int)v;
	return 0;
}

static int set_once(const char **slot, const char *opt, const char *value, struct al_error *err)
{
	if (*slot)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--%s given twice", opt);
	*slot = value;
	return 0;
}

static int add_path(const char **list, size_t *n, size_t max, const char *opt, const char *path, struct al_error *err)
{
	int r = jail_path_syntax_check(path, err);
	if (r < 0) {
		al_error_prefix(err, "--%s", opt);
		return r;
	}
	if (*n >= max)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG, "--%s given more than %zu times", opt, max);
	for (size_t i = 0; i < *n; i++)
		if (!strcmp(list[i], path))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--%s %s given twice", opt, path);
	list[(*n)++] = path;
	return 0;
}

static int parse_one(int opt, const char *arg, struct jail_config *cfg, bool *seen_uid, bool *seen_gid,
                     const char **cgroup_parent, struct al_error *err)
{
	uint32_t id32 = 0;
	int r, fd = -1;
	switch (opt) {
	case OPT_ID:
		if ((r = set_once(&cfg->id, "id", arg, err)) < 0)
			return r;
		if (!jail_id_valid(arg))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "--id: must be 1 to %d characters of [a-z0-9-]", JAIL_ID_MAX);
		return 0;
	case OPT_ROOT:
		if ((r = set_once(&cfg->root, "root", arg, err)) < 0)
			return r;
		if ((r = jail_path_syntax_check(arg, err)) < 0) {
			al_error_prefix(err, "--root");
			return r;
		}
		if (!strcmp(arg, "/"))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--root: cannot be /");
		return 0;
	case OPT_UID:
	case OPT_GID: {
		bool *seen = opt == OPT_UID ? seen_uid : seen_gid;
		const char *name = opt == OPT_UID ? "uid" : "gid";
		if (*seen)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--%s given twice", name);
		*seen = true;
		if ((r = parse_jail_id(name, arg, &id32, err)) < 0)
			return r;
		if (opt == OPT_UID)
			cfg->uid = id32;
		else
			cfg->gid = id32;
		return 0;
	}
	case OPT_NETNS_FD:
		if (cfg->netns_fd >= 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--netns-fd given twice");
		return parse_fd("netns-fd", arg, &cfg->netns_fd, err);
	case OPT_CGROUP_PARENT:
		if ((r = set_once(cgroup_parent, "cgroup-parent", arg, err)) < 0)
			return r;
		if (!name_valid(arg, JAIL_CGROUP_PARENT_MAX))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "--cgroup-parent: must be 1 to %d characters of [a-z0-9_-], starting "
			                    "with a letter or digit",
			                    JAIL_CGROUP_PARENT_MAX);
		cfg->cgroup_parent = arg;
		return 0;
	case OPT_CPU_QUOTA_PCT:
		return parse_u64_range("cpu-quota-pct", arg, 1, JAIL_CPU_QUOTA_PCT_MAX, &cfg->cpu_quota_pct, err);
	case OPT_CPU_WEIGHT:
		return parse_u64_range("cpu-weight", arg, 1, JAIL_CPU_WEIGHT_MAX, &cfg->cpu_weight, err);
	case OPT_MEMORY_MIB:
		return parse_u64_range("memory-mib", arg, 1, JAIL_MEMORY_MIB_MAX, &cfg->memory_mib, err);
	case OPT_PIDS_MAX:
		return parse_u64_range("pids-max", arg, 1, JAIL_PIDS_MAX, &cfg->pids_max, err);
	case OPT_RLIMIT_FSIZE:
		return parse_u64_range("rlimit-fsize", arg, 0, INT64_MAX, &cfg->rlimit_fsize, err);
	case OPT_RLIMIT_NOFILE:
		return parse_u64_range("rlimit-nofile", arg, JAIL_NOFILE_MIN, JAIL_NOFILE_MAX, &cfg->rlimit_nofile,
		                       err);
	case OPT_RLIMIT_NPROC:
		return parse_u64_range("rlimit-nproc", arg, 1, JAIL_PIDS_MAX, &cfg->rlimit_nproc, err);
	case OPT_BIND_RO:
		if ((r = add_path(cfg->binds, &cfg->n_binds, JAIL_MAX_BINDS, "bind-ro", arg, err)) < 0)
			return r;
		if (!strcmp(arg, "/"))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--bind-ro: cannot be /");
		/* These are the jail's own mounts. */
		static const char *const reserved[] = {"/dev", "/proc", "/sys", "/tmp"};
		for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
			if (jail_path_is_under(arg, reserved[i]))
				return al_error_set(
				    err, AL_ERR_INVALID_ARGUMENT, EINVAL,
				    "--bind-ro %s: nothing under %s can be bound (the jail has its own; "
				    "devices come with --dev)",
				    arg, reserved[i]);
		return 0;
	case OPT_DEV:
		if ((r = add_path(cfg->devs, &cfg->n_devs, JAIL_MAX_DEVS, "dev", arg, err)) < 0)
			return r;
		if (!jail_dev_allowed(arg))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EPERM,
			                    "--dev %s: not an allowed device (allowed: /dev/null, /dev/zero, "
			                    "/dev/urandom, /dev/random, /dev/kvm, /dev/net/tun, /dev/vhost-vsock)",
			                    arg);
		return 0;
	case OPT_KEEP_FD:
		if ((r = parse_fd("keep-fd", arg, &fd, err)) < 0)
			return r;
		if (cfg->n_keep_fds >= JAIL_MAX_KEEP_FDS)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG, "--keep-fd given more than %d times",
			                    JAIL_MAX_KEEP_FDS);
		for (size_t i = 0; i < cfg->n_keep_fds; i++)
			if (cfg->keep_fds[i] == fd)
				return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--keep-fd %d given twice",
				                    fd);
		cfg->keep_fds[cfg->n_keep_fds++] = fd;
		return 0;
	case OPT_SECCOMP:
		if ((r = set_once(&cfg->seccomp_path, "seccomp", arg, err)) < 0)
			return r;
		if ((r = jail_path_syntax_check(arg, err)) < 0)
			al_error_prefix(err, "--seccomp");
		return r;
	case OPT_NEW_PID_NS:
		cfg->new_pid_ns = true;
		return 0;
	case OPT_LEASE:
	case OPT_EXIT_FILE: {
		const char *name = opt == OPT_LEASE ? "lease" : "exit-file";
		const char **slot = opt == OPT_LEASE ? &cfg->lease_path : &cfg->exit_file;
		if ((r = set_once(slot, name, arg, err)) < 0)
			return r;
		if ((r = jail_path_syntax_check(arg, err)) < 0) {
			al_error_prefix(err, "--%s", name);
			return r;
		}
		if (!strcmp(arg, "/"))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--%s: cannot be /", name);
		return 0;
	}
	case OPT_ORPHAN_TIMEOUT_S:
		if (cfg->orphan_timeout_s)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--orphan-timeout-s given twice");
		return parse_u64_range("orphan-timeout-s", arg, 1, JAIL_ORPHAN_TIMEOUT_S_MAX, &cfg->orphan_timeout_s,
		                       err);
	case OPT_CHECK:
		cfg->mode = JAIL_MODE_CHECK;
		return 0;
	case OPT_CLEANUP:
		cfg->mode = JAIL_MODE_CLEANUP;
		return 0;
	case OPT_HELP:
		cfg->mode = JAIL_MODE_HELP;
		return 0;
	}
	return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "unknown option");
}

/* The lease and the exit record are the supervisor's, which only
 * --new-pid-ns has. SECURITY: neither may lie in the jail, whose owner is
 * the VMM: it could renew its own lease or write how it ended. */
static int check_supervisor_files(const struct jail_config *cfg, struct al_error *err)
{
	if (!cfg->lease_path != !cfg->orphan_timeout_s)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--lease and --orphan-timeout-s come together (leave both out: no lease)");
	if ((cfg->lease_path || cfg->exit_file) && !cfg->new_pid_ns)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "--lease and --exit-file need --new-pid-ns (its supervisor keeps them)");
	const char *paths[] = {cfg->lease_path, cfg->exit_file}, *names[] = {"lease", "exit-file"};
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
		if (paths[i] && (jail_path_is_under(paths[i], cfg->root) || jail_path_is_under(cfg->root, paths[i])))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "--%s %s: contains or lies inside --root %s (the VMM's own)", names[i],
			                    paths[i], cfg->root);
	return 0;
}

/* What each mode needs, once every option has been read. */
static int check_complete(int argc, char **argv, struct jail_config *cfg, bool seen_uid, bool seen_gid,
                          struct al_error *err)
{
	bool dashdash = optind > 0 && optind <= argc && !strcmp(argv[optind - 1], "--");
	if (cfg->mode == JAIL_MODE_HELP)
		return 0;
	if (cfg->mode == JAIL_MODE_CHECK) {
		if (optind < argc)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--check takes no other arguments");
		return 0;
	}
	if (!cfg->id)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--id is required");
	if (cfg->mode == JAIL_MODE_CLEANUP) {
		if (optind < argc)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "--cleanup takes only --id and --cgroup-parent");
		return 0;
	}
	if (!cfg->root || !seen_uid || !seen_gid)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--root, --uid and --gid are required");
	if (!dashdash || optind >= argc)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "the VMM's command line must follow \"--\" (-- /absolute/path/to/vmm ARGS...)");
	if (argc - optind > JAIL_MAX_VMM_ARGS)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG, "the VMM has more than %d arguments",
		                    JAIL_MAX_VMM_ARGS);
	cfg->vmm_argv = argv + optind;
	int r = jail_path_syntax_check(cfg->vmm_argv[0], err);
	if (r < 0) {
		al_error_prefix(err, "the VMM");
		return r;
	}
	for (size_t i = 0; i < cfg->n_keep_fds; i++)
		if (cfg->keep_fds[i] == cfg->netns_fd)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "--keep-fd %d is the --netns-fd (it is closed after joining)",
			                    cfg->netns_fd);
	if ((r = check_supervisor_files(cfg, err)) < 0)
		return r;
	for (size_t i = 0; i < cfg->n_binds; i++)
		if (jail_path_is_under(cfg->root, cfg->binds[i]) || jail_path_is_under(cfg->binds[i], cfg->root))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "--bind-ro %s: contains or lies inside --root %s", cfg->binds[i],
			                    cfg->root);
	return 0;
}

int jail_args_parse(int argc, char **argv, struct jail_config *ret, struct al_error *err)
{
	struct jail_config cfg;
	jail_config_init(&cfg);
	bool seen_uid = false, seen_gid = false;
	const char *cgroup_parent = NULL;
	optind = 0; /* 0: a full re-initialisation (the unit tests parse many times) */
	opterr = 0;
	for (;;) {
		int longindex = -1;
		/* "+": stop at the first non-option; the VMM's arguments are not ours. */
		int opt = getopt_long(argc, argv, "+", jail_options, &longindex);
		if (opt == -1)
			break;
		if (opt == '?' || opt == ':') {
			const char *bad = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "%s: unknown option or missing value (see --help)", bad);
		}
		int r = parse_one(opt, optarg, &cfg, &seen_uid, &seen_gid, &cgroup_parent, err);
		if (r < 0)
			return r;
	}
	int r = check_complete(argc, argv, &cfg, seen_uid, seen_gid, err);
	if (r < 0)
		return r;
	*ret = cfg;
	return 0;
}
