/* SPDX-License-Identifier: Apache-2.0 */
/* The unpacked tree as an ext4 image, the way images/build-minimal.sh makes
 * the built-in templates: mkfs.ext4 -d, no mounts. Size: the tree's blocks
 * + 10 % + 64 MiB + its inode tables, rounded up to a MiB; inodes: the
 * tree's + 10 %, and no fewer than one per 8 KiB, so a disk grown at create
 * (disk_mib) has room for new files too. */
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "oci.h"
#include "util.h"

#define MKFS_SLACK (64ULL << 20)
#define MKFS_INODE_BYTES 256ULL
#define MKFS_STDERR_MAX 512

static uint64_t tree_bytes, tree_inodes;

static int tree_visit(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)path, (void)flag, (void)f;
	uint64_t b = (uint64_t)st->st_blocks * 512;
	tree_bytes += st->st_nlink > 1 && !S_ISDIR(st->st_mode) ? b / st->st_nlink : b;
	tree_inodes++;
	return 0;
}

static int mkfs_run(char *const argv[], struct al_error *err)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "mkfs: pipe: %s", strerror(errno));
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0), dup2(null, 1), dup2(pfd[1], 2);
		setenv("PATH", "/usr/sbin:/sbin:/usr/bin:/bin", 1);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(pfd[1]);
	char msg[MKFS_STDERR_MAX + 1] = "";
	ssize_t n = pid > 0 ? read_full(pfd[0], msg, MKFS_STDERR_MAX) : 0;
	msg[n > 0 ? n : 0] = '\0';
	close(pfd[0]);
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "mkfs: cannot run mkfs.ext4: %s", strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		msg[strcspn(msg, "\n")] = '\0';
		return al_error_set(err, AL_ERR_INTERNAL, EIO, "mkfs.ext4 failed (status %d): %s",
		                    WIFEXITED(status) ? WEXITSTATUS(status) : -1,
		                    utf8_valid((uint8_t *)msg, strlen(msg)) ? msg : "");
	}
	return 0;
}

int oci_mkfs(const char *tree, const char *out_path, const char *label, uint64_t *ret_size_mib, struct al_error *err)
{
	tree_bytes = tree_inodes = 0;
	if (nftw(tree, tree_visit, 32, FTW_PHYS) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "mkfs: cannot measure the tree: %s", strerror(errno));
	uint64_t inodes = tree_inodes + tree_inodes / 10 + 1024;
	uint64_t bytes = tree_bytes + tree_bytes / 10 + MKFS_SLACK + inodes * MKFS_INODE_BYTES;
	uint64_t mib = size_mib_up(bytes);
	inodes = MAX(inodes, (mib << 20) / 8192);
	cleanup_close int fd = open(out_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || ftruncate(fd, (off_t)(mib << 20)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "mkfs: cannot make %s: %s", out_path, strerror(errno));
	char n_inodes[32];
	snprintf(n_inodes, sizeof(n_inodes), "%llu", (unsigned long long)inodes);
	char *argv[] = {"mkfs.ext4",
	                "-q",
	                "-F",
	                "-d",
	                (char *)tree,
	                "-L",
	                (char *)label,
	                "-U",
	                "clear",
	                "-N",
	                n_inodes,
	                "-E",
	                "root_owner=0:0",
	                (char *)out_path,
	                NULL};
	int r = mkfs_run(argv, err);
	if (r < 0)
		return r;
	*ret_size_mib = mib;
	return 0;
}
