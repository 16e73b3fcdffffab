/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the jailer's pure parts: the command line, the path checks
 * (on a temporary tree with symlinks, hard links and writable entries) and
 * the seccomp profile parser. The jail itself is tested from /proc in
 * tests/integration/test_jailer.py. */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "jailer.h"
#include "util.h"

#define UID 61000

/* ------------------------------------------------------------ arguments */

static int parse(struct jail_config *cfg, struct al_error *err, ...)
{
	/* static: cfg->vmm_argv points into it after the call. */
	static char *argv[64] = {"airlock-jailer"};
	int argc = 1;
	va_list ap;
	va_start(ap, err);
	for (char *a; (a = va_arg(ap, char *)) && argc < 63;)
		argv[argc++] = a;
	va_end(ap);
	argv[argc] = NULL;
	memset(err, 0, sizeof(*err));
	return jail_args_parse(argc, argv, cfg, err);
}

#define BASE "--id", "sb-1", "--root", "/srv/jail", "--uid", "61000", "--gid", "61000"

static void expect_refused(const char *needle, ...)
{
	char *argv[64] = {"airlock-jailer"};
	int argc = 1;
	va_list ap;
	va_start(ap, needle);
	for (char *a; (a = va_arg(ap, char *)) && argc < 63;)
		argv[argc++] = a;
	va_end(ap);
	struct jail_config cfg;
	struct al_error err = {0};
	assert_true(jail_args_parse(argc, argv, &cfg, &err) < 0);
	if (!strstr(err.message, needle))
		fail_msg("message \"%s\" lacks \"%s\"", err.message, needle);
	assert_null(strchr(err.message, '\n'));
}

static void test_args_full_command_line(void **state)
{
	(void)state;
	struct jail_config cfg;
	struct al_error err;
	assert_int_equal(
	    parse(&cfg, &err, BASE, "--netns-fd", "5", "--cgroup-parent", "airlock-test", "--cpu-quota-pct", "150",
	          "--memory-mib", "512", "--pids-max", "64", "--rlimit-fsize", "1073741824", "--rlimit-nofile", "1024",
	          "--rlimit-nproc", "128", "--bind-ro", "/usr", "--bind-ro", "/srv/images/vmlinuz", "--dev", "/dev/kvm",
	          "--dev", "/dev/net/tun", "--keep-fd", "7", "--keep-fd", "8", "--seccomp", "/etc/airlock/qemu.json",
	          "--new-pid-ns", "--", "/usr/bin/qemu-system-x86_64", "-M", "microvm", "--id", "not-ours", NULL),
	    0);
	assert_int_equal(cfg.mode, JAIL_MODE_RUN);
	assert_string_equal(cfg.id, "sb-1");
	assert_string_equal(cfg.root, "/srv/jail");
	assert_int_equal(cfg.uid, 61000);
	assert_int_equal(cfg.gid, 61000);
	assert_int_equal(cfg.netns_fd, 5);
	assert_string_equal(cfg.cgroup_parent, "airlock-test");
	assert_int_equal(cfg.cpu_quota_pct, 150);
	assert_int_equal(cfg.memory_mib, 512);
	assert_int_equal(cfg.pids_max, 64);
	assert_int_equal(cfg.rlimit_fsize, 1073741824);
	assert_int_equal(cfg.rlimit_nofile, 1024);
	assert_int_equal(cfg.rlimit_nproc, 128);
	assert_int_equal(cfg.n_binds, 2);
	assert_int_equal(cfg.n_devs, 2);
	assert_int_equal(cfg.n_keep_fds, 2);
	assert_true(cfg.new_pid_ns);
	assert_string_equal(cfg.seccomp_path, "/etc/airlock/qemu.json");
	/* Everything after "--" belongs to the VMM, even what looks like ours. */
	assert_string_equal(cfg.vmm_argv[0], "/usr/bin/qemu-system-x86_64");
	assert_string_equal(cfg.vmm_argv[3], "--id");
	assert_null(cfg.vmm_argv[5]);
}

