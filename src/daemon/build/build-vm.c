/* SPDX-License-Identifier: Apache-2.0 */
/* The build's sandbox (build-vm.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "airlock/proto.h"
#include "auth.h"
#include "json-cleanup.h"
#include "log.h"
#include "process.h"
#include "sandbox.h"
#include "snapshot.h"
#include "templates.h"
#include "util.h"
#include "build-child.h"
#include "build-vm.h"

#define UNTAR_CHUNK (256u * 1024u)
#define UNTAR_TIMEOUT_MS 600000u

static const char *vm_owner(const struct build_vm *vm)
{
	return vm->tenant[0] ? vm->tenant : TENANT_DEFAULT;
}

int build_vm_start(struct build_vm *vm, const char *build_name, const char *template_name, unsigned disk_mib,
                   const char *network_json, struct al_error *err)
{
	struct create_request req = {.vcpus = BUILD_VM_VCPUS,
	                             .memory_mib = BUILD_VM_MEMORY_MIB,
	                             .disk_mib = disk_mib,
	                             .cold_boot = true,
	                             .build_layer = true,
	                             .network_json = (char *)network_json};
	strlcpy_al(req.template_name, template_name, sizeof(req.template_name));
	strlcpy_al(req.tenant, vm_owner(vm), sizeof(req.tenant));
	char *mk[] = {TEMPLATE_BUILD_METADATA}, *mv[] = {(char *)build_name};
	req.metadata = (struct kv_list){.n = 1, .keys = mk, .values = mv};
	/* A tenant's build runs within its quota, as its own sandboxes do. */
	struct tenant_quota quota = {0};
	int r = auth_quota_get(vm_owner(vm), &quota, err);
	struct sandbox_record rec;
	if (r == 0)
		r = sandbox_create(&req, vm->tenant[0] ? vm->tenant : NULL, &quota, NULL, &rec, err);
	if (r < 0) {
		al_error_prefix(err, "start the build's sandbox");
		return r;
	}
	strlcpy_al(vm->id, rec.id, sizeof(vm->id));
	sandbox_record_release(&rec);
	return 0;
}

void build_vm_stop(struct build_vm *vm)
{
	if (!vm->id[0])
		return;
	struct al_error err = {0};
	struct sandbox_record rec;
	if (sandbox_delete(vm->id, NULL, &rec, &err) == 0)
		sandbox_record_release(&rec);
	else
		log_error("template build: delete its sandbox %s: %s", vm->id, err.message);
	vm->id[0] = '\0';
}

static struct exec_request run_request(char **argv, size_t argc, const char *cwd, unsigned uid, unsigned gid,
                                       unsigned timeout_s)
{
	return (struct exec_request){.argc = argc,
	                             .argv = argv,
	                             .cwd = (char *)cwd,
	                             .uid = uid,
	                             .gid = gid,
	                             .timeout_s = timeout_s,
	                             .timeout_given = true,
	                             .max_output_bytes = EXEC_OUTPUT_DEFAULT};
}

/* env ("K=V" strings) as the request's own variables. */
static void env_to_kv(json_t *env, struct kv_list *kv)
{
	size_t i;
	json_t *v;
	json_array_foreach (env, i, v) {
		const char *s = json_string_value(v), *eq = s ? strchr(s, '=') : NULL;
		if (eq && eq > s) {
			cleanup_free char *k = xstrndup(s, (size_t)(eq - s));
			kv_list_add(kv, k, eq + 1);
		}
	}
}

static int exit_status(json_t *result)
{
	json_t *code = json_object_get(result, "exit_code"), *sig = json_object_get(result, "signal");
	if (json_is_integer(code))
		return (int)json_integer_value(code);
	return 128 + (json_is_integer(sig) ? (int)json_integer_value(sig) : 0);
}

