/* SPDX-License-Identifier: Apache-2.0 */
/* Template snapshots (template-snap.h). */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ca.h"
#include "guest-ca.h"
#include "guest-channel.h"
#include "jail.h"
#include "json-cleanup.h"
#include "log.h"
#include "netns.h"
#include "sandbox.h"
#include "template-snap-disk.h"
#include "template-snap.h"
#include "util.h"
#include "vmm.h"

#define TSNAP_DIR "template-snapshots"
/* The save's file: the device state alone where the RAM is the memfd
 * (ram_fd), else the memory, mapped private by every restore (its pages
 * shared through the page cache); and the device state kept apart. */
#define TSNAP_STATE "state"
#define TSNAP_MEMORY_FILE "memory.bin"
#define TSNAP_STATE_FILE "memory.bin.vmstate"
#define TSNAP_RETRY_MS 60000
#define TSNAP_SAVE_SEAL_TRIES 100
#define TSNAP_MAX_WHY "at most 8 are kept"
#define TSNAP_NEWER_WHY "a newer one of the same kind is kept"
_Static_assert(TSNAP_MAX == 8, "TSNAP_MAX_WHY says 8");

struct tsnap {
	char key[96]; /* template/vcpus/memory */
	int mem_fd;   /* the RAM, a sealed memfd (ram_fd backends; else -1) */
	char *dir, *saved_path, *disk_path;
	char *state_path;      /* the device state (state_apart backends; else NULL) */
	char *ram_path;        /* the RAM on disk (ram_fd backends; else NULL) */
	bool kept;             /* its files and manifest are on disk (for a restart) */
	bool keep_dir;         /* the daemon stops: its directory stays */
	char ca_bundle[64];    /* where the guest has the Airlock CA ("": not installed) */
	struct stat images[3]; /* kernel, initrd, rootfs when it was made */
	uint64_t build_ms, last_used_ms;
	unsigned refs; /* the cache holds one */
};

static const struct daemon_config *cfg;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
/* One build (or load of a kept one) at a time, on its own thread
 * (build_main): build_lock is held by it; `building` says one runs (under
 * cache_lock), build_done is signalled when it ends, and the creates that
 * wait for it can each stop waiting (a DELETE) while it goes on. */
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;
#define BUILD_POLL_MS 100
static pthread_cond_t build_done = PTHREAD_COND_INITIALIZER;
static bool building, shut;
static struct tsnap *cache[TSNAP_MAX];
static struct {
	char key[96];
	uint64_t at_ms;
} failures[TSNAP_MAX];
/* The snapshots a previous daemon kept (tsnap_init), not yet loaded: under
 * build_lock. One per key, newest first out of TSNAP_MAX. */
static struct kept {
	char key[96];
	char *dir;
	int64_t mtime;
} kept[TSNAP_MAX];
static size_t kept_n;

static void tsnap_free(struct tsnap *t)
{
	if (t->mem_fd >= 0)
		close(t->mem_fd);
	if (t->dir && !t->keep_dir)
		rm_rf(t->dir);
	free(t->dir);
	free(t->ram_path);
	free(t->saved_path);
	free(t->disk_path);
	free(t->state_path);
	free(t);
}

void tsnap_put(struct tsnap *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&cache_lock);
	bool last = --t->refs == 0;
	pthread_mutex_unlock(&cache_lock);
	if (last)
		tsnap_free(t);
}

int tsnap_mem_fd(const struct tsnap *t)
{
	return t->mem_fd;
}

const char *tsnap_saved_path(const struct tsnap *t)
{
	return t->saved_path;
}

const char *tsnap_state_path(const struct tsnap *t)
{
	return t->state_path;
}

const char *tsnap_disk_path(const struct tsnap *t)
{
	return t->disk_path;
}

const char *tsnap_ca_bundle(const struct tsnap *t)
{
	return t->ca_bundle;
}

