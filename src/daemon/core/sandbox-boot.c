/* SPDX-License-Identifier: Apache-2.0 */
/* Booting a sandbox: its template's images, the VMM's jail, a cold boot, a
 * restore (of a snapshot or of the template's snapshot), and tearing the
 * runtime down again. Callers hold sb->op_lock; record fields change under
 * sb->lock. */
#include <dirent.h>
#include <inttypes.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include "ca.h"
#include "guest-ca.h"
#include "jail.h"
#include "json-cleanup.h"
#include "log.h"
#include "snapshot.h"
#include "template-snap.h"
#include "templates.h"
#include "util.h"
#include "file-copy.h"
#include "sandbox-internal.h"

#define RESTORE_TIMEOUT_MS 120000

/* ---- templates and images ---------------------------------------------------------------- */

static int list_templates(char *out, size_t size)
{
	cleanup_free char *dir = xasprintf("%s/templates", sb_cfg->image_dir);
	out[0] = '\0';
	size_t o = 0;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || !template_name_valid(de->d_name))
			continue;
		int n = snprintf(out + o, size - o, "%s%s", o ? ", " : "", de->d_name);
		if (n < 0 || (size_t)n >= size - o)
			break;
		o += (size_t)n;
	}
	closedir(d);
	return 0;
}

int sb_resolve_images(const char *template_name, struct images *ret, struct al_error *err)
{
	/* SECURITY: template_name was validated against [a-z0-9_-] before it
	 * becomes a path component. */
	if (!template_name_valid(template_name))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "template: invalid name");
	char base[PATH_MAX], dir[PATH_MAX];
	if (!realpath(sb_cfg->image_dir, base))
		return al_error_set(err, AL_ERR_INTERNAL, errno, "image dir %s: %m", sb_cfg->image_dir);
	/* A built or imported template (state dir) before a built-in one. */
	if (template_dir(template_name, dir, sizeof(dir)) < 0 ||
	    snprintf_ok(ret->rootfs, sizeof(ret->rootfs), "%s/" TEMPLATE_ROOTFS, dir) < 0 ||
	    snprintf_ok(ret->kernel, sizeof(ret->kernel), "%s/kernels/%s", base, sb_cfg->vmm->kernel_file) < 0 ||
	    snprintf_ok(ret->initrd, sizeof(ret->initrd), "%s/kernels/initramfs.cpio", base) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, ENAMETOOLONG, "image dir path %s is too long", base);
	if (access(ret->rootfs, R_OK) < 0) {
		char names[512];
		list_templates(names, sizeof(names));
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOENT,
		                    "template: unknown template \"%s\" (installed: %s)", template_name,
		                    names[0] ? names : "none; run 'make images'");
	}
	if (access(ret->kernel, R_OK) < 0 || access(ret->initrd, R_OK) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, ENOENT,
		                    "the guest kernel or initramfs is missing under %s/kernels; run 'make images'",
		                    base);
	return 0;
}

/* ---- restores, and the guest's CA ------------------------------------------------------- */

/* Tells the guest who it is now and makes it unique (proto.h, THAW). */
int sb_thaw(struct sandbox *sb, bool orphan_streams, struct al_error *err)
{
	uint8_t entropy[64];
	random_bytes(entropy, sizeof(entropy));
	cleanup_free char *b64 = base64_encode(entropy, sizeof(entropy), NULL);
	explicit_bzero(entropy, sizeof(entropy));
	/* A warm pool's VM is nobody yet: the create that takes it THAWs it
	 * again with its id (sb_pool_handout). */
	const char *who = sb->pooled ? "pool" : sb->rec.id;
	cleanup_json json_t *msg = json_pack("{s:I, s:s, s:I, s:s, s:s, s:b}", "generation", (json_int_t)sb->generation,
	                                     "entropy", b64, "time_ms", (json_int_t)now_ms_realtime(), "sandbox_id",
	                                     who, "hostname", who, "orphan_streams", orphan_streams);
	/* Its own MAC (a restore has its snapshot's); a record from before
	 * per-sandbox MACs keeps the one its guest has. */
	json_object_set_new(msg, "mac", json_string(sb->rec.guest_mac[0] ? sb->rec.guest_mac : AIRLOCK_NET_GUEST_MAC));
	return guest_channel_call(sb->ch, AIRLOCK_FRAME_THAW, msg, now_ms_monotonic() + THAW_TIMEOUT_MS,
	                          "the restore hooks (THAW)", NULL, err);
}

