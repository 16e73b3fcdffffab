/* SPDX-License-Identifier: Apache-2.0 */
/* Step 8: the VMM's syscall allow-list. The list is data in the repo
 * (security/seccomp/qemu-x86_64.json), compiled with libseccomp while the jailer still
 * can fail cleanly, and loaded just before execve. */
#include <fcntl.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "jailer.h"
#include "json-cleanup.h"
#include "util.h"

void jail_seccomp_profile_release(struct jail_seccomp_profile *p)
{
	free(p->syscalls);
	free(p->enosys);
	p->syscalls = p->enosys = NULL;
	p->n_syscalls = p->n_enosys = 0;
}

static bool syscall_name_valid(const char *s)
{
	size_t n = strnlen(s, JAIL_SYSCALL_NAME_MAX + 1);
	if (n == 0 || n > JAIL_SYSCALL_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

static int parse_default_action(json_t *root, bool *ret_kill, struct al_error *err)
{
	const char *action = json_string_value(json_object_get(root, "default_action"));
	if (!action)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"default_action\" must be \"kill_process\" or \"errno\"");
	if (!strcmp(action, "kill_process"))
		*ret_kill = true;
	else if (!strcmp(action, "errno"))
		*ret_kill = false;
	else
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
		                    "\"default_action\": \"%.64s\" is neither \"kill_process\" nor \"errno\"", action);
	return 0;
}

static bool listed(const struct jail_seccomp_profile *p, int nr)
{
	for (size_t j = 0; j < p->n_syscalls; j++)
		if (p->syscalls[j] == nr)
			return true;
	for (size_t j = 0; j < p->n_enosys; j++)
		if (p->enosys[j] == nr)
			return true;
	return false;
}

/* One list of names into *ret_nrs (numbers for this architecture). */
static int parse_syscalls(json_t *list, const char *key, bool required, struct jail_seccomp_profile *p, int **ret_nrs,
                          size_t *ret_n, struct al_error *err)
{
	if (!list && !required)
		return 0;
	if (!json_is_array(list) || (required && json_array_size(list) == 0))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"%s\" must be a%s array", key,
		                    required ? " non-empty" : "n");
	size_t n = json_array_size(list);
	if (n + p->n_syscalls + p->n_enosys > JAIL_SECCOMP_SYSCALLS_MAX)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, E2BIG, "more than %d syscall names",
		                    JAIL_SECCOMP_SYSCALLS_MAX);
	*ret_nrs = xcalloc(n, sizeof(int));
	size_t i;
	json_t *v;
	json_array_foreach (list, i, v) {
		const char *name = json_string_value(v);
		if (!name || !syscall_name_valid(name))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "\"%s\"[%zu] is not a syscall name ([a-z0-9_], 1 to %d)", key, i,
			                    JAIL_SYSCALL_NAME_MAX);
		/* Negative numbers are libseccomp's pseudo-syscalls: names
		 * that exist on other architectures only. */
		int nr = seccomp_syscall_resolve_name(name);
		if (nr < 0)
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, ENOENT,
			                    "\"%s\": %s is not a syscall on this architecture", key, name);
		if (listed(p, nr))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EEXIST, "\"%s\": %s is listed twice", key,
			                    name);
		(*ret_nrs)[(*ret_n)++] = nr;
	}
	return 0;
}

int jail_seccomp_parse(const char *text, size_t len, struct jail_seccomp_profile *ret, struct al_error *err)
{
	json_error_t jerr;
	cleanup_json json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "not valid JSON (line %d: %.200s)", jerr.line,
		                    jerr.text);
	if (!json_is_object(root))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "must be a JSON object");
	const char *key;
	json_t *value;
	json_object_foreach (root, key, value) {
		if (strcmp(key, "default_action") && strcmp(key, "syscalls") && strcmp(key, "errno_syscalls") &&
		    strcmp(key, "comment"))
			return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL,
			                    "unknown key \"%.64s\" (known: default_action, syscalls, errno_syscalls, "
			                    "comment)",
			                    key);
	}
	json_t *comment = json_object_get(root, "comment");
	if (comment && !json_is_string(comment))
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EINVAL, "\"comment\" must be a string");
	struct jail_seccomp_profile p = {0};
	int r = parse_default_action(root, &p.kill_process, err);
	if (r >= 0)
		r = parse_syscalls(json_object_get(root, "syscalls"), "syscalls", true, &p, &p.syscalls, &p.n_syscalls,
		                   err);
	if (r >= 0)
		r = parse_syscalls(json_object_get(root, "errno_syscalls"), "errno_syscalls", false, &p, &p.enosys,
		                   &p.n_enosys, err);
	if (r < 0) {
		jail_seccomp_profile_release(&p);
		return r;
	}
	*ret = p;
	return 0;
}