uint64_t tsnap_build_ms(const struct tsnap *t)
{
	return t->build_ms;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static int stat_images(const struct tsnap_request *req, struct stat st[3])
{
	const char *paths[3] = {req->kernel, req->initrd, req->rootfs};
	for (size_t i = 0; i < 3; i++)
		if (stat(paths[i], &st[i]) < 0)
			return -errno;
	return 0;
}

/* A kept snapshot's directory goes (takes dir). */
static void kept_dir_remove(const char *key, char *dir, const char *why)
{
	log_info("template snapshot %s: the one kept in %s is removed (%s)", key, dir, why);
	rm_rf(dir);
	free(dir);
}

static void kept_drop(size_t i, const char *why)
{
	kept_dir_remove(kept[i].key, kept[i].dir, why);
	kept[i] = kept[--kept_n];
}

static size_t kept_oldest(void)
{
	size_t oldest = 0;
	for (size_t i = 1; i < kept_n; i++)
		if (kept[i].mtime < kept[oldest].mtime)
			oldest = i;
	return oldest;
}

/* Adds dir, a complete snapshot of key, to kept[] (takes dir): one per
 * key, at most TSNAP_MAX, the newest. */
static void kept_add(const char *key, char *dir, int64_t mtime)
{
	for (size_t i = 0; i < kept_n; i++)
		if (!strcmp(kept[i].key, key)) {
			if (kept[i].mtime < mtime) {
				kept_drop(i, TSNAP_NEWER_WHY);
				break;
			}
			kept_dir_remove(key, dir, TSNAP_NEWER_WHY);
			return;
		}
	if (kept_n == TSNAP_MAX) {
		size_t oldest = kept_oldest();
		if (kept[oldest].mtime >= mtime) {
			kept_dir_remove(key, dir, TSNAP_MAX_WHY);
			return;
		}
		kept_drop(oldest, TSNAP_MAX_WHY);
	}
	kept[kept_n].dir = dir;
	kept[kept_n].mtime = mtime;
	strlcpy_al(kept[kept_n].key, key, sizeof(kept[kept_n].key));
	kept_n++;
}

/* What a previous daemon left in base: complete snapshots (a manifest of
 * this format) are kept for their first use; anything else (a build cut
 * by a crash, a manifest of another format) is removed. */
static void kept_scan(const char *base)
{
	DIR *d = opendir(base);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *dir = xasprintf("%s/%s", base, e->d_name);
		cleanup_free char *manifest = xasprintf("%s/%s", dir, TSNAP_MANIFEST);
		cleanup_json json_t *m = tsnap_manifest_read(dir);
		const char *key = json_string_value(json_object_get(m, "key"));
		struct stat st;
		if (!key || strlen(key) >= sizeof(kept[0].key) || lstat(manifest, &st) < 0) {
			log_info("template snapshot dir %s: not complete (no manifest of format %d): removed", dir,
			         TSNAP_FORMAT);
			rm_rf(dir);
			free(dir);
			continue;
		}
		kept_add(key, dir, (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
	}
	closedir(d);
}

void tsnap_init(const struct daemon_config *c)
{
	cfg = c;
	cleanup_free char *base = xasprintf("%s/%s", cfg->state_dir, TSNAP_DIR);
	/* A build's VMM a crashed daemon left (the jailer's --id is tpl-<hex>). */
	jail_kill_left_below(base, "tpl-", "template build");
	/* Complete snapshots stay for their first use (checked then); the
	 * rest goes. */
	pthread_mutex_lock(&build_lock);
	kept_scan(base);
	pthread_mutex_unlock(&build_lock);
}

void tsnap_shutdown(void)
{
	pthread_mutex_lock(&cache_lock);
	/* A build that runs ends first (its VMM must not outlive it). */
	shut = true;
	while (building)
		pthread_cond_wait(&build_done, &cache_lock);
	struct tsnap *all[TSNAP_MAX];
	memcpy(all, cache, sizeof(all));
	memset(cache, 0, sizeof(cache));
	/* What is on disk complete stays for the next daemon. */
	for (size_t i = 0; i < TSNAP_MAX; i++)
		if (all[i])
			all[i]->keep_dir = all[i]->kept;
	pthread_mutex_unlock(&cache_lock);
	for (size_t i = 0; i < TSNAP_MAX; i++)
		tsnap_put(all[i]);
	pthread_mutex_lock(&build_lock);
	for (size_t i = 0; i < kept_n; i++)
		free(kept[i].dir);
	kept_n = 0;
	pthread_mutex_unlock(&build_lock);
}

/* One build's runtime: what must go whatever happens. */
struct build {
	char id[24];
	uint32_t uid;
	bool uid_held;
	struct netns net;
	int dirfd, pidfd, ch_fd;
	pid_t pid;
	struct guest_channel *ch;
};

static void build_end(struct build *b)
{
	vmm_internal_end(&b->pid, b->id, b->uid, &b->uid_held, "template build");
	if (b->ch)
		guest_channel_free(b->ch); /* closes ch_fd */
	else if (b->ch_fd >= 0)
		close(b->ch_fd);
	b->ch = NULL;
	b->ch_fd = -1;
	netns_release(&b->net);
	if (b->pidfd >= 0)
		close(b->pidfd);
	if (b->dirfd >= 0)
		close(b->dirfd);
	b->pidfd = b->dirfd = -1;
}

/* Reads and writes the build's agent channel (what a sandbox's monitor
 * thread does) until stop_fd is written. */
struct pump {
	struct guest_channel *ch;
	int stop_fd;
	pthread_t thread;
	bool running;
};

static void *pump_main(void *arg)
{
	struct pump *p = arg;
	while (!guest_channel_dead(p->ch, NULL, 0)) {
		bool want_write = guest_channel_want_write(p->ch);
		struct pollfd f[3] = {
		    {.fd = p->stop_fd, .events = POLLIN},
		    {.fd = guest_channel_fd(p->ch), .events = (short)(POLLIN | (want_write ? POLLOUT : 0))},
		    {.fd = guest_channel_wake_fd(p->ch), .events = POLLIN},
		};
		if (poll(f, 3, want_write ? 1000 : -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (f[0].revents)
			break;
		if (f[1].revents & (POLLIN | POLLHUP | POLLERR))
			guest_channel_read(p->ch);
		if (want_write || f[2].revents)
			guest_channel_flush(p->ch);
	}
	return NULL;
}

static void pump_stop(struct pump *p)
{
	if (!p->running)
		return;
	uint64_t one = 1;
	if (write(p->stop_fd, &one, sizeof(one)) < 0)
		abort();
	pthread_join(p->thread, NULL);
	p->running = false;
}

/* Connects to the agent's channel (the VMM creates it a moment after it
 * starts), runs its pump, and waits for the first HELLO. */
static int wait_agent(struct build *b, const struct vmm_config *vc, struct pump *p, uint64_t deadline,
                      struct al_error *err)
{
	int r = vmm_connect_retry(cfg->vmm, vc, true, b->pidfd, deadline, &b->ch_fd);
	if (r == -ECHILD) {
		char how[1024];
		cleanup_close int dfd = open(vc->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		vmm_exit_describe(b->pidfd, b->pid, NULL, dfd, VMM_LOG, how, sizeof(how));
		return al_error_set(err, AL_ERR_BOOT_FAILED, ECHILD, "the template's VM exited at start: %s", how);
	}
	if (r == -ETIMEDOUT)
		return al_error_set(err, AL_ERR_BOOT_FAILED, ETIMEDOUT, "the template's VM did not start");
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot connect to the agent's channel: %s",
		                    strerror(-r));
	b->ch = guest_channel_new(b->ch_fd);
	p->ch = b->ch;
	if (pthread_create(&p->thread, NULL, pump_main, p) != 0)
		abort();
	p->running = true;
	/* A VMM that dies closes the channel: the wait ends then. */
	if (guest_channel_wait_hello(b->ch, deadline, NULL) < 0)
		return al_error_set(err, AL_ERR_BOOT_FAILED, ETIMEDOUT,
		                    "the template's agent did not say hello (within %u s, or its VM exited: see %s)",
		                    cfg->boot_timeout_s, VMM_LOG);
	return 0;
}

static int seal(int fd, struct al_error *err)
{
	/* The VMM's shared mapping goes when its process is gone, a moment
	 * after its cgroup emptied: EBUSY until then. */
	for (int i = 0; i < TSNAP_SAVE_SEAL_TRIES; i++) {
		if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0)
			return 0;
		if (errno != EBUSY)
			break;
		usleep(10 * 1000);
	}
	return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot seal the template's memory: %m");
}

/* The template's guest runs this once before its save: a shell, a pipe,
 * a program it starts (what a first command does). */
static const char *const warm_up_argv[] = {"sh", "-c", "echo ready | cat >/dev/null", NULL};

/* Boots the template to agent ready with its RAM in a new memfd, saves
 * its device state, and keeps RAM (sealed), state and disk. */
static int build(const struct tsnap_request *req, struct tsnap *t, struct al_error *err)
{
	uint64_t t0 = now_ms_monotonic();
	struct build b = {.net = NETNS_INIT, .dirfd = -1, .pidfd = -1, .ch_fd = -1};
	struct pump pump = {.stop_fd = eventfd(0, EFD_CLOEXEC)};
	if (pump.stop_fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "eventfd: %m");
	uint8_t rnd[8];
	random_bytes(rnd, sizeof(rnd));
	char hex[17];
	hex_encode(rnd, sizeof(rnd), hex);
	snprintf(b.id, sizeof(b.id), "tpl-%s", hex);
	cleanup_free char *root = xasprintf("%s/vm", t->dir);
	int r = 0;
	if (mkdir_p(t->dir, 0700) < 0 || mkdir(root, 0700) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "cannot create %s: %m", root);
	if ((r = jail_uid_take(&b.uid, err)) < 0)
		return r;
	b.uid_held = true;
	b.dirfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (b.dirfd < 0 || fchown(b.dirfd, b.uid, b.uid) < 0) {
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "cannot prepare %s: %m", root);
		goto out;
	}
	/* The RAM in a memfd mapped shared, left out of the save, where the
	 * backend's RAM can be one; else the save writes it to a file. */
	bool ram_fd = cfg->vmm->ram_fd;
	if (ram_fd) {
		t->mem_fd = memfd_create("airlock-template", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (t->mem_fd < 0 || ftruncate(t->mem_fd, (off_t)req->memory_mib << 20) < 0) {
			r = al_error_set(err, AL_ERR_INTERNAL, errno, "cannot make the template's memory: %m");
			goto out;
		}
	}
	if ((r = netns_take(b.uid, &b.net, err)) < 0)
		goto out;
	struct vmm_config vc = {
	    .sandbox_id = b.id,
	    .dir = t->dir,
	    .root = root,
	    .kernel = req->kernel,
	    .initrd = req->initrd,
	    .rootfs = req->rootfs,
	    .vcpus = req->vcpus,
	    .memory_mib = req->memory_mib,
	    .dirfd = b.dirfd,
	    .incoming_fd = -1,
	    .incoming_state_fd = -1,
	    .netns_fd = b.net.ns_fd,
	    .guest_mac = b.net.guest_mac, /* its namespace's; THAW gives each restore its own */
	    .mem_fd = t->mem_fd,
	    .mem_shared = ram_fd,
	};
	struct vmm_jail jail;
	vmm_jail_spec(cfg->vmm, &vc, b.uid, 0, &jail);
	vc.jail = &jail;
	if ((r = cfg->vmm->prepare_disk(&vc, err)) < 0 || (r = vmm_disk_give(cfg->vmm, b.dirfd, b.uid, err)) < 0)
		goto out;
	if ((r = cfg->vmm->spawn(&vc, &b.pid, err)) < 0)
		goto out;
	b.pidfd = pidfd_open_pid(b.pid);
	if (b.pidfd < 0) {
		r = al_error_set(err, AL_ERR_INTERNAL, errno, "pidfd_open on the template's VMM: %m");
		goto out;
	}
	uint64_t deadline = t0 + (uint64_t)cfg->boot_timeout_s * 1000u;
	if ((r = wait_agent(&b, &vc, &pump, deadline, err)) < 0)
		goto out;
	/* Every sandbox of the template trusts the Airlock CA from the start. */
	const char *pem = ca_cert_pem();
	if (pem && (r = guest_ca_install(b.ch, pem, deadline, t->ca_bundle, sizeof(t->ca_bundle), err)) < 0)
		goto out;
	/* Every sandbox's first command would otherwise read the shell from
	 * its disk and fill the guest's caches the same way (under TCG
	 * ~0.1 CPU-s of each create+exec+delete cycle, bench/profile): done
	 * once here, the snapshot has them. Only a gain: a template without
	 * a shell is saved all the same (a dead VM fails the save below). */
	struct al_error warm_err = {0};
	if (guest_run_internal(b.ch, (char **)warm_up_argv, ARRAY_SIZE(warm_up_argv) - 1, deadline, &warm_err) < 0)
		log_info("template %s: saved without its warm-up exec: %s", t->key, warm_err.message);
	pump_stop(&pump);
	if ((r = cfg->vmm->pause(&vc, err)) < 0)
		goto out;
	if ((r = cfg->vmm->save(&vc, t->saved_path, t->state_path, err)) < 0)
		goto out;
	/* Its disk as the state knows it; the VMM is gone before it moves. */
	pump_stop(&pump);
	build_end(&b);
	{
		cleanup_free char *from = xasprintf("%s/%s", root, cfg->vmm->disk_file);
		if (rename(from, t->disk_path) < 0 || chown(t->disk_path, 0, 0) < 0 || chmod(t->disk_path, 0600) < 0) {
			r = al_error_set(err, AL_ERR_INTERNAL, errno, "cannot keep the template's disk: %m");
			goto out;
		}
	}
	rm_rf(root);
	if (ram_fd && (r = seal(t->mem_fd, err)) < 0)
		goto out;
	t->build_ms = now_ms_monotonic() - t0;
out:
	pump_stop(&pump);
	build_end(&b);
	close(pump.stop_fd);
	return r;
}

static void note_failure(const char *key)
{
	size_t oldest = 0;
	for (size_t i = 0; i < TSNAP_MAX; i++) {
		if (!strcmp(failures[i].key, key)) {
			oldest = i;
			break;
		}
		if (failures[i].at_ms < failures[oldest].at_ms)
			oldest = i;
	}
	strlcpy_al(failures[oldest].key, key, sizeof(failures[oldest].key));
	failures[oldest].at_ms = now_ms_monotonic();
}

static bool failed_recently(const char *key)
{
	for (size_t i = 0; i < TSNAP_MAX; i++)
		if (failures[i].at_ms && !strcmp(failures[i].key, key) &&
		    now_ms_monotonic() - failures[i].at_ms < TSNAP_RETRY_MS)
			return true;
	return false;
}

/* With cache_lock held: the current snapshot for key, with a reference. */
static struct tsnap *lookup_locked(const char *key, const struct stat images[3])
{
	for (size_t i = 0; i < TSNAP_MAX; i++) {
		struct tsnap *t = cache[i];
		if (!t || strcmp(t->key, key))
			continue;
		if (!same_file(&t->images[0], &images[0]) || !same_file(&t->images[1], &images[1]) ||
		    !same_file(&t->images[2], &images[2]))
			return NULL; /* stale: the build replaces it */
		t->refs++;
		t->last_used_ms = now_ms_monotonic();
		return t;
	}
	return NULL;
}

static struct tsnap *tsnap_alloc(const char *key, const struct stat images[3], char *dir)
{
	struct tsnap *t = xcalloc(1, sizeof(*t));
	t->mem_fd = -1;
	t->refs = 1;
	strlcpy_al(t->key, key, sizeof(t->key));
	memcpy(t->images, images, sizeof(t->images));
	t->dir = dir;
	t->saved_path = xasprintf("%s/%s", t->dir, cfg->vmm->ram_fd ? TSNAP_STATE : TSNAP_MEMORY_FILE);
	t->state_path = cfg->vmm->state_apart ? xasprintf("%s/%s", t->dir, TSNAP_STATE_FILE) : NULL;
	t->disk_path = xasprintf("%s/%s", t->dir, cfg->vmm->disk_file);
	t->ram_path = cfg->vmm->ram_fd ? xasprintf("%s/%s", t->dir, TSNAP_RAM_FILE) : NULL;
	return t;
}

/* The files of t's directory its manifest lists (their digests). */
static size_t snap_files(const struct tsnap *t, const char *paths[4])
{
	size_t n = 0;
	paths[n++] = t->saved_path;
	if (t->state_path)
		paths[n++] = t->state_path;
	paths[n++] = t->disk_path;
	if (t->ram_path)
		paths[n++] = t->ram_path;
	return n;
}

static const char *base_name(const char *path)
{
	return strrchr(path, '/') + 1;
}

/* Writes what a restarted daemon needs to use t again: its RAM (ram_fd
 * backends), then, every file fsynced, the manifest: what t was made of and
 * the digests of its files. */
static int keep(const struct tsnap_request *req, struct tsnap *t, struct al_error *err)
{
	cleanup_json json_t *inputs = tsnap_inputs_new(cfg, req, err);
	if (!inputs)
		return -EINVAL;
	cleanup_json json_t *files = json_object();
	const char *paths[4];
	size_t n = snap_files(t, paths);
	for (size_t i = 0; i < n; i++) {
		char sha[65];
		uint64_t size = (uint64_t)req->memory_mib << 20;
		int r;
		if (paths[i] == t->ram_path)
			r = tsnap_ram_save(t->mem_fd, size, paths[i], sha, err);
		else if ((r = tsnap_file_digest(paths[i], true, &size, sha)) < 0)
			r = al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read %s: %s", paths[i], strerror(-r));
		if (r < 0)
			return r;
		json_object_set_new(files, base_name(paths[i]),
		                    json_pack("{s:I, s:s}", "size", (json_int_t)size,
		                              paths[i] == t->ram_path ? TSNAP_RAM_DIGEST : "sha256", sha));
	}
	cleanup_json json_t *m =
	    json_pack("{s:i, s:s, s:s, s:i, s:i, s:O, s:s, s:I, s:O}", "format", TSNAP_FORMAT, "key", t->key,
	              "template", req->template_name, "vcpus", (int)req->vcpus, "memory_mib", (int)req->memory_mib,
	              "inputs", inputs, "ca_bundle", t->ca_bundle, "build_ms", (json_int_t)t->build_ms, "files", files);
	if (!m)
		abort();
	return tsnap_manifest_write(t->dir, m, err);
}

/* Checks a kept snapshot against what it would be made of now and its
 * files against their digests (they may have been changed or corrupted
 * since), loading its RAM into a new sealed memfd on the way. */
static int kept_load(const struct tsnap_request *req, struct tsnap *t, struct al_error *err)
{
	cleanup_json json_t *m = tsnap_manifest_read(t->dir);
	if (!m || strcmp(json_string_value(json_object_get(m, "key")), t->key))
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "its manifest is not one of %s", t->key);
	cleanup_json json_t *now = tsnap_inputs_new(cfg, req, err);
	if (!now)
		return -EINVAL;
	char what[128];
	if (tsnap_inputs_differ(json_object_get(m, "inputs"), now, what, sizeof(what)))
		return al_error_set(err, AL_ERR_CONFLICT, ESTALE, "its %s changed", what);
	json_t *files = json_object_get(m, "files");
	const char *paths[4];
	size_t n = snap_files(t, paths);
	if (!json_is_object(files) || json_object_size(files) != n)
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "its manifest lists other files");
	for (size_t i = 0; i < n; i++) {
		const char *want =
		    json_string_value(json_object_get(json_object_get(files, base_name(paths[i])),
		                                      paths[i] == t->ram_path ? TSNAP_RAM_DIGEST : "sha256"));
		char got[65];
		uint64_t size;
		int r;
		if (paths[i] == t->ram_path)
			r = tsnap_ram_load(paths[i], (uint64_t)req->memory_mib << 20, &t->mem_fd, got, err);
		else if ((r = tsnap_file_digest(paths[i], false, &size, got)) < 0)
			r = al_error_set(err, AL_ERR_INTERNAL, -r, "cannot read %s: %s", paths[i], strerror(-r));
		if (r < 0)
			return r;
		if (!want || strcmp(want, got))
			return al_error_set(err, AL_ERR_INTERNAL, EBADMSG, "%s does not match its digest",
			                    base_name(paths[i]));
	}
	const char *ca = json_string_value(json_object_get(m, "ca_bundle"));
	if (!ca || strlen(ca) >= sizeof(t->ca_bundle))
		return al_error_set(err, AL_ERR_INTERNAL, EINVAL, "its manifest has no ca_bundle");
	strlcpy_al(t->ca_bundle, ca, sizeof(t->ca_bundle));
	t->build_ms = (uint64_t)json_integer_value(json_object_get(m, "build_ms"));
	return t->mem_fd >= 0 ? seal(t->mem_fd, err) : 0;
}

/* The snapshot of key a previous daemon kept, when it is still what it
 * would be made of now and its files are intact; else NULL (what was kept
 * is removed). With build_lock held. */
static struct tsnap *kept_take(const struct tsnap_request *req, const char *key, const struct stat images[3])
{
	size_t i = 0;
	while (i < kept_n && strcmp(kept[i].key, key))
		i++;
	if (i == kept_n)
		return NULL;
	struct tsnap *t = tsnap_alloc(key, images, kept[i].dir);
	kept[i] = kept[--kept_n];
	uint64_t t0 = now_ms_monotonic();
	struct al_error e = {0};
	if (kept_load(req, t, &e) < 0) {
		log_info("template snapshot %s: the one kept in %s is not used: %s; it is removed and made again", key,
		         t->dir, e.message);
		tsnap_put(t);
		return NULL;
	}
	t->kept = true;
	log_info("template snapshot %s: loaded the kept one in %" PRIu64 " ms (its inputs and digests checked)", key,
	         now_ms_monotonic() - t0);
	return t;
}

/* Boots the template to make the snapshot of key, and keeps it on disk
 * for later daemons (where that fails, it lives as long as this one). */
static int build_new(const struct tsnap_request *req, const char *key, const struct stat images[3], struct tsnap **ret,
                     struct al_error *err)
{
	/* A directory of its own: a replaced or evicted snapshot keeps its
	 * files until its last user is done. */
	uint8_t rnd[6];
	random_bytes(rnd, sizeof(rnd));
	char hex[13];
	hex_encode(rnd, sizeof(rnd), hex);
	struct tsnap *t = tsnap_alloc(key, images,
	                              xasprintf("%s/%s/%s-%u-%u-%s", cfg->state_dir, TSNAP_DIR, req->template_name,
	                                        req->vcpus, req->memory_mib, hex));
	log_info("template snapshot %s: booting the template once", key);
	int r = build(req, t, err);
	if (r < 0) {
		al_error_prefix(err, "template snapshot %s", key);
		log_error("%s (creates boot cold)", err->message);
		pthread_mutex_lock(&cache_lock);
		note_failure(key);
		pthread_mutex_unlock(&cache_lock);
		tsnap_put(t);
		return r;
	}
	log_info("template snapshot %s: ready in %" PRIu64 " ms", key, t->build_ms);
	uint64_t t0 = now_ms_monotonic();
	struct al_error e = {0};
	if (keep(req, t, &e) < 0) {
		log_error("template snapshot %s: not kept for a restart of the daemon: %s", key, e.message);
		cleanup_free char *manifest = xasprintf("%s/%s", t->dir, TSNAP_MANIFEST);
		unlink(manifest);
		if (t->ram_path)
			unlink(t->ram_path);
	} else {
		t->kept = true;
		log_info("template snapshot %s: kept on disk for a restart (written in %" PRIu64 " ms)", key,
		         now_ms_monotonic() - t0);
	}
	*ret = t;
	return 0;
}

/* Puts t in the cache (with a reference for the caller), the least recently
 * used one out when it is full; kept snapshots not loaded yet go, oldest
 * first, while there would be more than TSNAP_MAX on disk. With build_lock
 * held. */
static void publish(struct tsnap *t)
{
	t->last_used_ms = now_ms_monotonic();
	pthread_mutex_lock(&cache_lock);
	size_t slot = TSNAP_MAX, cached = 0;
	for (size_t i = 0; i < TSNAP_MAX; i++)
		if (!cache[i] && slot == TSNAP_MAX)
			slot = i;
	struct tsnap *evicted = NULL;
	if (slot == TSNAP_MAX) {
		slot = 0;
		for (size_t i = 1; i < TSNAP_MAX; i++)
			if (cache[i]->last_used_ms < cache[slot]->last_used_ms)
				slot = i;
		evicted = cache[slot];
	}
	cache[slot] = t;
	t->refs++; /* the caller's */
	for (size_t i = 0; i < TSNAP_MAX; i++)
		cached += cache[i] != NULL;
	pthread_mutex_unlock(&cache_lock);
	tsnap_put(evicted);
	while (kept_n && cached + kept_n > TSNAP_MAX)
		kept_drop(kept_oldest(), TSNAP_MAX_WHY);
}

/* A build on its thread (its own copy of the request: the create that
 * started it may be gone before it ends). */
struct build_job {
	struct tsnap_request req;
	char key[96];
	struct stat images[3];
};

static void build_job_free(struct build_job *j)
{
	free((char *)j->req.template_name);
	free((char *)j->req.kernel);
	free((char *)j->req.initrd);
	free((char *)j->req.rootfs);
	free(j);
}

/* Makes the snapshot of key (a previous daemon's, checked; else a build) and
 * puts it in the cache, or notes the failure. On the build thread. */
static void build_and_keep(const struct tsnap_request *req, const char *key, const struct stat images[3])
{
	pthread_mutex_lock(&build_lock);
	/* The stale one (if any) leaves the cache; it goes with its last user. */
	pthread_mutex_lock(&cache_lock);
	struct tsnap *old = NULL;
	for (size_t i = 0; i < TSNAP_MAX; i++)
		if (cache[i] && !strcmp(cache[i]->key, key)) {
			old = cache[i];
			cache[i] = NULL;
		}
	pthread_mutex_unlock(&cache_lock);
	tsnap_put(old);
	struct tsnap *t = kept_take(req, key, images);
	struct al_error e = {0};
	if (t || build_new(req, key, images, &t, &e) == 0) {
		publish(t);
		tsnap_put(t); /* publish's reference for a caller: a build has none */
	}
	pthread_mutex_unlock(&build_lock);
}

static void *build_main(void *arg)
{
	struct build_job *j = arg;
	build_and_keep(&j->req, j->key, j->images);
	build_job_free(j);
	pthread_mutex_lock(&cache_lock);
	building = false;
	pthread_cond_broadcast(&build_done);
	pthread_mutex_unlock(&cache_lock);
	return NULL;
}

/* With cache_lock held and no build running: starts one for req. */
static void build_start_locked(const struct tsnap_request *req, const char *key, const struct stat images[3])
{
	struct build_job *j = xcalloc(1, sizeof(*j));
	j->req = *req;
	j->req.template_name = xstrdup(req->template_name);
	j->req.kernel = xstrdup(req->kernel);
	j->req.initrd = xstrdup(req->initrd);
	j->req.rootfs = xstrdup(req->rootfs);
	j->req.cancelled = NULL;
	j->req.cancel_arg = NULL;
	strlcpy_al(j->key, key, sizeof(j->key));
	memcpy(j->images, images, sizeof(j->images));
	pthread_attr_t attr;
	pthread_t thread;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&thread, &attr, build_main, j) != 0)
		abort();
	pthread_attr_destroy(&attr);
	building = true;
}