/* Streams a LOG stream's output into the job until it ends. */
static int follow_output(struct build_vm *vm, struct guest_channel *ch, struct guest_stream *s, int *ret_status,
                         struct al_error *err)
{
	struct guest_cursor cur;
	if (guest_cursor_open(ch, s, true, &cur) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, EBUSY, "follow the step's output");
	bool killed = false;
	for (;;) {
		if (!killed && template_job_cancelled(vm->job)) {
			cleanup_json json_t *sig = json_pack("{s:i}", "signal", SIGKILL);
			guest_stream_send_control(ch, s, AIRLOCK_FRAME_SIGNAL, sig);
			killed = true;
		}
		uint8_t type, *data = NULL;
		size_t len;
		uint64_t dropped = 0;
		int r = guest_cursor_read(ch, &cur, now_ms_monotonic() + 500, &type, &data, &len, &dropped);
		if (r == -ETIMEDOUT)
			continue;
		if (r != 1)
			break;
		template_job_output(vm->job, type == AIRLOCK_FRAME_STDERR ? "stderr" : "stdout", (const char *)data,
		                    len);
		free(data);
	}
	guest_cursor_close(ch, &cur);
	uint8_t rtype = 0;
	cleanup_json json_t *result = NULL;
	guest_stream_done(ch, s, &rtype, &result);
	if (killed)
		return al_error_set(err, AL_ERR_UNAVAILABLE, ECANCELED,
		                    "cancelled (its client went away, or airlockd is stopping)");
	if (rtype != AIRLOCK_FRAME_EXIT)
		return al_error_set(err, AL_ERR_GUEST, EIO, "the guest did not run it: %s",
		                    json_string_value(json_object_get(result, "message"))
		                        ? json_string_value(json_object_get(result, "message"))
		                        : "its channel ended");
	*ret_status = exit_status(result);
	if (json_is_true(json_object_get(result, "timed_out")))
		return al_error_set(err, AL_ERR_TIMEOUT, ETIMEDOUT, "it ran past --build-step-timeout-s (%u s)",
		                    vm->step_timeout_s);
	return 0;
}

int build_vm_run(struct build_vm *vm, char **argv, size_t argc, json_t *env, const char *cwd, unsigned uid,
                 unsigned gid, int *ret_status, struct al_error *err)
{
	struct sandbox *sb = NULL;
	int r = sandbox_acquire(vm->id, NULL, &sb, err);
	if (r < 0)
		return r;
	struct exec_request req = run_request(argv, argc, cwd, uid, gid, vm->step_timeout_s);
	env_to_kv(env, &req.env);
	size_t n_env = 0;
	char **envp = sandbox_env_merge(sb, &req.env, &n_env);
	struct guest_channel *ch = sandbox_channel(sb);
	char pid[PROCESS_ID_MAX + 1];
	struct guest_stream *s = NULL;
	r = process_start(sandbox_processes(sb), ch, &req, envp, n_env, GUEST_STREAM_LOG, pid, &s, err);
	sandbox_env_free(envp, n_env);
	kv_list_release(&req.env);
	if (r == 0) {
		r = follow_output(vm, ch, s, ret_status, err);
		guest_stream_unref(ch, s);
	}
	sandbox_release(sb);
	return r;
}

