/* SPDX-License-Identifier: Apache-2.0 */
/* Saves of backends that write files by name (vmm-backend.h: Firecracker,
 * which cannot be handed an fd once running), taken out of the VMM's jail
 * root by the daemon: their save() of vmm_ops. */
#include <fcntl.h>
#include <sys/stat.h>

#include "file-copy.h"
#include "util.h"
#include "vmm-backend.h"
#include "vmm.h"

/* The name the VMM writes the memory to, in its jail root. */
#define SAVE_NAME "save.mem"
/* The largest device state file taken from a VMM (Firecracker's are a few
 * tens of KiB); its memory file is at most the guest's memory. */
#define SAVE_STATE_MAX_BYTES (16u << 20)

/* Copies the file the VMM wrote in its jail root (`name`, in dirfd) to
 * `dst`, then removes the VMM's.
 * SECURITY: the jail root is the VMM's uid's: `name` may be anything it
 * made it. Only a regular file with one link is taken (never a symlink,
 * FIFO or a link to a file of someone else), no bigger than max_bytes, and
 * it is copied, not renamed, so no fd the VMM kept open on it reaches the
 * daemon's file. The copy is 0644, for a directory of root's that is 0700:
 * no path leads to it, and a restore's VMM (another uid) can reopen the fd
 * it is given through /proc/self/fd (Firecracker takes paths). */
static int take_vmm_file(int dirfd, const char *name, const char *dst, uint64_t max_bytes, struct al_error *err)
{
	cleanup_close int in = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (in < 0 || fstat(in, &st) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "the VMM's snapshot file %s: %m", name);
	if (!S_ISREG(st.st_mode) || st.st_nlink != 1)
		return al_error_set(err, AL_ERR_INTERNAL, EPERM,
		                    "the VMM's snapshot file %s is not a regular file with one link; refused", name);
	if ((uint64_t)st.st_size > max_bytes)
		return al_error_set(
		    err, AL_ERR_INTERNAL, EFBIG,
		    "the VMM's snapshot file %s has %lld bytes, more than the %llu it can have; refused", name,
		    (long long)st.st_size, (unsigned long long)max_bytes);
	cleanup_close int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (out < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", dst);
	int r = file_copy_sparse_fd(in, out);
	if (r == 0 && (fchmod(out, 0644) < 0 || fsync(out) < 0))
		r = -errno;
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot copy the snapshot's %s: %s%s", name, strerror(-r),
		                    r == -ENOSPC ? " (the state dir's filesystem is full)" : "");
	unlinkat(dirfd, name, 0);
	return 0;
}

int vmm_save_by_name(const struct vmm_config *cfg, vmm_save_fn save, const char *state_suffix, const char *mem_dst,
                     const char *state_dst, struct al_error *err)
{
	cleanup_free char *state_name = xasprintf("%s%s", SAVE_NAME, state_suffix ? state_suffix : "");
	/* What an interrupted save left. */
	unlinkat(cfg->dirfd, SAVE_NAME, 0);
	unlinkat(cfg->dirfd, state_name, 0);
	int r = save(cfg, SAVE_NAME, err);
	if (r == 0)
		r = take_vmm_file(cfg->dirfd, SAVE_NAME, mem_dst, (uint64_t)cfg->memory_mib << 20, err);
	if (r == 0 && state_suffix)
		r = take_vmm_file(cfg->dirfd, state_name, state_dst, SAVE_STATE_MAX_BYTES, err);
	unlinkat(cfg->dirfd, SAVE_NAME, 0);
	unlinkat(cfg->dirfd, state_name, 0);
	return r;
}