static void test_args_defaults(void **state)
{
	(void)state;
	struct jail_config cfg;
	struct al_error err;
	assert_int_equal(parse(&cfg, &err, BASE, "--", "/usr/bin/sleep", NULL), 0);
	assert_string_equal(cfg.cgroup_parent, "airlock");
	assert_int_equal(cfg.netns_fd, -1);
	assert_int_equal(cfg.cpu_quota_pct, 0);
	assert_int_equal(cfg.rlimit_nofile, JAIL_RLIMIT_UNSET);
	assert_false(cfg.new_pid_ns);
	assert_null(cfg.seccomp_path);
}

static void test_args_modes(void **state)
{
	(void)state;
	struct jail_config cfg;
	struct al_error err;
	assert_int_equal(parse(&cfg, &err, "--check", NULL), 0);
	assert_int_equal(cfg.mode, JAIL_MODE_CHECK);
	assert_int_equal(parse(&cfg, &err, "--cleanup", "--id", "sb-2", "--cgroup-parent", "x", NULL), 0);
	assert_int_equal(cfg.mode, JAIL_MODE_CLEANUP);
	assert_string_equal(cfg.cgroup_parent, "x");
	assert_int_equal(parse(&cfg, &err, "--help", NULL), 0);
	assert_int_equal(cfg.mode, JAIL_MODE_HELP);
	expect_refused("--id is required", "--cleanup", NULL);
	expect_refused("no other arguments", "--check", "extra", NULL);
}

static void test_args_identity_refused(void **state)
{
	(void)state;
	expect_refused("--id", "--id", "Bad_ID", "--root", "/j", "--uid", "61000", "--gid", "61000", "--", "/x", NULL);
	expect_refused("--id", "--id", "", "--root", "/j", "--uid", "61000", "--gid", "61000", "--", "/x", NULL);
	expect_refused("--id", "--id", "a/b", "--root", "/j", "--uid", "61000", "--gid", "61000", "--", "/x", NULL);
	expect_refused("--id", "--id", "0123456789012345678901234567890123456789012345678901234567890123", "--root",
	               "/j", "--uid", "61000", "--gid", "61000", "--", "/x", NULL);
	expect_refused("--uid 0", "--id", "a", "--root", "/j", "--uid", "0", "--gid", "61000", "--", "/x", NULL);
	expect_refused("--uid 999", "--id", "a", "--root", "/j", "--uid", "999", "--gid", "61000", "--", "/x", NULL);
	expect_refused("--gid 65534", "--id", "a", "--root", "/j", "--uid", "61000", "--gid", "65534", "--", "/x",
	               NULL);
	expect_refused("--uid 4294967295", "--id", "a", "--root", "/j", "--uid", "4294967295", "--gid", "61000", "--",
	               "/x", NULL);
	expect_refused("--uid -5", "--id", "a", "--root", "/j", "--uid", "-5", "--gid", "61000", "--", "/x", NULL);
	expect_refused("--uid given twice", "--id", "a", "--root", "/j", "--uid", "61000", "--uid", "61001", "--gid",
	               "61000", "--", "/x", NULL);
}

