/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ownership of the OpenSSL objects the gateway holds in locals, in util.h's
 * idiom: `cleanup_x509 X509 *leaf = NULL;` frees at the end of the scope,
 * TAKE_PTR hands the object out. OpenSSL's free functions accept NULL.
 */
#ifndef AIRLOCK_EGRESS_OPENSSL_H
#define AIRLOCK_EGRESS_OPENSSL_H

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

static inline void egress_ssl_ctx_freep(SSL_CTX **p)
{
	SSL_CTX_free(*p);
}
static inline void egress_x509_freep(X509 **p)
{
	X509_free(*p);
}
static inline void egress_evp_pkey_freep(EVP_PKEY **p)
{
	EVP_PKEY_free(*p);
}
static inline void egress_bio_freep(BIO **p)
{
	BIO_free(*p);
}
#define cleanup_ssl_ctx __attribute__((cleanup(egress_ssl_ctx_freep)))
#define cleanup_x509 __attribute__((cleanup(egress_x509_freep)))
#define cleanup_evp_pkey __attribute__((cleanup(egress_evp_pkey_freep)))
#define cleanup_bio __attribute__((cleanup(egress_bio_freep)))

#endif
