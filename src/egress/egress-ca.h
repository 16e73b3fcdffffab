/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Airlock CA inside airlock-egress (issue 6; docs/egress.md "TLS
 * interception"): airlockd sends its certificate and private key ("ca"
 * control message) and the gateway issues, on the fly, the leaf
 * certificate it shows a guest for an intercepted TLS server name.
 *
 * Leaves: an EC P-256 key of their own, subjectAltName = exactly the server
 * name (canonical, never a wildcard), a random 127-bit serial, valid from an
 * hour ago for EGRESS_LEAF_VALID_S (never past the CA's own end), CA:FALSE,
 * digitalSignature, serverAuth. They are kept per name in a bounded
 * least-recently-used cache owned by the CA object (a new CA starts with an
 * empty cache) and re-issued once less than EGRESS_LEAF_RENEW_S is left.
 *
 * SECURITY: the CA key lives only in this process's memory (never written
 * to disk here); the PEM text it came in is wiped by the caller. A CA whose
 * certificate is not a CA, has expired, or does not match the key is
 * refused.
 */
#ifndef AIRLOCK_EGRESS_CA_H
#define AIRLOCK_EGRESS_CA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "error.h"

#define EGRESS_CA_PEM_MAX (64 * 1024)   /* each of cert_pem and key_pem */
#define EGRESS_LEAF_CACHE_MAX 1024      /* leaf certificates kept (LRU) */
#define EGRESS_LEAF_VALID_S (4 * 86400) /* a leaf's validity from its issue */
#define EGRESS_LEAF_BACKDATE_S 3600     /* notBefore: this long before issue (clock skew) */
#define EGRESS_LEAF_RENEW_S 86400       /* re-issued when less than this is left */
#define EGRESS_LEAF_NAME_MAX 253        /* a canonical host name */

struct egress_ca;

/*
 * Loads the CA from PEM text (lengths without any NUL; the first
 * certificate and the first private key are used; an encrypted key is
 * refused). cache_max: leaves kept (>= 1; EGRESS_LEAF_CACHE_MAX in the
 * gateway). Returns 0 or -EINVAL with a message that never contains key
 * material.
 */
int egress_ca_new(const char *cert_pem, size_t cert_len, const char *key_pem, size_t key_len, size_t cache_max,
                  struct egress_ca **ret, struct al_error *err);

struct egress_ca *egress_ca_ref(struct egress_ca *ca);
void egress_ca_unref(struct egress_ca *ca); /* accepts NULL */

/* The CA certificate (owned by ca). */
X509 *egress_ca_cert(const struct egress_ca *ca);
/* "CN=Airlock CA ..., SHA-256 AB:CD:..." for the log. */
void egress_ca_describe(const struct egress_ca *ca, char *buf, size_t size);

/*
 * Issues a leaf for a canonical host name at time now (no cache). Returns 0
 * with new references in *ret_cert and *ret_key, or -EINVAL (name not
 * usable) / -EIO (OpenSSL failed).
 */
int egress_ca_issue(const struct egress_ca *ca, const char *name, time_t now, X509 **ret_cert, EVP_PKEY **ret_key);

/*
 * The leaf for name at time now: from the cache (moved to the front) unless
 * it is missing or close to its end, else issued and cached (the least
 * recently used entry goes when the cache is full). New references in
 * *ret_cert and *ret_key; *ret_cached (may be NULL) says whether it came
 * from the cache. Thread-safe; issuing happens outside the cache's lock.
 */
int egress_ca_leaf(struct egress_ca *ca, const char *name, time_t now, X509 **ret_cert, EVP_PKEY **ret_key,
                   bool *ret_cached);

/* Leaves in the cache (tests, metrics). */
size_t egress_ca_cache_len(struct egress_ca *ca);

#endif