static void test_args_refused(void **state)
{
	(void)state;
	expect_refused("must follow \"--\"", BASE, "/usr/bin/sleep", NULL);
	expect_refused("must follow \"--\"", BASE, "--", NULL);
	expect_refused("not an absolute path", BASE, "--", "sleep", "1", NULL);
	expect_refused("not canonical", BASE, "--", "/usr/bin/../bin/sleep", NULL);
	expect_refused("unknown option", BASE, "--frobnicate", "--", "/x", NULL);
	expect_refused("required", "--id", "a", "--", "/x", NULL);
	expect_refused("--root: cannot be /", "--id", "a", "--root", "/", "--uid", "61000", "--gid", "61000", "--",
	               "/x", NULL);
	expect_refused("--bind-ro: cannot be /", BASE, "--bind-ro", "/", "--", "/x", NULL);
	expect_refused("nothing under /proc", BASE, "--bind-ro", "/proc/1", "--", "/x", NULL);
	expect_refused("nothing under /dev", BASE, "--bind-ro", "/dev", "--", "/x", NULL);
	expect_refused("nothing under /tmp", BASE, "--bind-ro", "/tmp/x", "--", "/x", NULL);
	expect_refused("given twice", BASE, "--bind-ro", "/usr", "--bind-ro", "/usr", "--", "/x", NULL);
	expect_refused("contains or lies inside --root", BASE, "--bind-ro", "/srv", "--", "/x", NULL);
	expect_refused("contains or lies inside --root", BASE, "--bind-ro", "/srv/jail/x", "--", "/x", NULL);
	expect_refused("not an allowed device", BASE, "--dev", "/dev/sda", "--", "/x", NULL);
	expect_refused("not an allowed device", BASE, "--dev", "/dev/mem", "--", "/x", NULL);
	expect_refused("not canonical", BASE, "--dev", "/dev/kvm/", "--", "/x", NULL);
	expect_refused("--cpu-quota-pct 0", BASE, "--cpu-quota-pct", "0", "--", "/x", NULL);
	expect_refused("--memory-mib 12x", BASE, "--memory-mib", "12x", "--", "/x", NULL);
	expect_refused("--rlimit-nofile 3", BASE, "--rlimit-nofile", "3", "--", "/x", NULL);
	expect_refused("--cgroup-parent", BASE, "--cgroup-parent", "../etc", "--", "/x", NULL);
	expect_refused("--netns-fd 2", BASE, "--netns-fd", "2", "--", "/x", NULL);
	expect_refused("is the --netns-fd", BASE, "--netns-fd", "5", "--keep-fd", "5", "--", "/x", NULL);
	expect_refused("--keep-fd 7 given twice", BASE, "--keep-fd", "7", "--keep-fd", "7", "--", "/x", NULL);
	expect_refused("control character", BASE, "--bind-ro", "/usr\n/x", "--", "/x", NULL);
}

/* The supervisor's lease and exit record: their bounds and combinations. */
static void test_args_lease(void **state)
{
	(void)state;
	struct jail_config cfg;
	struct al_error err;
	assert_int_equal(parse(&cfg, &err, BASE, "--new-pid-ns", "--lease", "/srv/sb/lease", "--orphan-timeout-s",
	                       "2592000", "--exit-file", "/srv/sb/vmm-exit", "--", "/x", NULL),
	                 0);
	assert_string_equal(cfg.lease_path, "/srv/sb/lease");
	assert_int_equal(cfg.orphan_timeout_s, JAIL_ORPHAN_TIMEOUT_S_MAX);
	assert_string_equal(cfg.exit_file, "/srv/sb/vmm-exit");
	assert_int_equal(
	    parse(&cfg, &err, BASE, "--new-pid-ns", "--lease", "/l", "--orphan-timeout-s", "1", "--", "/x", NULL), 0);
	assert_int_equal(cfg.orphan_timeout_s, 1);
	assert_int_equal(parse(&cfg, &err, BASE, "--", "/x", NULL), 0);
	assert_null(cfg.lease_path);
	assert_null(cfg.exit_file);
	assert_int_equal(cfg.orphan_timeout_s, 0);

#define LEASE "--new-pid-ns", "--lease", "/srv/sb/lease"
	expect_refused("--orphan-timeout-s 0: expected a whole number from 1 to 2592000", BASE, LEASE,
	               "--orphan-timeout-s", "0", "--", "/x", NULL);
	expect_refused("--orphan-timeout-s 2592001", BASE, LEASE, "--orphan-timeout-s", "2592001", "--", "/x", NULL);
	expect_refused("--orphan-timeout-s -1", BASE, LEASE, "--orphan-timeout-s", "-1", "--", "/x", NULL);
	expect_refused("--orphan-timeout-s 1h", BASE, LEASE, "--orphan-timeout-s", "1h", "--", "/x", NULL);
	expect_refused("--orphan-timeout-s given twice", BASE, LEASE, "--orphan-timeout-s", "5", "--orphan-timeout-s",
	               "5", "--", "/x", NULL);
	expect_refused("come together", BASE, LEASE, "--", "/x", NULL);
	expect_refused("come together", BASE, "--new-pid-ns", "--orphan-timeout-s", "5", "--", "/x", NULL);
	expect_refused("need --new-pid-ns", BASE, "--lease", "/l", "--orphan-timeout-s", "5", "--", "/x", NULL);
	expect_refused("need --new-pid-ns", BASE, "--exit-file", "/e", "--", "/x", NULL);
	expect_refused("--lease given twice", BASE, LEASE, "--lease", "/m", "--orphan-timeout-s", "5", "--", "/x",
	               NULL);
	expect_refused("--lease: cannot be /", BASE, "--new-pid-ns", "--lease", "/", "--orphan-timeout-s", "5", "--",
	               "/x", NULL);
	expect_refused("--exit-file: /srv/sb/: not canonical", BASE, "--new-pid-ns", "--exit-file", "/srv/sb/", "--",
	               "/x", NULL);
	expect_refused("not an absolute path", BASE, "--new-pid-ns", "--exit-file", "vmm-exit", "--", "/x", NULL);
	/* SECURITY: never in the jail, which is the VMM's. */
	expect_refused("lies inside --root", BASE, "--new-pid-ns", "--lease", "/srv/jail/lease", "--orphan-timeout-s",
	               "5", "--", "/x", NULL);
	expect_refused("lies inside --root", BASE, "--new-pid-ns", "--exit-file", "/srv/jail/x/vmm-exit", "--", "/x",
	               NULL);
	expect_refused("lies inside --root", BASE, "--new-pid-ns", "--exit-file", "/srv/jail", "--", "/x", NULL);
#undef LEASE
	assert_int_equal(jail_lease_period_ms(1), 250);
	assert_int_equal(jail_lease_period_ms(3), 750);
	assert_int_equal(jail_lease_period_ms(3600), 60000);
	assert_int_equal(jail_lease_period_ms(JAIL_ORPHAN_TIMEOUT_S_MAX), 60000);
	assert_string_equal(jail_path_base("/srv/sb/lease"), "lease");
	assert_string_equal(jail_path_base("/lease"), "lease");
}

