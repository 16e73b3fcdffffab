/* SPDX-License-Identifier: Apache-2.0 */
/*
 * airlockd's side of the egress gateway: starts airlock-egress as an
 * unprivileged child (its own uid, no capabilities, no_new_privs; it installs
 * its own seccomp allow-list before it serves), hands it each
 * sandbox's listeners and policy over the control channel (ctlmsg.h),
 * turns its audit records into events and metrics, and restarts it when it
 * dies, handing every listener back.
 *
 * Fail closed: while the gateway is down the sandboxes' rules still redirect
 * everything to listeners nobody serves, so nothing leaves.
 */
#ifndef AIRLOCK_EGRESS_SUPERVISOR_H
#define AIRLOCK_EGRESS_SUPERVISOR_H

#include <stdbool.h>
#include <sys/types.h>

#include "error.h"
#include "netns.h"

#include "policy-ceiling.h"

#define EGRESS_PUBLIC_CIDRS_MAX 16
/* The gateway's uid (= gid) unless --egress-uid says otherwise: its own,
 * shared with nothing else (not nobody), below the VMMs' default range. */
#define EGRESS_DEFAULT_UID 1499999999u

struct egress_config {
	const char *bin;      /* airlock-egress */
	const char *resolver; /* IP:PORT, NULL: the gateway's default (/etc/resolv.conf) */
	const char *trust_ca; /* extra CA file for upstream TLS, or NULL */
	const char *log_path; /* the gateway's stderr, appended */
	/* Networks the gateway may dial as if public (a test network on
	 * documentation addresses, an internal range); rules still decide. */
	const char *public_cidrs[EGRESS_PUBLIC_CIDRS_MAX];
	size_t n_public_cidrs;
	/* The operator's ceiling (--network-ceiling): the gateway dials a
	 * non-public address a rule names only inside it. */
	const struct policy_ceiling *ceiling;
	/* SECURITY: the gateway holds every tenant's secret values: it runs as
	 * a uid (= gid) of its own (never 0, nobody or a VMM's; the caller
	 * checks), and under its seccomp filter unless no_seccomp (debugging). */
	uint32_t uid;
	bool no_seccomp;
};

/* Starts the gateway and waits (bounded) until it is ready. */
int egress_start(const struct egress_config *c, struct al_error *err);
/* Stops it (at daemon exit). */
void egress_stop(void);

/* Registers a sandbox: takes its listener fds (n->listen_fds are set to -1),
 * its policy (canonical JSON) and its secret bindings (secrets.h; NULL or
 * "[]" for none), and sends them to the gateway ("add", with the bindings'
 * values decrypted for the message and wiped after it), waiting for its
 * answer. While the gateway is down the sandbox is registered and handed
 * over when it is back (its network is dead until then). */
int egress_sandbox_add(const char *id, const char *tenant, const char *policy_json, const char *bindings_json,
                       struct netns *n, struct al_error *err);
/* Replaces a sandbox's policy atomically. */
int egress_sandbox_set_policy(const char *id, const char *policy_json, struct al_error *err);
/* Forgets a sandbox: the gateway closes its listeners and connections. */
void egress_sandbox_remove(const char *id);

/* A secret of tenant was set (created or rotated) or deleted: every
 * registered sandbox of that tenant whose bindings name it gets its whole
 * binding list again ("secrets", acknowledged: new requests use the new
 * value at once; a deleted secret's binding is gone). SECURITY: fail
 * closed: if the gateway does not take the update it is restarted, and the
 * hand-over after the restart carries only what the store holds now. */
void egress_secret_changed(const char *tenant, const char *name);

/* The gateway's pid (0 when down), for tests and /v1/admin. */
pid_t egress_pid(void);

#endif
