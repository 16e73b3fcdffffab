/* SPDX-License-Identifier: Apache-2.0 */
/* The accelerator probe (accel-probe.h). */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "accel-probe.h"
#include "guest-channel.h"
#include "jail.h"
#include "log.h"
#include "util.h"
#include "vmm.h"

/* The jailer's --id of a probe's VMM: probe-<hex>. */
#define PROBE_ID_PREFIX "probe-"
#define PROBE_CONSOLE_KEEP 160
#define PROBE_POLL_MS 100
/* Beyond the boots themselves: the jail's set-up and clean-up. */
#define PROBE_MARGIN_S 15

int accel_probe_images(const struct daemon_config *d, struct accel_probe_images *ret, char *templates,
                       size_t templates_size, char *why, size_t why_size)
{
	snprintf(ret->kernel, sizeof(ret->kernel), "%s/kernels/%s", d->image_dir, d->vmm->kernel_file);
	snprintf(ret->initrd, sizeof(ret->initrd), "%s/kernels/initramfs.cpio", d->image_dir);
	ret->rootfs[0] = '\0';
	if (templates_size)
		templates[0] = '\0';
	size_t o = 0;
	bool have_minimal = false;
	cleanup_free char *dir = xasprintf("%s/templates", d->image_dir);
	DIR *dp = opendir(dir);
	for (struct dirent *e; dp && (e = readdir(dp));) {
		char cand[PATH_MAX];
		if (e->d_name[0] == '.' || snprintf_ok(cand, sizeof(cand), "%s/%s/rootfs.ext4", dir, e->d_name) < 0 ||
		    access(cand, R_OK) < 0)
			continue;
		if (o + strlen(e->d_name) + 2 < templates_size)
			o += (size_t)snprintf(templates + o, templates_size - o, "%s%s", o ? "," : "", e->d_name);
		/* The probe's guest: minimal, else the first name. */
		bool minimal = !strcmp(e->d_name, ACCEL_PROBE_TEMPLATE);
		if (!have_minimal && (minimal || !ret->rootfs[0] || strcmp(cand, ret->rootfs) < 0))
			strlcpy_al(ret->rootfs, cand, sizeof(ret->rootfs));
		have_minimal |= minimal;
	}
	if (dp)
		closedir(dp);
	const char *missing = access(ret->kernel, R_OK) < 0   ? ret->kernel
	                      : access(ret->initrd, R_OK) < 0 ? ret->initrd
	                      : !ret->rootfs[0]               ? "a template (templates/*/rootfs.ext4)"
	                                                      : NULL;
	if (missing) {
		(void)snprintf_ok(why, why_size,
		                  "nothing to boot: %s is missing in the image dir %s ('make images-all', or "
		                  "--image-dir where they are)",
		                  missing, d->image_dir);
		return -ENOENT;
	}
	return 0;
}

/* One attempt's runtime: what must go whatever happens. */
struct attempt {
	char id[32];
	uint32_t uid;
	bool uid_held;
	int dirfd, pidfd, con_fd;
	pid_t pid;
	struct guest_channel *ch;
	char console[PROBE_CONSOLE_KEEP + 1]; /* the guest's last words */
	size_t console_len, console_total;
};

static void attempt_end(struct attempt *a)
{
	vmm_internal_end(&a->pid, a->id, a->uid, &a->uid_held, "accelerator probe");
	if (a->ch)
		guest_channel_free(a->ch);
	a->ch = NULL;
	if (a->con_fd >= 0)
		close(a->con_fd);
	if (a->pidfd >= 0)
		close(a->pidfd);
	if (a->dirfd >= 0)
		close(a->dirfd);
	a->con_fd = a->pidfd = a->dirfd = -1;
}

/* Keeps the last bytes the guest printed, printable. */
static void console_read(struct attempt *a)
{
	char buf[4096];
	ssize_t n = read(a->con_fd, buf, sizeof(buf));
	if (n <= 0) {
		if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			close(a->con_fd);
			a->con_fd = -1;
		}
		return;
	}
	a->console_total += (size_t)n;
	for (ssize_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (a->console_len == PROBE_CONSOLE_KEEP) {
			memmove(a->console, a->console + 1, PROBE_CONSOLE_KEEP - 1);
			a->console_len--;
		}
		a->console[a->console_len++] = c >= 0x20 && c < 0x7f ? (char)c : ' ';
	}
	a->console[a->console_len] = '\0';
}

/* Set at shutdown: a probe in progress gives up. */
static atomic_bool stopping;

/* Until the agent's HELLO, the VMM's end or the deadline: 0, -ECHILD,
 * -ETIMEDOUT, -ECANCELED (shutdown) or -EPROTO (the channel broke). */