/* The supervisor's verdict, on a real directory and a clock of the test's. */
static void test_lease_check(void **state)
{
	(void)state;
	char dir[] = "/tmp/test-jailer-lease.XXXXXX", path[PATH_MAX], why[PATH_MAX + 128];
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/lease", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	struct jail_lease l;
	jail_lease_start(&l, dfd, path, 10, 1000);
	assert_int_equal(jail_lease_check(&l, 1000, why, sizeof(why)), 0);
	assert_int_equal(jail_lease_check(&l, 10999, why, sizeof(why)), 0);
	/* Not renewed for the timeout. */
	assert_int_equal(jail_lease_check(&l, 11000, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "was not renewed for 10 s"));
	/* A renewal (another mtime) starts the count again, whatever the mtime says. */
	struct timespec old[2] = {{.tv_sec = 1}, {.tv_sec = 1}};
	assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
	assert_int_equal(jail_lease_check(&l, 50000, why, sizeof(why)), 0);
	assert_int_equal(jail_lease_check(&l, 59999, why, sizeof(why)), 0);
	assert_int_equal(jail_lease_check(&l, 60000, why, sizeof(why)), -1);
	/* The lease gone, then its directory. */
	assert_int_equal(utimensat(AT_FDCWD, path, NULL, 0), 0);
	assert_int_equal(jail_lease_check(&l, 60001, why, sizeof(why)), 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(jail_lease_check(&l, 60002, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "the lease"));
	assert_non_null(strstr(why, "is gone"));
	assert_int_equal(rmdir(dir), 0);
	assert_int_equal(jail_lease_check(&l, 60003, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "the directory of the lease"));
	close(dfd);
}

static void test_exit_record(void **state)
{
	(void)state;
	char dir[] = "/tmp/test-jailer-exit.XXXXXX", buf[32];
	assert_non_null(mkdtemp(dir));
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	const int statuses[] = {SIGKILL, 3 << 8, 0};
	const char *want[] = {"signal 9\n", "status 3\n", "status 0\n"};
	for (size_t i = 0; i < ARRAY_SIZE(statuses); i++) {
		jail_exit_record_write(dfd, "vmm-exit", statuses[i]);
		int fd = openat(dfd, "vmm-exit", O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		struct stat st;
		assert_int_equal(fstat(fd, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
		close(fd);
		assert_true(n > 0);
		buf[n] = '\0';
		assert_string_equal(buf, want[i]);
	}
	assert_int_equal(unlinkat(dfd, "vmm-exit", 0), 0);
	close(dfd);
	assert_int_equal(rmdir(dir), 0);
}

static void test_ids_paths_devs(void **state)
{
	(void)state;
	assert_true(jail_id_valid("a"));
	assert_true(jail_id_valid("sb-0123-abc"));
	assert_false(jail_id_valid("A"));
	assert_false(jail_id_valid("a_b"));
	assert_false(jail_id_valid("a.b"));
	assert_true(jail_dev_allowed("/dev/null"));
	assert_true(jail_dev_allowed("/dev/vhost-vsock"));
	assert_false(jail_dev_allowed("/dev/null/"));
	assert_false(jail_dev_allowed("/dev/tty"));
	struct al_error err;
	assert_int_equal(jail_path_syntax_check("/", &err), 0);
	assert_int_equal(jail_path_syntax_check("/usr/lib", &err), 0);
	assert_true(jail_path_syntax_check("/usr/", &err) < 0);
	assert_true(jail_path_syntax_check("//usr", &err) < 0);
	assert_true(jail_path_syntax_check("/usr/./lib", &err) < 0);
	assert_true(jail_path_syntax_check("/..", &err) < 0);
	assert_int_equal(jail_path_syntax_check("/a/..b/.c", &err), 0);
	assert_true(jail_path_is_under("/usr/bin/x", "/usr"));
	assert_true(jail_path_is_under("/usr", "/usr"));
	assert_false(jail_path_is_under("/usrx", "/usr"));
	assert_true(jail_path_is_under("/anything", "/"));
}

/* ------------------------------------------------------------ path checks */

struct tree {
	char base[64];
};

static void tp(const struct tree *t, const char *rel, char out[PATH_MAX])
{
	snprintf(out, PATH_MAX, "%s/%s", t->base, rel);
}

static void touch(const char *dir, const char *name, mode_t mode)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(chmod(p, mode), 0);
}

static int tree_setup(void **state)
{
	if (geteuid() != 0) {
		*state = NULL;
		return 0;
	}
	struct tree *t = xcalloc(1, sizeof(*t));
	/* Under /var/tmp (root-owned, sticky; /tmp is the jail's own and
	 * cannot be bound from): the tree's own dirs are root's. */
	snprintf(t->base, sizeof(t->base), "/var/tmp/airlock-test-jailer-XXXXXX");
	assert_non_null(mkdtemp(t->base));
	assert_int_equal(chmod(t->base, 0755), 0);
	char p[PATH_MAX], q[PATH_MAX];
	tp(t, "d", p);
	assert_int_equal(mkdir(p, 0755), 0);
	touch(p, "f", 0644);
	touch(p, "x", 0755);
	touch(p, "nx", 0750);
	touch(p, "wf", 0666);
	touch(p, "gw", 0664);
	touch(p, "u", 0644);
	tp(t, "d/u", q);
	assert_int_equal(chown(q, UID, UID), 0);
	touch(p, "h1", 0644);
	tp(t, "d/h1", p);
	tp(t, "d/h2", q);
	assert_int_equal(link(p, q), 0);
	tp(t, "d/l", p);
	assert_int_equal(symlink("f", p), 0);
	tp(t, "ld", p);
	assert_int_equal(symlink("d", p), 0);
	tp(t, "w", p);
	assert_int_equal(mkdir(p, 0755), 0);
	assert_int_equal(chmod(p, 0777), 0);
	touch(p, "f", 0644);
	tp(t, "s", p);
	assert_int_equal(mkdir(p, 0755), 0);
	assert_int_equal(chmod(p, 01777), 0);
	touch(p, "f", 0644);
	tp(t, "o", p);
	assert_int_equal(mkdir(p, 0755), 0);
	touch(p, "f", 0644);
	assert_int_equal(chown(p, UID, UID), 0);
	tp(t, "jail", p);
	assert_int_equal(mkdir(p, 0755), 0);
	assert_int_equal(chown(p, UID, UID), 0);
	*state = t;
	return 0;
}

static int tree_teardown(void **state)
{
	struct tree *t = *state;
	if (t) {
		rm_rf(t->base);
		free(t);
	}
	return 0;
}

static int open_rel(struct tree *t, const char *rel, unsigned flags, uid_t alt, struct al_error *err)
{
	char p[PATH_MAX];
	tp(t, rel, p);
	int fd = -1;
	struct stat st;
	memset(err, 0, sizeof(*err));
	int r = jail_path_open(p, flags, alt, &fd, &st, err);
	if (r >= 0) {
		assert_true(fd >= 0);
		int fl = fcntl(fd, F_GETFL);
		assert_true(fl & O_PATH);
		assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
		close(fd);
	}
	return r;
}

#define FILE_RULES (JAIL_PATH_REG | JAIL_PATH_OWNER | JAIL_PATH_NOT_WRITABLE | JAIL_PATH_NO_HARDLINK)

static void expect_path_refused(struct tree *t, const char *rel, unsigned flags, uid_t alt, const char *needle)
{
	struct al_error err;
	assert_true(open_rel(t, rel, flags, alt, &err) < 0);
	if (!strstr(err.message, needle))
		fail_msg("%s: message \"%s\" lacks \"%s\"", rel, err.message, needle);
}

static void test_path_checks(void **state)
{
	struct tree *t = *state;
	if (!t)
		skip();
	struct al_error err;
	assert_int_equal(open_rel(t, "d/f", FILE_RULES, (uid_t)-1, &err), 0);
	assert_int_equal(open_rel(t, "d", JAIL_PATH_DIR | JAIL_PATH_OWNER | JAIL_PATH_NOT_WRITABLE, (uid_t)-1, &err),
	                 0);
	assert_int_equal(open_rel(t, "d/x", FILE_RULES | JAIL_PATH_EXEC_OTHER, (uid_t)-1, &err), 0);
	/* A sticky, world-writable directory on the way is fine (like /tmp). */
	assert_int_equal(open_rel(t, "s/f", FILE_RULES, (uid_t)-1, &err), 0);
	/* The jail root may belong to the jail's uid. */
	assert_int_equal(open_rel(t, "jail", JAIL_PATH_DIR | JAIL_PATH_OWNER | JAIL_PATH_NOT_WRITABLE, UID, &err), 0);

	expect_path_refused(t, "d/l", FILE_RULES, (uid_t)-1, "is a symlink");
	expect_path_refused(t, "ld/f", FILE_RULES, (uid_t)-1, "ld is a symlink");
	expect_path_refused(t, "d/wf", FILE_RULES, (uid_t)-1, "writable by group or others");
	expect_path_refused(t, "d/gw", FILE_RULES, (uid_t)-1, "writable by group or others");
	expect_path_refused(t, "w/f", FILE_RULES, (uid_t)-1, "on the way is writable");
	expect_path_refused(t, "o/f", FILE_RULES, (uid_t)-1, "on the way is owned by uid 61000");
	expect_path_refused(t, "d/u", FILE_RULES, (uid_t)-1, "must be owned by root");
	expect_path_refused(t, "d/h1", FILE_RULES, (uid_t)-1, "2 hard links");
	expect_path_refused(t, "d/nx", FILE_RULES | JAIL_PATH_EXEC_OTHER, (uid_t)-1, "not executable by others");
	expect_path_refused(t, "d/missing", FILE_RULES, (uid_t)-1, "No such file");
	expect_path_refused(t, "d/f/x", FILE_RULES, (uid_t)-1, "d/f is not a directory");
	expect_path_refused(t, "d", FILE_RULES, (uid_t)-1, "not a regular file");
	expect_path_refused(t, "d/f", JAIL_PATH_DIR, (uid_t)-1, "not a directory");
	expect_path_refused(t, "jail", JAIL_PATH_DIR | JAIL_PATH_OWNER, UID + 1, "root or by uid 61001");
	struct al_error e2 = {0};
	int fd = -1;
	struct stat st;
	assert_true(jail_path_open("/dev/null", JAIL_PATH_CHR, (uid_t)-1, &fd, &st, &e2) >= 0);
	close(fd);
	assert_true(jail_path_open("/dev/null", JAIL_PATH_REG, (uid_t)-1, &fd, &st, &e2) < 0);
}

static void test_validate(void **state)
{
	struct tree *t = *state;
	if (!t)
		skip();
	char root[PATH_MAX], file[PATH_MAX], sym[PATH_MAX], hard[PATH_MAX];
	tp(t, "jail", root);
	tp(t, "d/f", file);
	tp(t, "ld", sym);
	tp(t, "d/h2", hard);
	struct jail_config cfg;
	struct al_error err;
	assert_int_equal(parse(&cfg, &err, "--id", "a", "--root", root, "--uid", "61000", "--gid", "61000", "--bind-ro",
	                       "/usr", "--bind-ro", file, "--dev", "/dev/null", "--seccomp",
	                       "security/seccomp/qemu-x86_64.json", "--", "/usr/bin/sleep", "1", NULL),
	                 -EINVAL);
	/* The profile path must be absolute like every other. */
	assert_non_null(strstr(err.message, "--seccomp"));
	char profile[PATH_MAX];
	assert_non_null(realpath("security/seccomp/qemu-x86_64.json", profile));
	assert_int_equal(parse(&cfg, &err, "--id", "a", "--root", root, "--uid", "61000", "--gid", "61000", "--bind-ro",
	                       "/usr", "--bind-ro", file, "--dev", "/dev/null", "--seccomp", profile, "--",
	                       "/usr/bin/sleep", "1", NULL),
	                 0);
	struct jail_validated v;
	int r = jail_validate(&cfg, &v, &err);
	/* The repo may live under a directory others can write to: then the
	 * profile is refused, which is the check working. */
	if (r < 0 && strstr(err.message, "--seccomp")) {
		cfg.seccomp_path = NULL;
		r = jail_validate(&cfg, &v, &err);
	}
	if (r < 0)
		fail_msg("%s", err.message);
	assert_false(v.vmm_bind); /* /usr/bin/sleep is under the /usr bind */
	assert_true(S_ISCHR(v.dev_st[0].st_mode));
	jail_validated_release(&v);

	assert_int_equal(
	    parse(&cfg, &err, "--id", "a", "--root", root, "--uid", "61000", "--gid", "61000", "--", file, NULL), 0);
	assert_true(jail_validate(&cfg, &v, &err) < 0);
	assert_non_null(strstr(err.message, "the VMM"));
	assert_non_null(strstr(err.message, "not executable"));

	assert_int_equal(parse(&cfg, &err, "--id", "a", "--root", sym, "--uid", "61000", "--gid", "61000", "--",
	                       "/usr/bin/sleep", NULL),
	                 0);
	assert_true(jail_validate(&cfg, &v, &err) < 0);
	assert_non_null(strstr(err.message, "--root"));
	assert_non_null(strstr(err.message, "symlink"));

	assert_int_equal(parse(&cfg, &err, "--id", "a", "--root", root, "--uid", "61000", "--gid", "61000", "--bind-ro",
	                       hard, "--", "/usr/bin/sleep", NULL),
	                 0);
	assert_true(jail_validate(&cfg, &v, &err) < 0);
	assert_non_null(strstr(err.message, "hard links"));

	assert_int_equal(parse(&cfg, &err, "--id", "a", "--root", root, "--uid", "61000", "--gid", "61000",
	                       "--netns-fd", "1000", "--", "/usr/bin/sleep", NULL),
	                 0);
	assert_true(jail_validate(&cfg, &v, &err) < 0);
	assert_non_null(strstr(err.message, "not an open file descriptor"));
}

/* ------------------------------------------------------------ seccomp profiles */

static int parse_profile(const char *text, struct jail_seccomp_profile *p, struct al_error *err)
{
	memset(err, 0, sizeof(*err));
	memset(p, 0, sizeof(*p));
	return jail_seccomp_parse(text, strlen(text), p, err);
}

static void expect_profile_refused(const char *text, const char *needle)
{
	struct jail_seccomp_profile p;
	struct al_error err;
	assert_true(parse_profile(text, &p, &err) < 0);
	assert_null(p.syscalls);
	if (!strstr(err.message, needle))
		fail_msg("profile %s: message \"%s\" lacks \"%s\"", text, err.message, needle);
}

static void test_seccomp_parse(void **state)
{
	(void)state;
	struct jail_seccomp_profile p;
	struct al_error err;
	assert_int_equal(parse_profile("{\"comment\": \"x\", \"default_action\": \"kill_process\", "
	                               "\"syscalls\": [\"read\", \"write\", \"exit_group\"], "
	                               "\"errno_syscalls\": [\"io_uring_setup\"]}",
	                               &p, &err),
	                 0);
	assert_true(p.kill_process);
	assert_int_equal(p.n_syscalls, 3);
	assert_int_equal(p.syscalls[0], 0); /* read on x86_64 */
	assert_int_equal(p.n_enosys, 1);
	void *filter = NULL;
	assert_int_equal(jail_seccomp_compile(&p, &filter, &err), 0);
	assert_non_null(filter);
	jail_seccomp_free(filter);
	jail_seccomp_profile_release(&p);

	assert_int_equal(parse_profile("{\"default_action\": \"errno\", \"syscalls\": [\"execve\"]}", &p, &err), 0);
	assert_false(p.kill_process);
	jail_seccomp_profile_release(&p);

	expect_profile_refused("", "not valid JSON");
	expect_profile_refused("[]", "must be a JSON object");
	expect_profile_refused("{\"syscalls\": [\"read\"]}", "default_action");
	expect_profile_refused("{\"default_action\": \"allow\", \"syscalls\": [\"read\"]}", "neither");
	expect_profile_refused("{\"default_action\": \"errno\", \"syscalls\": []}", "non-empty");
	expect_profile_refused("{\"default_action\": \"errno\"}", "non-empty");
	expect_profile_refused("{\"default_action\": \"errno\", \"syscalls\": [\"read\", \"read\"]}", "listed twice");
	expect_profile_refused("{\"default_action\": \"errno\", \"syscalls\": [\"read\"], \"errno_syscalls\": "
	                       "[\"read\"]}",
	                       "listed twice");
	expect_profile_refused("{\"default_action\": \"errno\", \"syscalls\": [\"no_such_call\"]}", "not a syscall");
	/* A name of another architecture only. */
	expect_profile_refused("{\"default_action\": \"errno\", \"syscalls\": [\"socketcall\"]}", "not a syscall");
	expect_profile_refused("{\"default_action\": \"errno\", \"syscalls\": [\"READ\"]}", "not a syscall name");
	expect_profile_refused("{\"default_action\": \"errno\", \"syscalls\": [42]}", "not a syscall name");
	expect_profile_refused("{\"default_action\": \"errno\", \"syscalls\": [\"read\"], \"extra\": 1}",
	                       "unknown key");
	expect_profile_refused("{\"default_action\": \"errno\", \"syscalls\": [\"read\"], \"comment\": 1}",
	                       "\"comment\" must be a string");
	expect_profile_refused(
	    "{\"default_action\": \"errno\", \"default_action\": \"errno\", \"syscalls\": [\"read\"]}",
	    "not valid JSON");
}

/* The shipped profile is valid data for this architecture and compiles. */
static void test_shipped_profile(void **state)
{
	(void)state;
	cleanup_free char *text = NULL;
	size_t len = 0;
	assert_int_equal(read_file_limited("security/seccomp/qemu-x86_64.json", JAIL_SECCOMP_FILE_MAX, &text, &len), 0);
	struct jail_seccomp_profile p = {0};
	struct al_error err = {0};
	if (jail_seccomp_parse(text, len, &p, &err) < 0)
		fail_msg("%s", err.message);
	assert_true(p.kill_process);
	assert_true(p.n_syscalls > 50);
	void *filter = NULL;
	assert_int_equal(jail_seccomp_compile(&p, &filter, &err), 0);
	jail_seccomp_free(filter);
	jail_seccomp_profile_release(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_args_full_command_line),
	    cmocka_unit_test(test_args_defaults),
	    cmocka_unit_test(test_args_modes),
	    cmocka_unit_test(test_args_identity_refused),
	    cmocka_unit_test(test_args_refused),
	    cmocka_unit_test(test_args_lease),
	    cmocka_unit_test(test_lease_check),
	    cmocka_unit_test(test_exit_record),
	    cmocka_unit_test(test_ids_paths_devs),
	    cmocka_unit_test_setup_teardown(test_path_checks, tree_setup, tree_teardown),
	    cmocka_unit_test_setup_teardown(test_validate, tree_setup, tree_teardown),
	    cmocka_unit_test(test_seccomp_parse),
	    cmocka_unit_test(test_shipped_profile),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
