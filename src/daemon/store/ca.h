/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Airlock CA (docs/api.md, "The Airlock CA"): the certificate authority
 * whose leaves airlock-egress presents to a guest when it intercepts TLS to a
 * host a secret is bound to. Every guest trusts its certificate (installed at
 * create); its key never leaves the host but for the control channel to the
 * gateway.
 *
 * <state-dir>/ca/ (0700) holds ca.key (EC P-256, PKCS#8 PEM, 0600) and
 * ca.crt (self-signed, CA:TRUE with pathlen 0, keyUsage keyCertSign and
 * cRLSign, "Airlock sandbox CA <host>", 10 years). They are created at the
 * first start (and again when the certificate has expired).
 *
 * SECURITY: the key signs certificates that every sandbox trusts. The
 * directory and the key must be the daemon's alone (no group or world
 * bits) or airlockd refuses to start; the key is read only to be sent to
 * the gateway and wiped at once.
 */
#ifndef AIRLOCK_CA_H
#define AIRLOCK_CA_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define CA_DIR "ca"
#define CA_KEY_FILE "ca.key"
#define CA_CERT_FILE "ca.crt"
#define CA_VALIDITY_DAYS 3650
#define CA_FILE_MAX (16u * 1024u) /* either file */
/* Where a guest keeps it (docs/api.md). */
#define CA_GUEST_CERT "/usr/local/share/ca-certificates/airlock.crt"
#define CA_GUEST_SYSTEM_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
#define CA_GUEST_OWN_BUNDLE "/etc/airlock/ca.pem"

/* Loads the CA from <state_dir>/ca, creating it when it is missing or
 * expired (*ret_created tells). Checks modes and owners, that the key is
 * the certificate's, and keeps the certificate's PEM in memory. */
int ca_init(const char *state_dir, bool *ret_created, struct al_error *err);
/* Forgets it (tests). */
void ca_shutdown(void);

/* The certificate (PEM), or NULL before ca_init(). */
const char *ca_cert_pem(void);
/* The key's PEM, read from its file now (checked again): a new buffer of
 * *ret_len bytes, NUL-terminated, to be released with secret_wipe_free(). */
int ca_key_pem(char **ret_pem, size_t *ret_len, struct al_error *err);

#endif
