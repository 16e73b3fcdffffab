/* SPDX-License-Identifier: Apache-2.0 */
#include "vmm-select.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "util.h"
#include "vmm.h"

#define KVM_API_VERSION_EXPECTED 12
/* Where a KVM host is set up (Firecracker's binary, /dev/kvm). */
#define KVM_HOST_DOC "docs/kvm-host.md"

/* Each backend's ops, defined in its folder (vmm/<backend>/). Declared here
 * and nowhere else in the daemon: this table is the only place that names a
 * backend. */
extern const struct vmm_ops vmm_firecracker_ops;
extern const struct vmm_ops vmm_qemu_ops;

/* The backends, in the order --help and the errors name them. auto takes
 * the first that can run here, the kvm_only ones first (a VMM made for KVM
 * alone is the leaner one), each kind in this order. */
static const struct vmm_backend backends[] = {
    {
        .ops = &vmm_qemu_ops,
        .title = "QEMU",
        .install = "install qemu-system-x86 ('make deps')",
        .kvm_only = false,
    },
    {
        .ops = &vmm_firecracker_ops,
        .title = "Firecracker",
        .install = KVM_HOST_DOC " says where to get the release binary and how to check it",
        .kvm_only = true,
    },
};

_Static_assert(ARRAY_SIZE(backends) <= VMM_BACKENDS_MAX, "raise VMM_BACKENDS_MAX");

size_t vmm_backends(const struct vmm_backend **ret)
{
	*ret = backends;
	return ARRAY_SIZE(backends);
}

const char *vmm_backend_name(const struct vmm_backend *b)
{
	return b ? b->ops->name : "auto";
}

void vmm_backend_names(char *buf, size_t size)
{
	snprintf(buf, size, "auto");
	for (size_t i = 0; i < ARRAY_SIZE(backends); i++)
		snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", i + 1 == ARRAY_SIZE(backends) ? " or " : ", ",
		         backends[i].ops->name);
}

int vmm_backend_parse(const char *s, const struct vmm_backend **ret, struct al_error *err)
{
	if (!strcmp(s, "auto")) {
		*ret = NULL;
		return 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(backends); i++)
		if (!strcmp(s, backends[i].ops->name)) {
			*ret = &backends[i];
			return 0;
		}
	char names[256];
	vmm_backend_names(names, sizeof(names));
	return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "--backend is %s, not \"%s\"", names, s);
}

/* An executable regular file `name` in a directory of PATH. */
static bool find_on_path(const char *name, char *out, size_t size)
{
	const char *path = getenv("PATH");
	cleanup_free char *copy = xstrdup(path && *path ? path : "/usr/bin:/bin");
	char *save = NULL;
	for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		cleanup_free char *p = xasprintf("%s/%s", dir, name);
		struct stat st;
		if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0) {
			strlcpy_al(out, p, size);
			return true;
		}
	}
	return false;
}

static bool kvm_usable(char *why, size_t size)
{
	cleanup_close int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT)
			snprintf(
			    why, size,
			    "/dev/kvm does not exist (this machine does not expose hardware virtualization, or the "
			    "kvm_intel/kvm_amd module is not loaded)");
		else if (e == EACCES || e == EPERM)
			snprintf(why, size, "/dev/kvm is not accessible (%s): run airlockd as root or in the kvm group",
			         strerror(e));
		else
			snprintf(why, size, "cannot open /dev/kvm: %s", strerror(e));
		return false;
	}
	int v = ioctl(fd, KVM_GET_API_VERSION, 0);
	if (v != KVM_API_VERSION_EXPECTED) {
		snprintf(why, size, "/dev/kvm answers KVM API version %d, not %d", v, KVM_API_VERSION_EXPECTED);
		return false;
	}
	why[0] = '\0';
	return true;
}

void vmm_host_probe(struct vmm_host *ret)
{
	*ret = (struct vmm_host){0};
	for (size_t i = 0; i < ARRAY_SIZE(backends); i++)
		find_on_path(backends[i].ops->binary, ret->path[i], sizeof(ret->path[i]));
	ret->kvm = kvm_usable(ret->kvm_why, sizeof(ret->kvm_why));
}

static const char *path_of(const struct vmm_backend *b, const struct vmm_host *host)
{
	return host->path[b - backends];
}

static bool usable(const struct vmm_backend *b, const struct vmm_host *host)
{
	return path_of(b, host)[0] && (host->kvm || !b->kvm_only);
}

/* Why auto passes b over (it cannot run here), as a clause of its reason. */
static void why_not(const struct vmm_backend *b, const struct vmm_host *host, char *out, size_t size)
{
	const char *path = path_of(b, host);
	if (!b->kvm_only)
		snprintf(out, size, "there is no %s binary on PATH (%s)", b->ops->binary, b->install);
	else if (!path[0] && !host->kvm)
		snprintf(out, size, "there is no %s binary on PATH and %s", b->ops->binary, host->kvm_why);
	else if (!path[0])
		snprintf(out, size, "there is no %s binary on PATH (" KVM_HOST_DOC ")", b->ops->binary);
	else
		snprintf(out, size, "%s is on PATH but %s needs KVM, and %s", path, b->title, host->kvm_why);
}

