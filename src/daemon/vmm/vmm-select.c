/* SPDX-License-Identifier: Apache-2.0 */
#include "vmm-select.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include "util.h"

#define KVM_API_VERSION_EXPECTED 12

int vmm_backend_parse(const char *s, enum vmm_backend *ret)
{
	static const struct {
		const char *name;
		enum vmm_backend b;
	} names[] = {{"auto", VMM_BACKEND_AUTO}, {"qemu", VMM_BACKEND_QEMU}, {"firecracker", VMM_BACKEND_FIRECRACKER}};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!strcmp(s, names[i].name)) {
			*ret = names[i].b;
			return 0;
		}
	return -EINVAL;
}

const char *vmm_backend_name(enum vmm_backend b)
{
	return b == VMM_BACKEND_QEMU ? "qemu" : b == VMM_BACKEND_FIRECRACKER ? "firecracker" : "auto";
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
			if (out)
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
	ret->qemu = find_on_path(VMM_QEMU_BINARY, NULL, 0);
	ret->firecracker = find_on_path(VMM_FIRECRACKER_BINARY, ret->firecracker_path, sizeof(ret->firecracker_path));
	ret->kvm = kvm_usable(ret->kvm_why, sizeof(ret->kvm_why));
}

static int choose_qemu(const char *how, const char *because, const struct vmm_host *host, struct vmm_choice *ret,
                       struct al_error *err)
{
	if (!host->qemu)
		return al_error_set(err, AL_ERR_UNAVAILABLE, ENOENT,
		                    "%s: %s not found on PATH; install qemu-system-x86 ('make deps')%s%s", how,
		                    VMM_QEMU_BINARY, because[0] ? ", and " : "", because);
	*ret = (struct vmm_choice){.backend = VMM_BACKEND_QEMU, .kvm = host->kvm};
	if (host->kvm)
		snprintf(ret->reason, sizeof(ret->reason), "%s: qemu with KVM once a guest boots on it (else TCG)%s%s",
		         how, because[0] ? ", because " : "", because);
	else
		snprintf(ret->reason, sizeof(ret->reason), "%s: qemu with TCG (software emulation, slower)%s%s%s%s",
		         how, because[0] ? ", because " : "", because, because[0] ? "" : ": ",
		         because[0] ? "" : host->kvm_why);
	return 0;
}

int vmm_select(enum vmm_backend want, const struct vmm_host *host, struct vmm_choice *ret, struct al_error *err)
{
	switch (want) {
	case VMM_BACKEND_QEMU:
		return choose_qemu("--backend qemu", "", host, ret, err);
	case VMM_BACKEND_FIRECRACKER:
		if (!host->firecracker)
			return al_error_set(
			    err, AL_ERR_UNAVAILABLE, ENOENT,
			    "--backend firecracker: no %s binary on PATH (docs/kvm-host.md says where to "
			    "get the release binary and how to check it)",
			    VMM_FIRECRACKER_BINARY);
		if (!host->kvm)
			return al_error_set(err, AL_ERR_UNAVAILABLE, ENODEV,
			                    "--backend firecracker: Firecracker needs KVM, and %s (docs/kvm-host.md)",
			                    host->kvm_why);
		*ret = (struct vmm_choice){.backend = VMM_BACKEND_FIRECRACKER, .kvm = true};
		snprintf(ret->reason, sizeof(ret->reason), "--backend firecracker: firecracker at %s with KVM",
		         host->firecracker_path);
		return 0;
	case VMM_BACKEND_AUTO:
		break;
	}
	if (host->firecracker && host->kvm) {
		*ret = (struct vmm_choice){.backend = VMM_BACKEND_FIRECRACKER, .kvm = true};
		snprintf(ret->reason, sizeof(ret->reason),
		         "auto: firecracker, because %s is on PATH and /dev/kvm is usable", host->firecracker_path);
		return 0;
	}
	char because[512];
	if (!host->firecracker && !host->kvm)
		snprintf(because, sizeof(because), "there is no %s binary on PATH and %s", VMM_FIRECRACKER_BINARY,
		         host->kvm_why);
	else if (!host->firecracker)
		snprintf(because, sizeof(because), "there is no %s binary on PATH (docs/kvm-host.md)",
		         VMM_FIRECRACKER_BINARY);
	else
		snprintf(because, sizeof(because), "%s is on PATH but Firecracker needs KVM, and %s",
		         host->firecracker_path, host->kvm_why);
	return choose_qemu("auto", because, host, ret, err);
}
