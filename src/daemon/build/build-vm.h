/* SPDX-License-Identifier: Apache-2.0 */
/* The sandbox a template build runs its steps in (template-builds.h): a
 * real sandbox of the image so far, under the build's network policy,
 * listed with metadata airlock.build=NAME while it runs. */
#ifndef AIRLOCK_BUILD_VM_H
#define AIRLOCK_BUILD_VM_H

#include <jansson.h>
#include <stdbool.h>

#include "error.h"
#include "template-job.h"

#define BUILD_VM_VCPUS 1
#define BUILD_VM_MEMORY_MIB 512

struct build_vm {
	char id[32];
	char tenant[64]; /* "": the operator's build, in the default tenant */
	struct template_job *job;
	unsigned step_timeout_s;
};

/* Boots a sandbox of template (cold: a build's disk is bigger than its
 * template) with a disk of disk_mib and the egress policy network_json. */
int build_vm_start(struct build_vm *vm, const char *build_name, const char *template_name, unsigned disk_mib,
                   const char *network_json, struct al_error *err);
/* Runs argv to its end, its output streamed into the job: *ret_status is
 * its exit status (128 + signal when killed). env: "K=V" strings. */
int build_vm_run(struct build_vm *vm, char **argv, size_t argc, json_t *env, const char *cwd, unsigned uid,
                 unsigned gid, int *ret_status, struct al_error *err);
/* Extracts the tar at tar_path into / of the guest (its own tar). */
int build_vm_untar(struct build_vm *vm, const char *tar_path, struct al_error *err);
/* Runs argv and returns its stdout (at most 4 KiB) when it exits 0. */
int build_vm_capture(struct build_vm *vm, char **argv, size_t argc, char *out, size_t size, struct al_error *err);
/* The guest's disk as it is now, as a raw image at dst (the sandbox goes
 * on running). qemu_img: the converter of a qcow2 disk. */
int build_vm_export(struct build_vm *vm, const char *qemu_img, const char *dst, struct al_error *err);
/* Deletes the sandbox (no-op when none was started). */
void build_vm_stop(struct build_vm *vm);

#endif