static int wait_hello(struct attempt *a, uint64_t deadline_ms)
{
	for (;;) {
		if (guest_channel_hellos(a->ch) > 0)
			return 0;
		if (atomic_load(&stopping))
			return -ECANCELED;
		if (guest_channel_dead(a->ch, NULL, 0)) {
			/* A VMM that dies closes the channel: tell that apart. */
			struct pollfd p = {.fd = a->pidfd, .events = POLLIN};
			return poll(&p, 1, 500) > 0 ? -ECHILD : -EPROTO;
		}
		uint64_t now = now_ms_monotonic();
		if (now >= deadline_ms)
			return -ETIMEDOUT;
		bool want_write = guest_channel_want_write(a->ch);
		struct pollfd p[3] = {
		    {.fd = a->pidfd, .events = POLLIN},
		    {.fd = guest_channel_fd(a->ch), .events = (short)(POLLIN | (want_write ? POLLOUT : 0))},
		    {.fd = a->con_fd, .events = POLLIN},
		};
		uint64_t left = deadline_ms - now;
		if (poll(p, 3, (int)MIN(left, PROBE_POLL_MS)) < 0 && errno != EINTR)
			return -errno;
		if (p[2].revents)
			console_read(a);
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR))
			guest_channel_read(a->ch);
		if (want_write)
			guest_channel_flush(a->ch);
		if (p[0].revents && guest_channel_hellos(a->ch) == 0) {
			if (a->con_fd >= 0)
				console_read(a);
			return -ECHILD;
		}
	}
}

/* Why an attempt failed, in one sentence (into at->why). */
static void attempt_failed(struct attempt *a, int r, const char *dir, unsigned timeout_s, struct accel_attempt *at)
{
	char guest[PROBE_CONSOLE_KEEP + 64];
	if (a->console_total)
		snprintf(guest, sizeof(guest), "the guest printed %zu bytes, the last: \"%s\"", a->console_total,
		         a->console);
	else
		snprintf(guest, sizeof(guest), "the guest printed nothing");
	if (r == -ECHILD) {
		at->vmm_exited = true;
		char how[320];
		cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		vmm_exit_describe(a->pidfd, a->pid, NULL, dfd, VMM_LOG, how, sizeof(how));
		(void)snprintf_ok(at->why, sizeof(at->why), "%s (%s)", how, guest);
	} else if (r == -ECANCELED) {
		snprintf(at->why, sizeof(at->why), "the probe was cut short: airlockd is stopping");
	} else if (r == -ETIMEDOUT) {
		(void)snprintf_ok(at->why, sizeof(at->why), "no hello from the guest's agent within %u s (%s)",
		                  timeout_s, guest);
	} else {
		(void)snprintf_ok(at->why, sizeof(at->why), "the guest's channel failed: %s (%s)", strerror(-r), guest);
	}
}

/* Boots the probe's guest on KVM with at->cpu, to the agent's HELLO. */
static void attempt_run(const struct accel_probe_config *pc, const struct accel_probe_images *im,
                        struct accel_attempt *at)
{
	const struct daemon_config *d = pc->daemon;
	uint64_t t0 = now_ms_monotonic();
	struct attempt a = {.dirfd = -1, .pidfd = -1, .con_fd = -1};
	uint8_t rnd[8];
	random_bytes(rnd, sizeof(rnd));
	char hex[17];
	hex_encode(rnd, sizeof(rnd), hex);
	snprintf(a.id, sizeof(a.id), PROBE_ID_PREFIX "%s", hex);
	cleanup_free char *dir = xasprintf("%s/" ACCEL_PROBE_DIR, d->state_dir);
	cleanup_free char *root = xasprintf("%s/vm", dir);
	struct al_error err = {0};
	rm_rf(dir);
	int r;
	if (mkdir_p(dir, 0700) < 0 || mkdir(root, 0700) < 0) {
		snprintf(at->why, sizeof(at->why), "cannot create %s: %s", root, strerror(errno));
		goto out;
	}
	if (jail_uid_take(&a.uid, &err) < 0)
		goto failed;
	a.uid_held = true;
	a.dirfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (a.dirfd < 0 || fchown(a.dirfd, a.uid, a.uid) < 0) {
		snprintf(at->why, sizeof(at->why), "cannot prepare %s: %s", root, strerror(errno));
		goto out;
	}
	struct vmm_config vc = {
	    .sandbox_id = a.id,
	    .dir = dir,
	    .root = root,
	    .kernel = im->kernel,
	    .initrd = im->initrd,
	    .rootfs = im->rootfs,
	    .vcpus = 1,
	    .memory_mib = ACCEL_PROBE_MEMORY_MIB,
	    .dirfd = a.dirfd,
	    .incoming_fd = -1,
	    .incoming_state_fd = -1,
	    .netns_fd = -1,
	    .mem_fd = -1,
	    .kvm_cpu = at->cpu,
	};
	struct vmm_jail jail;
	vmm_jail_spec(d->vmm, &vc, a.uid, 0, &jail);
	vc.jail = &jail;
	if (d->vmm->prepare_disk(&vc, &err) < 0 || vmm_disk_give(d->vmm, a.dirfd, a.uid, &err) < 0 ||
	    d->vmm->spawn(&vc, &a.pid, &err) < 0)
		goto failed;
	a.pidfd = pidfd_open_pid(a.pid);
	if (a.pidfd < 0) {
		snprintf(at->why, sizeof(at->why), "pidfd_open on the probe's VMM: %s", strerror(errno));
		goto out;
	}
	uint64_t deadline = t0 + (uint64_t)pc->timeout_s * 1000u;
	int ch_fd = -1;
	if ((r = vmm_connect_retry(d->vmm, &vc, false, a.pidfd, deadline, &a.con_fd)) == 0)
		r = vmm_connect_retry(d->vmm, &vc, true, a.pidfd, deadline, &ch_fd);
	if (r == 0) {
		fcntl(a.con_fd, F_SETFL, O_NONBLOCK);
		a.ch = guest_channel_new(ch_fd);
		r = wait_hello(&a, deadline);
	}
	if (r < 0) {
		char refusal[256];
		cleanup_free char *log = xasprintf("%s/%s", dir, VMM_LOG);
		if (r == -ECHILD && jail_failure_in_log(AT_FDCWD, log, refusal, sizeof(refusal)))
			snprintf(at->why, sizeof(at->why), "the VMM's jail could not be set up: %s", refusal);
		else
			attempt_failed(&a, r, dir, pc->timeout_s, at);
	}
	goto out;
failed:
	strlcpy_al(at->why, err.message, sizeof(at->why));
out:
	attempt_end(&a);
	rm_rf(root); /* vmm.log stays, for whoever wants the whole story */
	at->ms = now_ms_monotonic() - t0;
}