int jail_seccomp_read(int path_fd, const char *path, struct jail_seccomp_profile *ret, struct al_error *err)
{
	/* Reopen the validated inode itself, not the path. */
	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", path_fd);
	cleanup_free char *text = NULL;
	size_t len = 0;
	int r = read_file_limited(proc, JAIL_SECCOMP_FILE_MAX, &text, &len);
	if (r == -EFBIG)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, EFBIG, "%s: larger than %d bytes", path,
		                    JAIL_SECCOMP_FILE_MAX);
	if (r < 0)
		return al_error_set(err, AL_ERR_INVALID_ARGUMENT, -r, "%s: cannot read: %s", path, strerror(-r));
	r = jail_seccomp_parse(text, len, ret, err);
	if (r < 0)
		al_error_prefix(err, "%s", path);
	return r;
}

void jail_seccomp_free(void *filter)
{
	if (filter)
		seccomp_release((scmp_filter_ctx)filter);
}

static void seccomp_releasep(scmp_filter_ctx *ctx)
{
	if (*ctx)
		seccomp_release(*ctx);
}

int jail_seccomp_compile(const struct jail_seccomp_profile *p, void **ret_filter, struct al_error *err)
{
	uint32_t def = p->kill_process ? SCMP_ACT_KILL_PROCESS : SCMP_ACT_ERRNO(EPERM);
	__attribute__((cleanup(seccomp_releasep))) scmp_filter_ctx ctx = seccomp_init(def);
	if (!ctx)
		return al_error_set(err, AL_ERR_INTERNAL, ENOMEM, "seccomp_init failed");
	/* SECURITY: a syscall made through another ABI (i386 int 0x80, x32)
	 * would bypass a native-only list: those kill the process outright. */
	int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot set the bad-architecture action: %s",
		                    strerror(-r));
	/* A binary-tree filter: a few hundred rules stay cheap per syscall
	 * (an optimisation only; older libseccomp lacks it). */
	(void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	bool has_execve = false;
	for (size_t i = 0; i < p->n_syscalls; i++) {
		has_execve |= p->syscalls[i] == SCMP_SYS(execve);
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, p->syscalls[i], 0);
		if (r < 0) {
			cleanup_free char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, p->syscalls[i]);
			return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot add a rule for %s: %s", name ? name : "?",
			                    strerror(-r));
		}
	}
	for (size_t i = 0; i < p->n_enosys; i++) {
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), p->enosys[i], 0);
		if (r < 0)
			return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot add an ENOSYS rule: %s", strerror(-r));
	}
	/* The filter is loaded before the jailer's own execve of the VMM. */
	if (!has_execve && (r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(execve), 0)) < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot add a rule for execve: %s", strerror(-r));
	*ret_filter = TAKE_PTR(ctx);
	return 0;
}

int jail_seccomp_install(void *filter, struct al_error *err)
{
	int r = seccomp_load((scmp_filter_ctx)filter);
	if (r < 0)
		return al_error_set(err, AL_ERR_INTERNAL, -r, "cannot load the filter: %s", strerror(-r));
	/* Nothing but execve may follow: any other syscall from here on is
	 * judged by the VMM's profile, not the jailer's needs. */
	return 0;
}

static bool action_available(uint32_t action)
{
	return syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) == 0;
}

void jail_seccomp_report(FILE *out, bool *ret_ok)
{
	int mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
	bool kill = action_available(SECCOMP_RET_KILL_PROCESS);
	bool errno_ok = action_available(SECCOMP_RET_ERRNO);
	const struct scmp_version *ver = seccomp_version();
	fprintf(out, "seccomp=%s\n", mode < 0 ? "unsupported" : "filter");
	fprintf(out, "seccomp.actions=%s%s%s\n", kill ? "kill_process" : "", kill && errno_ok ? "," : "",
	        errno_ok ? "errno" : "");
	fprintf(out, "seccomp.libseccomp=%u.%u.%u\n", ver->major, ver->minor, ver->micro);
	*ret_ok = mode >= 0 && kill && errno_ok;
}