/* A backend on KVM only. `how` is "--backend NAME" or "auto"; because: why
 * auto passed the ones before over ("" if none). */
static int choose_kvm_only(const struct vmm_backend *b, const char *how, const char *because,
                           const struct vmm_host *host, struct vmm_choice *ret, struct al_error *err)
{
	const char *path = path_of(b, host), *and_ = because[0] ? ", and " : "";
	if (!path[0])
		return al_error_set(err, AL_ERR_UNAVAILABLE, ENOENT, "%s: no %s binary on PATH (%s)%s%s", how,
		                    b->ops->binary, b->install, and_, because);
	if (!host->kvm)
		return al_error_set(err, AL_ERR_UNAVAILABLE, ENODEV, "%s: %s needs KVM, and %s (" KVM_HOST_DOC ")%s%s",
		                    how, b->title, host->kvm_why, and_, because);
	*ret = (struct vmm_choice){.backend = b, .kvm = true};
	if (!strcmp(how, "auto"))
		snprintf(ret->reason, sizeof(ret->reason), "auto: %s, because %s is on PATH and /dev/kvm is usable%s%s",
		         b->ops->name, path, and_, because);
	else
		snprintf(ret->reason, sizeof(ret->reason), "%s: %s at %s with KVM%s%s", how, b->ops->name, path, and_,
		         because);
	return 0;
}

/* A backend on KVM or TCG (the accelerator's probe decides, accel.h). */
static int choose_kvm_or_tcg(const struct vmm_backend *b, const char *how, const char *because,
                             const struct vmm_host *host, struct vmm_choice *ret, struct al_error *err)
{
	if (!path_of(b, host)[0])
		return al_error_set(err, AL_ERR_UNAVAILABLE, ENOENT, "%s: %s not found on PATH; %s%s%s", how,
		                    b->ops->binary, b->install, because[0] ? ", and " : "", because);
	*ret = (struct vmm_choice){.backend = b, .kvm = host->kvm};
	if (host->kvm)
		snprintf(ret->reason, sizeof(ret->reason), "%s: %s with KVM once a guest boots on it (else TCG)%s%s",
		         how, b->ops->name, because[0] ? ", because " : "", because);
	else
		snprintf(ret->reason, sizeof(ret->reason), "%s: %s with TCG (software emulation, slower)%s%s%s%s", how,
		         b->ops->name, because[0] ? ", because " : "", because, because[0] ? "" : ": ",
		         because[0] ? "" : host->kvm_why);
	return 0;
}

static int choose(const struct vmm_backend *b, const char *how, const char *because, const struct vmm_host *host,
                  struct vmm_choice *ret, struct al_error *err)
{
	return b->kvm_only ? choose_kvm_only(b, how, because, host, ret, err)
	                   : choose_kvm_or_tcg(b, how, because, host, ret, err);
}

int vmm_select(const struct vmm_backend *want, const struct vmm_host *host, struct vmm_choice *ret,
               struct al_error *err)
{
	if (want) {
		char how[64];
		snprintf(how, sizeof(how), "--backend %s", want->ops->name);
		return choose(want, how, "", host, ret, err);
	}
	/* auto: the first that can run here, saying why those before it
	 * cannot; when none can, the last one's refusal says why. */
	const struct vmm_backend *order[ARRAY_SIZE(backends)];
	size_t n = 0;
	for (int kvm_only = 1; kvm_only >= 0; kvm_only--)
		for (size_t i = 0; i < ARRAY_SIZE(backends); i++)
			if (backends[i].kvm_only == (kvm_only == 1))
				order[n++] = &backends[i];
	char because[768] = "";
	for (size_t i = 0; i < n; i++) {
		if (usable(order[i], host) || i + 1 == n)
			return choose(order[i], "auto", because, host, ret, err);
		char clause[512];
		why_not(order[i], host, clause, sizeof(clause));
		snprintf(because + strlen(because), sizeof(because) - strlen(because), "%s%s",
		         because[0] ? ", and " : "", clause);
	}
	return al_error_set(err, AL_ERR_UNAVAILABLE, ENOENT, "no VMM backend"); /* an empty table */
}

int vmm_choice_accel(const struct vmm_choice *c, enum accel_mode mode, const char *kvm_why, const char *cpu_pinned,
                     struct accel_info *ret, struct al_error *err)
{
	if (!c->backend->kvm_only)
		return accel_plan(mode, c->kvm ? "" : kvm_why, cpu_pinned, ret, err);
	*ret = (struct accel_info){.decided = true, .kvm = true};
	snprintf(ret->reason, sizeof(ret->reason), "kvm: %s runs on KVM only", c->backend->title);
	return 0;
}

const struct vmm_ops *vmm_accel_probe_ops(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(backends); i++)
		if (!backends[i].kvm_only)
			return backends[i].ops;
	return NULL;
}
