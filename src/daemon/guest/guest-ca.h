/* SPDX-License-Identifier: Apache-2.0 */
/* The Airlock CA in a guest's trust store, installed by the daemon itself
 * right after the agent's hello (before a create answers): through the
 * channel's file operations and one internal exec, which are not processes
 * of the sandbox (no process id, no exec events); such an exec is also how
 * a template's snapshot warms its guest up (template-snap.c). */
#ifndef AIRLOCK_GUEST_CA_H
#define AIRLOCK_GUEST_CA_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "guest-channel.h"

/*
 * Writes cert_pem to CA_GUEST_CERT (ca.h), then: if the guest has a system
 * bundle (CA_GUEST_SYSTEM_BUNDLE) appends it there (once: a restore or a
 * recover installs again and finds it), else writes it to
 * CA_GUEST_OWN_BUNDLE. *ret_bundle (size bytes) is the bundle that now
 * trusts it: what SSL_CERT_FILE, REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE name.
 * Any failure is an error (AL_ERR_BOOT_FAILED): a sandbox does not start
 * without it.
 */
/*
 * Runs argv (argc arguments) in the guest as root, cwd /, with the agent's
 * default PATH, and wants exit status 0 by deadline_ms (its output is
 * dropped; stderr's start is in the error). Not a process of the sandbox: no
 * process id, no exec event.
 */
int guest_run_internal(struct guest_channel *ch, char **argv, size_t argc, uint64_t deadline_ms, struct al_error *err);

int guest_ca_install(struct guest_channel *ch, const char *cert_pem, uint64_t deadline_ms, char *ret_bundle,
                     size_t size, struct al_error *err);

#endif