static int send_file(struct guest_channel *ch, struct guest_stream *s, int fd, struct al_error *err)
{
	cleanup_free uint8_t *buf = xmalloc(UNTAR_CHUNK);
	uint64_t deadline = now_ms_monotonic() + UNTAR_TIMEOUT_MS;
	for (;;) {
		ssize_t n = read(fd, buf, UNTAR_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return al_error_set(err, AL_ERR_INTERNAL, errno, "read the files to copy: %m");
		int r = guest_stream_send_data(ch, s, AIRLOCK_FRAME_STDIN, buf, (size_t)n, deadline);
		if (r == -EPIPE)
			return 0; /* tar ended early: its status says why */
		if (r < 0)
			return al_error_set(err, AL_ERR_GUEST, -r, "send the files to the guest: %s", strerror(-r));
		if (n == 0)
			return 0;
	}
}

int build_vm_untar(struct build_vm *vm, const char *tar_path, struct al_error *err)
{
	cleanup_close int fd = open(tar_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return al_error_set(err, AL_ERR_INTERNAL, errno, "open %s: %m", tar_path);
	struct sandbox *sb = NULL;
	int r = sandbox_acquire(vm->id, NULL, &sb, err);
	if (r < 0)
		return r;
	/* GNU tar keeps the metadata of directories that exist and of symlinks
	 * to directories (/bin -> usr/bin); busybox's tar has no such options
	 * (docs/templates.md). */
	static const char script[] = "if tar --version 2>/dev/null | grep -q GNU; then "
	                             "exec tar -x -p --no-overwrite-dir --keep-directory-symlink -f - -C /; "
	                             "else exec tar -x -p -f - -C /; fi";
	char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
	struct exec_request req = run_request(argv, 3, "/", 0, 0, UNTAR_TIMEOUT_MS / 1000);
	req.stdin_stream = true;
	req.max_output_bytes = 64 * 1024;
	struct kv_list none = {0};
	size_t n_env = 0;
	char **envp = sandbox_env_merge(sb, &none, &n_env);
	struct guest_channel *ch = sandbox_channel(sb);
	cleanup_json json_t *msg = guest_exec_message(&req, envp, n_env);
	sandbox_env_free(envp, n_env);
	struct guest_stream *s = NULL;
	r = guest_stream_start(ch, AIRLOCK_FRAME_EXEC, msg, GUEST_STREAM_COLLECT, req.max_output_bytes, &s, err);
	if (r == 0) {
		r = send_file(ch, s, fd, err);
		if (r == 0 && guest_stream_wait_done(ch, s, now_ms_monotonic() + UNTAR_TIMEOUT_MS) < 0)
			r = al_error_set(err, AL_ERR_GUEST, ETIMEDOUT, "the guest's tar did not finish");
		uint8_t rtype = 0;
		cleanup_json json_t *result = NULL;
		struct exec_output out[2] = {0};
		guest_stream_done(ch, s, &rtype, &result);
		guest_stream_take_output(ch, s, out);
		if (r == 0 && (rtype != AIRLOCK_FRAME_EXIT || exit_status(result) != 0))
			r = al_error_set(err, AL_ERR_INVALID_ARGUMENT, EIO,
			                 "the image's tar could not extract the files (a COPY needs /bin/sh and tar in "
			                 "the image): %.*s",
			                 (int)MIN(out[1].len, 512), out[1].data ? (const char *)out[1].data : "");
		free(out[0].data);
		free(out[1].data);
		guest_stream_unref(ch, s);
	}
	sandbox_release(sb);
	return r;
}

int build_vm_capture(struct build_vm *vm, char **argv, size_t argc, char *out, size_t size, struct al_error *err)
{
	struct exec_request req = run_request(argv, argc, "/", 0, 0, 60);
	req.max_output_bytes = 4096;
	struct exec_result res;
	char pid[32];
	int r = sandbox_exec(vm->id, NULL, &req, &res, pid, err);
	if (r < 0)
		return r;
	bool ok = res.status.exited && res.status.exit_code == 0;
	size_t n = MIN(res.out[0].len, size - 1);
	if (ok) {
		memcpy(out, res.out[0].data, n);
		out[n] = '\0';
	}
	guest_exec_result_release(&res);
	return ok ? 0 : al_error_set(err, AL_ERR_INVALID_ARGUMENT, EIO, "%s exited with an error", argv[0]);
}

/* A raw copy of the snapshot's disk: converted from its qcow2 overlay, or
 * copied (sparse) when the backend keeps the whole disk. */
static int disk_to_raw(const char *snap_dir, const char *qemu_img, const char *dst, struct al_error *err)
{
	cleanup_free char *qcow = xasprintf("%s/" SNAPSHOT_DISK, snap_dir);
	cleanup_free char *raw = xasprintf("%s/" SNAPSHOT_DISK_RAW, snap_dir);
	struct build_child_io io = {0};
	if (access(qcow, F_OK) == 0) {
		char *argv[] = {(char *)qemu_img, "convert", "-q", "-f", "qcow2", "-O", "raw", "-S", "64k", qcow,
		                (char *)dst,      NULL};
		return build_child_run(argv, &io, "export the build's disk (qemu-img convert)", err);
	}
	char *argv[] = {"/bin/cp", "--sparse=always", raw, (char *)dst, NULL};
	return build_child_run(argv, &io, "export the build's disk (cp)", err);
}

int build_vm_export(struct build_vm *vm, const char *qemu_img, const char *dst, struct al_error *err)
{
	struct snapshot_info snap;
	int r = sandbox_snapshot(vm->id, NULL, "template-build", true, &snap, err);
	if (r < 0) {
		al_error_prefix(err, "save the build's disk");
		return r;
	}
	cleanup_free char *dir = snapshot_dir(snap.id);
	r = disk_to_raw(dir, qemu_img, dst, err);
	struct al_error ignored;
	if (snapshot_delete(snap.id, NULL, &ignored) < 0)
		log_error("template build: remove its snapshot %s: %s", snap.id, ignored.message);
	if (r < 0)
		unlink(dst);
	return r;
}