unsigned accel_probe_wait_s(const struct accel_probe_config *pc)
{
	const char *models[4];
	size_t n = accel_cpu_candidates(pc->cpu_pinned, models, ARRAY_SIZE(models));
	return (unsigned)n * pc->timeout_s + PROBE_MARGIN_S;
}

int accel_probe_run(const struct accel_probe_config *pc, struct accel_info *ret, struct al_error *err)
{
	uint64_t t0 = now_ms_monotonic();
	cleanup_free char *dir = xasprintf("%s/" ACCEL_PROBE_DIR, pc->daemon->state_dir);
	/* A probe's VMM a crashed airlockd left. */
	jail_kill_left_below(dir, PROBE_ID_PREFIX, "accelerator probe");
	const char *models[4];
	size_t n = accel_cpu_candidates(pc->cpu_pinned, models, ARRAY_SIZE(models));
	struct accel_attempt attempts[4] = {{0}};
	size_t done = 0;
	struct accel_probe_images im;
	char why[sizeof(attempts[0].why)];
	if (accel_probe_images(pc->daemon, &im, NULL, 0, why, sizeof(why)) < 0) {
		attempts[0].cpu = models[0];
		strlcpy_al(attempts[0].why, why, sizeof(attempts[0].why));
		done = 1;
	} else {
		for (size_t i = 0; i < n; i++) {
			attempts[i].cpu = models[i];
			attempt_run(pc, &im, &attempts[i]);
			done = i + 1;
			log_info("accelerator probe: -accel kvm -cpu %s: %s (%" PRIu64 " ms)", models[i],
			         attempts[i].why[0] ? attempts[i].why : "the guest's agent said hello", attempts[i].ms);
			/* Another model helps only a VMM that ended by itself. */
			if (!attempts[i].why[0] || !attempts[i].vmm_exited || atomic_load(&stopping))
				break;
		}
	}
	return accel_verdict(pc->mode, attempts, done, now_ms_monotonic() - t0, ret, err);
}

static struct accel_probe_config bg_config;
static pthread_t bg_thread;
static bool bg_running;

static void *probe_main(void *arg)
{
	(void)arg;
	struct accel_info info;
	struct al_error err = {0};
	if (accel_probe_run(&bg_config, &info, &err) < 0) {
		/* Only --accel kvm fails, and it probes before serving. */
		log_error("%s", err.message);
		return NULL;
	}
	log_info("accelerator: %s", info.reason);
	accel_set(&info);
	return NULL;
}

void accel_probe_start(const struct accel_probe_config *pc)
{
	bg_config = *pc;
	if (pthread_create(&bg_thread, NULL, probe_main, NULL) != 0)
		abort();
	bg_running = true;
}

void accel_probe_join(void)
{
	atomic_store(&stopping, true);
	if (bg_running)
		pthread_join(bg_thread, NULL);
	bg_running = false;
}
