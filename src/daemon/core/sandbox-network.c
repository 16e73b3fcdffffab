/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's network: its namespace and the egress gateway's view of it
 * (rules, listeners, policy). Changing whether the gateway knows the
 * sandbox happens with sb->op_lock held; the policy in the record is under
 * sb->lock. */

#include "egress-supervisor.h"
#include "events.h"
#include "json-cleanup.h"
#include "util.h"
#include "sandbox-internal.h"

/* The gateway forgets the sandbox and its namespace goes (with the VMM). */
void sb_network_down(struct sandbox *sb)
{
	if (sb->net_registered) {
		egress_sandbox_remove(sb->rec.id);
		sb->net_registered = false;
	}
	netns_release(&sb->net);
}

/* A new namespace (attach_pid 0) or the one a running VMM is in, its
 * listeners handed to the gateway with the sandbox's policy.
 * SECURITY: fail closed: without its rules and listeners a sandbox does
 * not start (or is not re-attached). */
int sb_network_up(struct sandbox *sb, pid_t attach_pid, struct al_error *err)
{
	int r;
	if (attach_pid > 0) {
		sb_network_down(sb);
		r = netns_attach(attach_pid, &sb->net, err);
	} else {
		r = sb_network_take(sb, err);
	}
	if (r == 0 && (r = sb_network_register(sb, err)) < 0)
		netns_release(&sb->net);
	return r;
}

int sb_network_take(struct sandbox *sb, struct al_error *err)
{
	sb_network_down(sb);
	int r = netns_take(sb->rec.jail_uid, &sb->net, err);
	if (r < 0)
		return r;
	/* A new VM (and namespace) has the MAC its namespace drew; it stays
	 * while that VM lives (THAW after a snapshot of it, a daemon restart:
	 * the record keeps it, saved by the boot). */
	pthread_mutex_lock(&sb->lock);
	strlcpy_al(sb->rec.guest_mac, sb->net.guest_mac, sizeof(sb->rec.guest_mac));
	pthread_mutex_unlock(&sb->lock);
	return 0;
}

int sb_network_register(struct sandbox *sb, struct al_error *err)
{
	pthread_mutex_lock(&sb->lock);
	cleanup_free char *policy = xstrdup(sb->rec.network_json ? sb->rec.network_json : NETWORK_POLICY_EMPTY);
	cleanup_free char *bindings = xstrdup(sb->rec.secrets_json ? sb->rec.secrets_json : "[]");
	pthread_mutex_unlock(&sb->lock);
	int r = egress_sandbox_add(sb->rec.id, sb->rec.tenant, policy, bindings, &sb->net, err);
	if (r == 0)
		sb->net_registered = true;
	return r;
}

int sandbox_network_set(const char *id, const char *tenant, const char *policy_json, struct sandbox_record *ret,
                        struct al_error *err)
{
	struct sandbox *sb = NULL;
	/* op_lock: not in the middle of a boot or teardown, so whether the
	 * gateway knows the sandbox cannot change under us. */
	int r = sb_op_acquire(id, tenant, "", &sb, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&sb->lock);
	char *old = TAKE_PTR(sb->rec.network_json);
	sb->rec.network_json = xstrdup(policy_json);
	r = sb_persist_locked(sb, err);
	pthread_mutex_unlock(&sb->lock);
	if (r == 0 && sb->net_registered)
		r = egress_sandbox_set_policy(sb->rec.id, policy_json, err);
	pthread_mutex_lock(&sb->lock);
	if (r < 0) {
		/* Not applied: the record says what is enforced. */
		free(sb->rec.network_json);
		sb->rec.network_json = TAKE_PTR(old);
		struct al_error ignored;
		sb_persist_locked(sb, &ignored);
	} else {
		sb->last_activity_ms = now_ms_monotonic();
		sandbox_record_copy(ret, &sb->rec);
	}
	pthread_mutex_unlock(&sb->lock);
	sb_op_release(sb);
	free(old);
	if (r == 0) {
		cleanup_json json_t *policy = json_loads(policy_json, 0, NULL);
		events_emit("network.policy", ret->tenant, ret->id, json_pack("{sO}", "policy", policy));
	}
	return r;
}

int sandbox_network_dropped(const char *id, const char *tenant, uint64_t *ret_packets, uint64_t *ret_bytes,
                            struct al_error *err)
{
	struct sandbox *sb = NULL;
	int r = sb_op_acquire(id, tenant, "", &sb, err);
	if (r < 0)
		return r;
	r = sb->net.ns_fd >= 0 ? netns_dropped(sb->net.ns_fd, ret_packets, ret_bytes, err)
	                       : al_error_set(err, AL_ERR_CONFLICT, ENOENT, "sandbox %s has no network", id);
	sb_op_release(sb);
	return r;
}