/* With cache_lock held: waits until no build runs, or (-ECANCELED) until
 * req->cancelled says so (asked without the lock, every BUILD_POLL_MS). */
static int build_wait_locked(const struct tsnap_request *req)
{
	while (building) {
		if (req->cancelled) {
			pthread_mutex_unlock(&cache_lock);
			bool cancelled = req->cancelled(req->cancel_arg);
			pthread_mutex_lock(&cache_lock);
			if (cancelled)
				return -ECANCELED;
		}
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += BUILD_POLL_MS * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&build_done, &cache_lock, &until);
	}
	return 0;
}

int tsnap_get(const struct tsnap_request *req, struct tsnap **ret, struct al_error *err)
{
	char key[96];
	if (snprintf_ok(key, sizeof(key), "%s/%u/%u", req->template_name, req->vcpus, req->memory_mib) < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENAMETOOLONG, "template name too long");
	struct stat images[3];
	int r = stat_images(req, images);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot stat the template's images: %s", strerror(-r));
	/* One build at a time; whoever waited finds it made (or failed). */
	pthread_mutex_lock(&cache_lock);
	for (;;) {
		struct tsnap *t = lookup_locked(key, images);
		if (t)
			r = 0;
		else if (failed_recently(key))
			r = al_error_set(err, AL_ERR_UNAVAILABLE, EAGAIN,
			                 "the template snapshot for %s failed less than a minute ago", key);
		else if (shut)
			r = al_error_set(err, AL_ERR_UNAVAILABLE, ESHUTDOWN, "airlockd is shutting down");
		else {
			if (!building)
				build_start_locked(req, key, images);
			if (build_wait_locked(req) == 0)
				continue;
			r = al_error_set(err, AL_ERR_BOOT_FAILED, ECANCELED,
			                 "the wait for the template snapshot %s was cancelled", key);
		}
		pthread_mutex_unlock(&cache_lock);
		if (r == 0)
			*ret = t;
		return r;
	}
}