/* The disk and memory of a restore, from its snapshot; before the VMM
 * starts. *ret_mem_fd: the memory, for the VMM to read (never by path: it
 * is outside the jail, and a restore never modifies its snapshot);
 * *ret_state_fd: the device state of a backend that keeps it apart
 * (state_apart), else -1. */
static int restore_prepare(struct sandbox *sb, const struct snapshot_info *from, int *ret_mem_fd, int *ret_state_fd,
                           struct al_error *err)
{
	cleanup_free char *snap = snapshot_dir(from->id);
	cleanup_free char *src = xasprintf("%s/%s", snap, snapshot_disk_name(sb_snapshot_disk()));
	cleanup_free char *dst = xasprintf("%s/%s", sb->root, sb_cfg->vmm->disk_file);
	unlink(dst); /* a recover replaces the disk it had */
	/* A whole disk is copied by reflink where the filesystem can (else
	 * sparse); an overlay is small. */
	int r = file_copy_cow(src, dst, 0600, NULL);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot copy the snapshot's disk: %s", strerror(-r));
	cleanup_free char *mem = xasprintf("%s/%s", snap, SNAPSHOT_MEMORY);
	cleanup_close int fd = open(mem, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open the snapshot's memory: %m");
	int state_fd = -1;
	if (sb_cfg->vmm->state_apart) {
		cleanup_free char *state = xasprintf("%s/%s", snap, SNAPSHOT_STATE);
		if (!from->state_sha[0] || (state_fd = open(state, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
			return al_error_set(err, AL_ERR_CONFLICT, from->state_sha[0] ? errno : ENOENT,
			                    "snapshot %s has no device state (%s) to restore", from->id,
			                    SNAPSHOT_STATE);
	}
	*ret_mem_fd = TAKE_FD(fd);
	*ret_state_fd = state_fd;
	return 0;
}

/* After the VMM loaded the snapshot: run it, find its agent, make it unique. */
static int restore_finish(struct sandbox *sb, const struct vmm_config *vc, uint64_t deadline, struct al_error *err)
{
	int r = sb_cfg->vmm->wait_incoming(vc, sb->pidfd, deadline, err);
	if (r == 0)
		crash_point("restore.loaded");
	if (r == 0)
		r = sb_cfg->vmm->resume(vc, err);
	/* A restored guest has no connection of its own: opened now it runs. */
	if (r == 0 && !sb->ch)
		r = sb_attach_channel(sb, deadline, err);
	if (r < 0)
		return r;
	if (guest_channel_request_hello(sb->ch) < 0 || guest_channel_wait_hello(sb->ch, deadline, NULL) < 0)
		return al_error_set(err, AL_ERR_BOOT_FAILED, ETIMEDOUT, "the restored guest agent did not answer");
	return sb_thaw(sb, true, err);
}

/* The guest trusts the Airlock CA before anything else runs in it (a
 * restore or recover installs again: it finds what it had). */
static int install_ca(struct sandbox *sb, uint64_t deadline, struct al_error *err)
{
	const char *pem = ca_cert_pem();
	if (!pem)
		return 0;
	char bundle[sizeof(sb->rec.ca_bundle)];
	int r = guest_ca_install(sb->ch, pem, deadline, bundle, sizeof(bundle), err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sb->lock);
	strlcpy_al(sb->rec.ca_bundle, bundle, sizeof(sb->rec.ca_bundle));
	pthread_mutex_unlock(&sb->lock);
	return 0;
}

/* ---- the VMM's jail (jail.h) ------------------------------------------------------------ */

/* The VMM's directory, owned by a uid of its own (taken here, kept in the
 * record): nothing in it but the disk from an earlier life (sockets, the
 * jail's mount points and anything an earlier VMM left are removed). */
static int jail_enter_prepare(struct sandbox *sb, struct al_error *err)
{
	if (!sb->uid_held) {
		uint32_t uid;
		int r = jail_uid_take(&uid, err);
		if (r < 0)
			return r;
		pthread_mutex_lock(&sb->lock);
		sb->rec.jail_uid = uid;
		sb->uid_held = true;
		pthread_mutex_unlock(&sb->lock);
	}
	if (mkdir(sb->root, 0700) < 0 && errno != EEXIST)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", sb->root);
	if (sb->dirfd >= 0)
		close(sb->dirfd);
	sb->dirfd = open(sb->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (sb->dirfd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open %s: %m", sb->root);
	cleanup_close int scan = dup(sb->dirfd);
	DIR *d = scan >= 0 ? fdopendir(scan) : NULL;
	if (!d)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot list %s: %m", sb->root);
	scan = -1; /* the DIR has it */
	struct dirent *de;
	int r = 0;
	while (r == 0 && (de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strcmp(de->d_name, sb_cfg->vmm->disk_file))
			r = rm_rf_at(sb->dirfd, de->d_name);
	closedir(d);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot clean %s: %s", sb->root, strerror(-r));
	if (fchown(sb->dirfd, sb->rec.jail_uid, sb->rec.jail_uid) < 0 || fchmod(sb->dirfd, 0700) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot give %s to the jail's uid: %m", sb->root);
	return 0;
}

/* The jailer's refusal in the VMM log, if that is why the VMM ended. */
bool sb_jail_refusal(struct sandbox *sb, char *buf, size_t size)
{
	cleanup_free char *log = xasprintf("%s/%s", sb->dir, VMM_LOG);
	return jail_failure_in_log(AT_FDCWD, log, buf, size);
}

/* After the VMM is gone: its cgroup goes, its uid is free again. */
static void jail_release(struct sandbox *sb)
{
	if (sb->pid > 0 && !sb->vmm_exited)
		return; /* still there: nothing may be reused */
	if (sb->rec.jail_uid == 0 && sb->pid <= 0)
		return;
	struct al_error e = {0};
	if (jail_cleanup(sb->rec.id, &e) < 0) {
		/* Its uid stays taken: something of it may still run. */
		log_error("sandbox %s: %s", sb->rec.id, e.message);
		return;
	}
	pthread_mutex_lock(&sb->lock);
	if (sb->uid_held)
		jail_uid_put(sb->rec.jail_uid);
	sb->uid_held = false;
	sb->rec.jail_uid = 0;
	pthread_mutex_unlock(&sb->lock);
}

static void tsnap_putp(struct tsnap **t)
{
	tsnap_put(*t);
}

/* Whether a DELETE asked to cut this boot short (sandbox_delete sets it). */
static bool boot_cancel_requested(void *arg)
{
	struct sandbox *sb = arg;
	pthread_mutex_lock(&sb->lock);
	bool cancel = sb->cancel;
	pthread_mutex_unlock(&sb->lock);
	return cancel;
}

int sb_boot_cancelled(struct sandbox *sb, struct al_error *err)
{
	return al_error_set(err, AL_ERR_BOOT_FAILED, ECANCELED, "sandbox %s was deleted while it booted", sb->rec.id);
}

/* Between two stages of a boot: the documented answer once a DELETE came
 * (whatever the stage, the create answers the same). */
static int boot_cancel_check(struct sandbox *sb, struct al_error *err)
{
	return boot_cancel_requested(sb) ? sb_boot_cancelled(sb, err) : 0;
}

/* The snapshot of the sandbox's template (made now if needed), or NULL:
 * then it boots cold (the reason is logged; making it is retried after a
 * minute), or a DELETE ended the wait for its build (the build goes on for
 * the other creates; the caller checks). */
static struct tsnap *template_snapshot_for(struct sandbox *sb, const struct images *im)
{
	if (!sb_cfg->template_snapshots)
		return NULL;
	struct tsnap_request tr = {
	    .template_name = sb->rec.template_name,
	    .vcpus = sb->rec.vcpus,
	    .memory_mib = sb->rec.memory_mib,
	    .kernel = im->kernel,
	    .initrd = im->initrd,
	    .rootfs = im->rootfs,
	    .cancelled = boot_cancel_requested,
	    .cancel_arg = sb,
	};
	struct tsnap *ts = NULL;
	struct al_error e = {0};
	int r = tsnap_get(&tr, &ts, &e);
	if (r == -ECANCELED)
		return NULL;
	if (r < 0) {
		log_info("sandbox %s: boots cold: %s", sb->rec.id, e.message);
		return NULL;
	}
	return ts;
}

/* The fds a restore of the template's snapshot starts from: its save (with
 * its RAM in the snapshot's memfd where the backend's RAM can be one,
 * ram_fd; else its memory file, which the VMM maps private), and its
 * device state where the backend keeps it apart. */
static int template_snapshot_open(const struct tsnap *ts, int *ret_mem_fd, int *ret_state_fd, struct al_error *err)
{
	cleanup_close int mem_fd = open(tsnap_saved_path(ts), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	cleanup_close int state_fd = -1;
	if (mem_fd < 0 ||
	    (tsnap_state_path(ts) && (state_fd = open(tsnap_state_path(ts), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0))
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot open the template snapshot: %m");
	*ret_mem_fd = TAKE_FD(mem_fd);
	*ret_state_fd = TAKE_FD(state_fd);
	return 0;
}

/* The disk and memory of a restore of the template's snapshot ts, before
 * the VMM starts: the snapshot's disk copied, its save and RAM opened. */
static int template_restore_prepare(struct sandbox *sb, const struct tsnap *ts, struct vmm_config *vc, int *ret_mem_fd,
                                    int *ret_state_fd, struct al_error *err)
{
	/* A new sandbox, as after a boot: its snapshots are generation 0's. */
	sb->generation = 0;
	cleanup_free char *disk = xasprintf("%s/%s", sb->root, sb_cfg->vmm->disk_file);
	unlink(disk);
	/* A whole disk by reflink where it can (else sparse); an overlay is small. */
	int r = file_copy_cow(tsnap_disk_path(ts), disk, 0600, NULL);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot copy the template snapshot's disk: %s",
		                    strerror(-r));
	if ((r = template_snapshot_open(ts, ret_mem_fd, ret_state_fd, err)) < 0)
		return r;
	vc->incoming_fd = *ret_mem_fd;
	vc->incoming_state_fd = *ret_state_fd;
	vc->mem_fd = tsnap_mem_fd(ts); /* -1 unless the backend has ram_fd */
	return 0;
}

/* Where a start's time went (the benchmarks' profile of a create). */
static void boot_phases_log(struct sandbox *sb, uint64_t t0, uint64_t disk, uint64_t net, uint64_t spawn,
                            uint64_t attach, uint64_t agent)
{
	uint64_t now = now_ms_monotonic();
	log_info("sandbox %s: started (%s) in %" PRIu64 " ms: disk %" PRIu64 ", network %" PRIu64 ", spawn %" PRIu64
	         ", sockets %" PRIu64 ", %s %" PRIu64 ", CA %" PRIu64,
	         sb->rec.id, sb->rec.boot_path, now - t0, disk - t0, net - disk, spawn - net, attach - spawn,
	         !strcmp(sb->rec.boot_path, "cold") ? "boot to hello" : "load+resume+hello+thaw", agent - attach,
	         now - agent);
}

/* The guest agent did not say hello (r: what waiting for it returned): why,
 * as far as the VMM, its jail and the channel tell. */
static int hello_failed(struct sandbox *sb, int r, struct al_error *err)
{
	/* Give the console a moment to deliver the guest's last words. */
	struct pollfd p = {.fd = sb->pidfd, .events = POLLIN};
	poll(&p, 1, r == -ETIMEDOUT ? 0 : 500);
	char what[1200];
	char refusal[200];
	if (poll(&p, 1, 0) > 0 && sb_jail_refusal(sb, refusal, sizeof(refusal))) {
		snprintf(what, sizeof(what), "the VMM's jail could not be set up: %s", refusal);
	} else if (poll(&p, 1, 0) > 0) {
		char how[1024];
		sb_vmm_end_describe(sb, how, sizeof(how));
		snprintf(what, sizeof(what), "the VM exited before the guest agent said hello: %s", how);
	} else if (r == -ETIMEDOUT)
		snprintf(what, sizeof(what), "the guest agent did not say hello within %u s (boot timeout)",
		         sb_cfg->boot_timeout_s);
	else
		guest_channel_dead(sb->ch, what, sizeof(what));
	return al_error_set(err, AL_ERR_BOOT_FAILED, -r, "%s", what);
}

/* Boots the VMM of a freshly inserted sandbox and waits for the agent. */
int sb_boot(struct sandbox *sb, const struct images *im, const struct snapshot_info *from, bool reuse,
            struct al_error *err)
{
	uint64_t t0 = now_ms_monotonic();
	uint64_t deadline = t0 + (uint64_t)sb_cfg->boot_timeout_s * 1000u;
	struct vmm_config vc = {
	    .sandbox_id = sb->rec.id,
	    .dir = sb->dir,
	    .incoming_fd = -1,
	    .incoming_state_fd = -1,
	    .netns_fd = -1,
	    .mem_fd = -1,
	    .kernel = im->kernel,
	    .initrd = im->initrd,
	    .rootfs = im->rootfs,
	    .vcpus = sb->rec.vcpus,
	    .memory_mib = sb->rec.memory_mib,
	};
	/* A recover boots again in the directory the sandbox has. */
	if (mkdir(sb->dir, 0700) < 0 && !(errno == EEXIST && reuse))
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", sb->dir);
	int r = boot_cancel_check(sb, err);
	if (r < 0 || (r = jail_enter_prepare(sb, err)) < 0)
		return r;
	vc.root = sb->root;
	vc.dirfd = sb->dirfd;
	cleanup_close int mem_fd = -1, state_fd = -1;
	const char *disk_file = sb_cfg->vmm->disk_file;
	/* Held until the VMM has its fds. */
	__attribute__((cleanup(tsnap_putp))) struct tsnap *ts = NULL;
	if (from) {
		sb->generation = from->generation + 1;
		deadline = t0 + RESTORE_TIMEOUT_MS;
		r = restore_prepare(sb, from, &mem_fd, &state_fd, err);
		vc.incoming_fd = mem_fd;
		vc.incoming_state_fd = state_fd;
	} else if (reuse) {
		/* Cold boot of the disk the sandbox has. */
		cleanup_free char *disk = xasprintf("%s/%s", sb->root, disk_file);
		r = access(disk, R_OK) == 0
		        ? 0
		        : al_error_set(err, AL_ERR_CONFLICT, ENOENT,
		                       "sandbox %s has no disk left to boot and no snapshot", sb->rec.id);
	} else {
		/* A disk bigger than the template's (create's disk_mib). */
		struct stat st;
		if (stat(im->rootfs, &st) == 0 && sb->rec.disk_mib > size_mib_up((uint64_t)st.st_size))
			vc.disk_mib = sb->rec.disk_mib;
		/* A restore of the template's snapshot where there can be one:
		 * its RAM mapped copy-on-write, its disk copied (small). */
		if (!vc.disk_mib && strcmp(sb->rec.boot_path, "cold"))
			ts = template_snapshot_for(sb, im);
		if (ts) {
			deadline = t0 + RESTORE_TIMEOUT_MS;
			r = template_restore_prepare(sb, ts, &vc, &mem_fd, &state_fd, err);
		} else if (sb->pooled) {
			r = al_error_set(err, AL_ERR_UNAVAILABLE, ENOENT,
			                 "template %s has no snapshot to restore (a warm pool holds only restored VMs; "
			                 "see airlockd's log for why the snapshot is missing)",
			                 sb->rec.template_name);
		} else {
			r = sb_cfg->vmm->prepare_disk(&vc, err);
		}
	}
	pthread_mutex_lock(&sb->lock);
	strlcpy_al(sb->rec.boot_path, from ? "snapshot" : ts ? "template" : "cold", sizeof(sb->rec.boot_path));
	pthread_mutex_unlock(&sb->lock);
	/* The disk is the VMM's to write (and nothing else in the jail root). */
	if (r == 0 && (r = boot_cancel_check(sb, err)) == 0)
		r = vmm_disk_give(sb_cfg->vmm, sb->dirfd, sb->rec.jail_uid, err);
	if (r < 0)
		return r;
	uint64_t t_disk = now_ms_monotonic();
	/* A pooled VM's namespace is known to the gateway only once a create
	 * gives it a policy. */
	if ((r = sb->pooled ? sb_network_take(sb, err) : sb_network_up(sb, 0, err)) < 0 ||
	    (r = boot_cancel_check(sb, err)) < 0)
		return r;
	uint64_t t_net = now_ms_monotonic();
	vc.netns_fd = sb->net.ns_fd;
	vc.guest_mac = sb->rec.guest_mac;
	struct vmm_jail jail;
	vmm_jail_spec(sb_cfg->vmm, &vc, sb->rec.jail_uid, sb->rec.disk_mib, &jail);
	jail.sandbox_dir = sb->dir;
	/* A pool fills at a low weight: its VMs' CPU yields to the sandboxes'. */
	jail.cpu_weight = sb->pooled ? JAIL_CPU_WEIGHT_POOL : 0;
	vc.jail = &jail;
	/* The VMM's jailer stops it once nobody renews this (docs/jailer.md). */
	if (jail_orphan_timeout_s() && (r = jail_lease_touch(sb->dir, true)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot make the lease in %s: %s", sb->dir, strerror(-r));
	__atomic_store_n(&sb->lease_timeout_s, jail_orphan_timeout_s(), __ATOMIC_RELAXED);
	pid_t pid;
	if ((r = sb_cfg->vmm->spawn(&vc, &pid, err)) < 0)
		return r;
	uint64_t t_spawn = now_ms_monotonic();
	pthread_mutex_lock(&sb->lock);
	sb->pid = pid;
	sb->our_child = true;
	sb->pidfd = pidfd_open_pid(pid);
	sb->rec.vmm_pid = pid;
	int pr = sb_persist_locked(sb, err);
	/* A DELETE from here on kills the VMM itself (sandbox_delete): every
	 * wait below ends with it. One that came before is seen here. */
	bool cancel = sb->cancel;
	pthread_mutex_unlock(&sb->lock);
	if (sb->pidfd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "pidfd_open on the VMM: %m");
	if (pr < 0)
		return pr;
	if (cancel)
		return sb_boot_cancelled(sb, err);
	/* A restored guest's vsock channel can only be opened once it runs
	 * (restore_finish). */
	if ((r = sb_attach(sb, deadline, !((from || ts) && sb_channel_needs_running_guest()), err)) < 0)
		return r;
	uint64_t t_attach = now_ms_monotonic();
	if (from || ts) {
		if ((r = restore_finish(sb, &vc, deadline, err)) < 0)
			return r;
	} else if ((r = guest_channel_wait_hello(sb->ch, deadline, NULL)) != 0) {
		return hello_failed(sb, r, err);
	}
	uint64_t t_agent = now_ms_monotonic();
	/* The template's snapshot has the CA already. */
	if (ts && tsnap_ca_bundle(ts)[0]) {
		pthread_mutex_lock(&sb->lock);
		strlcpy_al(sb->rec.ca_bundle, tsnap_ca_bundle(ts), sizeof(sb->rec.ca_bundle));
		pthread_mutex_unlock(&sb->lock);
	} else if ((r = install_ca(sb, deadline, err)) < 0) {
		return r;
	}
	boot_phases_log(sb, t0, t_disk, t_net, t_spawn, t_attach, t_agent);
	pthread_mutex_lock(&sb->lock);
	sb->rec.boot_ms = (int64_t)(now_ms_monotonic() - t0);
	if (sb->pooled) { /* it stays creating until a create takes it */
		pthread_mutex_unlock(&sb->lock);
		return 0;
	}
	/* A DELETE that came at the last moment wins: it was told the boot is cut short. */
	r = sb->cancel ? sb_boot_cancelled(sb, err) : sb_set_state_locked(sb, SANDBOX_RUNNING, NULL, err);
	pthread_mutex_unlock(&sb->lock);
	return r;
}

/* Tears down the runtime of a sandbox: monitor, VMM, fds. Keeps the dir. */
void sb_teardown(struct sandbox *sb)
{
	pthread_mutex_lock(&sb->lock);
	sb->stopping = true;
	pthread_mutex_unlock(&sb->lock);
	if (sb->ch)
		guest_channel_kill(sb->ch, "the sandbox is being stopped");
	sb_ports_hang_up(sb, false);
	sb_monitor_stop(sb);
	sb_vmm_stop_wait(sb);
	sb_network_down(sb);
	if (sb->console_fd >= 0)
		sb_console_drain(sb);
	/* The VMM's sockets go with it (its disk stays for a recover). */
	if (sb->pid <= 0 || sb->vmm_exited) {
		for (const char *const *f = sb_cfg->vmm->runtime_files; *f; f++) {
			cleanup_free char *p = xasprintf("%s/%s", sb->root, *f);
			unlink(p);
		}
	}
	jail_release(sb);
}

/* A boot (of a create or a recover) failed with err: the runtime goes, the
 * record says why, with the console's last lines. */
void sb_boot_failed(struct sandbox *sb, const struct al_error *err)
{
	sb_teardown(sb);
	pthread_mutex_lock(&sb->lock);
	/* Deleted while it booted: the DELETE waiting for op_lock ends it in
	 * `deleted`; an `error` on the way would only mislead. */
	if (!sb->cancel)
		sb_error_locked(sb, err->message);
	pthread_mutex_unlock(&sb->lock);
}
